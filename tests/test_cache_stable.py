"""Cache-stable plans and the shrink ladder over growing sessions, as properties.

A random session (user turns, assistant answers with reasoning, tool calls with results of
random sizes) grows turn by turn; after every turn the conversation is fitted with
``cache_stable=True`` (with or without the shrink ladder). Every plan is checked against an
independent recount (``count_messages``), the tool pairs, nothing dropped silently, and the
stability rule: the cut moves only when the history from the previous cut no longer fits
(checked with a plain drop-to-fit of exactly that history).
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import tokenflex
from tokenflex import Conversation, count_messages
from tokenflex.engine.ladder import LADDER
from tokenflex.options import AUTO_MARK_MAX, SHRINK_STEPS
from tokenflex.session import KEY_MESSAGES
from tokenflex.state import MemoryStore

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "42",
    "{json:",
    "true}",
    "東京",
    "код",
    "pump",
    "valve",
    "pressure",
    "parcel",
    "district",
]
SYSTEM = {"role": "system", "content": "You are a careful maintenance assistant."}
NOTE = re.compile(r"\[(\d+) earlier messages? omitted to fit the context window\]")


def text(n: int, seed: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] for i in range(n))


@st.composite
def sessions(draw: st.DrawFn) -> list[list[dict[str, Any]]]:
    """Turns: each a list of messages appended before the next fit (ends with a user turn
    or, sometimes, an assistant tool call and its results)."""
    turns = []
    for t in range(draw(st.integers(8, 40))):
        turn: list[dict[str, Any]] = []
        if t:
            answer: dict[str, Any] = {
                "role": "assistant",
                "content": text(draw(st.integers(1, 80)), t),
            }
            if draw(st.booleans()):
                answer["reasoning_content"] = text(draw(st.integers(20, 200)), t + 1)
            turn.append(answer)
        turn.append({"role": "user", "content": text(draw(st.integers(1, 60)), t + 2)})
        if draw(st.integers(0, 2)) == 0:
            calls = draw(st.integers(1, 2))
            ids = [f"call_{t}_{k}" for k in range(calls)]
            turn.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": i,
                            "type": "function",
                            "function": {
                                "name": draw(st.sampled_from(["grep", "read"])),
                                "arguments": "{}",
                            },
                        }
                        for i in ids
                    ],
                }
            )
            for i in ids:
                turn.append(
                    {
                        "role": "tool",
                        "tool_call_id": i,
                        "content": text(draw(st.integers(1, 400)), t),
                    }
                )
            turn.append({"role": "user", "content": "go on"})
        turns.append(turn)
    return turns


def model(window: int) -> tokenflex.Model:
    return tokenflex.Model(f"stable-{window}", window, tokenizer="o200k_base", chat_format="openai")


def priced(window: int, **cache: Any) -> tokenflex.Model:
    """A model with Anthropic's cache prices: ``low_water="auto"`` cuts by expected cost."""
    prices = {"input_price": 3.0, "cache_read_price": 0.3, "cache_write_price": 3.75}
    return model(window).replace(**prices, **cache)


def check_plan(plan: tokenflex.Plan, m: tokenflex.Model, history: list[dict[str, Any]]) -> None:
    """The promise, recounted; tool pairs whole; every message of the conversation either
    sent as it is, sent shrunk (and listed), or listed as dropped."""
    assert plan.input_tokens == count_messages(plan.messages, model=m)
    assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= plan.context_window
    calls = {c["id"] for x in plan.messages if x.get("tool_calls") for c in x["tool_calls"]}
    answered = {x["tool_call_id"] for x in plan.messages if x.get("role") == "tool"}
    assert calls == answered
    sent = {id(x) for x in plan.messages}
    sent_plain = [x for x in plan.messages if "reasoning_content" not in x]
    listed = {d.index: d for d in plan.dropped if d.section != "reasoning"}
    reasoning = {d.index: d for d in plan.dropped if d.section == "reasoning"}
    for i, x in enumerate(history):
        if x.get("reasoning_content"):  # taken out as fit() takes it out, and listed
            assert reasoning[i].item == x["reasoning_content"]
            assert reasoning[i].tokens > 0
            assert all(m.get("reasoning_content") != x["reasoning_content"] for m in plan.messages)
            if i not in listed:  # the rest of it is sent
                bare = {k: v for k, v in x.items() if k != "reasoning_content"}
                assert any(m == bare for m in sent_plain), f"message {i} not sent"
            continue
        assert i not in reasoning
        if id(x) in sent:
            assert i not in listed
            continue
        assert i in listed, f"message {i} neither sent nor listed in plan.dropped"
        d = listed[i]
        assert d.item is x
        if d.reason in ("cleared", "reasoning", "truncated"):
            assert d.tokens >= 0
        else:
            assert d.reason in {"budget", "share", "orphan", "low_water", "held", "summarized"}


