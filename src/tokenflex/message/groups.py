"""The tool-group rule: which messages are kept or dropped together.

A group is one message, or an assistant message with tool calls together with the tool
results that answer it (the API refuses a result whose call is missing, and a call whose
results are missing). The rule is one relation between neighbours,
:func:`joins_previous`: a tool result joins the group of the message before it when that
message is a tool call or another tool result. Orphan results (no call before them) form
one group of their own, consecutive orphans together.

History reads groups backwards (:func:`group_start`, newest first) and a growing
conversation builds them forwards (a new message either joins the last group or opens
one); both ask :func:`joins_previous`, so they cannot disagree.

>>> call = {"role": "assistant", "content": None, "tool_calls": [{"id": "a"}]}
>>> result = {"role": "tool", "tool_call_id": "a", "content": "42"}
>>> joins_previous(call, result), joins_previous(result, call)
(True, False)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "TOOL_RESULT_ROLES",
    "group_start",
    "is_tool_call",
    "is_tool_result",
    "joins_previous",
    "role_of",
]

TOOL_RESULT_ROLES = ("tool", "function")
"""The roles of a tool's answer (``function``: the legacy function-calling form)."""


def role_of(m: Any) -> Any:
    """The ``role`` of a message dict, or of a message object that stands for another
    API's items (it has ``.get``); None when it has none."""
    if isinstance(m, dict):
        return m.get("role")
    get = getattr(m, "get", None)
    return get("role") if callable(get) else None


def is_tool_call(message: Any) -> bool:
    """Whether ``message`` is an assistant message that calls tools."""
    return role_of(message) == "assistant" and bool(
        message.get("tool_calls") or message.get("function_call")
    )


def is_tool_result(message: Any) -> bool:
    """Whether ``message`` is a tool's answer."""
    return role_of(message) in TOOL_RESULT_ROLES


def joins_previous(previous: Any, message: Any) -> bool:
    """Whether ``message`` belongs to the group of ``previous``, the message before it:
    a tool result after a tool call or after another tool result."""
    return is_tool_result(message) and (is_tool_result(previous) or is_tool_call(previous))


def group_start(messages: Sequence[Any], last: int, lo: int = 0) -> int:
    """The index of the first message of the group that ends at ``messages[last]``
    (the group is not looked for before ``lo``)."""
    start = last
    while start > lo and joins_previous(messages[start - 1], messages[start]):
        start -= 1
    return start
