"""The request formats tokenflex reads and writes, in one list.

Detection asks each format in order, ``fit(format=...)`` and ``plan.request(api=...)``
look a name up here, recall asks the format for its tool shape, and the proxy builds its
routes from the formats that have a :attr:`~tokenflex.formats.base.RequestFormat.path`.
The first format is the default (chat: what a list with no format's mark is read as).

A plug-in adds its own with :func:`register_format` (before fitting with it).
"""

from __future__ import annotations

import threading

from ..errors import InvalidInputError
from .anthropic import ANTHROPIC
from .base import RequestFormat
from .chat import CHAT
from .gemini import GEMINI
from .responses import RESPONSES

__all__ = ["default_format", "format_names", "formats", "get_format", "register_format"]

_FORMATS: list[RequestFormat] = [CHAT, ANTHROPIC, RESPONSES, GEMINI]
_LOCK = threading.Lock()


def formats() -> tuple[RequestFormat, ...]:
    """Every registered format, in detection order (the default first)."""
    return tuple(_FORMATS)


def format_names() -> tuple[str, ...]:
    """The registered formats' names.

    >>> format_names()[:3]
    ('chat', 'anthropic', 'responses')
    """
    return tuple(f.name for f in _FORMATS)


def default_format() -> RequestFormat:
    """What a conversation with no format's mark is read as (chat)."""
    return _FORMATS[0]


def get_format(name: str, *, option: str = "format") -> RequestFormat:
    """The format called ``name``.

    Raises:
        InvalidInputError: no such format (the message names ``option`` and lists them).

    >>> get_format("anthropic").system_key
    'system'
    """
    for f in _FORMATS:
        if f.name == name:
            return f
    raise InvalidInputError(
        f"{option}={name!r} is not a request format. Use one of {', '.join(format_names())}."
    )


def register_format(fmt: RequestFormat) -> None:
    """Add a request format (detected after the built-in ones).

    Raises:
        InvalidInputError: a format of that name is registered already.
    """
    with _LOCK:
        for f in _FORMATS:
            if f.name == fmt.name:
                raise InvalidInputError(
                    f"A request format named {fmt.name!r} is registered already "
                    f"({type(f).__module__}.{type(f).__name__}); the new one is "
                    f"{type(fmt).__module__}.{type(fmt).__name__}. Give it another name."
                )
        _FORMATS.append(fmt)