def first_kept(plan: tokenflex.Plan, history: list[dict[str, Any]]) -> int:
    """Index of the first history message sent (``len``: none)."""
    cut = 1
    for d in plan.dropped:
        if d.reason not in ("cleared", "reasoning", "truncated"):
            cut = max(cut, d.index + 1)
    return cut


@SETTINGS
@given(
    turns=sessions(),
    window=st.sampled_from([1500, 2500, 4000]),
    low_water=st.sampled_from([0.4, 0.6, 0.9, "auto"]),
)
def test_the_cut_moves_only_when_the_window_forces_it(
    turns: list[list[dict[str, Any]]], window: int, low_water: float | str
) -> None:
    m = model(window) if low_water != "auto" else priced(window)
    conv = Conversation([SYSTEM], model=m, low_water=low_water, pin=0)
    history: list[dict[str, Any]] = [SYSTEM]
    previous: tokenflex.Plan | None = None
    cut_before = 1
    for turn in turns:
        conv.extend(turn)
        history += turn
        try:
            plan = conv.fit(max_tokens=300)
        except tokenflex.ContextOverflowError:
            return
        check_plan(plan, m, history)
        cut = first_kept(plan, history)
        if previous is not None:
            # Independent: would plain drop-to-fit keep all of the history from the
            # previous cut? Then the cut must hold; else it must move.
            current = max(i for i, x in enumerate(history) if x.get("role") == "user")
            if cut_before <= current:
                tail = [SYSTEM, *history[cut_before:]]
                plain = tokenflex.fit(tail, model=m, max_tokens=300, pin=0)
                fits = not any(d.section == "history" for d in plain.dropped)
                event(f"cut moved: {cut != cut_before}")
                assert (cut == cut_before) == fits, (cut, cut_before, fits)
                if fits:  # an unchanged prefix: the whole previous plan
                    n = len(previous.messages)
                    assert [id(x) for x in plan.messages[:n]] == [id(x) for x in previous.messages]
                    assert plan.prefix_tokens == count_messages(
                        previous.messages, model=m
                    ) - count_messages([], model=m)
        previous, cut_before = plan, cut


@SETTINGS
@given(
    turns=sessions(),
    window=st.sampled_from([1500, 2500, 4000]),
    keep=st.integers(0, 3),
    stable=st.booleans(),
    note=st.booleans(),
)
def test_the_shrink_ladder_keeps_the_promise_and_lists_every_step(
    turns: list[list[dict[str, Any]]], window: int, keep: int, stable: bool, note: bool
) -> None:
    m = model(window)
    conv = Conversation(
        [SYSTEM],
        model=m,
        cache_stable=stable,
        clear_tool_results=True,
        keep_tool_results=keep,
        drop_reasoning=True,
        cut_note=note,
        pin=0,
    )
    history: list[dict[str, Any]] = [SYSTEM]
    for turn in turns:
        conv.extend(turn)
        history += turn
        try:
            plan = conv.fit(max_tokens=300)
        except tokenflex.ContextOverflowError:
            return
        check_plan(plan, m, history)
        reasons = plan.dropped.by_reason()
        omitted = sum(
            n for r, n in reasons.items() if r not in ("cleared", "reasoning", "truncated")
        )
        notes = [x for x in plan.messages if NOTE.fullmatch(str(x.get("content")))]
        if note and omitted:  # told, with the number, at the cut
            assert len(notes) == 1, (reasons, [x.get("role") for x in plan.messages])
            assert int(NOTE.fullmatch(notes[0]["content"])[1]) == omitted  # type: ignore[index]
            assert plan.messages.index(notes[0]) == 1
        else:
            assert not notes
        sent_results = [x for x in plan.messages if x.get("role") == "tool"]
        if reasons.get("cleared"):
            # the newest `keep` tool results of the conversation are never cleared
            newest = [x for x in history if x.get("role") == "tool"][-keep:] if keep else []
            for x in newest:
                assert not any(d.item is x and d.reason == "cleared" for d in plan.dropped)
            assert any(str(x["content"]).startswith("[tool result cleared") for x in sent_results)
        if not stable and (reasons.get("budget") or reasons.get("share")):
            # turns were dropped only after every step of the ladder was taken
            sent_ids = {id(x) for x in plan.messages}
            for d in plan.dropped:
                if d.reason in ("cleared", "reasoning", "truncated"):
                    assert id(d.item) not in sent_ids


