"""The ``tokenflex`` command line: presentation only; the library does the work.

Each command lives in its own module and registers on the shared typer app. Every error is
one line on stderr (``error: ...``) and an exit code; ``--debug`` (anywhere on the line) or
``TOKENFLEX_DEBUG=1`` adds the traceback. Exit codes:

- 0: done (``validate``: OK or WARNING);
- 1: a negative answer (``validate``: FALLBACK) or a failure that is not the input's
  fault: an upstream or summarizer error, the operating system, a bug;
- 2: the command line or the input is wrong: a usage error, an unreadable or invalid file,
  an unknown model with ``--strict``, a request that cannot fit (every other
  :class:`~tokenflex.errors.TokenflexError`);
- 130: interrupted.
"""

from __future__ import annotations

import importlib
import logging
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import SummarizerError, TokenflexError, UpstreamError
from ._fast import DEBUG_ENV, debug_from_env, plain_count

__all__ = ["COMMANDS", "app", "load_commands", "main"]


def __getattr__(name: str) -> Any:
    # typer and rich are imported when a command needs them: a plain `count` line is
    # answered without them (cli._fast)
    if name == "app":
        from ._app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


MAX_MESSAGE_CHARS = 2000
"""An error line echoes the user's values; a 1 MB model name must not become a 1 MB line."""

_RUNTIME_ERRORS = (UpstreamError, SummarizerError)

COMMANDS = {
    "batch": "_batch",
    "count": "_count",
    "models": "_count",
    "demo": "_demo",
    "fit": "_fit",
    "inspect": "_fit",
    "pack": "_pack",
    "validate": "_pack",
    "serve": "_serve",
}
"""Each command and the module that registers it on :data:`app`: a command line loads
only its command's module (``tokenflex count`` never imports the proxy); help, a
misspelled command or none loads them all."""


