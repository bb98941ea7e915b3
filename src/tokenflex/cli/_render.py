"""Rich renderables for plans: the stacked window bar and the dropped table."""

from __future__ import annotations

from rich.console import Group, RenderableType
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
    "output": "bright_white on grey23",
    "margin": "red",
    "free": "grey50",
}


def window_bar(plan: Plan, width: int = 64) -> RenderableType:
    """One bar for the whole window: sections, reserved output, margin, free room."""
    parts = [(name, tokens) for name, tokens in plan.sections.items() if tokens > 0]
    parts += [
        ("output", plan.max_tokens),
        ("margin", plan.safety_margin),
        ("free", plan.free_tokens),
    ]
    bar = Text()
    legend = Text()
    window = plan.context_window
    for name, tokens in parts:
        if tokens <= 0:
            continue
        cells = max(1, round(width * tokens / window))
        style = _COLOURS.get(name, "white")
        bar.append("█" * cells if name != "free" else "░" * cells, style=style.split(" on ")[0])
        legend.append("■ ", style=style.split(" on ")[0])
        legend.append(f"{name} {tokens:,}  ")
    head = Text(
        f"{plan.model.name}: {plan.input_tokens:,} input + {plan.max_tokens:,} output + "
        f"{plan.safety_margin:,} margin of {window:,} ({plan.utilization:.0%})"
    )
    return Group(head, bar, legend)


def dropped_table(plan: Plan, limit: int = 20) -> RenderableType:
    """What was left out: runs, then the first ``limit`` items with their tokens."""
    if not len(plan.dropped):
        return Text("Nothing dropped.", style="green")
    table = Table(title=f"Dropped: {len(plan.dropped):,} items", title_justify="left")
    table.add_column("section")
    table.add_column("index", justify="right")
    table.add_column("role")
    table.add_column("tokens", justify="right")
    table.add_column("reason")
    for i, d in enumerate(plan.dropped):
        if i >= limit:
            table.add_row("…", f"{len(plan.dropped) - limit:,} more", "", "", "")
            break
        role = d.item.get("role", "") if isinstance(d.item, dict) else ""
        table.add_row(d.section, str(d.index), Text(str(role)), f"{d.tokens:,}", d.reason)
    return table


def plan_view(plan: Plan, *, verbose: bool = False) -> RenderableType:
    """The bar, the warnings, the summary and the dropped table."""
    items: list[RenderableType] = [window_bar(plan)]
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
    items.append(dropped_table(plan, limit=200 if verbose else 20))
    if verbose:
        kept = Table(title="Kept messages", title_justify="left")
        kept.add_column("#", justify="right")
        kept.add_column("role")
        kept.add_column("content")
        for i, m in enumerate(plan.messages):
            content = m.get("content")
            text = content if isinstance(content, str) else repr(content)
            # Text(), not str: message content is data, never rich markup
            kept.add_row(str(i), str(m.get("role")), Text((text or "")[:80].replace("\n", " ")))
        items.append(kept)
    return Group(*items)
