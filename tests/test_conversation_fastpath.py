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


class Answers:
    """Counts the fits the fast path answered, by kind: ``grown`` (nothing cut),
    ``held`` (the previous cut held or moved, its dropped runs updated) and ``moved``
    (the cut moved down to the low-water mark)."""

    def __init__(self) -> None:
        self.grown = self.held = self.moved = 0


@contextmanager
def counted() -> Iterator[Answers]:
    """Conversation's fast path, counted (the engine's function, wrapped)."""
    import tokenflex.conversation as conversation

    answers = Answers()
    real = conversation.grown_plan

    def spy(previous: Plan, *args: Any, **kwargs: Any) -> Plan | None:
        plan = real(previous, *args, **kwargs)
        if plan is not None and len(plan.dropped):
            answers.held += 1
            answers.moved += "low_water" in plan.dropped.by_reason()
        elif plan is not None:
            answers.grown += 1
        return plan

    conversation.grown_plan = spy
    try:
        yield answers
    finally:
        conversation.grown_plan = real


def plain(turns: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    """The turns without their tool rounds (a chat: the shrink ladder has nothing to
    shrink, so the fast path may hold a cut)."""
    out = []
    for turn in turns:
        kept = [m for m in turn if m["role"] != "tool" and not m.get("tool_calls")]
        if len(kept) > 1 and kept[-1]["content"] == "go on":
            kept.pop()
        out.append(kept)
    return out


def same(fast: Plan, full: Plan, given: set[int] | None = None) -> None:
    """Field by field; the caller's messages by identity, the ones each plan made (a cut
    note, a converted copy of a message with reasoning) by value."""
    pairs = zip(fast.messages, full.messages, strict=True)
    assert all(a is b or (given is not None and id(b) not in given and a == b) for a, b in pairs)
    assert fast.input_tokens == full.input_tokens
    assert list(fast.sections.items()) == list(full.sections.items())  # (the JSON's order too)
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


OPTIONS: dict[str, st.SearchStrategy[Any]] = {
    "max_input_tokens": st.integers(200, 6000),
    "history_share": st.sampled_from([0.5, 0.8, 1.0]),
    "low_water": st.sampled_from([0.4, 0.6, "auto"]),
    "max_messages": st.integers(2, 30),
    "cut_note": st.booleans(),
    "safety_margin": st.sampled_from([0, 100]),
    "clear_tool_results": st.booleans(),
    "truncate_tool_results": st.booleans(),
}
"""The fit options a fast path is compared under (each given or not)."""


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
    rounds=st.booleans(),
    options=st.fixed_dictionaries({}, optional=OPTIONS),
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
    rounds: bool,
    options: dict[str, Any],
) -> None:
    """Each fit, fast path allowed, equals the same conversation's fit on the full path;
    a max_tokens switched now and then makes the full path answer in between. Chats
    without tool rounds (``rounds=False``) and small windows make it hold cuts."""
    if not reasoning:
        turns = strip(turns)
    if not rounds:
        turns = plain(turns)
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
    with counted() as answers:
        compare(fast, full, turns, max_tokens, switch, given)
    event(f"fast path answered: {'some' if answers.grown else 'none'}")
    event(f"fast path held a cut: {'some' if answers.held else 'none'}")


def compare(
    fast: Conversation,
    full: Conversation,
    turns: list[list[dict[str, Any]]],
    max_tokens: int,
    switch: int,
    given: set[int],
) -> None:
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
        same(a, b, given)


@SETTINGS
@given(
    turns=sessions(),
    window=st.sampled_from([700, 1000, 1500]),
    stable=st.sampled_from([True, True, False]),
    pin=st.integers(0, 2),
    low_water=st.sampled_from([0.4, 0.6, "auto"]),
    share=st.sampled_from([0.5, 0.8, 1.0]),
)
def test_fast_path_holds_the_full_paths_cut(
    turns: list[list[dict[str, Any]]],
    window: int,
    stable: bool,
    pin: int,
    low_water: Any,
    share: float,
) -> None:
    """Chats that must cut (small windows, no tool rounds, no reasoning): every fit equals
    the full path's, the held cuts' dropped runs, reasons and warnings included; with
    cache-stable on, the fast path holds cuts (red if it never does)."""
    turns = plain(strip(turns))
    m = priced(window) if low_water == "auto" else model(window)
    system = {"role": "system", "content": "Be brief."}
    kw: dict[str, Any] = {"model": m, "cache_stable": stable, "pin": pin}
    kw |= {"low_water": low_water, "history_share": share}
    fast, full = Conversation([system], **kw), Conversation([system], **kw)
    given = {id(m) for turn in turns for m in turn} | {id(system)}
    with counted() as answers:
        compare(fast, full, turns, 300, 0, given)
    event(f"fast path held a cut: {'some' if answers.held else 'none'}")
    event(f"fast path moved a cut: {'some' if answers.moved else 'none'}")


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
    cut = 0
    with counted() as answers:
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
            cut += len(a.dropped) > 0
    assert answers.grown > 10 and cut > 10  # both paths were taken, many times
    if stable:  # a held cut is answered by the fast path, its runs and warning updated
        assert answers.held > 20
        assert answers.moved > 0  # and a cut that moved down to the low-water mark
