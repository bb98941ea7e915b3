"""fit() of a remembered list fitted again unchanged (warm): the previous plan, checked.

The reference is the full path (``engine.flow.FAST_PATH = False``) on the same list at
the same moment; between fits the list grows, has messages edited in place or replaced
by equal copies, is truncated.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from test_cache_stable import SETTINGS, model, sessions, text
from test_conversation_fastpath import full_path, same

import tokenflex
from tokenflex import Plan
from tokenflex.roundtrip import forget

fit_module = sys.modules["tokenflex.fit"]


@contextmanager
def counted() -> Iterator[list[int]]:
    """How many fits the warm path answered (``[0]``) and the grown path (``[1]``: a
    remembered list grown by appending)."""
    answers = [0, 0]
    real = fit_module._warm, fit_module._grown

    def spy(k: int) -> Any:
        def answer(*args: Any, **kwargs: Any) -> Plan | None:
            plan = real[k](*args, **kwargs)
            answers[k] += plan is not None
            return plan

        return answer

    fit_module._warm, fit_module._grown = spy(0), spy(1)
    try:
        yield answers
    finally:
        fit_module._warm, fit_module._grown = real


def opening(n: int) -> list[dict[str, Any]]:
    """A system message and ``n`` older turns (the memo keeps a list of 32 or more from
    its first read, a shorter one from its second)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": text(12, 1)}]
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        out.append({"role": role, "content": text(5 + i % 40, i)})
    return out