STEP_REASONS = {"clear": "cleared", "truncate": "truncated", "reasoning": "reasoning"}


@SETTINGS
@given(
    turns=sessions(),
    window=st.sampled_from([1500, 2500]),
    steps=st.lists(st.sampled_from(sorted(STEP_REASONS)), unique=True, max_size=3),
    stable=st.booleans(),
)
def test_shrink_steps_pick_and_order_the_ladder(
    turns: list[list[dict[str, Any]]], window: int, steps: list[str], stable: bool
) -> None:
    """Shrink(steps=[...]) takes only the steps it names; naming them in the ladder's
    own order is the same fit as turning each on by its option (the reference)."""
    m = model(window)
    flags = {
        "clear_tool_results": "clear" in steps,
        "drop_reasoning": "reasoning" in steps,
        "truncate_tool_results": "truncate" in steps,
    }
    ladder_order = [n for n in ("clear", "truncate", "reasoning") if n in steps]
    # the truncate step rides on the others when turned on by its option
    same_as_flags = "truncate" not in steps or len(steps) > 1
    history: list[dict[str, Any]] = [SYSTEM]
    for turn in turns:
        history += turn
        try:
            plan = tokenflex.fit(
                history,
                model=m,
                max_tokens=300,
                pin=0,
                cache=stable,
                shrink=tokenflex.Shrink(steps=steps),
            )
        except tokenflex.ContextOverflowError:
            return
        check_plan(plan, m, history)
        named = {STEP_REASONS[n] for n in steps}
        shrunk = {d.reason for d in plan.dropped if d.section == "history"} & set(
            STEP_REASONS.values()
        )
        assert shrunk <= named, (shrunk, steps)
        if same_as_flags and steps == ladder_order and not stable:
            reference = tokenflex.fit(history, model=m, max_tokens=300, pin=0, **flags)
            assert plan.messages == reference.messages
            assert [(d.reason, d.index) for d in plan.dropped] == [
                (d.reason, d.index) for d in reference.dropped
            ]