def load_commands(args: list[str]) -> None:
    """Register the command ``args`` name (every command if it names none we know)."""
    from ._app import GLOBAL_OPTIONS

    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in GLOBAL_OPTIONS and args[i] != "--version" else 1
    name = args[i] if i < len(args) else None
    modules = {COMMANDS[name]} if name in COMMANDS else set(COMMANDS.values())
    for module in sorted(modules):
        importlib.import_module(f".{module}", __name__)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return the exit code (see the module docstring)."""
    args, debug = _take_debug(list(sys.argv[1:] if argv is None else argv))
    if not debug:
        answered = plain_count(args)  # `count TEXT|FILE [--model M]`, without typer
        if answered is not None:
            return answered
    from typer import Abort

    from ._app import DEFAULT_MAX_INPUT_MB, app, options

    options.debug = debug or debug_from_env()
    options.max_input_mb = DEFAULT_MAX_INPUT_MB
    with _log_to_stderr(debug=options.debug):
        try:
            load_commands(args)
            result = app(args=args, prog_name="tokenflex", standalone_mode=False)
        except TokenflexError as exc:
            return _fail(exc, str(exc), 1 if isinstance(exc, _RUNTIME_ERRORS) else 2)
        except SystemExit as exc:  # validate's FALLBACK, uvicorn
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except KeyboardInterrupt:
            return 130
        except Abort:  # typer's answer to end-of-input at a prompt
            _error_line("aborted.")
            return 1
        except BrokenPipeError:  # `tokenflex models | head`: the reader left, nothing to say
            return 1
        except OSError as exc:
            return _fail(exc, f"{exc.strerror or exc}{_where(exc)}.", 1)
        except Exception as exc:
            if is_usage_error(exc):
                return _usage_error(exc, args)
            return _fail(
                exc,
                f"internal error ({type(exc).__name__}: {exc}). This is a bug in tokenflex: "
                f"run again with --debug (or {DEBUG_ENV}=1) for the traceback and report it.",
                1,
            )
    return result if isinstance(result, int) else 0


def is_usage_error(exc: Exception) -> bool:
    """A click usage error. typer 0.29 raises its bundled click's exceptions (subclasses of
    ``typer.exceptions.TyperException``), older typer raises click's own: both carry an
    ``exit_code`` and ``format_message()``, which is all we use."""
    from typer.exceptions import TyperException

    return isinstance(exc, TyperException) or (
        isinstance(getattr(exc, "exit_code", None), int)
        and callable(getattr(exc, "format_message", None))
    )


def _take_debug(args: list[str]) -> tuple[list[str], bool]:
    """Remove ``--debug`` wherever it stands before ``--``: after the command too, where a
    user reaches for it when a command fails."""
    end = args.index("--") if "--" in args else len(args)
    head = [a for a in args[:end] if a != "--debug"]
    return head + args[end:], len(head) < end


def _where(exc: OSError) -> str:
    return f": {exc.filename!r}" if exc.filename else ""


def one_line(message: str) -> str:
    """The message on one line, at most :data:`MAX_MESSAGE_CHARS` long."""
    flat = " ".join(message.split())
    if len(flat) > MAX_MESSAGE_CHARS:
        flat = flat[: MAX_MESSAGE_CHARS - 1] + "…"
    return flat


def _fail(exc: BaseException, message: str, code: int) -> int:
    from ._app import options

    if options.debug:
        traceback.print_exception(exc, file=sys.stderr)
    _error_line(message)
    return code


def _error_line(message: str) -> None:
    from rich.text import Text

    from ._app import err_console

    line = Text("error: ", style="red")
    line.append(one_line(message))  # Text: the message is data, never rich markup
    err_console.print(line, soft_wrap=True, highlight=False)


def _usage_error(exc: Any, args: list[str]) -> int:
    message = str(exc.format_message())
    ctx = getattr(exc, "ctx", None)
    if not message:  # no command: typer printed the help
        return int(exc.exit_code)
    value = _bad_value(exc, args)
    if value is not None:
        message = message.replace("Invalid value for", f"Invalid value {value!r} for", 1)
    message = message if message.endswith((".", "?", "!")) else message + "."
    option = getattr(exc, "option_name", None)
    from ._app import GLOBAL_OPTIONS

    if option in GLOBAL_OPTIONS:  # `tokenflex fit big.json --max-input-mb 200`
        _error_line(f"{message} {option} goes before the command: {GLOBAL_OPTIONS[option]}")
        return int(exc.exit_code)
    _error_line(f"{message} Try '{_command_path(ctx, args)} --help'.")
    return int(exc.exit_code)


def _command_path(ctx: Any, args: list[str]) -> str:
    """``tokenflex fit`` for an error in fit's options, even where click gave no context."""
    if ctx is not None:
        return str(ctx.command_path)
    from ._app import app

    commands = {
        c.name or (c.callback.__name__.replace("_", "-") if c.callback else "")
        for c in app.registered_commands
    }
    command = next((a for a in args if a in commands), None)
    return f"tokenflex {command}" if command else "tokenflex"


def _bad_value(exc: Any, args: list[str]) -> str | None:
    """The value a BadParameter rejected, found on the command line (click keeps only the
    parameter), so the line can name it: ``Invalid value 'abc' for '--max-tokens'``."""
    param: Any = getattr(exc, "param", None)
    opts = getattr(param, "opts", None) or []
    if not opts or not all(o.startswith("-") for o in opts):
        return None
    for i, arg in enumerate(args):
        for opt in opts:
            if arg == opt and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(opt + "="):
                return arg[len(opt) + 1 :]
    return None


class _StderrHandler(logging.Handler):
    """The library's log records, one escaped line each: ``warning: ...``."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from rich.text import Text

            from ._app import err_console

            line = Text(f"{record.levelname.lower()}: ", style="yellow")
            line.append(one_line(record.getMessage()))
            err_console.print(line, soft_wrap=True, highlight=False)
        except Exception:  # a log line must never take the command down
            self.handleError(record)


@contextmanager
def _log_to_stderr(*, debug: bool) -> Iterator[None]:
    """WARNING and up from the ``tokenflex`` logger on stderr; with --debug, DEBUG too."""
    log = logging.getLogger("tokenflex")
    handler = _StderrHandler(logging.DEBUG if debug else logging.WARNING)
    level = log.level
    log.addHandler(handler)
    if debug:
        log.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


if __name__ == "__main__":
    sys.exit(main())
