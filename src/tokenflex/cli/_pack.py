"""``tokenflex pack`` (chunks into a budget) and ``tokenflex validate`` (a budget spec)."""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Group
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from ..errors import ConfigError, InvalidInputError
from ._app import app, console
from ._input import parse_json, read_text, resolve_model

_KEYS = {
    "text": "text",
    "source": "source",
    "label": "source",
    "title": "source",
    "identifier": "identifier",
    "url": "identifier",
    "uri": "identifier",
    "extras": "extras",
    "metadata": "extras",
    "score": "score",
    "id": "id",
}
_CHUNK_HINT = (
    'Expected a JSON list (or {"chunks": [...]}, or JSON lines) of objects like '
    '{"text": "...", "source": "...", "identifier": "https://...", "extras": {...}, '
    '"score": 0.9, "id": "c1"}.'
)


def load_chunks(path: str) -> list[Any]:
    """Chunks from a JSON list, a ``{"chunks": [...]}`` object or a JSON-lines file."""
    from ..documents import Chunk

    text = read_text(path, hint=_CHUNK_HINT)
    data = parse_json(text, repr(path), hint=_CHUNK_HINT, lines=True)
    if isinstance(data, dict) and isinstance(data.get("chunks"), list):
        data = data["chunks"]
    if not isinstance(data, list):
        raise InvalidInputError(f"{path!r} holds a {type(data).__name__}. {_CHUNK_HINT}")
    chunks = []
    for i, item in enumerate(data):
        if isinstance(item, str):
            item = {"text": item}
        if not isinstance(item, dict) or "text" not in item:
            raise InvalidInputError(f"{path!r}: chunk {i} has no 'text'. {_CHUNK_HINT}")
        unknown = sorted(set(item) - set(_KEYS))
        if unknown:
            raise InvalidInputError(
                f"{path!r}: chunk {i} has unknown keys {unknown}; allowed: {sorted(_KEYS)}."
            )
        fields = {_KEYS[k]: v for k, v in item.items()}
        for name in ("source", "identifier", "id"):
            if name in fields and fields[name] is not None and not isinstance(fields[name], str):
                fields[name] = str(fields[name])
        try:
            chunks.append(Chunk(**fields))
        except InvalidInputError as exc:
            raise InvalidInputError(f"{path!r}: chunk {i}: {exc}") from exc
    return chunks


ROWS = 20
"""Rows of each chunk table before the rest are summed up in one row."""


