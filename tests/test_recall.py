"""Recall under the promise (issue 28 item 1), in the library.

What a plan leaves out (dropped, summarized, cleared) is kept under a stable,
tenant-bound id that the cut note, the summary and each placeholder name; the request
gains the counted ``tokenflex_recall`` tool; :func:`tokenflex.recall` gives it back in
the caller's format. The references are the caller's own lists: a recalled span must be
exactly the caller's items the plan's dropped runs name.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cache_stable import SYSTEM, model, sessions

import tokenflex
from tokenflex.recall import RECALL_TOOL, recall_calls, recall_tool, resolved_round
from tokenflex.state import MemoryStore, TenantStore
from tokenflex.summarize import ExtractiveSummarizer

ID = re.compile(r"recall id: ([0-9a-f]{12})")


def chat(n: int, words: int = 120) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [SYSTEM]
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        msgs.append({"role": role, "content": f"message {i}: " + "lorem ipsum " * words})
    return msgs


def named_ids(plan: tokenflex.Plan) -> list[str]:
    """Every recall id the plan's messages (and Anthropic system) name."""
    text = repr(plan.messages) + repr(plan.system)
    return ID.findall(text)


def spans(plan: tokenflex.Plan, *reasons: str) -> list[tuple[int, int]]:
    """The plan's dropped runs of ``reasons``, merged where contiguous."""
    out: list[tuple[int, int]] = []
    for _section, a, b, reason in plan.dropped.runs():
        if reason not in reasons:
            continue
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


CUT = ("budget", "share", "orphan", "low_water", "held", "max_items")
SMALL = {"model": model(4000), "max_tokens": 500}


def test_a_cut_is_named_counted_and_recalled_in_full() -> None:
    store = MemoryStore()
    msgs = chat(30)
    plan = tokenflex.fit(msgs, recall=True, state=store, **SMALL)
    (a, b), *_ = spans(plan, *CUT)
    [rid] = named_ids(plan)
    assert plan.extras["recall"]["ids"] == [rid]
    note = next(m for m in plan.messages if rid in m["content"])
    assert note["content"].startswith(f"[{b - a} earlier messages omitted")
    assert [t["function"]["name"] for t in plan.tools] == [RECALL_TOOL]
    # counted: the plan's input is the request's input, the tool included
    assert plan.input_tokens == tokenflex.count_messages(
        plan.messages, model=SMALL["model"], tools=list(plan.tools)
    )
    assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= plan.context_window
    assert tokenflex.recall(rid, state=store) == msgs[a:b]
    assert plan.request()["tools"] == list(plan.tools)


def test_a_request_that_fits_goes_out_unchanged() -> None:
    store = MemoryStore()
    msgs = chat(4, words=5)
    plan = tokenflex.fit(msgs, recall=True, state=store, **SMALL)
    assert plan.messages == msgs and all(a is b for a, b in zip(plan.messages, msgs, strict=True))
    assert plan.tools == () and "recall" not in plan.extras and not named_ids(plan)
    assert plan.max_tokens == 500
    assert store.size_bytes == 0


