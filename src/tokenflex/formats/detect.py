"""Which API a list of messages is written for: ``chat``, ``anthropic`` or ``responses``.

Each format has marks no other has: Anthropic's ``tool_use`` / ``tool_result`` /
``thinking`` blocks and ``source``-based images; Responses' typed items
(``function_call``, ``reasoning``, ``"type": "message"``) and ``input_*`` parts; chat's
``tool`` role, ``tool_calls`` and ``image_url`` parts. Plain ``{"role", "content": str}``
messages are the same in all three and are treated as chat, unless fit() was given
``system=`` (Anthropic's top-level system; Responses callers pass ``format=``). Marks of
two formats in one list are an error that names both and the ``format=`` option.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidMessagesError
from .objects import is_langchain

__all__ = ["FORMATS", "detect_format", "format_marks"]

FORMATS = ("chat", "anthropic", "responses")
"""The request formats fit() reads and returns."""

_ANTHROPIC_BLOCKS = frozenset(
    {"tool_use", "tool_result", "thinking", "redacted_thinking", "image", "document"}
    | {"server_tool_use", "web_search_tool_result", "search_result"}
)
_RESPONSES_PARTS = frozenset({"input_text", "input_image", "input_file", "output_text"})
_CHAT_PARTS = frozenset({"image_url", "input_audio", "file", "refusal"})


def _marks(m: Any, found: dict[str, int], i: int) -> None:
    if is_langchain(m):
        found.setdefault("chat", i)
        return
    if not isinstance(m, Mapping):
        dump = getattr(m, "model_dump", None)
        if not callable(dump):
            return
        module = type(m).__module__
        if module.startswith("anthropic"):
            found.setdefault("anthropic", i)
        elif ".responses" in module:
            found.setdefault("responses", i)
        elif ".chat" in module:
            found.setdefault("chat", i)
        return
    itype = m.get("type")
    if (isinstance(itype, str) and "role" not in m) or itype == "message":
        found.setdefault("responses", i)
        return
    role = m.get("role")
    if role in ("tool", "function") or m.get("tool_calls") or m.get("function_call"):
        found.setdefault("chat", i)
    content = m.get("content")
    if not isinstance(content, list):
        return
    for part in content:
        ptype = getattr(part, "type", None) if not isinstance(part, Mapping) else part.get("type")
        if not isinstance(ptype, str):
            continue  # the format's own checks name what is wrong with it
        if ptype in _ANTHROPIC_BLOCKS:
            found.setdefault("anthropic", i)
        elif ptype in _RESPONSES_PARTS:
            found.setdefault("responses", i)
        elif ptype in _CHAT_PARTS:
            found.setdefault("chat", i)


def format_marks(messages: Sequence[Any], offset: int = 0) -> dict[str, int]:
    """Each format ``messages`` carry a mark of, with the index of its first mark
    (``offset`` added): the formats an appended run of items could belong to."""
    found: dict[str, int] = {}
    for i, m in enumerate(messages, offset):
        _marks(m, found, i)
    return found


def detect_format(messages: Sequence[Any], *, system: Any = None) -> str:
    """The format of ``messages`` (``chat`` when nothing says otherwise).

    Args:
        messages: The caller's list.
        system: fit()'s ``system=``: a list of blocks is Anthropic's top-level system.

    Raises:
        InvalidMessagesError: marks of two formats in one list.

    >>> detect_format([{"role": "user", "content": "hi"}])
    'chat'
    >>> detect_format([{"type": "function_call_output", "call_id": "c1", "output": "42"}])
    'responses'
    """
    found = format_marks(messages)
    if isinstance(system, list):
        found.setdefault("anthropic", -1)
    if len(found) > 1:
        where = ", ".join(
            f"{name} (messages[{i}])" if i >= 0 else f"{name} (system=)"
            for name, i in sorted(found.items(), key=lambda kv: kv[1])
        )
        raise InvalidMessagesError(
            f"The messages mix formats: {where}. Convert them to one format, or pass "
            f"format= (one of {', '.join(FORMATS)}) to read them as that format."
        )
    if not found and system is not None:
        return "anthropic"  # chat carries its system prompt inline; Responses says format=
    return next(iter(found), "chat")
