"""What the user hands the CLI: files, stdin and model names, read with bounds.

Every failure is a :class:`~tokenflex.errors.InvalidInputError` whose message names the
file and the fix, so ``main`` prints one line and exits 2: a missing file, a directory,
bytes that are not UTF-8, more than ``--max-input-mb`` (``fit /dev/zero`` stops), JSON
that is invalid, nested deeper than anything a request needs or holding NaN/Infinity, and
strings holding lone surrogates (``"\\ud800"``), which no tokenizer or terminal can take.
"""

from __future__ import annotations

import difflib
import errno
import json
import math
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import InvalidInputError, InvalidMessagesError, UnknownModelError
from ..models import DEFAULT_CONTEXT_WINDOW, Model, get_model, list_models
from ._app import MAX_INPUT_ENV, options

MAX_JSON_DEPTH = 100
"""Deepest JSON nesting the CLI reads. A chat request is about 6 levels deep and a tool's
JSON schema a few dozen; far deeper input is a mistake or an attack (and Python's parser
would stop at its recursion limit with a RecursionError)."""

_RAISE_LIMIT = f"tokenflex --max-input-mb N <command> ... (before the command) or {MAX_INPUT_ENV}=N"
_SURROGATE = re.compile("[\ud800-\udfff]")


def read_text(path: str, *, what: str = "", hint: str = "") -> str:
    """The UTF-8 text of ``path`` (``-``: stdin), at most ``--max-input-mb``.

    ``what`` names the file in messages ("tools file"), ``hint`` says what was expected.
    """
    label = f"{what} {path!r}" if what else repr(path)
    limit = options.max_input_bytes
    try:
        if path == "-":
            data = _read_stdin(limit)
        else:
            with open(path, "rb") as f:
                data = f.read(limit + 1)
    except OSError as exc:
        raise InvalidInputError(f"Cannot read {label}: {_reason(exc)}. {hint}".rstrip()) from exc
    if isinstance(data, bytes) and len(data) > limit:
        raise InvalidInputError(
            f"Cannot read {label}: it holds more than the {options.max_input_mb:,} MiB input "
            f"limit. Pass a smaller file, or raise the limit: {_RAISE_LIMIT}."
        )
    if isinstance(data, str):
        text = data
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise InvalidInputError(
                f"Cannot read {label}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                f"{exc.start:,}). Save it as UTF-8."
            ) from exc
    if len(text) > limit:  # a text stream (no byte buffer) is bounded in characters
        raise InvalidInputError(
            f"Cannot read {label}: it holds more than the {options.max_input_mb:,} MiB input "
            f"limit. Raise the limit: {_RAISE_LIMIT}."
        )
    check_text(text, label)
    return text


def _read_stdin(limit: int) -> bytes | str:
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is not None:
        data: bytes = buffer.read(limit + 1)
        return data
    return sys.stdin.read(limit + 1)  # a replaced stdin (tests, embedding) has no buffer


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ENOENT:
        return "no such file"
    if exc.errno == errno.EISDIR:
        return "it is a directory"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return (exc.strerror or type(exc).__name__).lower()


def check_text(text: str, label: str) -> None:
    """Reject lone surrogates: an argument with non-UTF-8 bytes (Python maps them to
    ``\\udcXX``) or a JSON ``"\\ud800"`` escape."""
    found = _SURROGATE.search(text)
    if found is not None:
        raise InvalidInputError(
            f"{label} holds a lone surrogate {found.group()!a} at character {found.start():,}, "
            "which is not valid Unicode text. Fix the encoding (or the JSON escape)."
        )


def parse_json(text: str, label: str, *, hint: str = "", lines: bool = False) -> Any:
    """``json.loads`` with one-line errors: invalid JSON, nesting deeper than
    :data:`MAX_JSON_DEPTH`, lone surrogates in strings. ``lines``: text that is not one
    JSON document may be JSON lines (a list of one value per non-empty line)."""

    def loads(doc: str) -> Any:
        return json.loads(doc, parse_constant=_not_json, parse_float=_finite)

    try:
        try:
            data = loads(text)
        except json.JSONDecodeError as first:
            if not lines:
                raise
            try:
                data = [loads(line) for line in text.splitlines() if line.strip()]
            except json.JSONDecodeError:
                raise first from None
    except _NotJSONNumber as exc:
        raise InvalidInputError(
            f"{label} holds {exc.args[0]}, which is not a finite number (NaN, Infinity or too "
            "large for a float). Replace it with a finite number."
        ) from None
    except json.JSONDecodeError as exc:
        raise InvalidInputError(
            f"{label} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}). "
            f"{hint}".rstrip()
        ) from exc
    except RecursionError:  # deeper than the parser's own limit
        raise InvalidInputError(_too_deep(label, hint)) from None
    _check_tree(data, label, hint)
    return data


class _NotJSONNumber(ValueError):
    """NaN, Infinity or a float that overflows: Python's json reads them, JSON has none."""


def _not_json(constant: str) -> Any:
    raise _NotJSONNumber(constant)


def _finite(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise _NotJSONNumber(literal)
    return value


def _too_deep(label: str, hint: str) -> str:
    return (
        f"{label} is nested more than {MAX_JSON_DEPTH} levels deep; a chat request needs "
        f"fewer than 20. {hint}".rstrip()
    )


def _check_tree(data: Any, label: str, hint: str) -> None:
    """Depth and lone surrogates, walked without recursion."""
    stack = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            check_text(value, label)
        elif isinstance(value, dict | list):
            if depth >= MAX_JSON_DEPTH:
                raise InvalidInputError(_too_deep(label, hint))
            if isinstance(value, dict):
                stack.extend((k, depth + 1) for k in value)
                value = value.values()
            stack.extend((v, depth + 1) for v in value)


@contextmanager
def naming(path: str | None) -> Iterator[None]:
    """Bad messages found by the library name the file they came from:
    ``'chat.json': messages[3] has no 'role'``."""
    try:
        yield
    except InvalidMessagesError as exc:
        if path is None:
            raise
        raise InvalidMessagesError(f"{path!r}: {exc}") from exc


def resolve_model(name: str, *, strict: bool) -> Model:
    """The registry's model; with ``strict``, an unknown name is an error naming close
    registry names (``gtp-4`` -> ``gpt-4``) instead of the conservative default."""
    if not strict:
        return get_model(name)
    try:
        return get_model(name, strict=True)
    except UnknownModelError:
        pass
    models = list_models()
    names = [m.name for m in models] + [a for m in models for a in m.aliases]
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise InvalidInputError(
        f"Unknown model {name!r} (--strict).{hint} List the registry with 'tokenflex models', "
        f"or drop --strict to use the conservative {DEFAULT_CONTEXT_WINDOW:,}-token default."
    )