def test_the_tool_never_drops_a_message_that_fits_without_it() -> None:
    """A conversation that fits only without the tool's tokens goes out unchanged."""
    m = SMALL["model"]
    msgs = chat(2, words=5)
    base = tokenflex.count_messages(msgs, model=m)
    room = m.context_window - 500 - base
    pad = {"role": "user", "content": "pad " * 4000}
    while tokenflex.count_messages([*msgs, pad], model=m) > base + room - 8:
        pad["content"] = pad["content"][: len(pad["content"]) - 20]
    msgs.append(pad)
    plan = tokenflex.fit(msgs, recall=True, state=MemoryStore(), safety_margin=0, **SMALL)
    without = tokenflex.fit(msgs, safety_margin=0, **SMALL)
    assert len(without.dropped) == 0
    assert plan.messages == msgs and plan.tools == () and len(plan.dropped) == 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    big=st.integers(200, 1_500),
    slack=st.integers(0, 150),
    cache_stable=st.booleans(),
)
def test_recall_never_cuts_a_request_that_fits_without_it(
    big: int, slack: int, cache_stable: bool
) -> None:
    """The reference is the same fit without recall: whenever it leaves nothing out, the
    fit with recall sends the same messages and no tool, however much the tool's tokens
    would have forced a cut (an old message of any size, a low-water mark)."""
    m = SMALL["model"]
    msgs = [*chat(2, words=5), {"role": "user", "content": "old " * big}, *chat(2, words=5)[1:]]
    opts = {"safety_margin": 0, "cache_stable": cache_stable, **SMALL}
    room = m.context_window - 500
    pad = {"role": "user", "content": "pad " * 4000}
    while tokenflex.count_messages([*msgs, pad], model=m) > room - slack:
        pad["content"] = pad["content"][: len(pad["content"]) - 40]
    msgs.append(pad)
    without = tokenflex.fit(msgs, **opts)
    plan = tokenflex.fit(msgs, recall=True, state=MemoryStore(), **opts)
    if len(without.dropped) == 0:
        assert plan.messages == without.messages, [d.index for d in plan.dropped]
        assert plan.tools == () and len(plan.dropped) == 0


def test_the_same_cut_keeps_the_same_id_turn_after_turn() -> None:
    """A cache-stable conversation that grows keeps its note (and id) while the cut is
    held, and a moved cut's id reads the whole span back, chained to the old one."""
    store = MemoryStore()
    msgs = chat(30)
    options = {**SMALL, "cache_stable": True, "recall": True, "state": store}
    first = tokenflex.fit(msgs, **options)
    [rid] = named_ids(first)
    seen = {rid}
    for k in range(12):
        msgs += [
            {"role": "assistant", "content": f"answer {k} " + "lorem " * 30},
            {"role": "user", "content": f"question {k} " + "ipsum " * 30},
        ]
        plan = tokenflex.fit(msgs, **options)
        [now] = named_ids(plan)
        (a, b), *_ = spans(plan, *CUT)
        assert tokenflex.recall(now, state=store) == msgs[a:b]
        seen.add(now)
    assert len(seen) < 12  # held cuts keep their id (the cut moved only a few times)


def test_a_moved_cut_stores_only_what_it_newly_left_out() -> None:
    """The cost model: the record of a grown cut holds the new messages and the id of
    the record before it."""
    store = MemoryStore()
    tenant = TenantStore(store, "")
    msgs = chat(30)
    plan = tokenflex.fit(msgs, recall=True, state=store, **SMALL)
    [old] = named_ids(plan)
    (_, b0), *_ = spans(plan, *CUT)
    msgs += chat(12)[1:]
    plan = tokenflex.fit(msgs, recall=True, state=store, **SMALL)
    [new] = named_ids(plan)
    (a, b), *_ = spans(plan, *CUT)
    assert new != old and b > b0
    record = json.loads(tenant.get(f"recall:{new}") or b"")
    assert record["prev"] == old and record["items"] == msgs[b0:b]
    assert tokenflex.recall(new, state=store) == msgs[a:b]


def test_cleared_tool_results_name_their_ids() -> None:
    store = MemoryStore()
    msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "Inspect the logs."}]
    for k in range(14):
        msgs += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{k}",
                        "type": "function",
                        "function": {"name": "read_log", "arguments": f'{{"part": {k}}}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"call_{k}", "content": f"log {k} " + "ok " * 300},
        ]
    plan = tokenflex.fit(
        msgs, recall=True, state=store, clear_tool_results=True, keep_tool_results=1, **SMALL
    )
    cleared = [d for d in plan.dropped if d.reason == "cleared"]
    assert cleared
    for d in cleared:
        sent = next(
            m for m in plan.messages if m.get("tool_call_id") == msgs[d.index]["tool_call_id"]
        )
        [rid] = ID.findall(sent["content"])
        assert sent["content"].startswith("[tool result cleared")
        assert tokenflex.recall(rid, state=store) == [msgs[d.index]]
        assert rid in plan.extras["recall"]["ids"]


