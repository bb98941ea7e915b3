"""``tokenflex pack`` (chunks into a budget) and ``tokenflex validate`` (a budget spec)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from ..errors import ConfigError, InvalidInputError
from ._app import app, console

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

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(f"Cannot read {path!r}: {exc.strerror}. {_CHUNK_HINT}") from exc
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as first:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError:
            raise InvalidInputError(
                f"{path!r} is not valid JSON ({first.msg} at line {first.lineno}, column "
                f"{first.colno}). {_CHUNK_HINT}"
            ) from first
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


def _pack_view(result: Any, n: int) -> Group:
    """Summary line, admitted table, dropped table."""
    head = Text(
        f"Packed {len(result.admitted):,} of {n:,} chunks: {result.tokens:,} of "
        f"{result.limit:,} tokens (budget {result.budget:,} - {result.safety_buffer:,} "
        f"buffer), policy {result.policy}, {result.format}, tokenizer {result.tokenizer} "
        f"({'exact' if result.exact else 'estimate'})"
        + (f", knapsack {result.knapsack}" if result.knapsack else "")
        + "."
    )
    admitted = Table(title=f"Admitted: {len(result.admitted):,}", title_justify="left")
    for col, right in (("#", True), ("id", False), ("score", True), ("tokens", True)):
        admitted.add_column(col, justify="right" if right else "left")
    admitted.add_column("citation", overflow="fold")
    for k, (c, i, t) in enumerate(
        zip(result.admitted, result.admitted_indices, result.admitted_costs, strict=True), 1
    ):
        cite = " — ".join(p for p in (c.source, c.identifier) if p)
        score = "" if c.score is None else f"{c.score:g}"
        admitted.add_row(str(k), c.id or f"#{i}", score, f"{t:,}", cite)
    if not result.dropped:
        return Group(head, admitted, Text("Nothing dropped.", style="green"))
    dropped = Table(
        title=f"Dropped: {result.dropped_count:,} chunks, {result.dropped_tokens:,} tokens",
        title_justify="left",
    )
    for col in ("index", "id", "score", "tokens", "reason"):
        dropped.add_column(col, justify="right" if col in ("index", "score", "tokens") else "left")
    for k, d in enumerate(result.dropped):
        if k >= 50:
            dropped.add_row("…", f"{result.dropped_count - 50:,} more", "", "", "")
            break
        score = "" if d.score is None else f"{d.score:g}"
        tokens = "not counted" if d.tokens is None else f"{d.tokens:,}"
        dropped.add_row(str(d.index), d.id or "", score, tokens, d.reason)
    return Group(head, admitted, dropped)


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
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable result.")] = False,
) -> None:
    """Pack ranked chunks and their citations into a token budget; show what was dropped."""
    from ..documents import pack_chunks
    from ..models import get_model

    if model and tokenizer:
        raise InvalidInputError("Pass --model or --tokenizer, not both.")
    tok: Any = get_model(model) if model else (tokenizer or "estimate")
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
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"Cannot read {path!r}: {exc.strerror}. {_SPEC_HINT}") from exc
    try:
        spec = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path!r} is not valid TOML: {exc}. {_SPEC_HINT}") from exc
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
                f = base / str(value["file"])
                try:
                    value = f.read_text(encoding="utf-8")
                except OSError as exc:
                    raise ConfigError(
                        f"{path!r}: component {name!r} file {str(f)!r}: {exc.strerror}."
                    ) from exc
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
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable result.")] = False,
) -> None:
    """Check prompt components + expected output against a total budget (exit 1 on FALLBACK)."""
    from ..models import get_model
    from ..validate import rag_budget, validate_budget

    spec = load_spec(file)
    if spec.get("model") and spec.get("tokenizer"):
        raise ConfigError(f"{file!r}: give 'model' or 'tokenizer', not both.")
    tok: Any = get_model(spec["model"]) if spec.get("model") else spec.get("tokenizer", "estimate")
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
        table = Table(title=f"Budget {v.total_budget:,} (input + output)", title_justify="left")
        table.add_column("component")
        table.add_column("tokens", justify="right")
        table.add_column("share", justify="right")
        for name, tokens in [*v.components.items(), ("expected output", v.expected_output)]:
            table.add_row(name, f"{tokens:,}", f"{100 * tokens / v.total_budget:.1f}%")
        table.add_row("total", f"{v.total_tokens:,}", f"{v.usage_percent:.1f}%", style="bold")
        console.print(table)
        style = {"OK": "green", "WARNING": "yellow", "FALLBACK": "red"}[v.status]
        console.print(Text(f"{v.status}: {v.message}", style=style), soft_wrap=True)
        if rag is not None:
            console.print(f"RAG budget: {rag:,} tokens (min(rag_cap, input_cap - other input)).")
    if v.status == "FALLBACK" or not v.valid:
        raise SystemExit(1)