def _pack_view(result: Any, n: int) -> Group:
    """Summary line, admitted table, dropped table (at most :data:`ROWS` rows each)."""
    head = Text(
        f"Packed {len(result.admitted):,} of {n:,} chunks: {result.tokens:,} of "
        f"{result.limit:,} tokens (budget {result.budget:,} - {result.safety_buffer:,} "
        f"buffer), policy {result.policy}, {result.format}, tokenizer {result.tokenizer} "
        f"({'exact' if result.exact else 'estimate'})"
        + (f", knapsack {result.knapsack}" if result.knapsack else "")
        + "."
    )
    admitted = Table(
        title=f"Admitted: {len(result.admitted):,}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    admitted.add_column("#", justify="right", no_wrap=True)
    admitted.add_column("id", overflow="ellipsis", no_wrap=True, max_width=20)
    admitted.add_column("score", justify="right", no_wrap=True)
    admitted.add_column("tokens", justify="right", no_wrap=True)
    admitted.add_column("citation", overflow="ellipsis", ratio=1)
    rows = zip(result.admitted, result.admitted_indices, result.admitted_costs, strict=True)
    for k, (c, i, t) in enumerate(rows, 1):
        if k > ROWS:
            rest = result.admitted_costs[ROWS:]
            admitted.add_row("…", f"{len(rest):,} more", "", f"{sum(rest):,}", "")
            break
        cite = " — ".join(p for p in (c.source, c.identifier) if p)
        score = "" if c.score is None else f"{c.score:g}"
        cell = Text(cite, no_wrap=True, overflow="ellipsis")  # in full in the rendered context
        admitted.add_row(str(k), Text(c.id or f"#{i}"), score, f"{t:,}", cell)
    if not result.dropped:
        return Group(head, admitted, Text("Nothing dropped.", style="green"))
    dropped = Table(
        title=f"Dropped: {result.dropped_count:,} chunks, {result.dropped_tokens:,} tokens",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    dropped.add_column("chunks", no_wrap=True)
    dropped.add_column("ids", overflow="ellipsis", no_wrap=True, max_width=28)
    dropped.add_column("count", justify="right", no_wrap=True)
    dropped.add_column("tokens", justify="right", no_wrap=True)
    dropped.add_column("reason", no_wrap=True)
    runs = chunk_runs(result.dropped)
    for run in runs[:ROWS]:
        first, last = run[0], run[-1]
        span = str(first.index) if len(run) == 1 else f"{first.index}–{last.index}"
        ids = [d.id or "" for d in (first, last) if d.id] if len(run) > 1 else [first.id or ""]
        counted = [d.tokens for d in run if d.tokens is not None]
        tokens = f"{sum(counted):,}" if len(counted) == len(run) else "not counted"
        dropped.add_row(span, Text(" … ".join(ids)), f"{len(run):,}", tokens, first.reason)
    rest = runs[ROWS:]
    if rest:
        chunks = [d for run in rest for d in run]
        counted_rest = sum(d.tokens for d in chunks if d.tokens is not None)
        dropped.add_row(
            "…", f"{len(rest):,} more runs", f"{len(chunks):,}", f"{counted_rest:,}", ""
        )
    return Group(head, admitted, dropped)


def chunk_runs(dropped: Sequence[Any]) -> list[list[Any]]:
    """Dropped chunks grouped into runs of consecutive indices with one reason."""
    runs: list[list[Any]] = []
    for d in sorted(dropped, key=lambda d: d.index):
        last = runs[-1][-1] if runs else None
        if last is not None and d.index == last.index + 1 and d.reason == last.reason:
            runs[-1].append(d)
        else:
            runs.append([d])
    return runs


@app.command("pack")
def pack_cmd(
    file: Annotated[str, typer.Argument(help="JSON list / JSON lines of chunks.")],
    budget: Annotated[int, typer.Option("--budget", "-b", help="Token budget.")],
    policy: Annotated[str, typer.Option(help="skip, stop or optimal.")] = "skip",
    format: Annotated[str, typer.Option("--format", help="markdown or xml.")] = "markdown",
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Count with this model's tokenizer.")
    ] = None,
    tokenizer: Annotated[
        str | None, typer.Option("--tokenizer", "-t", help="Tokenizer name (default estimate).")
    ] = None,
    safety_buffer: Annotated[int, typer.Option("--safety-buffer", help="Tokens kept free.")] = 64,
    strict: Annotated[
        bool, typer.Option("--strict", help="An unknown --model is an error.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable result.")] = False,
) -> None:
    """Pack ranked chunks and their citations into a token budget; show what was dropped."""
    from ..documents import pack_chunks

    if model and tokenizer:
        raise InvalidInputError("Pass --model or --tokenizer, not both.")
    tok: Any = resolve_model(model, strict=strict) if model else (tokenizer or "estimate")
    chunks = load_chunks(file)
    result = pack_chunks(
        chunks,
        budget=budget,
        tokenizer=tok,
        policy=policy,  # type: ignore[arg-type]  # pack_chunks validates
        safety_buffer=safety_buffer,
        format=format,  # type: ignore[arg-type]
    )
    if as_json:
        console.print_json(data=result.to_dict())
        return
    console.print(_pack_view(result, len(chunks)))
    console.print(Rule("Rendered context", align="left"))
    console.print(Text(result.rendered), soft_wrap=True, highlight=False, markup=False)


# --- validate ------------------------------------------------------------------------------

_SPEC_KEYS = {
    "components",
    "expected_output",
    "total_budget",
    "input_cap",
    "warning_at",
    "fallback_input_at",
    "fallback_total_at",
    "thresholds",
    "tokenizer",
    "model",
    "rag_cap",
    "rag_component",
}
_SPEC_HINT = (
    "Example: total_budget = 120000, expected_output = 20000, input_cap = 90000, and "
    'components = { base = 5000, style = "You write clearly.", rag = { file = "rag.txt" } }'
)


def load_spec(path: str) -> dict[str, Any]:
    """The validate spec: TOML with components (ints, texts or ``{file = ...}``)."""
    try:
        text = read_text(path, hint=_SPEC_HINT)
    except InvalidInputError as exc:
        raise ConfigError(str(exc)) from exc
    try:
        spec = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path!r} is not valid TOML: {exc}. {_SPEC_HINT}") from exc
    except RecursionError:  # arrays or tables nested past the parser's limit
        raise ConfigError(f"{path!r} is nested too deeply to read. {_SPEC_HINT}") from None
    unknown = sorted(set(spec) - _SPEC_KEYS)
    if unknown:
        raise ConfigError(f"{path!r}: unknown keys {unknown}; allowed: {sorted(_SPEC_KEYS)}.")
    for key in ("total_budget", "expected_output"):
        if key not in spec:
            raise ConfigError(f"{path!r} needs {key!r}. {_SPEC_HINT}")
    if not isinstance(spec.get("components"), dict):
        raise ConfigError(f"{path!r} needs a 'components' table. {_SPEC_HINT}")
    thresholds = spec.pop("thresholds", {})
    allowed = {"warning_at", "fallback_input_at", "fallback_total_at"}
    if not isinstance(thresholds, dict) or set(thresholds) - allowed:
        raise ConfigError(
            f"{path!r}: the 'thresholds' table takes warning_at, fallback_input_at and "
            "fallback_total_at."
        )
    spec.update(thresholds)
    base = Path(path).parent
    components: dict[str, Any] = {}
    for name, value in spec["components"].items():
        if isinstance(value, dict):
            if set(value) == {"file"}:
                f = str(base / str(value["file"]))
                try:
                    value = read_text(f, what=f"{path!r}: component {name!r} file")
                except InvalidInputError as exc:
                    raise ConfigError(str(exc)) from exc
            elif set(value) == {"text"}:
                value = value["text"]
            else:
                raise ConfigError(
                    f"{path!r}: component {name!r} must be a token count, a text, "
                    '{ file = "..." } or { text = "..." }.'
                )
        components[name] = value
    spec["components"] = components
    return spec