def test_a_summary_names_the_span_it_stands_for() -> None:
    store = MemoryStore()
    msgs = chat(30)
    plan = tokenflex.fit(msgs, recall=True, state=store, summarizer=ExtractiveSummarizer(), **SMALL)
    assert plan.summary is not None
    a, b = plan.summary.covers
    summary = next(m for m in plan.messages if tokenflex.is_summary_message(m))
    [rid] = ID.findall(summary["content"])
    assert tokenflex.recall(rid, state=store) == msgs[a:b]


def anthropic_conversation(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"turn {i}: " + "lorem ipsum " * 120
        out.append({"role": role, "content": [{"type": "text", "text": text}]})
    return out


def responses_conversation(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        if i % 2 == 0:
            out.append({"role": "user", "content": f"turn {i}: " + "lorem ipsum " * 120})
        else:
            out.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": f"turn {i}: " + "ipsum " * 200}],
                }
            )
    return out


@pytest.mark.parametrize(
    ("fmt", "items", "system"),
    [
        pytest.param("anthropic", anthropic_conversation(31), "Be terse.", id="anthropic"),
        pytest.param("responses", responses_conversation(31), "Be terse.", id="responses"),
        pytest.param("chat", chat(30), None, id="chat"),
    ],
)
def test_recall_in_the_callers_format(fmt: str, items: list[Any], system: Any) -> None:
    store = MemoryStore()
    plan = tokenflex.fit(items, recall=True, state=store, format=fmt, system=system, **SMALL)
    assert plan.format == fmt
    assert list(plan.tools) == [recall_tool(fmt)]
    [rid] = named_ids(plan)
    (a, b), *_ = spans(plan, *CUT)
    assert tokenflex.recall(rid, state=store) == items[a:b]
    assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= plan.context_window
    body = plan.request()
    assert body["tools"] == [recall_tool(fmt)]


def test_afit_recalls_as_fit_does() -> None:
    msgs = chat(30)
    plan = tokenflex.fit(msgs, recall=True, state=MemoryStore(), **SMALL)
    aplan = asyncio.run(tokenflex.afit(msgs, recall=True, state=MemoryStore(), **SMALL))
    assert aplan.messages == plan.messages and aplan.tools == plan.tools
    assert aplan.extras["recall"] == plan.extras["recall"]


def test_ids_and_records_belong_to_their_tenant() -> None:
    shared = MemoryStore()
    alice, bob = TenantStore(shared, "alice"), TenantStore(shared, "bob")
    msgs = chat(30)
    pa = tokenflex.fit(msgs, recall=True, state=alice, **SMALL)
    pb = tokenflex.fit(msgs, recall=True, state=bob, **SMALL)
    [ra], [rb] = named_ids(pa), named_ids(pb)
    assert ra != rb  # the same content: another tenant, another id
    assert tokenflex.recall(ra, state=alice) is not None
    assert tokenflex.recall(ra, state=bob) is None and tokenflex.recall(rb, state=alice) is None
    assert tokenflex.recall(ra, state=shared) is None  # the plain store is the tenant ""
    assert all(k.startswith((alice.prefix, bob.prefix)) for k in shared._data)