@pytest.mark.parametrize("order", [["clear", "reasoning"], ["reasoning", "clear"]])
def test_the_first_step_named_is_taken_first(order: list[str]) -> None:
    """Either step alone would make room: only the first one named is taken."""
    msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "Audit the files."}]
    for k in range(8):
        call = {"id": f"c{k}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": text(150, k),
                "tool_calls": [call],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": f"c{k}", "content": text(150, 50 + k)})
    msgs.append({"role": "user", "content": "Summarize what you found."})
    m = model(count_messages(msgs, model=model(10**6)) + 300 + 100 - 400)
    plan = tokenflex.fit(
        msgs, model=m, max_tokens=300, keep_reasoning=True, shrink=tokenflex.Shrink(steps=order)
    )
    reasons = plan.dropped.by_reason()
    first, second = (STEP_REASONS[n] for n in order)
    assert reasons.get(first) and not reasons.get(second), reasons
    assert not reasons.get("budget") and not reasons.get("share"), reasons


@pytest.mark.parametrize("steps", [["clean"], ["clear", "clear"]])
def test_a_bad_shrink_step_names_the_steps(steps: list[str]) -> None:
    assert [s.name for s in LADDER] == list(SHRINK_STEPS)  # the names options checks
    msgs = [SYSTEM, {"role": "user", "content": text(4000, 1)}, {"role": "user", "content": "q"}]
    with pytest.raises(tokenflex.InvalidInputError, match="'clear', 'truncate', 'reasoning'"):
        tokenflex.fit(msgs, model=model(1500), max_tokens=300, shrink_steps=steps)


def test_only_as_far_as_needed_then_dropping() -> None:
    """Without cache stability the ladder clears the fewest oldest results that fit."""
    m = model(2400)  # 2,130 input + 300 output + 100 margin: history must be cut
    msgs: list[dict[str, Any]] = [SYSTEM]
    for t in range(8):
        msgs.append({"role": "user", "content": text(10, t)})
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{t}",
                        "type": "function",
                        "function": {"name": "read", "arguments": "{}"},
                    }
                ],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": f"c{t}", "content": text(150, t)})
        msgs.append({"role": "assistant", "content": text(10, t)})
    msgs.append({"role": "user", "content": "and now?"})
    plain = tokenflex.fit(msgs, model=m, max_tokens=300)
    assert plain.dropped.by_reason().get("share")
    roomy = tokenflex.fit(msgs, model=model(3000), max_tokens=300, clear_tool_results=True)
    assert not roomy.dropped, "a request that fits is sent as it is: nothing cleared"
    plan = tokenflex.fit(
        msgs, model=m, max_tokens=300, clear_tool_results=True, keep_tool_results=2
    )
    reasons = plan.dropped.by_reason()
    assert set(reasons) == {"cleared"}, reasons
    cleared = [d.index for d in plan.dropped]
    assert cleared == sorted(cleared) and cleared[0] == 3  # the oldest first
    fewer = tokenflex.fit(
        msgs, model=m, max_tokens=300, clear_tool_results=True, keep_tool_results=len(msgs)
    )
    assert fewer.dropped.by_reason().get("share")  # nothing may be cleared: turns dropped
    keep_read = tokenflex.fit(
        msgs, model=m, max_tokens=300, clear_tool_results=True, keep_tools=["read"]
    )
    assert "cleared" not in keep_read.dropped.by_reason()
    check_plan(plan, m, msgs)


@pytest.mark.parametrize(
    "stateless", [pytest.param(True, id="fit-each-turn"), pytest.param(False, id="conversation")]
)
def test_stateless_fit_gets_the_same_stability(stateless: bool) -> None:
    """fit(list) each turn with a state store holds its cut like a Conversation does."""
    m = model(2500)
    store = MemoryStore()
    msgs: list[dict[str, Any]] = [SYSTEM]
    conv = Conversation([SYSTEM], model=m)
    moved = 0
    cut_before = None
    shared = []
    for t in range(60):
        turn = [{"role": "user", "content": text(40, t)}]
        msgs += turn
        conv.extend(turn)
        if stateless:
            plan = tokenflex.fit(
                list(msgs), model=m, max_tokens=300, cache_stable=True, state=store
            )
        else:
            plan = conv.fit(max_tokens=300)
        cut = first_kept(plan, msgs)
        moved += cut_before is not None and cut != cut_before
        cut_before = cut
        shared.append((plan.prefix_tokens or 0) / plan.input_tokens)
        answer = {"role": "assistant", "content": text(40, t + 1)}
        msgs.append(answer)
        conv.append(answer)
    assert 0 < moved <= 10
    assert sum(shared[10:]) / len(shared[10:]) > 0.7


def test_plan_reports_cached_tokens_and_cost() -> None:
    m = tokenflex.Model(
        "cached",
        4000,
        tokenizer="o200k_base",
        chat_format="openai",
        input_price=3.0,
        cache_read_price=0.3,
        cache_write_price=3.75,
        cache_min_tokens=50,
    )
    conv = Conversation([SYSTEM], model=m)
    conv.append({"role": "user", "content": "hi"})
    first = conv.fit(max_tokens=100)
    assert first.prefix_tokens is None and first.cache_cost is None
    conv.append({"role": "assistant", "content": text(80, 1)})
    conv.append({"role": "user", "content": "more"})
    second = conv.fit(max_tokens=100)
    assert second.prefix_tokens == count_messages(first.messages, model=m) - count_messages(
        [], model=m
    )
    assert second.cached_tokens == 0  # below cache_min_tokens
    conv.append({"role": "assistant", "content": text(80, 2)})
    conv.append({"role": "user", "content": "again"})
    third = conv.fit(max_tokens=100)
    assert third.cached_tokens == third.prefix_tokens and third.prefix_tokens >= 50
    cost = third.cache_cost
    hit, rest = third.cached_tokens, third.input_tokens - third.cached_tokens
    assert cost.input_usd == pytest.approx((hit * 0.3 + rest * 3.75) / 1e6)
    assert cost.uncached_usd == pytest.approx(third.input_tokens * 3.0 / 1e6)
    assert third.to_dict()["cached_tokens"] == hit


