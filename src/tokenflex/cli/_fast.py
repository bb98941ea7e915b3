"""The command line answered without typer: ``tokenflex count TEXT|FILE [--model M]``.

typer imports pydantic, and with rich that costs more than tiktoken's whole start-up
(issue 24), for a command that counts one text. A plain ``count`` line (a text or a small
UTF-8 file that is not messages, a known model or none, no other option) is answered
here; anything else, and anything that would warn or fail, returns None and goes through
typer, which then says it exactly as it always did. The answer is the same line the typer
command prints, printed the same way (rich's console, imported without typer).
"""

from __future__ import annotations

import logging
import os
import re
import sys

__all__ = ["DEBUG_ENV", "FILE_SUFFIXES", "debug_from_env", "names_a_file", "plain_count"]

DEBUG_ENV = "TOKENFLEX_DEBUG"
_SMALL_FILE = 1024 * 1024
"""Largest file read here: under the smallest ``--max-input-mb`` (1 MiB), so the input
limit, whatever it is set to, cannot be what this file runs into."""
_MESSAGE_FILES = (".json", ".jsonl")
FILE_SUFFIXES = (".json", ".txt", ".md", ".jsonl")
"""Suffixes that make a ``count`` argument a file name, whether it exists or not."""
_SURROGATE = re.compile("[\ud800-\udfff]")


def debug_from_env() -> bool:
    """``TOKENFLEX_DEBUG=1`` (any value but empty, 0, false, no) asks for tracebacks."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


class _Heard(logging.Handler):
    """Notes that the library said something (then typer's path answers instead)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.heard = False

    def emit(self, record: logging.LogRecord) -> None:
        self.heard = True


def _plain_args(args: list[str]) -> tuple[str, str | None] | None:
    """(source, model) of ``count SOURCE [--model M | -m M | --model=M]``; else None."""
    if len(args) < 2 or args[0] != "count":
        return None
    source: str | None = None
    model: str | None = None
    rest = args[1:]
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg in ("--model", "-m") and i + 1 < len(rest) and model is None:
            model, i = rest[i + 1], i + 2
        elif arg.startswith("--model=") and model is None:
            model, i = arg[len("--model=") :], i + 1
        elif arg.startswith("-") or source is not None:  # '-' (stdin), '--', other options
            return None
        else:
            source, i = arg, i + 1
    return (source, model) if source else None


def plain_count(args: list[str]) -> int | None:
    """Answer a plain ``tokenflex count`` line and return 0, or None when it is not one
    (then nothing was printed)."""
    if debug_from_env():
        return None
    parsed = _plain_args(args)
    if parsed is None:
        return None
    source, name = parsed
    read = _read(source)
    if read is None:
        return None
    text, _ = read
    log = logging.getLogger("tokenflex")
    heard = _Heard()
    log.addHandler(heard)
    try:
        from ..counting import get_counter
        from ..errors import TokenflexError
        from ..models import get_model

        try:
            model = get_model(name or "gpt-4o")
            if not model.known:
                return None  # typer's command warns about the default it uses
            counter = get_counter(model)
            tokens = counter.text(text)
        except TokenflexError:
            return None
    finally:
        log.removeHandler(heard)
    if heard.heard:
        return None
    kind = "exact" if counter.tokenizer.exact else "estimate"
    _print(
        (f"{tokens:,}", "bold"),
        f" tokens  ({len(text):,} characters; {model.name}, {counter.tokenizer.name} {kind})",
    )
    return 0


def names_a_file(source: str) -> bool:
    """A path that exists (a file, a directory, /dev/zero: each gets its own answer), or
    one shaped like a path: a file suffix, or / ./ ../ ~/ in front, and no spaces (an
    absolute path that does not exist is a mistyped file, not text to count)."""
    if "\n" in source or len(source) >= 4096:
        return False
    if os.path.lexists(source):
        return True
    if source.lower().endswith(FILE_SUFFIXES):
        return True
    if any(c.isspace() for c in source):
        return False
    return len(source) > 1 and source.startswith(("/", "./", "../", "~/"))


def _read(source: str) -> tuple[str, str] | None:
    """(text, where) of a small UTF-8 file or of a TEXT argument; None where typer's
    command must read it: stdin, a missing, special or large file, bytes that are not
    UTF-8, a lone surrogate, a text that may be messages."""
    if names_a_file(source):
        if source.lower().endswith(_MESSAGE_FILES):
            return None
        try:
            if not os.path.isfile(source) or os.path.getsize(source) > _SMALL_FILE:
                return None
            with open(source, "rb") as f:
                text = f.read(_SMALL_FILE + 1).decode("utf-8-sig")
        except (OSError, UnicodeDecodeError):
            return None
    else:
        text = source
    if text.lstrip().startswith(("[", "{")):
        return None  # may be messages: typer's command reads them
    if _SURROGATE.search(text):
        return None
    return text, source


_STYLED = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "JUPYTER_COLUMNS")
"""Environment variables that make rich style what it writes to a pipe."""


def _print(*parts: tuple[str, str] | str) -> None:
    """The line as the typer command's ``console.print(Text.assemble(...))`` writes it:
    to a pipe or file, rich writes a line shorter than its width (``COLUMNS``, else 80)
    as plain text, so such a line is written here without importing rich; else through
    rich."""
    plain = "".join(p if isinstance(p, str) else p[0] for p in parts)
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() else 80
    out = sys.stdout
    if (
        len(plain) < width
        and not any(os.environ.get(k) for k in _STYLED)
        and not (hasattr(out, "isatty") and out.isatty())
    ):
        out.write(plain + "\n")
        out.flush()
        return
    from rich.console import Console
    from rich.text import Text

    Console().print(Text.assemble(*parts), highlight=False)