def test_the_model_recall_call_is_answered_in_each_format() -> None:
    store = MemoryStore()
    msgs = chat(30)
    plan = tokenflex.fit(msgs, recall=True, state=store, **SMALL)
    [rid] = named_ids(plan)
    (a, b), *_ = spans(plan, *CUT)
    args = json.dumps({"id": rid})
    answers = {
        "chat": {
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": RECALL_TOOL, "arguments": args},
                            }
                        ],
                    }
                }
            ]
        },
        "anthropic": {
            "content": [{"type": "tool_use", "id": "c1", "name": RECALL_TOOL, "input": {"id": rid}}]
        },
        "responses": {
            "output": [
                {"type": "function_call", "call_id": "c1", "name": RECALL_TOOL, "arguments": args}
            ]
        },
    }
    for fmt, answer in answers.items():
        assert recall_calls(fmt, answer) == [("c1", rid)]
        made = resolved_round(fmt, answer, store)
        assert made is not None and len(made) == 2
        result = made[1]
        text = (
            result.get("content")
            if fmt == "chat"
            else result["content"][0]["content"]
            if fmt == "anthropic"
            else result["output"]
        )
        assert json.loads(text) == msgs[a:b]
    other = {"choices": [{"message": {"role": "assistant", "content": "hi"}}]}
    assert resolved_round("chat", other, store) is None
    mixed = answers["anthropic"]["content"] + [
        {"type": "tool_use", "id": "c2", "name": "search", "input": {}}
    ]
    assert resolved_round("anthropic", {"content": mixed}, store) is None


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns=sessions(), data=st.data())
def test_with_recall_every_plan_keeps_the_promise_and_every_id_reads_back(
    turns: list[list[dict[str, Any]]], data: st.DataObject
) -> None:
    """The window promise holds with the tool counted (recounted independently), the
    tool is there exactly when something was left out, and every id named reads back
    the caller's messages of its span."""
    window = data.draw(st.sampled_from([1500, 2500, 4000]), label="window")
    m = model(window)
    options: dict[str, Any] = {
        "model": m,
        "max_tokens": data.draw(st.sampled_from([100, 300, None]), label="max_tokens"),
        "cache_stable": data.draw(st.booleans(), label="cache_stable"),
        "clear_tool_results": data.draw(st.booleans(), label="clear"),
    }
    store = TenantStore(MemoryStore(), "t")
    msgs: list[dict[str, Any]] = [SYSTEM]
    for turn in turns:
        msgs += turn
        try:
            plan = tokenflex.fit(msgs, recall=True, state=store, **options)
        except tokenflex.ContextOverflowError:
            continue
        tools = list(plan.tools) or None
        assert plan.input_tokens == tokenflex.count_messages(plan.messages, model=m, tools=tools)
        assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= window
        engine_left_out = any(d.section != "reasoning" for d in plan.dropped)
        assert bool(plan.tools) == engine_left_out == ("recall" in plan.extras)
        cut = [msgs[a:b] for a, b in spans(plan, *CUT)]
        for note in plan.messages:
            if str(note.get("content")).startswith("[") and "earlier" in str(note["content"]):
                [rid] = ID.findall(note["content"])
                assert tokenflex.recall(rid, state=store) in cut
        for rid in plan.extras.get("recall", {}).get("ids", ()):
            assert tokenflex.recall(rid, state=store)


# -- Prompt and Conversation take recall as fit() does ----------------------------------


def prompt(history: list[dict[str, Any]], **options: Any) -> tokenflex.Prompt:
    """A prompt laid out as fit() lays out a chat: system, history, the current turn."""
    p = tokenflex.Prompt(SMALL["model"], max_tokens=SMALL["max_tokens"], **options)
    p.add("system", SYSTEM["content"], required=True)
    p.add("history", history[:-1])
    return p.add("current", history[-1:], required=True)


def test_a_prompt_names_counts_and_recalls_its_cut() -> None:
    store = MemoryStore()
    hist = chat(30)[1:]
    search = {"type": "function", "function": {"name": "search", "parameters": {}}}
    plan = prompt(hist, tools=[search]).fit(recall=True, state=store)
    (a, b), *_ = spans(plan, *CUT)
    [rid] = named_ids(plan)
    assert plan.extras["recall"]["ids"] == [rid]
    assert [t["function"]["name"] for t in plan.tools] == ["search", RECALL_TOOL]
    assert plan.input_tokens == tokenflex.count_messages(
        plan.messages, model=SMALL["model"], tools=list(plan.tools)
    )
    assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= plan.context_window
    assert tokenflex.recall(rid, state=store) == hist[a:b]
    aplan = asyncio.run(prompt(hist, tools=[search]).afit(recall=True, state=store))
    assert aplan.messages == plan.messages and aplan.tools == plan.tools
    assert aplan.extras["recall"] == plan.extras["recall"]