@contextmanager
def dropped_log() -> Iterator[list[str]]:
    """The "dropped" lines tokenflex logs inside (a fixture would not reset per example)."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "dropped" in record.getMessage():
                lines.append(record.getMessage())

    logger, handler = logging.getLogger("tokenflex"), Keep()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def edit_and_grow(
    msgs: list[dict[str, Any]], kind: str, seed: int, turn: list[dict[str, Any]]
) -> None:
    """Between two fits: a message changed in place (``edit``: new text; ``think``:
    reasoning put on it, no longer plain chat, the opening too: the layout reads it
    outside the history), replaced by an equal copy (``copy``), or the list truncated;
    then the turn appended (and a user's "go on" after a plain answer)."""
    j = seed % len(msgs)
    if kind == "edit":
        msgs[j]["content"] = text(3 + seed % 50, seed)
    elif kind == "copy":
        msgs[j] = dict(msgs[j])
    elif kind == "think":
        msgs[j if seed % 2 else seed % 3]["reasoning_content"] = text(5, seed)
    elif kind == "truncate" and len(msgs) > 36:
        del msgs[len(msgs) - 1 - seed % 4 :]
    msgs.extend(turn)
    if msgs[-1]["role"] == "assistant" and not msgs[-1].get("tool_calls"):
        msgs.append({"role": "user", "content": "go on"})


EDITS = st.lists(
    st.tuples(st.sampled_from(["none", "edit", "copy", "truncate"]), st.integers(0, 10**6)),
    min_size=1,
    max_size=12,
)


@SETTINGS
@given(
    turns=sessions(),
    edits=EDITS,
    window=st.sampled_from([1500, 3000, 8000]),
    max_tokens=st.sampled_from([64, 300]),
    pin=st.integers(0, 2),
    share=st.sampled_from([0.5, 1.0]),
    tools=st.booleans(),
    clear=st.booleans(),
    start=st.sampled_from([0, 5, 40]),
)
def test_warm_fit_is_the_full_paths_plan(
    turns: list[list[dict[str, Any]]],
    edits: list[tuple[str, int]],
    window: int,
    max_tokens: int,
    pin: int,
    share: float,
    tools: bool,
    clear: bool,
    start: int,
) -> None:
    forget()
    m = model(window)
    schema = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    opts: dict[str, Any] = {
        "model": m,
        "max_tokens": max_tokens,
        "safety_margin": 50,
        "history_share": share,
        "pin": pin,
        "tools": schema if tools else None,
        # a plan that clears old tool results sends copies: never answered warm as the
        # caller's own messages
        "clear_tool_results": clear,
        "keep_tool_results": 1,
    }
    msgs = opening(start)
    with counted() as answers:
        for i, turn in enumerate(turns):
            kind, seed = edits[i % len(edits)]
            edit_and_grow(msgs, kind, seed, turn)
            try:
                first = tokenflex.fit(msgs, **opts)
            except tokenflex.ContextOverflowError:
                continue
            with full_path():
                full = tokenflex.fit(msgs, **opts)
            mine = {id(m) for m in msgs}  # (a cleared tool result is a plan's copy)
            same(first, full, mine)
            if tools and kind == "copy":  # equal tools given anew: this call's objects
                opts["tools"] = [dict(schema[0])]
            warm = tokenflex.fit(msgs, **opts)  # unchanged: the warm path may answer
            same(warm, full, mine)
            assert all(map(lambda a, b: a is b, warm.tools, opts["tools"] or ()))
            assert warm is not first and warm.messages is not first.messages
            if kind == "edit":  # edited after a fit: noticed as it is now
                j = seed % len(msgs)
                msgs[j]["content"] = text(2 + seed % 30, seed + 1)
                again = tokenflex.fit(msgs, **opts)
                with full_path():
                    same(again, tokenflex.fit(msgs, **opts), {id(m) for m in msgs})
    event(f"warm answers: {min(answers[0], 3)}")
    event(f"grown answers: {min(answers[1], 3)}")
    # (a plan that cleared a tool result sends copies: the warm path declines it; a short
    # list is remembered from its second read, and reasoning in an early turn converts it
    # for good: test_a_short_list_is_remembered_from_its_second_read answers those)
    assert answers[0] > 0 or not turns or clear or start < 32


def test_warm_fit_answers_a_plain_list(caplog: pytest.LogCaptureFixture) -> None:
    """The bench's call: the same list again answers from the remembered plan, as a new
    plan object whose messages list the caller may change; what it drops is logged as
    the full path logs it."""
    forget()
    msgs = opening(200)
    msgs.append({"role": "user", "content": "last"})
    opts: dict[str, Any] = {"model": model(2000), "max_tokens": 300, "history_share": 1.0}
    with counted() as answers, caplog.at_level(logging.INFO, logger="tokenflex"):
        a = tokenflex.fit(msgs, **opts)
        full_log = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
        caplog.clear()
        b = tokenflex.fit(msgs, **opts)
        assert answers[0] == 1
        assert [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()] == (full_log)
        assert full_log
        b.messages.clear()
        c = tokenflex.fit(msgs, **opts)
        assert answers[0] == 2
    with full_path():
        same(c, tokenflex.fit(msgs, **opts))
    same(a, c)
    assert len(a.dropped)


def test_a_short_list_is_remembered_from_its_second_read() -> None:
    """A chat loop's short list (under 32 messages) is read afresh once, remembered from
    its second fit, and grown from its third, also where its pinned question moves the
    history's start after the first turn; a new list every call (a request parsed once)
    is never answered from the memo, and neither is a list a parse vouched for."""
    from tokenflex.formats.body import vouch

    forget()
    # (pin=1: the history starts after the first question once there is an older one)
    opts: dict[str, Any] = {"model": model(8000), "max_tokens": 300, "pin": 1}
    msgs = opening(0)
    with counted() as answers:
        for turn in range(6):
            msgs.append({"role": "user", "content": text(4, turn)})
            plan = tokenflex.fit(msgs, **opts)
            with full_path():
                same(plan, tokenflex.fit(msgs, **opts), {id(m) for m in msgs})
            assert answers[1] == max(0, turn - 1)  # grown from the third fit on
            msgs.append({"role": "assistant", "content": text(6, turn)})
        grown = tokenflex.fit(msgs, **opts)  # the answer appended: grown
        same(tokenflex.fit(msgs, **opts), grown)  # unchanged: warm
        assert answers == [1, 5]
        for _ in range(3):  # a new list each time, with the same items
            tokenflex.fit(list(msgs), **opts)
        parsed = list(msgs)
        for _ in range(3):  # the same object, vouched for by a parse each time
            vouch(parsed, "chat")
            tokenflex.fit(parsed, **opts)
        assert answers == [1, 5]


GROWN_EDITS = st.lists(
    st.tuples(
        st.sampled_from(["none", "none", "edit", "copy", "think", "truncate"]),
        st.integers(0, 10**6),
    ),
    min_size=1,
    max_size=12,
)


@SETTINGS
@given(
    turns=sessions(),
    edits=GROWN_EDITS,
    window=st.sampled_from([1500, 3000, 8000]),
    max_tokens=st.sampled_from([64, 300]),
    pin=st.integers(0, 2),
    rounds=st.booleans(),
    start=st.sampled_from([0, 5, 40]),
    options=st.fixed_dictionaries(
        {},
        optional={
            "max_input_tokens": st.integers(300, 6000),
            "history_share": st.sampled_from([0.5, 0.8, 1.0]),
            "min_messages": st.integers(0, 4),
            "clear_tool_results": st.booleans(),
            "safety_margin": st.sampled_from([0, 100]),
        },
    ),
)
def test_grown_fit_is_the_full_paths_plan(
    turns: list[list[dict[str, Any]]],
    edits: list[tuple[str, int]],
    window: int,
    max_tokens: int,
    pin: int,
    rounds: bool,
    start: int,
    options: dict[str, Any],
) -> None:
    """A list that grows by appending, fitted every turn: each plan, the grown path
    allowed, equals the full path's of the same list at the same moment, and so does what
    it logs as dropped (but after reasoning was put on a kept message: the full path then
    logs the plan it throws away before it reads the list afresh). Between fits
    messages are edited in place (new text, or reasoning put on one: no longer plain
    chat), replaced by equal copies, or the list is truncated. Small windows make
    the newest groups that fit slide; tool rounds make the cut open on a call."""
    forget()
    turns = [[{k: v for k, v in m.items() if k != "reasoning_content"} for m in t] for t in turns]
    if not rounds:
        turns = [
            [m for m in t if m["role"] in ("user", "assistant") and m.get("content")] for t in turns
        ]
    opts: dict[str, Any] = {"model": model(window), "max_tokens": max_tokens, "pin": pin, **options}
    msgs = opening(start)
    with counted() as answers:
        for i, turn in enumerate(turns):
            edit_and_grow(msgs, *edits[i % len(edits)], turn)
            try:
                with dropped_log() as log:
                    plan = tokenflex.fit(msgs, **opts)
            except tokenflex.ContextOverflowError:
                with full_path(), pytest.raises(tokenflex.ContextOverflowError):
                    tokenflex.fit(msgs, **opts)
                continue
            with full_path(), dropped_log() as full_log:
                same(plan, tokenflex.fit(msgs, **opts), {id(m) for m in msgs})
            if edits[i % len(edits)][0] != "think":  # (see below)
                assert log == full_log  # what it drops is logged once, as the full path does
    event(f"grown answers: {min(answers[1], 5)}")
    kinds = {kind for kind, _ in edits}
    declines = options.get("clear_tool_results") or options.get("min_messages")
    if kinds == {"none"} and len(turns) > 10 and not declines:
        assert answers[1] > 0  # a list that only grows is answered


def test_an_evolved_plan_is_the_replaced_one_computed_afresh() -> None:
    """``Plan.evolved`` (the fast paths' copy) against ``dataclasses.replace``: equal
    fields, and what a plan computes on first access computed for the copy, not carried
    over from the plan it was made from."""
    import dataclasses

    msgs = opening(200)
    msgs.append({"role": "user", "content": "last"})
    plan = tokenflex.fit(msgs, model="gpt-4o", max_tokens=300, max_input_tokens=2000)
    assert len(plan.dropped)
    before = (plan.cost, plan.full_input_tokens, plan.savings, plan.cache_cost)
    changes = {"input_tokens": plan.input_tokens - 100, "cached_tokens": 0, "warnings": ("x",)}
    a, b = plan.evolved(**changes), dataclasses.replace(plan, **changes)
    assert a == b and a is not plan
    after = (a.cost, a.full_input_tokens, a.savings, a.cache_cost)
    assert after == (b.cost, b.full_input_tokens, b.savings, b.cache_cost)
    assert all(x != y for x, y in zip(after, before, strict=True))


def test_a_cut_list_grown_turn_by_turn_is_answered_by_the_grown_path() -> None:
    """A long chat cut to a small window, grown one turn at a time: the cut slides, the
    history a solve reads is checked from a new place every turn, and still every fit
    after the first is the grown path's (it recognises its list's running counts, not
    one view of them), each the full path's plan."""
    forget()
    opts: dict[str, Any] = {"model": model(2_000), "max_tokens": 200}
    msgs = opening(60)
    with counted() as answers:
        for i in range(30):
            msgs.append({"role": "user" if i % 2 else "assistant", "content": text(30, i)})
            plan = tokenflex.fit(msgs, **opts)
            assert len(plan.dropped) > 0
            with full_path():
                same(plan, tokenflex.fit(msgs, **opts), {id(m) for m in msgs})
    assert answers[1] == 29
