"""fit() keeps the running counts of a list it has seen (issue 24): a list grown by
appending is re-fitted by bisecting prefix sums over its history's groups, counting only
what is new (:class:`tokenflex.engine.ListIndex`).

The reference for every property is the same request read afresh: a new list holding
the same items, which fit() has never seen (counted newest first, group by group). Lists
grown, fitted, edited in place anywhere (a new content, a new role, a tool call added,
an item replaced by an equal copy or by another message) give the plan a fresh read
gives: the same messages, tokens, output and dropped items.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tokenflex
from tokenflex.roundtrip import forget
from tokenflex.state import MemoryStore

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
MODEL = tokenflex.get_model("gpt-4o").replace(name="gpt-4o-index", context_window=1200)
WORDS = ["pump", "valve", "東京", "код", "42", "naïve", "print(x)", "—", "the", "a"]


def _text(draw: Any, most: int = 40) -> str:
    return " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=most)))


@st.composite
def _turn(draw: Any, k: int) -> list[dict[str, Any]]:
    """A user message and the answer: plain, or a tool round (a call, its results)."""
    q, a = _text(draw), _text(draw)
    turn: list[dict[str, Any]] = [{"role": "user", "content": q}]
    for j in range(draw(st.integers(0, 2))):  # tool rounds: a call and 1-2 results
        call = {"name": "f", "arguments": "{}"}
        calls = [
            {"id": f"c{k}-{j}-{r}", "type": "function", "function": call}
            for r in range(draw(st.integers(1, 2)))
        ]
        turn.append({"role": "assistant", "content": None, "tool_calls": calls})
        turn += [{"role": "tool", "tool_call_id": c["id"], "content": _text(draw)} for c in calls]
    turn.append({"role": "assistant", "content": a})
    return turn


OPS = ["append", "append", "fit", "edit", "role", "call", "copy", "other"]


@st.composite
def _story(draw: Any) -> tuple[list[Any], dict[str, Any], list[tuple[str, int, Any]]]:
    opening: list[Any] = [{"role": "system", "content": "Be brief."}]
    k = 0
    while len(opening) < 34:
        opening += draw(_turn(k))
        k += 1
    options = {
        "pin": draw(st.sampled_from([0, 1])),
        "cache_stable": draw(st.booleans()),
        "max_tokens": draw(st.sampled_from([100, 200, None])),
    }
    if draw(st.booleans()):
        options["history_share"] = draw(st.sampled_from([0.5, 1.0]))
    if draw(st.booleans()):  # the index holds more groups than kept, not a window's worth
        options["max_messages"] = draw(st.sampled_from([2, 7]))
    if draw(st.booleans()):
        options["max_input_tokens"] = draw(st.sampled_from([300, 700]))
    steps: list[tuple[str, int, Any]] = []
    for _ in range(draw(st.integers(3, 8))):
        steps.append((draw(st.sampled_from(OPS)), draw(st.integers(0, 10_000)), draw(_turn(k))))
        k += 1
    return opening, options, steps


def _fit(msgs: list[Any], options: dict[str, Any], state: Any) -> Any:
    return tokenflex.fit(msgs, model=MODEL, state=state, **options)


def _same(plan: Any, ref: Any) -> None:
    assert plan.messages == ref.messages
    assert plan.input_tokens == ref.input_tokens
    assert plan.max_tokens == ref.max_tokens
    assert plan.dropped.runs() == ref.dropped.runs()
    assert [(d.index, d.tokens) for d in plan.dropped] == [(d.index, d.tokens) for d in ref.dropped]


@SETTINGS
@given(_story())
def test_a_grown_list_keeps_what_a_fresh_read_keeps(
    story: tuple[list[Any], dict[str, Any], list[tuple[str, int, Any]]],
) -> None:
    opening, options, steps = story
    forget()
    msgs = copy.deepcopy(opening)
    # each side its own store: a cache-stable fit holds the cut of its own previous plan
    mine, theirs = MemoryStore(), MemoryStore()
    _same(_fit(msgs, options, mine), _fit(list(msgs), options, theirs))
    for op, at, turn in steps:
        i = 1 + at % (len(msgs) - 1)  # anywhere after the system prompt
        m = msgs[i]
        if op == "append":
            msgs += turn
        elif op == "edit" and isinstance(m.get("content"), str):
            m["content"] = " ".join(WORDS) * (1 + at % 3)  # in place: the same dict
        elif op == "role" and m.get("role") in ("user", "assistant") and "tool_calls" not in m:
            m["role"] = "user" if m["role"] == "assistant" else "assistant"
        elif op == "call" and m.get("role") == "assistant" and "tool_calls" not in m:
            m["tool_calls"] = [
                {"id": "x", "type": "function", "function": {"name": "g", "arguments": "{}"}}
            ]
        elif op == "copy":
            msgs[i] = copy.deepcopy(m)
        elif op == "other":
            msgs[i] = {"role": "user", "content": turn[0]["content"]}
        _same(_fit(msgs, options, mine), _fit(list(msgs), options, theirs))


def test_a_list_grown_by_one_message_counts_that_message_only() -> None:
    """The kept history is not read again (the count cache sees only the new message,
    the system prompt and the current turn), yet what is kept is the fresh read's."""
    forget()
    enc = tokenflex.get_tokenizer("o200k_base")
    msgs: list[Any] = [{"role": "system", "content": "Be brief."}]
    for k in range(60):
        msgs += [
            {"role": "user", "content": f"question {k} " + "pump " * 40},
            {"role": "assistant", "content": f"answer {k} " + "valve " * 40},
        ]
    msgs.append({"role": "user", "content": "and now?"})
    plan = tokenflex.fit(msgs, model=MODEL, max_tokens=200)
    kept = len(plan.messages)
    assert kept > 10 and plan.dropped.runs()
    before = enc.hits + enc.misses
    msgs.append({"role": "assistant", "content": "an answer " + "valve " * 40})
    msgs.append({"role": "user", "content": "and then?"})
    plan = tokenflex.fit(msgs, model=MODEL, max_tokens=200)
    assert enc.hits + enc.misses - before < 8 < kept
    forget()
    ref = tokenflex.fit(list(msgs), model=MODEL, max_tokens=200)
    _same(plan, ref)