def test_a_prompt_that_fits_goes_out_unchanged() -> None:
    store = MemoryStore()
    hist = chat(4, words=5)[1:]
    plan = prompt(hist).fit(recall=True, state=store)
    assert plan.messages == [SYSTEM, *hist] and plan.tools == () and "recall" not in plan.extras
    assert store.size_bytes == 0


def test_a_prompt_summary_names_the_span_it_stands_for() -> None:
    store = MemoryStore()
    hist = chat(30)[1:]
    p = tokenflex.Prompt(SMALL["model"], max_tokens=SMALL["max_tokens"])
    p.add("system", SYSTEM["content"], required=True).add("history", hist, shrink="summarize")
    plan = p.fit(recall=True, state=store, summarizer=ExtractiveSummarizer())
    assert plan.summary is not None
    a, b = plan.summary.covers
    summary = next(m for m in plan.messages if tokenflex.is_summary_message(m))
    [rid] = ID.findall(summary["content"])
    assert tokenflex.recall(rid, state=store) == hist[a:b]


def test_a_conversation_keeps_its_cut_id_and_stores_only_what_is_new() -> None:
    """The cost model: while the cut is held, a fit stores no record and names the same
    id; a cut that moves stores only the messages it newly left out."""
    store = MemoryStore()
    tenant = TenantStore(store, "")
    msgs = chat(30)
    conv = tokenflex.Conversation(msgs, model=SMALL["model"], recall=True, state=store)
    ids: list[str] = []
    records: list[int] = []
    for k in range(16):
        plan = conv.fit(max_tokens=SMALL["max_tokens"])
        [rid] = named_ids(plan)
        (a, b), *_ = spans(plan, *CUT)
        assert tokenflex.recall(rid, state=store) == conv.messages[a:b]
        assert plan.input_tokens == tokenflex.count_messages(
            plan.messages, model=SMALL["model"], tools=list(plan.tools)
        )
        if ids and rid != ids[-1]:  # moved: a record of the new messages, chained
            record = json.loads(tenant.get(f"recall:{rid}") or b"")
            assert record["prev"] == ids[-1] and len(record["items"]) < b - a
        elif ids:
            assert sum(1 for key in store._data if "recall:" in key) == records[-1]
        ids.append(rid)
        records.append(sum(1 for key in store._data if "recall:" in key))
        conv.extend(
            [
                {"role": "assistant", "content": f"answer {k} " + "lorem " * 80},
                {"role": "user", "content": f"question {k} " + "ipsum " * 80},
            ]
        )
    assert 1 < len(set(ids)) < 16  # held cuts keep their id; the cut moved a few times


def test_a_conversation_that_fits_goes_out_unchanged() -> None:
    store = MemoryStore()
    msgs = chat(4, words=5)
    plan = tokenflex.Conversation(msgs, model=SMALL["model"], recall=True, state=store).fit(
        max_tokens=500
    )
    assert plan.messages == msgs and plan.tools == () and "recall" not in plan.extras
    assert store.size_bytes == 0
    with pytest.raises(tokenflex.InvalidInputError, match="recall='yes'"):
        tokenflex.Conversation(msgs, model=SMALL["model"], recall="yes")  # type: ignore[arg-type]