class CountingSummarizer:
    """The offline extractive summarizer, counting its calls."""

    def __init__(self) -> None:
        self._calls = 0
        self._inner = tokenflex.ExtractiveSummarizer("o200k_base")

    @property
    def calls(self) -> int:
        return self._calls

    def summarize(self, messages: Any, *, previous_summary: str | None, max_tokens: int) -> str:
        self._calls += 1
        return self._inner.summarize(
            messages, previous_summary=previous_summary, max_tokens=max_tokens
        )


@pytest.mark.parametrize(
    "stateless", [pytest.param(True, id="fit-each-turn"), pytest.param(False, id="conversation")]
)
def test_one_summarizer_call_per_roll(stateless: bool) -> None:
    """A resent history is summarized once per roll; between rolls the summary is the
    same bytes, from the store."""
    m = model(2500)
    store = MemoryStore()
    summarizer = CountingSummarizer()
    msgs: list[dict[str, Any]] = [SYSTEM]
    conv = Conversation([SYSTEM], model=m)
    summaries: list[str] = []
    seen: dict[tuple[int, int], str] = {}
    rolls = 0
    for t in range(80):
        turn = [{"role": "user", "content": f"Turn {t}. " + text(40, t) + "."}]
        msgs += turn
        conv.extend(turn)
        if stateless:
            plan = tokenflex.fit(
                list(msgs),
                model=m,
                max_tokens=300,
                cache_stable=True,
                state=store,
                summarizer=summarizer,
            )
        else:
            plan = conv.fit(max_tokens=300, summarizer=summarizer)
        check_plan(plan, m, msgs)
        if plan.summary is not None:
            covers = plan.summary.covers
            if covers in seen:  # between rolls: the same bytes, from the store
                assert plan.summary.reused and plan.summary.text == seen[covers]
            else:
                rolls += 1
                assert not plan.summary.reused
                seen[covers] = plan.summary.text
            summaries.append(plan.summary.text)
        answer = {"role": "assistant", "content": f"Answer {t}. " + text(40, t + 1) + "."}
        msgs.append(answer)
        conv.append(answer)
    assert len(summaries) > 40
    assert summarizer.calls == rolls  # one call per roll, none between rolls
    assert summarizer.calls <= 80 // 4  # a roll every few turns, never one per request


def test_prompt_history_section_is_cache_stable() -> None:
    """A Prompt rebuilt every turn (stateless) holds its history cut through the store."""
    m = model(2500)
    store = MemoryStore()
    history: list[dict[str, Any]] = []
    cuts = []
    prefixes = []
    for t in range(40):
        history.append({"role": "user", "content": text(40, t)})
        history.append({"role": "assistant", "content": text(40, t + 1)})
        prompt = tokenflex.Prompt(m, max_tokens=300, cache_stable=True, low_water=0.5)
        prompt.add("system", "Be brief.", required=True)
        prompt.add("history", list(history), shrink="drop_oldest", priority=10)
        prompt.add("question", [{"role": "user", "content": f"question {t}"}], required=True)
        plan = prompt.fit(state=store)
        assert plan.input_tokens == count_messages(plan.messages, model=m)
        assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= m.context_window
        dropped = [d.index for d in plan.dropped if d.section == "history"]
        cuts.append(max(dropped) + 1 if dropped else 0)
        prefixes.append(plan.prefix_tokens)
    moves = sum(1 for a, b in itertools.pairwise(cuts) if a != b)
    assert 0 < moves <= 8, cuts
    # the key is the first KEY_MESSAGES messages: from the second turn on it is the same
    assert all(p for p in prefixes[2:]), prefixes


