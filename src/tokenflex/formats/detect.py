"""Which API a list of messages is written for: each registered format is asked.

Each format has marks no other has (:meth:`~tokenflex.formats.base.RequestFormat.marks`):
Anthropic's ``tool_use`` / ``tool_result`` / ``thinking`` blocks and ``source``-based
images; Responses' typed items (``function_call``, ``reasoning``, ``"type": "message"``)
and ``input_*`` parts; chat's ``tool`` role, ``tool_calls`` and ``image_url`` parts;
Gemini's ``parts`` and ``model`` role. Plain ``{"role", "content": str}`` messages are the
same in chat, Anthropic and Responses and are read as the default format (chat), unless
fit() was given ``system=`` (Anthropic's top-level system, or a ``systemInstruction``
with ``parts``; Responses callers pass ``format=``). Marks of two formats in one list are
an error that names both and the ``format=`` option.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import InvalidMessagesError
from .registry import default_format, format_names, formats

__all__ = ["FORMATS", "detect_format", "format_marks"]

FORMATS = format_names()
"""The built-in request formats fit() reads and returns (the registry has them all:
:func:`~tokenflex.formats.registry.format_names`)."""


def format_marks(messages: Sequence[Any], offset: int = 0) -> dict[str, int]:
    """Each format ``messages`` carry a mark of, with the index of its first mark
    (``offset`` added): the formats an appended run of items could belong to."""
    found: dict[str, int] = {}
    known = formats()
    for i, m in enumerate(messages, offset):
        for f in known:
            if f.name not in found and f.marks(m):
                found[f.name] = i
    return found


def detect_format(messages: Sequence[Any], *, system: Any = None) -> str:
    """The format of ``messages`` (``chat`` when nothing says otherwise).

    Args:
        messages: The caller's list.
        system: fit()'s ``system=``: a list of blocks is Anthropic's top-level system, a
            content with ``parts`` Gemini's ``systemInstruction``.

    Raises:
        InvalidMessagesError: marks of two formats in one list.

    >>> detect_format([{"role": "user", "content": "hi"}])
    'chat'
    >>> detect_format([{"type": "function_call_output", "call_id": "c1", "output": "42"}])
    'responses'
    >>> detect_format([{"role": "user", "parts": [{"text": "hi"}]}])
    'gemini'
    """
    found = format_marks(messages)
    if system is not None:
        for f in formats():
            if f.marks_system(system):
                found.setdefault(f.name, -1)
    if len(found) > 1:
        where = ", ".join(
            f"{name} (messages[{i}])" if i >= 0 else f"{name} (system=)"
            for name, i in sorted(found.items(), key=lambda kv: kv[1])
        )
        raise InvalidMessagesError(
            f"The messages mix formats: {where}. Convert them to one format, or pass "
            f"format= (one of {', '.join(format_names())}) to read them as that format."
        )
    if not found and system is not None:
        # chat carries its system prompt inline; Responses says format=
        bare = next((f for f in formats() if f.bare_system), None)
        if bare is not None:
            return bare.name
    return next(iter(found), default_format().name)