def without_reasoning(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in m.items() if k != "reasoning_content"} for m in msgs]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns=sessions(), data=st.data())
def test_prompt_and_conversation_with_recall_keep_the_promise_and_read_back(
    turns: list[list[dict[str, Any]]], data: st.DataObject
) -> None:
    """As fit()'s property, for a Conversation grown turn by turn and a Prompt of the
    same messages: the window promise with the tool counted (recounted independently),
    the tool exactly when something was left out (a request that fits goes out as it
    is), and every id named reads back the caller's messages of a span the plan cut."""
    window = data.draw(st.sampled_from([1500, 2500, 4000]), label="window")
    m = model(window)
    max_tokens = data.draw(st.sampled_from([100, 300]), label="max_tokens")
    options: dict[str, Any] = {
        "cache_stable": data.draw(st.booleans(), label="cache_stable"),
        "clear_tool_results": data.draw(st.booleans(), label="clear"),
    }
    store = TenantStore(MemoryStore(), "t")
    conv = tokenflex.Conversation([SYSTEM], model=m, recall=True, state=store, **options)

    def check(plan: tokenflex.Plan, given: list[dict[str, Any]], sent_as: Any) -> None:
        tools = list(plan.tools) or None
        assert plan.input_tokens == tokenflex.count_messages(plan.messages, model=m, tools=tools)
        assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= window
        left_out = any(d.section != "reasoning" for d in plan.dropped)
        assert bool(plan.tools) == left_out == ("recall" in plan.extras)
        if not left_out:
            assert plan.messages == [SYSTEM, *sent_as(given)]
        cut = [given[a:b] for a, b in spans(plan, *CUT)]
        assert bool(named_ids(plan)) >= bool(cut)  # what is cut is named
        for note in plan.messages:
            if str(note.get("content")).startswith("[") and "earlier" in str(note["content"]):
                [rid] = ID.findall(note["content"])
                assert tokenflex.recall(rid, state=store) in cut
        for rid in plan.extras.get("recall", {}).get("ids", ()):
            assert tokenflex.recall(rid, state=store)

    msgs: list[dict[str, Any]] = [SYSTEM]
    for turn in turns:
        msgs += turn
        conv.extend(turn)
        try:
            plan = conv.fit(max_tokens=max_tokens)
        except tokenflex.ContextOverflowError:
            continue
        check(plan, msgs, lambda given: without_reasoning(given[1:]))
    p = tokenflex.Prompt(m, max_tokens=max_tokens, **options).add(
        "system", SYSTEM["content"], required=True
    )
    p.add("history", msgs[1:])
    try:
        plan = p.fit(recall=True, state=store)
    except tokenflex.ContextOverflowError:
        return
    check(plan, without_reasoning(msgs[1:]), lambda given: given)


# -- recall costs no share of the cached prefix ----------------------------------------


@pytest.mark.parametrize("chat_format", [None, "openai"], ids=["template-unknown", "openai"])
def test_a_fresh_cut_with_recall_leaves_the_room_a_cut_without_it_leaves(
    chat_format: str | None,
) -> None:
    """A cache-stable cut is held until the history outgrows the room it left. With
    recall, every cut made afresh (down to the low-water mark) sends no more than the
    same cut made afresh without recall (a fresh store is the reference), so the tool
    and the note never make the held cut give way a turn sooner. With a model whose chat
    template is not known, the tool is counted at its bound (about 250 tokens, half a
    turn here); with OpenAI's, at about 65."""
    formats = {"chat_format": chat_format} if chat_format else {}
    m = tokenflex.Model(f"recall-8k-{chat_format}", 8192, tokenizer="o200k_base", **formats)
    options: dict[str, Any] = {"model": m, "max_tokens": 1000, "cache_stable": True}
    store = MemoryStore()
    msgs: list[dict[str, Any]] = [SYSTEM]
    fresh_cuts = 0
    for k in range(40):
        msgs += [
            {"role": "assistant", "content": f"answer {k}: " + "lorem ipsum " * (60 + k % 5 * 7)},
            {"role": "user", "content": f"question {k}: " + "dolor sit " * (55 + k % 3 * 11)},
        ]
        plan = tokenflex.fit(msgs, recall=True, state=store, **options)
        if any(r[3] == "low_water" for r in plan.dropped.runs()):
            fresh_cuts += 1
            fresh = tokenflex.fit(msgs, state=MemoryStore(), **options)
            assert plan.input_tokens <= fresh.input_tokens, (k, plan.dropped.runs())
    assert fresh_cuts >= 2


