"""``tokenflex models --check URL [NAME]``: the registry against what a running server
reports (:func:`tokenflex.models.discovery.compare`). Exit code 1 when they differ."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.markup import escape
from rich.table import Table

from ._app import console

__all__ = ["check_models"]


def _show(value: Any) -> str:
    if value is None:
        return "—"
    return f"{value:,}" if isinstance(value, int) else str(value)


def check_models(url: str, name: str, *, as_json: bool) -> None:
    """Print the comparison; exit 1 when the registry and the server differ."""
    from ..models.discovery import compare

    result = compare(url, name or None)
    served, entry = result.served, result.registry
    if as_json:
        console.print_json(
            data={
                "url": result.url,
                "served": served.name,
                "registry": entry.name if entry is not None else None,
                "matches": result.matches,
                "context_window": served.context_window,
                "tokenizer": served.tokenizer,
                "chat_format": served.chat_format,
                "differences": [
                    {"field": d.field, "registry": d.registry, "server": d.server, "note": d.note}
                    for d in result.differences
                ],
            }
        )
    else:
        registry_name = entry.name if entry is not None else "(not in the registry)"
        console.print(
            f"{escape(result.url)} serves {escape(served.name)!s} "
            f"({served.provider}): window {served.context_window:,}, "
            f"counted with {escape(served.tokenizer)} ({served.chat_format}); "
            f"registry: {escape(registry_name)}",
            highlight=False,
        )
        if result.matches:
            console.print("[green]The registry matches the server.[/green]")
        else:
            table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
            table.add_column("field", style="bold", no_wrap=True)
            table.add_column("registry")
            table.add_column("server")
            table.add_column("meaning")
            for d in result.differences:
                table.add_row(
                    d.field, escape(_show(d.registry)), escape(_show(d.server)), escape(d.note)
                )
            console.print(table)
    if not result.matches:
        raise SystemExit(1)
