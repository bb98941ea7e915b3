"""``tokenflex count`` (text or messages) and ``tokenflex models`` (search the registry)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from ..errors import InvalidInputError
from ..models import Model, get_model, list_models
from ._app import app, console

_FILE_SUFFIXES = (".json", ".txt", ".md", ".jsonl")


def _read(source: str | None) -> tuple[str, str]:
    """(text, where) from '-'/stdin, an existing file, or the argument itself."""
    if source is None or source == "-":
        if source is None and sys.stdin.isatty():
            raise InvalidInputError(
                "Nothing to count. Pass TEXT, a FILE (messages .json or plain text) or '-' "
                "for stdin."
            )
        return sys.stdin.read(), "stdin"
    path = Path(source)
    if "\n" not in source and len(source) < 4096 and path.is_file():
        try:
            return path.read_text(encoding="utf-8"), source
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise InvalidInputError(
                f"Cannot read {source!r}: {reason}. Pass a readable UTF-8 file, or '-' to "
                "read stdin."
            ) from exc
    if "\n" not in source and source.lower().endswith(_FILE_SUFFIXES):
        raise InvalidInputError(
            f"No such file {source!r}. Check the path (to count the literal text, quote it "
            "without a file suffix or pipe it through '-')."
        )
    return source, "argument"


def _messages_from(
    text: str, where: str, *, required: bool
) -> tuple[list[Any], list[Any] | None, str | None] | None:
    """(messages, tools, model) if ``text`` is a messages JSON document, else None."""
    stripped = text.lstrip()
    if not required and not stripped.startswith(("[", "{")):
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if not required:
            return None
        raise InvalidInputError(
            f"{where!r} is not valid JSON ({exc.msg} at line {exc.lineno}, column "
            f'{exc.colno}). Expected [{{"role": ..., "content": ...}}, ...] or '
            '{"messages": [...]}.'
        ) from exc
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        tools = data.get("tools") or data.get("functions")
        model = data.get("model") if isinstance(data.get("model"), str) else None
        return data["messages"], tools, model
    if isinstance(data, list):
        return data, None, None
    if not required:
        return None
    raise InvalidInputError(
        f"{where!r} holds a JSON {type(data).__name__}, not messages. Expected a list of "
        'messages or an OpenAI request body {"messages": [...], "tools": [...]}.'
    )


def _tools_from(path: str) -> list[Any]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise InvalidInputError(
            f"Cannot read tools file {path!r}: {reason}. Pass a JSON file of tool definitions."
        ) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(
            f"Tools file {path!r} is not valid JSON ({exc.msg} at line {exc.lineno}, column "
            f'{exc.colno}). Expected [{{"type": "function", "function": {{...}}}}].'
        ) from exc
    if isinstance(data, dict) and isinstance(data.get("tools"), list):
        data = data["tools"]
    if not isinstance(data, list):
        raise InvalidInputError(
            f"Tools file {path!r} holds a JSON {type(data).__name__}; expected a list of tool "
            'definitions or {"tools": [...]}.'
        )
    return data


def _wide() -> Console:
    """The console, or for a pipe/file (no width) one wide enough not to cut numbers."""
    if console.is_terminal:
        return console
    return Console(file=console.file, width=max(console.width, 120))


def _money(value: float | None) -> str:
    if value is None:
        return "—"
    return f"${value:,.2f}" if value >= 0.1 else f"${value:.4g}"


def _preview(content: Any) -> str:
    if isinstance(content, list):
        kinds = [str(p.get("type")) for p in content if isinstance(p, dict)]
        texts = [str(p.get("text")) for p in content if isinstance(p, dict) and "text" in p]
        content = " ".join(texts) + (f" [{', '.join(kinds)}]" if kinds else "")
    text = " ".join(str(content or "").split())
    return text if len(text) <= 60 else text[:57] + "..."


def _cost(model: Model, tokens: int) -> float | None:
    return None if model.input_price is None else tokens * model.input_price / 1_000_000


@app.command("count")
def count_cmd(
    source: Annotated[
        str | None,
        typer.Argument(
            metavar="[TEXT|FILE|-]",
            help="Text, a file (a .json of messages or a request body, or plain text), or "
            "'-' for stdin.",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", help="Model name (default: the file's, else gpt-4o)."),
    ] = None,
    tools: Annotated[
        str | None, typer.Option("--tools", help="JSON file of tool definitions to include.")
    ] = None,
    strict: Annotated[bool, typer.Option(help="Unknown model is an error.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Count the tokens of text or of a chat request (messages, tools, reply priming)."""
    from ..counting import get_counter

    text, where = _read(source)
    is_json_file = where.lower().endswith((".json", ".jsonl"))
    parsed = _messages_from(text, where, required=is_json_file)
    tool_list = _tools_from(tools) if tools else None
    name = model or (parsed[2] if parsed else None) or "gpt-4o"
    resolved = get_model(name, strict=strict)
    counter = get_counter(resolved)
    info: dict[str, Any] = {
        "model": resolved.name,
        "known_model": resolved.known,
        "tokenizer": counter.tokenizer.name,
        "exact": counter.exact,
        "chat_format": resolved.chat_format,
        "context_window": resolved.context_window,
    }
    if parsed is None and tool_list is None:
        tokens = counter.text(text)
        info.update(kind="text", tokens=tokens, characters=len(text))
        info["input_cost_usd"] = _cost(resolved, tokens)
        if as_json:
            console.print_json(data=info)
        else:
            kind = "exact" if counter.tokenizer.exact else "estimate"
            console.print(
                f"[bold]{tokens:,}[/bold] tokens  ({len(text):,} characters; {resolved.name}, "
                f"{counter.tokenizer.name} {kind})",
                highlight=False,
            )
        return
    messages = parsed[0] if parsed else [{"role": "user", "content": text}]
    tool_list = tool_list if tool_list is not None else (parsed[1] if parsed else None)
    total = counter.count_rendered(messages, tool_list)
    per_message = [counter.message(m) for m in messages]
    tool_tokens = counter.tools(tool_list)
    info.update(
        kind="messages",
        tokens=total,
        base=counter.base(),
        tools=tool_tokens,
        messages=per_message,
        input_cost_usd=_cost(resolved, total),
    )
    if as_json:
        console.print_json(data=info)
        return
    _print_messages(resolved, counter.exact, counter.tokenizer.name, messages, info)