def test_each_counter_gets_its_own_recall_overhead() -> None:
    """The tool's and the cut note's counts are kept per counter (and format): asked in
    turn for models whose tokenizers and envelopes differ, each gets its own figures,
    the ones its counter gives when asked directly, the first time and every time."""
    from tokenflex.engine import cut_note
    from tokenflex.recall import recall_overhead

    names = ["gpt-4o", "gpt-4", "claude-3-5-sonnet-20241022", "llama-3.1-8b-instruct"]
    counters = [tokenflex.get_counter(n) for n in names]
    expected = {
        (i, fmt): (
            c.base([recall_tool(fmt)]) - c.base(None),
            c.message(cut_note(10**6, "")) + 2 * 12,
        )
        for i, c in enumerate(counters)
        for fmt in ("chat", "anthropic")
    }
    assert len(set(expected.values())) == len(expected)  # the cases tell the counters apart
    for _ in range(2):
        for (i, fmt), figures in expected.items():
            assert recall_overhead(counters[i], fmt) == figures
        assert recall_overhead(counters[0]) == expected[(0, "chat")]  # the default: chat


def _recallers(source: list[Any], *, stable: bool, edit: bool = False) -> tuple[str, str, int]:
    """The id of ``source[1:-1]`` named by two fits' recallers (each a request of its
    own), the second after ``source[5]`` was edited in place when ``edit``; and how many
    messages the second fingerprinted."""
    import importlib
    from unittest import mock

    recall_module = importlib.import_module("tokenflex.recall")  # (not the function)
    store = MemoryStore()
    first = recall_module.Recaller(store, source, "chat", stable=stable).span_id(1, len(source) - 1)
    if edit:
        source[5]["content"] += " (edited)"
    sized, plain = recall_module.sized_fingerprint, recall_module.fingerprint
    with (
        mock.patch.object(recall_module, "sized_fingerprint", wraps=sized) as a,
        mock.patch.object(recall_module, "fingerprint", wraps=plain) as b,
    ):
        second = recall_module.Recaller(store, source, "chat", stable=stable).span_id(
            1, len(source) - 1
        )
    return first, second, a.call_count + b.call_count


def test_a_conversation_that_goes_on_fingerprints_its_messages_once() -> None:
    """A conversation that goes on (a proxy's parse: objects no one edits, repeated by
    the next turn) keeps its messages' fingerprints for the next fit: a span its next
    turn names again is not fingerprinted again, and its id is the one a caller's list
    of equal messages gets."""
    source = [{"role": "user", "content": f"message {i} " + "x" * 50} for i in range(300)]
    first, second, made = _recallers(source, stable=True)
    assert first == second and made < 5
    copy = [dict(m) for m in source]
    assert _recallers(copy, stable=False)[1] == first  # the same id, fingerprinted anew


def test_a_caller_s_list_edited_in_place_is_fingerprinted_again() -> None:
    """A caller's own list (not read once) is fingerprinted on each fit: an edit in place
    between two fits changes the id its span is named by."""
    source = [{"role": "user", "content": f"message {i}"} for i in range(40)]
    first, second, made = _recallers(source, stable=False, edit=True)
    assert first != second and made >= 38


def test_a_request_sent_again_reads_the_fingerprints_its_conversation_kept() -> None:
    """The same request again (a retry: its parse reuses the last one's objects, but a
    list that only repeats the last does not go on from it) reads the fingerprints kept
    for those objects: none made again, the same id. What it fingerprints itself it does
    not keep: a later fit of the same objects, not going on, makes them again."""
    import importlib
    from unittest import mock

    recall_module = importlib.import_module("tokenflex.recall")  # (not the function)
    store = MemoryStore()
    source = [{"role": "user", "content": f"again {i} " + "y" * 40} for i in range(300)]
    other = [{"role": "user", "content": f"never kept {i}"} for i in range(40)]
    kept = recall_module.Recaller(store, source, "chat", stable=True).span_id(1, 299)
    sized, plain = recall_module.sized_fingerprint, recall_module.fingerprint
    for _ in range(2):
        with (
            mock.patch.object(recall_module, "sized_fingerprint", wraps=sized) as a,
            mock.patch.object(recall_module, "fingerprint", wraps=plain) as b,
        ):
            again = recall_module.Recaller(store, source, "chat", stable=False).span_id(1, 299)
            assert again == kept and a.call_count + b.call_count < 5
            recall_module.Recaller(store, other, "chat", stable=False).span_id(1, 39)
            assert a.call_count + b.call_count >= 38  # (each pass: none kept from the last)
