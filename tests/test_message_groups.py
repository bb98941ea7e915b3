"""The tool-group rule, written once (tokenflex.message.groups): history reads groups
backwards, a Conversation builds them forwards, and both equal a reference."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenflex import Conversation
from tokenflex.history import iter_groups

KINDS = ("user", "assistant", "call", "tool", "function", "system", "fcall")


def _message(kind: str, i: int) -> dict[str, Any]:
    if kind == "call":
        call = {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    if kind == "fcall":
        return {
            "role": "assistant",
            "content": None,
            "function_call": {"name": "f", "arguments": "{}"},
        }
    if kind == "tool":
        return {"role": "tool", "tool_call_id": f"c{i - 1}", "content": f"result {i}"}
    if kind == "function":
        return {"role": "function", "name": "f", "content": f"result {i}"}
    return {"role": kind, "content": f"message {i}"}


def _reference(kinds: list[str], lo: int) -> list[tuple[int, int]]:
    """Groups of ``kinds[lo:]`` as ``(start, stop)``, oldest first, read off a regex: a
    call and the results right after it are one group, results with no call before them
    are one group (consecutive ones together), anything else stands alone."""
    letters = "".join(
        "C" if k in ("call", "fcall") else "T" if k in ("tool", "function") else "U"
        for k in kinds[lo:]
    )
    return [(lo + m.start(), lo + m.end()) for m in re.finditer(r"CT*|T+|U", letters)]


@settings(max_examples=200, deadline=None)
@given(
    pinned=st.integers(0, 2),
    kinds=st.lists(st.sampled_from(KINDS), max_size=24),
)
def test_history_and_conversation_build_the_same_groups(pinned: int, kinds: list[str]) -> None:
    kinds = ["system"] * pinned + kinds
    messages = [_message(k, i) for i, k in enumerate(kinds)]
    lo = pinned
    while lo < len(kinds) and kinds[lo] == "system":
        lo += 1  # a Conversation pins the leading system messages
    expected = _reference(kinds, lo)

    backwards = [(start, stop) for start, stop, _ in iter_groups(messages, lo, len(messages), len)]
    assert backwards[::-1] == expected

    conv = Conversation(messages, model="gpt-4o")
    starts = list(conv._group_start)  # the groups Conversation keeps (no public view)
    assert starts == [start for start, _ in expected]
    # each group's running count is the sum of its messages' counts
    cum = conv._cum
    tokens = conv._tokens
    assert [cum[g + 1] - cum[g] for g in range(len(expected))] == [
        sum(tokens[a:b]) for a, b in expected
    ]