def _print_messages(
    model: Model, exact: bool, tokenizer: str, messages: list[Any], info: dict[str, Any]
) -> None:
    kind = "exact" if exact else "conservative estimate"
    table = Table(
        title=f"{model.name} · {tokenizer} · {model.chat_format} ({kind})",
        title_justify="left",
    )
    table.add_column("#", justify="right", style="dim")
    table.add_column("role")
    table.add_column("tokens", justify="right")
    table.add_column("content")
    for i, (msg, tokens) in enumerate(zip(messages, info["messages"], strict=True)):
        table.add_row(str(i), str(msg.get("role")), f"{tokens:,}", _preview(msg.get("content")))
    table.add_row(
        "", "[dim]priming[/dim]", f"{info['base']:,}", "[dim]reply priming / template[/dim]"
    )
    if info["tools"]:
        table.add_row("", "[dim]tools[/dim]", f"{info['tools']:,}", "[dim]tool schemas[/dim]")
    _wide().print(table)
    share = info["tokens"] / model.context_window
    cost = info["input_cost_usd"]
    console.print(
        f"[bold]{info['tokens']:,}[/bold] input tokens of a {model.context_window:,}-token "
        f"window ({share:.1%})" + (f"; input cost ≈ ${cost:.6f}" if cost is not None else ""),
        highlight=False,
    )
    if not model.known:
        console.print(
            f"[yellow]note:[/yellow] {model.name!r} is not in the registry: conservative "
            "default window and estimator. Use --strict to make this an error.",
            highlight=False,
        )


@app.command("models")
def models_cmd(
    query: Annotated[
        str, typer.Argument(help="Part of a name, alias or provider (empty: all).")
    ] = "",
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    check: Annotated[
        str | None,
        typer.Option(
            "--check",
            metavar="URL",
            help="Compare the registry entry QUERY (default: the served model) with what "
            "the server at URL runs; exit 1 when they differ.",
        ),
    ] = None,
) -> None:
    """List the models tokenflex knows: window, output limit, tokenizer, prices."""
    if check is not None:
        from ._check import check_models

        return check_models(check, query, as_json=as_json)
    found = list_models(query)
    if as_json:
        console.print_json(
            data=[
                {
                    "name": m.name,
                    "provider": m.provider,
                    "family": m.family,
                    "context_window": m.context_window,
                    "max_output_tokens": m.max_output_tokens,
                    "tokenizer": m.tokenizer,
                    "chat_format": m.chat_format,
                    "input_price": m.input_price,
                    "output_price": m.output_price,
                    "max_input_tokens": m.max_input_tokens,
                    "cache_read_price": m.cache_read_price,
                    "cache_write_price": m.cache_write_price,
                    "source_url": m.source_url,
                    "aliases": list(m.aliases),
                    "source": m.source,
                }
                for m in found
            ]
        )
        return
    if not found:
        console.print(
            f"No model matches {query!r}. Try a shorter query, or list all: tokenflex models"
        )
        return
    table = Table(
        title=f"{len(found)} models" + (f" matching {query!r}" if query else ""),
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("name", style="bold", no_wrap=True)
    table.add_column("provider", no_wrap=True)
    table.add_column("window", justify="right", no_wrap=True)
    table.add_column("max out", justify="right", no_wrap=True)
    table.add_column("tokenizer", no_wrap=True)
    table.add_column("format", no_wrap=True)
    table.add_column("$/1M in", justify="right", no_wrap=True)
    table.add_column("$/1M out", justify="right", no_wrap=True)
    for m in found:
        table.add_row(
            m.name,
            m.provider,
            f"{m.context_window:,}",
            "—" if m.max_output_tokens is None else f"{m.max_output_tokens:,}",
            m.tokenizer,
            m.chat_format,
            _money(m.input_price),
            _money(m.output_price),
        )
    _wide().print(table)
