"""The typer app every command module registers on, its consoles and its global options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer
from rich.console import Console

from ._fast import DEBUG_ENV

DEFAULT_MAX_INPUT_MB = 64
"""What the CLI reads from one file or stdin before it stops (``fit /dev/zero`` must end)."""
MAX_INPUT_ENV = "TOKENFLEX_MAX_INPUT_MB"
GLOBAL_OPTIONS = {
    "--version": "tokenflex --version",
    "--max-input-mb": "tokenflex --max-input-mb N <command> ...",
}
"""Options of ``tokenflex`` itself, which go before the command (``--debug`` goes anywhere),
with how to write them."""

app = typer.Typer(
    name="tokenflex",
    help="Make every LLM request fit its context window, and say what was left out.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)


@dataclass
class GlobalOptions:
    """The options that come before the command (``tokenflex --debug fit ...``)."""

    debug: bool = False
    """Print the traceback of an error, and the library's DEBUG log, on stderr."""
    max_input_mb: int = DEFAULT_MAX_INPUT_MB
    """Largest file or stdin the CLI reads, in MiB."""

    @property
    def max_input_bytes(self) -> int:
        return self.max_input_mb * 1024 * 1024


options = GlobalOptions()


def package_version() -> str:
    """The installed distribution's version, else the source tree's."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tokenflex")
    except PackageNotFoundError:  # run from a source tree that is not installed
        from .. import __version__

        return __version__


def _print_version(value: bool) -> None:
    if value:
        console.print(f"tokenflex {package_version()}", highlight=False, markup=False)
        raise typer.Exit()


@app.callback()
def global_options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            help=f"On an error, print the traceback (also {DEBUG_ENV}=1); may go anywhere.",
        ),
    ] = False,
    max_input_mb: Annotated[
        int,
        typer.Option(
            "--max-input-mb",
            envvar=MAX_INPUT_ENV,
            min=1,
            help="Largest input file (or stdin) to read, in MiB.",
        ),
    ] = DEFAULT_MAX_INPUT_MB,
) -> None:
    """Make every LLM request fit its context window, and say what was left out."""
    options.debug = options.debug or debug
    options.max_input_mb = max_input_mb


@app.command()
def version() -> None:
    """Print the tokenflex version (also: tokenflex --version)."""
    console.print(f"tokenflex {package_version()}", highlight=False, markup=False)
