"""Runs of plain ``{"role", "content": str}`` messages are passed over in C: by the
check of a request's messages (``check_prepared``) and by ``is_plain_chat``. The C loop
must stop exactly where the Python reading would look (a property test against a
reference written out here), and the check must answer as the message-by-message check
does, bad messages included."""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenflex.formats.chat as chat
import tokenflex.roundtrip as roundtrip
from tokenflex import InvalidMessagesError, fit
from tokenflex.tokenizers import base

ROLES = {"system": 0, "user": 0, "assistant": 0}


class Sub(dict):  # type: ignore[type-arg]
    """A dict subclass: never plain."""


class Text(str):
    """A str subclass: never plain."""

    __slots__ = ()


ROLE = st.sampled_from(["user", "assistant", "system", "tool", "wizard", ""])
VALUE = st.one_of(
    st.text(max_size=5),
    st.none(),
    st.integers(),
    st.just(Text("x")),
    st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=3)})),
)
PLAIN = st.builds(lambda r, c: {"role": r, "content": c}, ROLE, st.text(max_size=5))
OTHER = st.one_of(
    st.builds(lambda r, c: {"content": c, "role": r}, ROLE, VALUE),  # either key order
    st.builds(lambda r, c: {"role": Text(r), "content": c}, ROLE, st.text(max_size=3)),
    st.builds(lambda r, c: Sub(role=r, content=c), ROLE, st.text(max_size=3)),
    st.builds(lambda r, c, k: {"role": r, "content": c, k: 1}, ROLE, VALUE, st.text(max_size=3)),
    st.dictionaries(st.sampled_from(["role", "content", "type", "name"]), VALUE, max_size=3),
    st.sampled_from([None, "user", 3, ("role", "user")]),
)
MESSAGES = st.lists(st.one_of(PLAIN, PLAIN, OTHER), max_size=12)


def _reference(messages: list[Any], lo: int, hi: int, roles: dict[str, Any]) -> int:
    """What the C loop must answer, read in Python (0 <= lo <= hi <= len(messages))."""
    for i in range(lo, hi):
        m = messages[i]
        plain = (
            type(m) is dict
            and len(m) == 2
            and type(m.get("role")) is str
            and type(m.get("content")) is str
            and m["role"] in roles
        )
        if not plain:
            return i
    return hi


@pytest.mark.skipif(base._PLAIN_UNTIL is None, reason="built without a C compiler")
@settings(max_examples=400, deadline=None)
@given(MESSAGES, st.data())
def test_the_c_loop_stops_where_python_would(messages: list[Any], data: st.DataObject) -> None:
    hi = data.draw(st.integers(0, len(messages)))
    lo = data.draw(st.integers(0, hi))
    assert base.plain_until(messages, lo, hi, ROLES) == _reference(messages, lo, hi, ROLES)


def _old_is_plain_chat(messages: list[Any]) -> bool:
    for m in messages:
        if type(m) is not dict:
            return False
        content = m.get("content")
        if type(content) is not str and content is not None:
            return False
        if "reasoning_content" in m or "type" in m:
            return False
    return True


@settings(max_examples=300, deadline=None)
@given(MESSAGES)
def test_is_plain_chat_answers_as_the_message_by_message_reading(messages: list[Any]) -> None:
    assert chat.is_plain_chat(messages) == _old_is_plain_chat(messages)
    assert chat.is_plain_chat(tuple(messages)) == _old_is_plain_chat(messages)


def _outcome(messages: list[Any]) -> str:
    try:
        plan = fit(messages, model="gpt-4o", max_tokens=100)
    except (InvalidMessagesError, ValueError, TypeError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return f"plan: {plan.input_tokens}"


@settings(max_examples=300, deadline=None)
@given(MESSAGES)
def test_a_request_is_checked_as_message_by_message(messages: list[Any]) -> None:
    """The same answer, the same error naming the same message, with the C loop and
    without it (each message checked in Python)."""
    with_c = _outcome(list(messages))

    def python(messages: Any, lo: int, hi: int, roles: Any) -> int:
        return lo

    with patch.object(roundtrip, "plain_until", python), patch.object(chat, "plain_until", python):
        without = _outcome(list(messages))
    assert with_c == without