@app.command("validate")
def validate_cmd(
    file: Annotated[str, typer.Argument(help="TOML budget spec (components, budget, thresholds).")],
    strict: Annotated[
        bool, typer.Option("--strict", help="An unknown spec 'model' is an error.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable result.")] = False,
) -> None:
    """Check prompt components + expected output against a total budget (exit 1 on FALLBACK)."""
    from ..validate import rag_budget, validate_budget

    spec = load_spec(file)
    if spec.get("model") and spec.get("tokenizer"):
        raise ConfigError(f"{file!r}: give 'model' or 'tokenizer', not both.")
    model = spec.get("model")
    if model is not None and not isinstance(model, str):
        raise ConfigError(f"{file!r}: 'model' must be a string, got {model!r}.")
    tok: Any = resolve_model(model, strict=strict) if model else spec.get("tokenizer", "estimate")
    try:
        v = validate_budget(
            spec["components"],
            expected_output=spec["expected_output"],
            total_budget=spec["total_budget"],
            input_cap=spec.get("input_cap"),
            warning_at=spec.get("warning_at", 0.85),
            fallback_input_at=spec.get("fallback_input_at", 0.90),
            fallback_total_at=spec.get("fallback_total_at", 0.96),
            tokenizer=tok,
        )
        rag = None
        if spec.get("rag_cap") is not None:
            if v.input_cap is None:
                raise ConfigError(f"{file!r}: rag_cap needs input_cap.")
            used = v.total_input - v.components.get(spec.get("rag_component", "rag"), 0)
            rag = rag_budget(used, input_cap=v.input_cap, rag_cap=spec["rag_cap"])
    except InvalidInputError as exc:
        raise ConfigError(f"{file!r}: {exc}") from exc
    if as_json:
        console.print_json(data={**v.to_dict(), "rag_budget": rag})
    else:
        table = Table(
            title=f"Budget {v.total_budget:,} (input + output)",
            title_justify="left",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
        )
        table.add_column("component", overflow="fold", max_width=48)
        table.add_column("tokens", justify="right", no_wrap=True)
        table.add_column("share", justify="right", no_wrap=True)
        for name, tokens in [*v.components.items(), ("expected output", v.expected_output)]:
            table.add_row(Text(name), f"{tokens:,}", f"{100 * tokens / v.total_budget:.1f}%")
        table.add_row("total", f"{v.total_tokens:,}", f"{v.usage_percent:.1f}%", style="bold")
        console.print(table)
        style = {"OK": "green", "WARNING": "yellow", "FALLBACK": "red"}[v.status]
        console.print(Text(f"{v.status}: {v.message}", style=style))
        if rag is not None:
            console.print(
                f"RAG budget: {rag:,} tokens (min(rag_cap, input_cap - other input)).",
                markup=False,
                highlight=False,
            )
    if v.status == "FALLBACK" or not v.valid:
        raise SystemExit(1)