def test_a_kept_message_edited_in_place_is_counted_afresh() -> None:
    forget()
    msgs: list[Any] = [{"role": "system", "content": "Be brief."}]
    for k in range(40):
        msgs += [
            {"role": "user", "content": f"question {k}"},
            {"role": "assistant", "content": f"answer {k}"},
        ]
    msgs.append({"role": "user", "content": "and now?"})
    first = tokenflex.fit(msgs, model=MODEL, max_tokens=200)
    assert not first.dropped.runs()  # all of it fits
    msgs[-3]["content"] = "pump " * 900  # a kept answer grows past the window, in place
    plan = tokenflex.fit(msgs, model=MODEL, max_tokens=200)
    assert msgs[-3] not in plan.messages
    _same(plan, tokenflex.fit(list(msgs), model=MODEL, max_tokens=200))


POOL = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "pump"},
    {"role": "assistant", "content": "valve"},
    {"role": "user", "content": "pump"},  # equal to another, not the same dict
    {"role": "user", "content": "x", "foo": 1},  # an unknown field: estimated
    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]},
]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, len(POOL) - 1), max_size=12), min_size=1, max_size=6))
def test_exact_for_reads_again_only_what_is_new_and_answers_as_each_message_does(
    lists: list[list[int]],
) -> None:
    """The runs shared with the last list found exact are skipped, never the answer:
    exact_for is True exactly when every message is counted exactly."""
    counter = tokenflex.get_counter("gpt-4o")
    for picks in lists:
        msgs = [POOL[i] for i in picks]
        assert counter.exact_for(msgs) == all(counter.message_exact(m) for m in msgs)


def test_the_running_counts_hold_no_more_than_the_fit_can_keep() -> None:
    """With max_messages, a large window's list is counted only as far as the lazy
    path would count it (the newest groups beyond the limit), not a window's worth."""
    forget()
    enc = tokenflex.get_tokenizer("o200k_base")
    big = MODEL.replace(name="gpt-4o-index-big", context_window=1_000_000)
    msgs: list[Any] = [{"role": "system", "content": "Be brief."}]
    for k in range(100):
        msgs += [
            {"role": "user", "content": f"q {k} " + "pump " * 30},
            {"role": "assistant", "content": f"a {k} " + "valve " * 30},
        ]
    msgs.append({"role": "user", "content": "and now?"})
    before = enc.hits + enc.misses
    plan = tokenflex.fit(msgs, model=big, max_tokens=200, max_messages=4)
    assert enc.hits + enc.misses - before < 20
    forget()
    _same(plan, tokenflex.fit(list(msgs), model=big, max_tokens=200, max_messages=4))