def growing(m: tokenflex.Model, turns: int, size: int, **options: Any) -> list[tokenflex.Plan]:
    """Plans of a conversation that grows by a user turn of ``size`` words and an answer
    each request, fitted each turn as a stateless caller would."""
    store = MemoryStore()
    msgs: list[dict[str, Any]] = [SYSTEM]
    plans = []
    options = {"cache_stable": True, **options}
    for t in range(turns):
        msgs.append({"role": "user", "content": text(size, t)})
        plans.append(tokenflex.fit(list(msgs), model=m, max_tokens=300, state=store, **options))
        msgs.append({"role": "assistant", "content": text(size, t + 1)})
    return plans


def kept_after_cuts(plans: list[tokenflex.Plan]) -> list[int]:
    """History messages sent by each plan whose cut moved."""
    out, cut = [], None
    for plan in plans:
        now = max((d.index for d in plan.dropped if d.reason != "reasoning"), default=0)
        if cut is not None and now != cut:
            out.append(len(plan.messages) - 1)
        cut = now
    return out


def test_auto_mark_weighs_the_cache_prices_against_the_history_kept() -> None:
    """With cache prices, ``low_water="auto"`` cuts by expected cost, never keeping more
    than AUTO_MARK_MAX of the room (a deeper mark costs less): a conversation that grows
    fast in a small room cuts deeper than that, one that grows slowly in a large room
    keeps that much, less than the fixed 0.6; without prices it is the fixed 0.6."""
    fast = kept_after_cuts(growing(priced(2500), 60, 120))
    fixed = kept_after_cuts(growing(model(2500), 60, 120))
    assert fast and fixed and max(fast) < min(fixed)
    assert kept_after_cuts(growing(model(2500), 60, 120, low_water=0.6)) == fixed
    capped = kept_after_cuts(growing(model(2500), 60, 120, low_water=AUTO_MARK_MAX))
    assert max(fast) <= min(capped)
    slow = kept_after_cuts(growing(priced(6000), 250, 20))
    slow_fixed = kept_after_cuts(growing(model(6000), 250, 20))
    assert slow and slow_fixed and max(slow) < min(slow_fixed)
    assert slow == kept_after_cuts(growing(model(6000), 250, 20, low_water=AUTO_MARK_MAX))


def test_growth_per_request_is_remembered() -> None:
    """The stored cut carries the mean tokens appended to the history per request,
    counted with the model's own per-message counts (the history ends before the
    current user turn; the key holds from the third message on)."""
    from tokenflex.counting import get_counter
    from tokenflex.session import StoreMemory

    m = priced(100_000)
    store = MemoryStore()
    msgs: list[dict[str, Any]] = [SYSTEM]
    count = get_counter(m).message
    samples = []
    for t in range(8):
        if t:
            msgs.append({"role": "assistant", "content": text(7 * t, t)})
        msgs.append({"role": "user", "content": text(10 + 5 * t, t)})
        if t >= 2:  # the previous user turn and this answer joined the history
            samples.append(count(msgs[-3]) + count(msgs[-2]))
        tokenflex.fit(list(msgs), model=m, max_tokens=300, cache_stable=True, state=store)
    cut = StoreMemory(store, m.name, msgs).previous_cut(msgs)
    assert cut is not None and cut.end == len(msgs) - 1
    assert cut.grown == len(samples) == 6
    assert cut.growth == pytest.approx(sum(samples) / len(samples))


class CopyingStore(MemoryStore):
    """A memory store that hands back a copy of what it keeps, as a store that
    serializes does (SQLite, Redis): never the bytes object it was given."""

    def get(self, key: str) -> bytes | None:
        raw = super().get(key)
        return None if raw is None else bytes(bytearray(raw))


