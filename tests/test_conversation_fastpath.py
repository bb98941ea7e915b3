"""The "nothing changed" fast path of Conversation.fit (tokenflex.engine.grown_plan):
where it answers, its plan is the full path's, field by field, and the conversation's
memory goes on as the full path leaves it (the next fits are compared too)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from test_cache_stable import SETTINGS, model, priced, sessions, text

import tokenflex
import tokenflex.engine.flow as flow
from tokenflex import Conversation, Plan


@contextmanager
def full_path() -> Iterator[None]:
    """Every fit inside takes the full path (the reference)."""
    flow.FAST_PATH = False
    try:
        yield
    finally:
        flow.FAST_PATH = True


def same(fast: Plan, full: Plan, given: set[int] | None = None) -> None:
    """Field by field; the caller's messages by identity, the ones each plan made (a cut
    note, a converted copy of a message with reasoning) by value."""
    pairs = zip(fast.messages, full.messages, strict=True)
    assert all(a is b or (given is not None and id(b) not in given and a == b) for a, b in pairs)
    assert fast.input_tokens == full.input_tokens
    assert fast.max_tokens == full.max_tokens
    assert list(fast.dropped) == list(full.dropped)
    assert fast.warnings == full.warnings
    assert fast.prefix_tokens == full.prefix_tokens
    assert fast.cached_tokens == full.cached_tokens
    assert fast.input_tokens + fast.max_tokens + fast.safety_margin <= fast.context_window
    a, b = fast.to_dict(), full.to_dict()
    a.pop("elapsed_ms", None)
    b.pop("elapsed_ms", None)
    assert a == b


def strip(turns: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    return [[{k: v for k, v in m.items() if k != "reasoning_content"} for m in t] for t in turns]


@SETTINGS
@given(
    turns=sessions(),
    reasoning=st.booleans(),
    window=st.sampled_from([1500, 3000, 8000, 32000]),
    max_tokens=st.sampled_from([64, 300, 1000]),
    stable=st.booleans(),
    pin=st.integers(0, 2),
    tools=st.booleans(),
    switch=st.integers(0, 6),
    options=st.fixed_dictionaries(
        {},
        optional={
            "max_input_tokens": st.integers(200, 6000),
            "history_share": st.sampled_from([0.5, 0.8, 1.0]),
            "low_water": st.sampled_from([0.4, 0.6, "auto"]),
            "max_messages": st.integers(2, 30),
            "cut_note": st.booleans(),
            "safety_margin": st.sampled_from([0, 100]),
        },
    ),
)
def test_fast_path_plan_is_the_full_paths(
    turns: list[list[dict[str, Any]]],
    reasoning: bool,
    window: int,
    max_tokens: int,
    stable: bool,
    pin: int,
    tools: bool,
    switch: int,
    options: dict[str, Any],
) -> None:
    """Each fit, fast path allowed, equals the same conversation's fit on the full path;
    a max_tokens switched now and then makes the full path answer in between."""
    if not reasoning:
        turns = strip(turns)
    m = model(window)
    schema = (
        [{"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}}]
        if tools
        else None
    )
    system = {"role": "system", "content": "Be brief."}
    kw: dict[str, Any] = {"model": m, "tools": schema, "cache_stable": stable, "pin": pin}
    kw |= options
    fast, full = Conversation([system], **kw), Conversation([system], **kw)
    given = {id(m) for turn in turns for m in turn} | {id(system)}
    answered, before = 0, None
    for t, turn in enumerate(turns):
        fast.extend(turn)
        full.extend(turn)
        out = max_tokens * 2 if switch and t % (switch + 3) == switch else max_tokens
        try:
            a = fast.fit(max_tokens=out)
        except tokenflex.ContextOverflowError:
            with full_path():
                try:
                    full.fit(max_tokens=out)
                except tokenflex.ContextOverflowError:
                    continue
            raise
        with full_path():
            b = full.fit(max_tokens=out)
        answered += before is not None and a.dropped is before.dropped  # the fast path's mark
        before = a
        same(a, b, given)
    event(f"fast path answered: {'some' if answered else 'none'}")


def test_fast_path_answers_a_grown_conversation() -> None:
    """An uncut conversation that grew by one turn: the plan is the previous one's dropped
    record (the fast path's mark) and the full path's figures; red if it never answers."""
    m = model(32000)
    system = {"role": "system", "content": "Be brief."}
    conv, ref = Conversation([system], model=m), Conversation([system], model=m)
    plans = []
    for t in range(6):
        turn = [
            {"role": "assistant", "content": f"answer {t}"},
            {"role": "user", "content": f"question {t}"},
        ][0 if t else 1 :]
        conv.extend(turn)
        ref.extend(turn)
        plans.append(conv.fit(max_tokens=500))
        with full_path():
            same(plans[-1], ref.fit(max_tokens=500))
    assert all(p.dropped is plans[0].dropped for p in plans[1:])
    assert plans[-1].prefix_tokens is not None and plans[-1].prefix_tokens > 0


@pytest.mark.parametrize("pin", [0, 1], ids=["unpinned", "pinned"])
@pytest.mark.parametrize(
    ("stable", "priced_model", "words"),
    [(False, False, 4), (True, False, 4), (True, True, 4), (True, True, 60)],
    ids=["uncut", "stable", "stable-auto-priced", "stable-auto-priced-long"],
)
def test_fast_path_across_the_room(pin: int, stable: bool, priced_model: bool, words: int) -> None:
    """Messages appended one at a time, each fit compared, through the fit that first
    must cut (the fast path's room to the token) and the cache-stable cuts after it
    (long messages: a large growth per request for the "auto" mark to weigh)."""
    m = priced(2000) if priced_model else model(2000)
    system = {"role": "system", "content": "Be brief."}
    kw: dict[str, Any] = {"model": m, "cache_stable": stable, "pin": pin}
    fast, full = Conversation([system], **kw), Conversation([system], **kw)
    given = {id(system)}
    answered = cut = 0
    before = None
    for t in range(200):
        role = "user" if t % 2 == 0 else "assistant"
        message = {"role": role, "content": text(words + t % 9, t)}
        given.add(id(message))
        fast.append(message)
        full.append(message)
        a = fast.fit(max_tokens=300)
        with full_path():
            b = full.fit(max_tokens=300)
        same(a, b, given)
        answered += before is not None and a.dropped is before.dropped
        cut += len(a.dropped) > 0
        before = a
    assert answered > 10 and cut > 10  # both paths were taken, many times
