"""``tokenflex count`` (text or messages) and ``tokenflex models`` (search the registry)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..errors import InvalidInputError
from ..models import Model, list_models
from ._app import app, console
from ._fast import names_a_file
from ._input import check_text, naming, parse_json, read_text, resolve_model
from ._render import content_cell

_MESSAGES_HINT = 'Expected [{"role": ..., "content": ...}, ...] or {"messages": [...]}.'


def _read(source: str | None) -> tuple[str, str]:
    """(text, where) from '-'/stdin, a file, or the argument itself."""
    if source is None:  # reading stdin is asked for with '-', never assumed
        raise InvalidInputError(
            "Nothing to count. Usage: tokenflex count [TEXT|FILE|-] [--model M]: pass TEXT, "
            "a FILE (a request body or messages .json/.jsonl, or plain text) or '-' for "
            "stdin. See tokenflex count --help."
        )
    if source == "-":
        return read_text("-"), "stdin"
    if names_a_file(source):
        if not os.path.lexists(source):
            raise InvalidInputError(
                f"No such file {source!r}. Check the path (to count the literal text, quote it "
                "without a file suffix or pipe it through '-')."
            )
        return read_text(source), source
    check_text(source, "The TEXT argument")
    return source, "argument"


def _messages_from(
    text: str, where: str, *, required: bool
) -> tuple[list[Any], list[Any] | None, str | None, Any] | None:
    """(messages, tools, model, system) if ``text`` is a request body (chat, Anthropic
    Messages or Responses), a list of messages, or JSON lines of messages; else None.
    The messages and the system are in the body's own format (:func:`as_chat` converts)."""
    from ..batch import read_body

    stripped = text.lstrip()
    if not required and not stripped.startswith(("[", "{")):
        return None
    try:
        data = parse_json(text, repr(where), hint=_MESSAGES_HINT, lines=True)
    except InvalidInputError:
        if not required:
            return None
        raise
    is_body = isinstance(data, dict) and isinstance(data.get("messages", data.get("input")), list)
    if is_body or isinstance(data, list):
        req = read_body(data, where=repr(where))
        return req.messages, req.tools, req.model, (req.format, req.system)
    if not required:
        return None
    raise InvalidInputError(
        f"{where!r} holds a JSON {type(data).__name__}, not messages. Expected a list of "
        "messages, JSON lines of messages, or a request body: chat "
        '{"messages": [...]}, Anthropic {"system": ..., "messages": [...]} or Responses '
        '{"instructions": ..., "input": [...]}.'
    )


def as_chat(
    messages: list[Any], tools: list[Any] | None, how: tuple[str, Any]
) -> tuple[list[Any], Any]:
    """The messages as the counter reads them (an Anthropic ``system`` or the Responses
    ``instructions`` become the leading system message) and the tools in chat's shape."""
    from ..roundtrip import prepare

    fmt, system = how
    prepared = prepare(messages, format=fmt, system=system, tools=tools)
    return list(prepared.messages), prepared.tools


def _tools_from(path: str) -> list[Any]:
    hint = 'Expected [{"type": "function", "function": {...}}].'
    text = read_text(path, what="tools file", hint=hint)
    data = parse_json(text, f"Tools file {path!r}", hint=hint)
    if isinstance(data, dict) and isinstance(data.get("tools"), list):
        data = data["tools"]
    if not isinstance(data, list):
        raise InvalidInputError(
            f"Tools file {path!r} holds a JSON {type(data).__name__}; expected a list of tool "
            'definitions or {"tools": [...]}.'
        )
    return data


def _money(value: float | None) -> str:
    if value is None:
        return "—"
    return f"${value:,.2f}" if value >= 0.1 else f"${value:.4g}"


def _cost(model: Model, tokens: int) -> float | None:
    return None if model.input_price is None else tokens * model.input_price / 1_000_000