def test_a_state_is_read_as_it_was_last_written() -> None:
    """The process keeps the states it wrote decoded, for the bytes it wrote: what it
    reads through them is what decoding the stored bytes gives (a store that hands back
    copies is the reference), turn after turn of a session that is cut; and bytes
    written under the key by another writer are read as written."""
    from tokenflex.session import StoreMemory

    m = priced(2_000)
    kept, copying = MemoryStore(), CopyingStore()
    msgs: list[dict[str, Any]] = [SYSTEM]
    for t in range(14):
        if t:
            msgs.append({"role": "assistant", "content": text(60, t)})
        msgs.append({"role": "user", "content": text(40, t)})
        plans = [
            tokenflex.fit(list(msgs), model=m, max_tokens=300, cache_stable=True, state=store)
            for store in (kept, copying)
        ]
        assert [p.messages for p in plans[1:]] == [plans[0].messages]
        assert plans[0].prefix_tokens == plans[1].prefix_tokens
        cuts = [StoreMemory(s, m.name, msgs).previous_cut(msgs) for s in (kept, copying)]
        assert cuts[0] is not None and cuts[1] is not None
        assert cuts[0]._replace(at=0.0) == cuts[1]._replace(at=0.0)  # (made apart)
    assert plans[0].dropped  # the session was cut
    memory = StoreMemory(kept, m.name, msgs)
    raw = memory.store.get(memory.key)  # (the tenant's view of the store)
    assert raw is not None
    state = json.loads(raw)
    state["start"] = held = state["start"] - 2  # another writer's cut, two messages back
    memory.store.set(memory.key, json.dumps(state).encode())
    cut = StoreMemory(kept, m.name, msgs).previous_cut(msgs)
    assert cut is not None and cut.start == held


@pytest.mark.parametrize("gone", ["ttl", "min_tokens"])
def test_a_cut_is_not_held_for_a_cache_that_is_gone(
    gone: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the provider no longer holds the previous request (its cache expired, or it
    was too short to cache), the fit keeps all the history that fits, as drop-to-fit."""
    if gone == "ttl":
        m = priced(2500, cache_ttl_s=300)
        clock = itertools.count(1_000_000, 301)  # every request 301 s after the last
        monkeypatch.setattr("time.time", lambda: float(next(clock)))
    else:
        m = priced(2500, cache_min_tokens=1_000_000)
    stable = growing(m, 40, 40)
    plain = growing(m, 40, 40, cache_stable=False)
    assert [p.messages for p in stable] == [p.messages for p in plain]
    held = growing(priced(2500, cache_ttl_s=10**6, cache_min_tokens=100), 40, 40)
    assert [p.messages for p in held] != [p.messages for p in plain]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=sessions(),
    window=st.sampled_from([1500, 2500, 4000]),
    low_water=st.sampled_from([0.4, 0.9, "auto"]),
    clear=st.booleans(),
    fresh=st.booleans(),
)
def test_stateless_prefix_tokens_match_a_message_by_message_reference(
    turns: list[list[dict[str, Any]]], window: int, low_water: float | str, clear: bool, fresh: bool
) -> None:
    """A stateless caller's ``prefix_tokens`` (kept as runs of its own messages, so a grown
    conversation costs O(what changed)) equal an independent reference: the tokens of the
    leading messages two consecutive plans send alike, compared one by one by value.
    ``fresh``: every request is a new copy of the conversation, as a proxy parses it."""
    m = model(window) if low_water != "auto" else priced(window)
    store = MemoryStore()
    history: list[dict[str, Any]] = [SYSTEM]
    previous: list[Any] | None = None
    for turn in turns:
        if len(history) < KEY_MESSAGES:  # the conversation's key is not its own yet
            previous = None
        history += turn
        sent = [dict(x) for x in history] if fresh else list(history)
        try:
            plan = tokenflex.fit(
                sent,
                model=m,
                max_tokens=300,
                cache_stable=True,
                state=store,
                low_water=low_water,
                clear_tool_results=clear,
                keep_tool_results=1,
            )
        except tokenflex.ContextOverflowError:
            return
        keys = list(plan.messages)
        if previous is None:
            assert plan.prefix_tokens is None
        else:
            n = next(
                (i for i, (a, b) in enumerate(zip(previous, keys, strict=False)) if a != b),
                min(len(previous), len(keys)),
            )
            event(f"whole previous plan shared: {n == len(previous)}")
            expected = count_messages(plan.messages[:n], model=m) - count_messages([], model=m)
            assert plan.prefix_tokens == expected
        previous = keys
