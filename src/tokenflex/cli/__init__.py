"""The ``tokenflex`` command line: presentation only; the library does the work.

Each command lives in its own module and registers on the shared typer app.
Errors become one red line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import sys

from rich.markup import escape

from ..errors import TokenflexError
from . import _count, _demo, _fit, _pack, _serve  # noqa: F401  (registers commands)
from ._app import app, err_console

__all__ = ["app", "main"]


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (2 for a tokenflex error)."""
    try:
        app(args=argv, standalone_mode=False)
    except (TokenflexError, OSError) as exc:
        # escape: messages name things like chunks[0] that rich would read as markup
        err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 2
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    except Exception as exc:  # click usage errors and aborts
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            return exc.exit_code
        if isinstance(exc, click.exceptions.Abort):
            return 130
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