@app.command("count", no_args_is_help=True)
def count_cmd(
    source: Annotated[
        str | None,
        typer.Argument(
            metavar="[TEXT|FILE|-]",
            help="Text, a file (a request body: chat, Anthropic Messages or Responses; a "
            ".json or .jsonl of messages; or plain text), or '-' for stdin.",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", help="Model name (default: the file's, else gpt-4o)."),
    ] = None,
    tools: Annotated[
        str | None, typer.Option("--tools", help="JSON file of tool definitions to include.")
    ] = None,
    per_message: Annotated[
        bool, typer.Option("--per-message", help="One row per message (default: a summary).")
    ] = False,
    strict: Annotated[bool, typer.Option("--strict", help="An unknown model is an error.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Count the tokens of text or of a chat request (messages, tools, reply priming)."""
    from ..counting import get_counter

    text, where = _read(source)
    is_json_file = where.lower().endswith((".json", ".jsonl"))
    parsed = _messages_from(text, where, required=is_json_file)
    tool_list = _tools_from(tools) if tools else None
    name = model or (parsed[2] if parsed else None) or "gpt-4o"
    resolved = resolve_model(name, strict=strict)
    counter = get_counter(resolved)
    info: dict[str, Any] = {
        "model": resolved.name,
        "known_model": resolved.known,
        "tokenizer": counter.tokenizer.name,
        "exact": counter.tokenizer.exact,  # text; a conversation: exact_for below
        "chat_format": counter.model.chat_format,  # as it counts here (exact_tokenizer)
        "context_window": resolved.context_window,
    }
    if parsed is None and tool_list is None:
        tokens = counter.text(text)
        info.update(kind="text", tokens=tokens, characters=len(text))
        info["input_cost_usd"] = _cost(resolved, tokens)
        if as_json:
            console.print_json(data=info)
            return
        kind = "exact" if counter.tokenizer.exact else "estimate"
        line = Text.assemble(
            (f"{tokens:,}", "bold"),
            f" tokens  ({len(text):,} characters; {resolved.name}, {counter.tokenizer.name} "
            f"{kind})",
        )
        console.print(line, highlight=False)
        return
    messages = parsed[0] if parsed else [{"role": "user", "content": text}]
    tool_list = tool_list if tool_list is not None else (parsed[1] if parsed else None)
    with naming(where if where != "argument" else None):
        messages, tool_list = as_chat(messages, tool_list, parsed[3] if parsed else ("chat", None))
        total = counter.count_rendered(messages, tool_list)
        counts = [counter.message(m) for m in messages]
    info.update(
        kind="messages",
        exact=counter.exact_for(messages, tool_list),
        tokens=total,
        base=counter.base(),
        tools=counter.tools(tool_list),
        messages=counts,
        by_role=_by_role(messages, counts),
        input_cost_usd=_cost(resolved, total),
    )
    if as_json:
        console.print_json(data=info)
        return
    kind = "exact" if info["exact"] else "conservative estimate"
    title = Text(
        f"{resolved.name} · {counter.tokenizer.name} · {counter.model.chat_format} ({kind})",
        style="bold",
    )
    if per_message:
        console.print(_per_message_table(title, messages, info))
    else:
        console.print(_summary_table(title, messages, info))
    share = total / resolved.context_window
    cost = info["input_cost_usd"]
    console.print(
        Text.assemble(
            (f"{total:,}", "bold"),
            f" input tokens of a {resolved.context_window:,}-token window ({share:.1%})",
            f"; input cost ≈ ${cost:.6f}" if cost is not None else "",
        ),
        highlight=False,
    )
    if not per_message and len(messages) > 1:
        top = max(range(len(counts)), key=counts.__getitem__)
        role = Text(str(messages[top].get("role")))
        console.print(
            Text.assemble(
                f"Largest: message {top} (",
                role,
                f", {counts[top]:,} tokens). One row per message: --per-message.",
            ),
            style="dim",
            highlight=False,
        )


def _by_role(messages: list[Any], counts: list[int]) -> dict[str, dict[str, int]]:
    """``{role: {"messages": n, "tokens": t}}`` in order of first appearance."""
    out: dict[str, dict[str, int]] = {}
    for msg, tokens in zip(messages, counts, strict=True):
        row = out.setdefault(str(msg.get("role")), {"messages": 0, "tokens": 0})
        row["messages"] += 1
        row["tokens"] += tokens
    return out


def _summary_table(title: Text, messages: list[Any], info: dict[str, Any]) -> Table:
    """Messages and tokens per role, then tools, priming and the total: a few rows at any
    length of conversation."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("part", overflow="ellipsis", max_width=30)
    table.add_column("messages", justify="right", no_wrap=True)
    table.add_column("tokens", justify="right", no_wrap=True)
    table.add_column("share", justify="right", no_wrap=True)
    total = max(1, info["tokens"])
    for role, row in info["by_role"].items():
        table.add_row(
            Text(role),
            f"{row['messages']:,}",
            f"{row['tokens']:,}",
            f"{row['tokens'] / total:.1%}",
        )
    if info["tools"]:
        table.add_row("tool schemas", "", f"{info['tools']:,}", f"{info['tools'] / total:.1%}")
    table.add_row("reply priming", "", f"{info['base']:,}", f"{info['base'] / total:.1%}")
    table.add_row("total", f"{len(messages):,}", f"{info['tokens']:,}", "", style="bold")
    return table


def _per_message_table(title: Text, messages: list[Any], info: dict[str, Any]) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    table.add_column("role", overflow="ellipsis", max_width=12)
    table.add_column("tokens", justify="right", no_wrap=True)
    table.add_column("content", ratio=1, overflow="ellipsis")
    for i, (msg, tokens) in enumerate(zip(messages, info["messages"], strict=True)):
        table.add_row(
            str(i), Text(str(msg.get("role"))), f"{tokens:,}", content_cell(msg.get("content"))
        )
    dim = "dim"
    table.add_row("", Text("priming", dim), f"{info['base']:,}", Text("reply priming", dim))
    if info["tools"]:
        table.add_row("", Text("tools", dim), f"{info['tools']:,}", Text("tool schemas", dim))
    return table


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
    import_file: Annotated[
        Path | None,
        typer.Option(
            "--import",
            metavar="FILE",
            help="Read a models file (TOML, or a LiteLLM model_prices_and_context_window"
            ".json) and list the models it adds; set TOKENFLEX_MODELS_FILE=FILE to use them "
            "in every command and in the proxy.",
        ),
    ] = None,
) -> None:
    """List the models tokenflex knows: window, output limit, prices, tokenizer."""
    if check is not None:
        from ._check import check_models

        return check_models(check, query, as_json=as_json)
    added: set[str] | None = None
    if import_file is not None:
        from ..models import load_models_file

        added = {m.name for m in load_models_file(import_file)}
    found = [m for m in list_models(query) if added is None or m.name in added]
    if as_json:
        counted = [m.counting() for m in found]
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
                    "exact_tokenizer": m.exact_tokenizer,
                    "counting_tokenizer": c.tokenizer,
                    "counting_chat_format": c.chat_format,
                    "input_price": m.input_price,
                    "output_price": m.output_price,
                    "max_input_tokens": m.max_input_tokens,
                    "cache_read_price": m.cache_read_price,
                    "cache_write_price": m.cache_write_price,
                    "source_url": m.source_url,
                    "aliases": list(m.aliases),
                    "source": m.source,
                }
                for m, c in zip(found, counted, strict=True)
            ]
        )
        return
    if not found:
        console.print(
            Text(f"No model matches {query!r}. Try a shorter query, or list all: tokenflex models"),
            highlight=False,
        )
        return
    console.print(_models_table(found, query))


def _models_table(found: list[Model], query: str) -> RenderableType:
    """Fits 80 columns: numbers and the tokenizer never wrap, a long name folds.

    The tokenizer is the one the model counts with here (:meth:`Model.counting`). Where
    its ``exact_tokenizer`` does not load, that is the estimate, marked ``¹``; a note under
    the table names the exact tokenizer and what it needs. Provider, family, chat format
    and aliases are in ``--json``.
    """
    title = Text(f"{len(found)} models" + (f" matching {query!r}" if query else ""))
    table = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        padding=(0, 1, 0, 0),  # two spaces between columns: room for the tokenizer
    )
    marks: dict[str, str] = {}  # exact tokenizer that does not load here -> its mark
    tokenizers: list[str] = []
    for m in found:
        tokenizer = m.counting().tokenizer
        if m.exact_tokenizer and tokenizer != m.exact_tokenizer:
            tokenizer += marks.setdefault(m.exact_tokenizer, _superscript(len(marks) + 1))
        tokenizers.append(tokenizer)
    longest = max(len(m.name) for m in found)
    numbers = [
        [f"{m.context_window:,}" for m in found],
        ["—" if m.max_output_tokens is None else f"{m.max_output_tokens:,}" for m in found],
        [_money(m.input_price) for m in found],
        [_money(m.output_price) for m in found],
        tokenizers,
    ]
    headers = ("window", "max out", "$/1M in", "$/1M out", "tokenizer")
    others = sum(max(len(h), *map(len, col)) + 2 for h, col in zip(headers, numbers, strict=True))
    room = max(12, console.width - others - 1)
    table.add_column("name", style="bold", overflow="fold", min_width=min(12, longest))
    table.add_column("window", justify="right", no_wrap=True)
    table.add_column("max out", justify="right", no_wrap=True)
    table.add_column("$/1M in", justify="right", no_wrap=True)
    table.add_column("$/1M out", justify="right", no_wrap=True)
    table.add_column("tokenizer", no_wrap=True)
    for m, tokenizer in zip(found, tokenizers, strict=True):
        table.add_row(
            Text(wrap_name(m.name, room)),
            f"{m.context_window:,}",
            "—" if m.max_output_tokens is None else f"{m.max_output_tokens:,}",
            _money(m.input_price),
            _money(m.output_price),
            Text(tokenizer),
        )
    notes = [
        Text(f"{mark} estimate here: exact {exact} {_needs(exact)}", style="dim")
        for exact, mark in marks.items()
    ]
    return Group(table, *notes)


def wrap_name(name: str, room: int) -> str:
    r"""``name`` in lines of at most ``room`` characters, broken after a ``-``, ``:``, ``/``
    or ``.`` where it has one (``qwen3:30b-a3b-`` / ``instruct-2507``), never mid-word
    unless a word alone is longer than the room.

    >>> wrap_name("qwen3:30b-a3b-instruct-2507", 20)
    'qwen3:30b-a3b-\ninstruct-2507'
    """
    lines = []
    while len(name) > room:
        cut = max(name.rfind(c, 0, room) for c in "-:/.") + 1
        cut = cut if cut > 0 else room
        lines.append(name[:cut])
        name = name[cut:]
    return "\n".join([*lines, name])


def _superscript(n: int) -> str:
    return str(n).translate(str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹"))


def _needs(exact: str) -> str:
    """Why an exact tokenizer does not load here, as briefly as that can be said."""
    from ..tokenizers import mistral

    if exact.startswith("mistral:") and not mistral.installed():
        return f"needs {mistral.INSTALL_HINT}"
    return "does not load here"