@st.composite
def _history(draw: Any) -> list[Any]:
    msgs: list[Any] = [{"role": "system", "content": "Be brief."}]
    for k in range(draw(st.integers(0, 12))):
        msgs += draw(_turn(k))
        if draw(st.booleans()):  # another shape between plain runs
            msgs.append({"role": "user", "content": _text(draw), "name": "ann"})
    return msgs


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(_history(), st.data())
def test_the_running_counts_are_the_groups_read_one_by_one(
    msgs: list[Any], data: st.DataObject
) -> None:
    """The index's first read (plain runs counted in one native loop, other groups one by
    one) against the groups read newest first with each message counted alone."""
    from tokenflex.counting import get_counter
    from tokenflex.engine.sections import ListIndex
    from tokenflex.history import iter_groups

    counter = get_counter("gpt-4o")
    counter.tokenizer.clear()
    for m in data.draw(st.lists(st.sampled_from(msgs), max_size=40)):
        if isinstance(m.get("content"), str):  # some texts cached: the native loop stops
            counter.tokenizer.count(m["content"])
    lo = data.draw(st.integers(0, 1))
    bound = data.draw(st.integers(1, 3000))
    most = data.draw(st.one_of(st.none(), st.integers(1, 20)))
    view = ListIndex().view(msgs, lo, len(msgs), counter, bound=bound, most=most)
    assert view is not None
    groups: list[tuple[int, int, int]] = []
    total = 0
    for group in iter_groups(msgs, lo, len(msgs), counter.message):
        groups.append(group)
        total += group[2]
        if total > bound or (most is not None and len(groups) > most):
            break
    groups.reverse()
    first = groups[0][0] if groups else len(msgs)
    assert view.first == first
    assert list(view.starts) == [g[0] for g in groups]
    assert list(view.cum) == [0, *itertools.accumulate(g[2] for g in groups)]
    assert list(view.tokens) == [counter.message(m) for m in msgs[first:]]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(_history(), st.booleans(), st.data())
def test_a_dropped_runs_tokens_are_summed_as_its_items_are_counted(
    msgs: list[Any], clear: bool, data: st.DataObject
) -> None:
    """What recall reads of a plan's dropped history (how far past a bound its tokens
    go, newest first) is what the plan's items say they cost, one by one."""
    from tokenflex.engine.sections import MessageSection

    forget()
    model = MODEL.replace(context_window=data.draw(st.sampled_from([300, 600, 1200])))
    try:
        plan = tokenflex.fit(msgs, model=model, max_tokens=50, clear_tool_results=clear)
    except tokenflex.TokenflexError:
        return
    counter = plan.dropped.counter
    for section, a, b, _ in plan.dropped.runs():
        source = plan.dropped.source(section)
        if not isinstance(source, MessageSection):
            continue
        total = data.draw(st.integers(0, 100))
        sums = [total]
        for i in range(b - 1, a - 1, -1):
            sums.append(sums[-1] + source.item_tokens(i, source.item(i), counter))
        near = [s + d for s in sums for d in (-1, 0, 1)]  # bounds at and beside each sum
        for bound in [*near, data.draw(st.integers(0, 2000))]:
            expected = total
            for i in range(b - 1, a - 1, -1):
                if expected > bound:
                    break
                expected += source.item_tokens(i, source.item(i), counter)
            assert source.tokens_until(a, b, total, bound, counter) == expected


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(_history(), st.booleans(), st.data())
def test_recall_tells_a_cut_without_its_tool_as_the_dropped_items_say(
    msgs: list[Any], stable: bool, data: st.DataObject
) -> None:
    """Whether a plan that made room for the recall tool surely leaves something out
    without it (its dropped items' tokens past the room the tool, the note and the plan's
    slack take) is what the dropped items say, summed one by one in request order; a
    second fit of the same list reads them from its running counts."""
    import importlib
    from unittest import mock

    from tokenflex.engine.passes import TakenOut
    from tokenflex.engine.sections import MessageSection

    recall_module = importlib.import_module("tokenflex.recall")  # (not the function)
    surely = recall_module.RecallFit._cuts_without_tool

    def checked(self: Any, plan: Any) -> bool:
        got: bool = surely(self, plan)
        room = plan.context_window - plan.safety_margin
        room -= min(plan.requested_max_tokens, plan.min_output_tokens)
        added = self.tool_tokens + self.note_tokens
        added += plan.summary.tokens if plan.summary is not None else 0
        total, dropped = 0, plan.dropped
        for section, a, b, reason in dropped.runs():
            if section == TakenOut.section or reason in (*recall_module.ITEM_REASONS, "summarized"):
                continue
            source = dropped.source(section)
            for i in range(a, b):
                total += (
                    source.item_tokens(i, source.item(i), dropped.counter)
                    if isinstance(source, MessageSection)
                    else dropped.cost_of(section, i)
                )
        assert got == (total > room - (plan.input_tokens - added))
        return got

    forget()
    model = MODEL.replace(context_window=data.draw(st.sampled_from([300, 600, 1200])))
    store = MemoryStore()
    with mock.patch.object(recall_module.RecallFit, "_cuts_without_tool", checked):
        for _ in range(2):
            try:
                tokenflex.fit(
                    msgs, model=model, max_tokens=50, recall=True, cache_stable=stable, state=store
                )
            except tokenflex.TokenflexError:
                return
