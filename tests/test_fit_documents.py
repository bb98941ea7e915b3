"""Documents as a section of fit() (seed 003 + ADR-0006), savings, fallback via choose_model."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenflex
from tokenflex import Chunk, ContextOverflowError, count_messages, fit


def _chunks(n: int, words: int = 60) -> list[Chunk]:
    return [
        Chunk(
            text=f"Passage {i}: " + "retrieved evidence about the rollout " * (words // 5),
            source=f"doc-{i}",
            identifier=f"https://example.com/{i}",
            score=1.0 - i / (2 * n),
            id=f"c{i}",
        )
        for i in range(n)
    ]


def _chat(turns: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "Answer from the sources."}]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"question {i} " * 20})
        msgs.append({"role": "assistant", "content": f"answer {i} " * 20})
    msgs.append({"role": "user", "content": "What changed in the rollout?"})
    return msgs


def test_documents_are_packed_into_min_cap_and_left_and_counted() -> None:
    msgs = _chat(5)
    plan = fit(msgs, model="gpt-4", max_tokens=1000, documents=_chunks(40), documents_cap=2000)
    doc_msg = plan.messages[1]
    assert doc_msg["role"] == "system" and "Passage 0" in doc_msg["content"]
    assert plan.sections["documents"] <= 2000
    assert plan.input_tokens == count_messages(plan.messages, model="gpt-4")
    assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= 8192
    dropped = [d for d in plan.dropped if d.section == "documents"]
    assert dropped and all(d.reason == "budget" and d.tokens > 0 for d in dropped)
    assert {d.index for d in dropped} == set(range(40)) - {
        i for i in range(40) if f"Passage {i}:" in doc_msg["content"]
    }
    assert "omitted to fit the budget" in doc_msg["content"]
    assert plan.extras["documents"]["dropped"] == len(dropped)


def test_documents_get_only_what_is_left_after_required_input() -> None:
    big_system = {"role": "system", "content": "rule " * 6000}
    plan = fit(
        [big_system, {"role": "user", "content": "q"}],
        model="gpt-4",
        max_tokens=1000,
        documents=_chunks(10),
        documents_cap=40_000,
    )
    left = 8192 - 100 - 1000 - plan.sections["system"] - plan.sections["current"]
    assert plan.sections.get("documents", 0) <= left
    assert plan.input_tokens + plan.max_tokens + 100 <= 8192


def test_no_room_for_documents_lists_every_chunk_as_dropped() -> None:
    big_system = {"role": "system", "content": "rule " * 7000}
    plan = fit(
        [big_system, {"role": "user", "content": "q"}],
        model="gpt-4",
        max_tokens=800,
        documents=_chunks(5),
    )
    assert len([d for d in plan.dropped if d.section == "documents"]) == 5
    assert all(m["content"] != "" for m in plan.messages)


def test_savings_compare_with_sending_everything() -> None:
    msgs = _chat(200)
    plan = fit(msgs, model="gpt-4", max_tokens=1000)
    assert plan.full_input_tokens == count_messages(msgs, model="gpt-4")
    s = plan.savings
    assert s.saved_tokens == plan.full_input_tokens - plan.input_tokens > 0
    assert s.saved_usd is not None and s.saved_usd > 0
    d = plan.to_dict()
    assert d["savings"]["saved_tokens"] == s.saved_tokens


def test_fallback_goes_through_choose_model_and_says_why() -> None:
    msgs = [{"role": "system", "content": "word " * 9000}, {"role": "user", "content": "hi"}]
    plan = fit(msgs, model="gpt-4", max_tokens=1000, fallback_models=["gpt-4-turbo", "gpt-4o"])
    assert plan.model.name == "gpt-4o"  # the cheaper of the two that fit
    assert plan.fallback_from == "gpt-4"
    huge = [{"role": "system", "content": "word " * 20_000}, {"role": "user", "content": "hi"}]
    with pytest.raises(ContextOverflowError, match=r"gpt-3\.5-turbo"):
        fit(huge, model="gpt-4", max_tokens=1000, fallback_models=["gpt-3.5-turbo"])


def test_documents_with_the_estimator_model() -> None:
    plan = fit(_chat(3), model="claude-3-5-sonnet", max_tokens=1000, documents=_chunks(5))
    assert not plan.exact
    assert plan.input_tokens == tokenflex.count_messages(plan.messages, model="claude-3-5-sonnet")


def test_fallback_input_share_is_seed003s_fallback_status() -> None:
    counter = tokenflex.get_counter("gpt-4")
    words = 7450
    msgs = [{"role": "system", "content": "word " * words}, {"role": "user", "content": "hi"}]
    required = counter.count(msgs)
    assert 0.9 * 8192 < required < 8192 - 600  # fits gpt-4, but above 90% of its window
    plain = fit(msgs, model="gpt-4", max_tokens=500, fallback_models=["gpt-4o"])
    assert plain.model.name == "gpt-4"
    switched = fit(
        msgs, model="gpt-4", max_tokens=500, fallback_models=["gpt-4o"], fallback_input_share=0.9
    )
    assert switched.model.name == "gpt-4o" and switched.fallback_from == "gpt-4"
    assert any("90%" in w or "0.9" in w for w in switched.warnings)
    kept = fit(
        msgs,
        model="gpt-4",
        max_tokens=500,
        fallback_models=["gpt-3.5-turbo-0613"],
        fallback_input_share=0.3,
    )
    assert kept.model.name in ("gpt-4", "gpt-3.5-turbo-0613")
    with pytest.raises(tokenflex.InvalidInputError):
        fit(msgs, model="gpt-4", fallback_models=["gpt-4o"], fallback_input_share=1.5)


@settings(max_examples=60, deadline=None)
@given(
    n_chunks=st.integers(0, 12),
    words=st.integers(5, 400),
    turns=st.integers(0, 40),
    window=st.integers(1500, 9000),
    cap=st.one_of(st.none(), st.integers(100, 6000)),
    policy=st.sampled_from(["skip", "stop", "optimal"]),
)
def test_promise_with_documents_property(
    n_chunks: int, words: int, turns: int, window: int, cap: int | None, policy: str
) -> None:
    model = tokenflex.get_model("gpt-4o").replace(
        name=f"gpt-4o-w{window}", context_window=window, max_output_tokens=None
    )
    msgs = _chat(turns)
    chunks = _chunks(n_chunks, words)
    try:
        plan = fit(
            msgs,
            model=model,
            max_tokens=300,
            documents=chunks,
            documents_cap=cap,
            documents_policy=policy,
        )
    except ContextOverflowError:
        return
    assert plan.input_tokens == count_messages(plan.messages, model=model)
    assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= window
    if cap is not None:
        assert plan.sections.get("documents", 0) <= cap
    docs_dropped = {d.index for d in plan.dropped if d.section == "documents"}
    rendered = plan.messages[1]["content"] if plan.sections.get("documents") else ""
    for i, c in enumerate(chunks):
        assert (c.text in rendered) != (i in docs_dropped)  # whole, or reported dropped
