"""plan.dropped read against a straightforward rebuild (issue 23, item 5).

The plan lists every item left out once, however many layers it went through (the
engine, the reasoning taken out before it, a converted request's own items). The
reference here rebuilds each dropped record from the caller's input by hand: the item at
its index, its tokens counted alone, one record per reasoning text taken out.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tokenflex
from tokenflex import Chunk, Prompt
from tokenflex.counting import get_counter

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

MODEL = tokenflex.Model(
    name="small-window",
    context_window=1500,
    tokenizer="o200k_base",
    chat_format="openai",
    family="gpt-4o",
)

_turn = st.tuples(
    st.integers(1, 60),  # words in the user message
    st.integers(1, 60),  # words in the reply
    st.one_of(st.none(), st.integers(0, 40)),  # words of reasoning on the reply
)


def _messages(turns: list[tuple[int, int, int | None]]) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for k, (asked, answered, thought) in enumerate(turns):
        msgs.append({"role": "user", "content": f"q{k} " + "ask " * asked})
        reply: dict[str, Any] = {"role": "assistant", "content": f"a{k} " + "say " * answered}
        if thought is not None:
            reply["reasoning_content"] = "think " * thought
        msgs.append(reply)
    msgs.append({"role": "user", "content": "and now?"})
    return msgs


def _without_reasoning(m: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in m.items() if k != "reasoning_content"}


def _records(plan: tokenflex.Plan) -> list[tuple[str, int, int, str, Any]]:
    return [(d.section, d.index, d.tokens, d.reason, d.item) for d in plan.dropped]


def _check_dict(plan: tokenflex.Plan) -> None:
    assert plan.to_dict(dropped_limit=None)["dropped"] == [
        {"section": s, "index": i, "tokens": t, "reason": r} for s, i, t, r, _ in _records(plan)
    ]


@SETTINGS
@given(turns=st.lists(_turn, max_size=25), chunks=st.integers(0, 30))
def test_fit_dropped_is_the_straight_rebuild(
    turns: list[tuple[int, int, int | None]], chunks: int
) -> None:
    msgs = _messages(turns)
    docs = [Chunk(f"passage {i} " + "text " * (5 + i % 40), source=f"d{i}") for i in range(chunks)]
    plan = tokenflex.fit(msgs, model=MODEL, max_tokens=200, documents=docs or None)
    counter = get_counter(MODEL)
    expected: list[tuple[str, int, int, str, Any]] = []
    for section, a, b, reason in plan.dropped.runs():
        for i in range(a, b):
            if section == "reasoning":
                text = msgs[i]["reasoning_content"]
                expected.append((section, i, counter.text(text), reason, text))
            elif section == "documents":
                (_, _, tokens, _, _) = next(r for r in _records(plan) if r[:2] == (section, i))
                assert tokens > 0
                expected.append((section, i, tokens, reason, docs[i]))
            else:  # the caller's message as sent (reasoning out), its tokens
                item = _without_reasoning(msgs[i])
                expected.append((section, i, counter.message(item), reason, item))
    assert _records(plan) == expected
    for d in plan.dropped:  # a message sent as given is dropped as the caller's own object
        if d.section == "history" and "reasoning_content" not in msgs[d.index]:
            assert d.item is msgs[d.index]
    taken = [i for i, m in enumerate(msgs) if m.get("reasoning_content")]
    assert [r[1] for r in plan.dropped.runs() if r[0] == "reasoning"] == taken
    _check_dict(plan)


@SETTINGS
@given(turns=st.lists(_turn, max_size=25))
def test_prompt_and_conversation_dropped_are_the_straight_rebuild(
    turns: list[tuple[int, int, int | None]],
) -> None:
    msgs = _messages(turns)
    counter = get_counter(MODEL)
    history, current = msgs[1:-1], msgs[-1:]
    prompt = (
        Prompt(MODEL, max_tokens=200)
        .add("system", msgs[:1], required=True)
        .add("history", history)
        .add("current", current, required=True)
    )
    plan = prompt.fit()
    expected: list[tuple[str, int, int, str, Any]] = []
    for section, a, b, reason in plan.dropped.runs():
        for i in range(a, b):
            if section == "reasoning":  # counted over the prompt's message sections
                text = msgs[i]["reasoning_content"]
                expected.append((section, i, counter.text(text), reason, text))
            else:
                item = _without_reasoning(history[i])
                expected.append((section, i, counter.message(item), reason, item))
    assert _records(plan) == expected
    _check_dict(plan)

    conv = tokenflex.Conversation(msgs, model=MODEL, cache_stable=False)
    plan = conv.fit(max_tokens=200)
    expected = []
    for section, a, b, reason in plan.dropped.runs():
        for i in range(a, b):
            if section == "reasoning":
                text = msgs[i]["reasoning_content"]
                expected.append((section, i, counter.text(text), reason, text))
            else:
                item = _without_reasoning(msgs[i])
                expected.append((section, i, counter.message(item), reason, item))
    assert _records(plan) == expected
    _check_dict(plan)
