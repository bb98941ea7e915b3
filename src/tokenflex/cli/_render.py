"""Rich renderables for plans: the window bar, what was dropped (as runs), what was kept.

Everything here fits 80 columns, and every piece of user data (model and section names,
roles, message content) goes in as :class:`~rich.text.Text`, never as markup: content like
``[INST] hi [/INST]`` or ``[x³ sin x]`` is shown as written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from ..plan import Plan

_COLOURS = {
    "system": "magenta",
    "summary": "bright_magenta",
    "documents": "cyan",
    "history": "blue",
    "current": "green",
    "tools_and_priming": "yellow",
    "output": "bright_white",
    "margin": "red",
    "free": "grey50",
}

REASONS = {
    "budget": "did not fit the window once the output and the margin were reserved",
    "share": "past the section's soft share of the room (fit: --history-share)",
    "cap": "past the section's token cap",
    "max_items": "past the section's item limit",
    "orphan": "an answer whose question was dropped",
    "summarized": "replaced by the summary",
    "duplicate": "the same as a kept item",
}
"""What each drop reason means, one line for the table's legend."""

RUN_ROWS = 20
"""Runs shown before the rest are summed up in one row."""


def preview(content: Any, limit: int = 200) -> str:
    """Message content on one line: text parts joined, other parts named by type."""
    if isinstance(content, list):
        kinds = [str(p.get("type")) for p in content if isinstance(p, dict)]
        texts = [str(p.get("text")) for p in content if isinstance(p, dict) and "text" in p]
        content = " ".join(texts) + (f" [{', '.join(kinds)}]" if kinds else "")
    text = " ".join(str(content or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def content_cell(content: Any) -> Text:
    """A table cell for message content: one line, cut with an ellipsis at the column's
    width (the column itself must wrap, so rich can narrow it to fit the terminal)."""
    return Text(preview(content), no_wrap=True, overflow="ellipsis")


def bar_cells(sizes: Sequence[int], width: int) -> list[int]:
    """Cells per part so that they add up to ``width`` exactly (largest remainder), and
    every non-empty part gets at least one cell while there is room for it."""
    total = sum(sizes)
    if total <= 0 or width <= 0:
        return [0] * len(sizes)
    raw = [width * s / total for s in sizes]
    cells = [max(1, int(r)) if s > 0 else 0 for s, r in zip(sizes, raw, strict=True)]
    while sum(cells) < width:
        i = max(range(len(cells)), key=lambda j: (raw[j] - cells[j], sizes[j]))
        cells[i] += 1
    while sum(cells) > width and max(cells) > 1:
        cells[cells.index(max(cells))] -= 1
    return cells


@dataclass(frozen=True)
class WindowBar:
    """One bar for the whole window: sections, reserved output, margin, free room. As wide
    as the terminal allows, up to ``width``."""

    plan: Plan
    width: int = 64

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        plan = self.plan
        parts = [(name, tokens) for name, tokens in plan.sections.items() if tokens > 0]
        parts += [
            ("output", plan.max_tokens),
            ("margin", plan.safety_margin),
            ("free", plan.free_tokens),
        ]
        parts = [(name, tokens) for name, tokens in parts if tokens > 0]
        yield Text(
            f"{plan.model.name}: {plan.input_tokens:,} input + {plan.max_tokens:,} output + "
            f"{plan.safety_margin:,} margin of {plan.context_window:,} "
            f"({plan.utilization:.0%})"
        )
        width = min(self.width, options.max_width)
        bar = Text()
        for (name, _), n in zip(parts, bar_cells([t for _, t in parts], width), strict=True):
            bar.append(("░" if name == "free" else "█") * n, style=_COLOURS.get(name, "white"))
        yield bar
        # the legend breaks between entries, never inside "output 3,000"
        line = Text()
        for name, tokens in parts:
            entry = Text("■ ", style=_COLOURS.get(name, "white"))
            entry.append(f"{name} {tokens:,}")
            if line and line.cell_len + 2 + entry.cell_len > options.max_width:
                yield line
                line = Text()
            if line:
                line.append("  ")
            line.append_text(entry)
        yield line


@dataclass(frozen=True)
class DropRunRow:
    """One run of dropped items with what it would have cost."""

    section: str
    start: int
    stop: int
    reason: str
    tokens: int

    @property
    def items(self) -> str:
        """The input indices, inclusive: ``1–306``, or ``7`` for one item."""
        last = self.stop - 1
        return str(self.start) if last == self.start else f"{self.start}–{last}"


def drop_runs(plan: Plan) -> list[DropRunRow]:
    """The plan's dropped runs with their tokens (each dropped item counted once); runs
    that continue one another (same section and reason) are merged."""
    rows: list[DropRunRow] = []
    offset = 0
    for section, start, stop, reason in plan.dropped.runs():
        n = stop - start
        tokens = sum(d.tokens for d in plan.dropped[offset : offset + n])
        offset += n
        last = rows[-1] if rows else None
        if last and (last.section, last.reason, last.stop) == (section, reason, start):
            rows[-1] = DropRunRow(section, last.start, stop, reason, last.tokens + tokens)
        else:
            rows.append(DropRunRow(section, start, stop, reason, tokens))
    return rows


def dropped_table(plan: Plan, limit: int = RUN_ROWS) -> RenderableType:
    """What was left out, one row per run (``history 1–306 · 306 · 41,200 tokens ·
    share``), at most ``limit`` rows, then the meaning of each reason."""
    if not len(plan.dropped):
        return Text("Nothing dropped.", style="green")
    runs = drop_runs(plan)
    total = sum(r.tokens for r in runs)
    table = Table(
        title=f"Dropped: {len(plan.dropped):,} items, {total:,} tokens",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("section", overflow="ellipsis", max_width=24)
    table.add_column("items", no_wrap=True)
    table.add_column("count", justify="right", no_wrap=True)
    table.add_column("tokens", justify="right", no_wrap=True)
    table.add_column("reason", no_wrap=True)
    for r in runs[:limit]:
        table.add_row(Text(r.section), r.items, f"{r.stop - r.start:,}", f"{r.tokens:,}", r.reason)
    rest = runs[limit:]
    if rest:
        table.add_row(
            "…",
            f"{len(rest):,} more runs",
            f"{sum(r.stop - r.start for r in rest):,}",
            f"{sum(r.tokens for r in rest):,}",
            "",
        )
    legend = Text(style="dim")
    for reason in sorted({r.reason for r in runs}):
        if legend:
            legend.append("\n")
        legend.append(f"{reason}: {REASONS.get(reason, 'see the plan warnings')}")
    return Group(table, legend)


def dropped_items_table(plan: Plan, limit: int = 200) -> RenderableType:
    """The first ``limit`` dropped items, one line each, with a preview of their content."""
    table = Table(
        title=f"Dropped items (first {min(limit, len(plan.dropped)):,})",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("section", overflow="ellipsis", max_width=12)
    table.add_column("role", overflow="ellipsis", max_width=10)
    table.add_column("tokens", justify="right", no_wrap=True)
    table.add_column("content", ratio=1, overflow="ellipsis")
    for d in plan.dropped[:limit]:
        item = d.item if isinstance(d.item, dict) else {}
        content = item.get("content", item.get("text")) if item else d.item
        table.add_row(
            str(d.index),
            Text(d.section),
            Text(str(item.get("role", ""))),
            f"{d.tokens:,}",
            content_cell(content),
        )
    return table


def kept_table(plan: Plan, given: Sequence[Any] | None = None) -> RenderableType:
    """Every message of the plan, one line each, numbered like the dropped items: by its
    index in the caller's input ``given`` (a message the fit added, a summary or a note,
    is ``+``); without ``given``, by its place in the plan."""
    where = {id(m): i for i, m in enumerate(given)} if given is not None else None
    table = Table(title="Kept messages", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("role", overflow="ellipsis", max_width=10)
    table.add_column("content", ratio=1, overflow="ellipsis")
    for i, m in enumerate(plan.messages):
        number = str(i) if where is None else str(where.get(id(m), "+"))
        table.add_row(number, Text(str(m.get("role"))), content_cell(m.get("content")))
    return table


def plan_view(
    plan: Plan, *, verbose: bool = False, given: Sequence[Any] | None = None
) -> RenderableType:
    """The bar, the warnings, the summary and the dropped runs; ``verbose`` adds the first
    200 dropped items and every kept message (numbered by index in ``given``, the
    caller's messages, like the dropped ones)."""
    items: list[RenderableType] = [WindowBar(plan)]
    for w in plan.warnings:
        items.append(Text(f"⚠ {w}", style="yellow"))
    if plan.summary is not None:
        s = plan.summary
        items.append(
            Text(
                f"Summary of messages [{s.covers[0]}:{s.covers[1]}] in {s.tokens:,} tokens "
                f"(saved {s.saved_tokens:,}) by {s.summarizer or 'summarizer'}",
                style="magenta",
            )
        )
    items.append(dropped_table(plan))
    if verbose:
        if len(plan.dropped):
            items.append(dropped_items_table(plan))
        items.append(kept_table(plan, given))
    return Group(*items)
