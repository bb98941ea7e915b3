"""The typer app every command module registers on, and its console."""

from __future__ import annotations

import typer
from rich.console import Console

app = typer.Typer(
    name="tokenflex",
    help="Make every LLM request fit its context window, and say what was left out.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)


@app.command()
def version() -> None:
    """Print the tokenflex version."""
    from .. import __version__

    console.print(f"tokenflex {__version__}")
