"""Prompt: the multi-section builder. The promise, each way to shrink, and bad input."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from llama_server import LlamaServer

import tokenflex
from tokenflex import (
    ContextOverflowError,
    InvalidInputError,
    InvalidMessagesError,
    Prompt,
    count_messages,
    get_model,
)
from tokenflex.models.gguf import model_from_gguf
from tokenflex.prompt import segments

GPT4O = get_model("gpt-4o")


def small(window: int) -> tokenflex.Model:
    return GPT4O.replace(name=f"gpt-4o-{window}", context_window=window)


def chat(n: int, words: int = 8) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        out.append({"role": "user", "content": f"question {i} " + "word " * words})
        out.append({"role": "assistant", "content": f"answer {i} " + "word " * (2 * words)})
    return out


TEXT = " ".join(f"Sentence {i} is about topic {i % 7}." for i in range(300))
QUESTION = [{"role": "user", "content": "What does the document say about topic 3?"}]


def test_docstring_example() -> None:
    p = Prompt("gpt-4o", max_tokens=500)
    p.add("system", "You are a concise assistant.", required=True)
    p.add("memories", ["Likes tea.", "Lives in Lyon."], shrink="drop_lowest", scores=[0.2, 0.9])
    p.add("current", [{"role": "user", "content": "Where do I live?"}], required=True)
    plan = p.fit()
    assert [m["role"] for m in plan.messages] == ["system", "system", "user"]
    assert plan.messages[1]["content"] == "Likes tea.\n\nLives in Lyon."
    assert plan.input_tokens == count_messages(plan.messages, model="gpt-4o")
    assert plan.max_tokens == 500 and len(plan.dropped) == 0


def test_segments_join_back_and_cut_after_the_boundary() -> None:
    assert segments("One. Two! Three", "sentence") == ["One.", " Two!", " Three"]
    assert segments("a\n\nb\n\n\nc", "paragraph") == ["a", "\n\nb", "\n\n\nc"]
    assert segments("x\ny", "line") == ["x", "\ny"]
    assert segments("to be  or", "word") == ["to", " be", "  or"]
    assert segments("日本語。です。", "sentence") == ["日本語。", "です。"]
    for b in ("paragraph", "line", "sentence", "word"):
        assert "".join(segments(TEXT, b)) == TEXT  # type: ignore[arg-type]


def test_truncate_keeps_a_prefix_of_whole_sentences_and_says_so() -> None:
    p = Prompt(small(1200), max_tokens=300, min_output_tokens=100)
    p.add("system", "Answer from the document.", required=True)
    p.add("document", TEXT, shrink="truncate", boundary="sentence", role="user", header="Doc:")
    p.add("current", QUESTION, required=True)
    plan = p.fit()
    doc = plan.messages[1]["content"]
    assert doc.startswith("Doc:\n\nSentence 0 is about topic 0.")
    assert doc.endswith("\n[truncated]")
    body = doc[len("Doc:\n\n") : -len("\n[truncated]")]
    assert TEXT.startswith(body) and body.endswith(".")  # whole sentences, a prefix
    kept = len(segments(body, "sentence"))
    assert [r[:2] for r in plan.dropped.runs()] == [("document", kept)]
    assert plan.dropped.runs()[0][2] == len(segments(TEXT, "sentence"))
    # it used the room: one more sentence would not have fit
    assert plan.free_tokens < 30
    assert plan.input_tokens == count_messages(plan.messages, model=small(1200))


def test_drop_lowest_keeps_the_best_scores_in_input_order() -> None:
    memories = [f"memory {i}: " + "detail " * 70 for i in range(10)]
    scores = [0.1, 0.9, 0.3, 0.8, 0.2, 0.7, 0.4, 0.6, 0.5, 0.0]
    p = Prompt(small(900), max_tokens=300, min_output_tokens=100)
    p.add("memories", memories, shrink="drop_lowest", scores=scores, header="Memories:")
    p.add("current", QUESTION, required=True)
    plan = p.fit()
    content = plan.messages[0]["content"]
    kept = [i for i in range(10) if f"memory {i}:" in content]
    assert 0 < len(kept) < 10
    assert (
        sorted(kept, key=lambda i: -scores[i])
        == sorted(range(10), key=lambda i: -scores[i])[: len(kept)]
    )
    assert [content.index(f"memory {i}:") for i in kept] == sorted(
        content.index(f"memory {i}:") for i in kept
    )
    assert {d.index for d in plan.dropped} == set(range(10)) - set(kept)
    assert all(d.section == "memories" and d.item == memories[d.index] for d in plan.dropped)


def test_history_drops_oldest_keeps_tool_pairs_and_no_orphans(
    caplog: pytest.LogCaptureFixture,
) -> None:
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    history = [
        *chat(20),
        {"role": "user", "content": "run the tool"},
        call,
        {"role": "tool", "tool_call_id": "c1", "content": "result " * 20},
        *chat(3),
    ]
    for window in range(700, 1400, 37):
        p = Prompt(small(window), max_tokens=200, min_output_tokens=100)
        p.add("system", "sys", required=True)
        p.add("history", history, share=0.9)
        p.add("current", QUESTION, required=True)
        with caplog.at_level(logging.INFO, logger="tokenflex"):
            plan = p.fit()
        kept = plan.messages[1:-1]
        assert kept == history[len(history) - len(kept) :]  # newest, contiguous
        if kept:
            assert kept[0]["role"] == "user"  # never an orphan answer
        assert (call in kept) == (history[-7] in kept)  # the call and its result together
        dropped = sorted(d.index for d in plan.dropped)
        assert dropped == list(range(len(history) - len(kept)))
        assert plan.input_tokens == count_messages(plan.messages, model=small(window))
    assert any("dropped history" in r.getMessage() for r in caplog.records)


def test_priorities_and_caps() -> None:
    p = Prompt(small(2000), max_tokens=500, min_output_tokens=200)
    p.add("system", "sys", required=True)
    p.add("document", TEXT, shrink="truncate", cap=300, priority=1)
    p.add("history", chat(40), priority=2, share=0.5)
    p.add("current", QUESTION, required=True)
    plan = p.fit()
    assert plan.sections["document"] <= 300
    assert plan.sections["history"] > plan.sections["document"]  # higher priority filled first
    assert ("document", "cap") in {(d.section, d.reason) for d in plan.dropped}


def test_required_sections_that_do_not_fit_raise_with_the_numbers() -> None:
    p = Prompt(small(1000), max_tokens=400, min_output_tokens=400)
    p.add("system", "word " * 600, required=True)
    p.add("current", QUESTION, required=True)
    with pytest.raises(ContextOverflowError, match="over") as exc:
        p.fit()
    assert exc.value.context_window == 1000


def test_an_optional_text_section_whose_envelope_does_not_fit_is_left_out() -> None:
    p = Prompt(small(700), max_tokens=100, min_output_tokens=100)
    p.add("system", "word " * 470, required=True)
    p.add("notes", ["a note"], header="Notes " * 40)
    p.add("current", QUESTION, required=True)
    plan = p.fit()
    assert [m["role"] for m in plan.messages] == ["system", "user"]
    assert [(d.section, d.index) for d in plan.dropped] == [("notes", 0)]


def test_same_plan_as_fit_for_fits_own_layout() -> None:
    msgs = [{"role": "system", "content": "You are helpful."}, *chat(60), QUESTION[0]]
    for window, share in ((1500, 0.8), (3000, 1.0), (900, 0.5)):
        model = small(window)
        expected = tokenflex.fit(msgs, model=model, max_tokens=300, history_share=share, pin=0)
        p = Prompt(model, max_tokens=300)
        p.add("system", msgs[:1], required=True)
        p.add("history", msgs[1:-1], share=share)
        p.add("current", msgs[-1:], required=True)
        plan = p.fit()
        assert plan.messages == expected.messages
        assert (plan.input_tokens, plan.max_tokens) == (expected.input_tokens, expected.max_tokens)
        # indices are per section here, into the whole list in fit()
        shifted = [(s, a + 1, b + 1, r) for s, a, b, r in plan.dropped.runs()]
        assert shifted == expected.dropped.runs()


def test_deterministic() -> None:
    def build() -> Prompt:
        p = Prompt(small(1500), max_tokens=300)
        p.add("system", "sys", required=True)
        p.add("memories", [f"m{i} " * 9 for i in range(30)], scores=[i % 7 for i in range(30)])
        p.add("document", TEXT, shrink="truncate", boundary="word")
        p.add("history", chat(30))
        p.add("current", QUESTION, required=True)
        return p

    a, b = build().fit().to_dict(), build().fit().to_dict()
    a.pop("elapsed_ms")
    b.pop("elapsed_ms")
    assert a == b


@pytest.mark.parametrize(
    ("call", "match"),
    [
        pytest.param(lambda p: p.add("x", "a").add("x", "b"), "twice", id="duplicate-name"),
        pytest.param(
            lambda p: p.add("x", "a", required=True, shrink="truncate"), "never shrunk", id="req"
        ),
        pytest.param(lambda p: p.add("x", ["a", "b"], shrink="truncate"), "one string", id="tl"),
        pytest.param(
            lambda p: p.add("x", [{"role": "user", "content": "a"}], shrink="truncate"),
            "not messages",
            id="truncate-messages",
        ),
        pytest.param(lambda p: p.add("x", ["a"], scores=[1, 2]), "one per item", id="scores"),
        pytest.param(lambda p: p.add("x", ["a", "b"], scores=[None, 1]), "None", id="none"),
        pytest.param(lambda p: p.add("x", ["a"], scores=[float("nan")]), "finite", id="nan"),
        pytest.param(lambda p: p.add("x", ["a"], scores=[10**400]), "finite", id="huge-int"),
        pytest.param(lambda p: p.add("x", ["a"], scores=5), "list of 1", id="scores-int"),
        pytest.param(lambda p: p.add("x", "a b", shrink="truncate", boundary="page"), "boundary"),
        pytest.param(lambda p: p.add("x", 42), "content must be", id="content-type"),
        pytest.param(lambda p: p.add("x", ["a", {"role": "user"}]), "content must be", id="mix"),
    ],
)
def test_bad_input(call: Any, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        call(Prompt("gpt-4o"))


def test_bad_messages_name_the_section_and_index() -> None:
    """Checked when added, kept or not (counting is lazy and would miss a dropped one)."""
    p = Prompt("gpt-4o")
    with pytest.raises(InvalidMessagesError, match=r"Section 'history': .*messages\[1\].*wizard"):
        p.add("history", [{"role": "user", "content": "hi"}, {"role": "wizard", "content": "x"}])
    assert p.sections == []


def test_bad_options_are_fits_errors() -> None:
    with pytest.raises(InvalidInputError, match=r"policy"):
        Prompt("gpt-4o", policy="greedy")  # type: ignore[arg-type]
    for bad in ("100", 1.5, True, 0):
        with pytest.raises(InvalidInputError, match=r"max_tokens"):
            Prompt("gpt-4o", max_tokens=bad)  # type: ignore[arg-type]


# ------------------------------------------------------------------ the promise, as a property

SECTION = st.one_of(
    st.tuples(st.just("messages"), st.integers(0, 60), st.integers(1, 60)),
    st.tuples(st.just("texts"), st.integers(0, 30), st.integers(1, 80)),
    st.tuples(st.just("truncate"), st.integers(0, 600), st.sampled_from(["sentence", "word"])),
)
REQUIRED = st.sampled_from([False, False, False, True])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sections=st.lists(st.tuples(SECTION, REQUIRED, st.integers(0, 3)), min_size=1, max_size=5),
    window=st.integers(300, 3000),
    max_tokens=st.integers(1, 2000),
    floor=st.integers(0, 800),
    policy=st.sampled_from(["reserve", "flex"]),
    tools=st.booleans(),
)
def test_promise_property(
    sections: list[Any], window: int, max_tokens: int, floor: int, policy: str, tools: bool
) -> None:
    model = small(window)
    schema = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    p = Prompt(
        model,
        max_tokens=max_tokens,
        min_output_tokens=floor,
        policy=policy,  # type: ignore[arg-type]
        tools=schema if tools else None,
    )
    given_items: dict[str, list[Any]] = {}
    required_msgs: list[Any] = []
    for n, ((kind, size, arg), required, priority) in enumerate(sections):
        name = f"s{n}"
        if kind == "messages":
            content: Any = chat(size, arg)[:size]
            p.add(name, content, required=required, priority=priority)
            given_items[name] = content
        elif kind == "texts":
            content = [f"item {i} " + "x " * arg for i in range(size)]
            p.add(name, content, required=required, priority=priority, header="H")
            given_items[name] = content
        else:
            content = " ".join(f"Sentence {i}." for i in range(size))
            p.add(
                name,
                content,
                required=required,
                priority=priority,
                shrink=None if required else "truncate",
                boundary=arg,
            )
            given_items[name] = [content] if required else segments(content, arg)
        if required and given_items[name] and kind == "messages":
            required_msgs += content
    try:
        plan = p.fit()
    except ContextOverflowError as exc:
        # only when the required sections and the floor cannot fit
        assert exc.required_tokens + exc.max_tokens + exc.safety_margin > window
        event("overflow")
        return
    event("dropped something" if plan.dropped else "kept everything")
    assert plan.input_tokens == count_messages(
        plan.messages, model=model, tools=schema if tools else None
    )
    assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= window
    assert plan.max_tokens >= min(floor, max_tokens)
    assert plan.max_tokens <= max_tokens
    for m in required_msgs:
        assert m in plan.messages
    for n, ((kind, _size, _arg), required, _prio) in enumerate(sections):
        name = f"s{n}"
        dropped = {d.index for d in plan.dropped if d.section == name}
        if required:
            assert not dropped
        elif kind == "messages":
            kept = [
                i for i, m in enumerate(given_items[name]) if any(m is x for x in plan.messages)
            ]
            assert sorted(dropped | set(kept)) == list(range(len(given_items[name])))
            assert not dropped & set(kept)
        else:
            assert dropped <= set(range(len(given_items[name])))


# ------------------------------------------------------------------ against a real server


@pytest.mark.server
def test_a_fitted_prompt_is_accepted_by_the_real_server(llama_server: LlamaServer) -> None:
    model = model_from_gguf(llama_server.model_path, context_window=llama_server.n_ctx)
    long_doc = " ".join(
        f"Line {i}: the warehouse in district {i % 9} ships parcels." for i in range(600)
    )
    history = chat(80, 12)
    too_big = [
        {"role": "system", "content": "Answer from the document."},
        {"role": "user", "content": long_doc},
        *history,
        QUESTION[0],
    ]
    r = httpx.post(
        f"{llama_server.base_url}/chat/completions",
        json={"messages": too_big, "max_tokens": 8},
        timeout=120,
    )
    assert r.status_code == 400 and "context" in r.text  # sent as is, it is refused

    p = Prompt(model, max_tokens=64, min_output_tokens=32, safety_margin=16)
    p.add("system", "Answer from the document.", required=True)
    p.add("document", long_doc, shrink="truncate", boundary="sentence", role="user", priority=2)
    p.add("history", history, share=0.5, priority=1)
    p.add("current", QUESTION, required=True)
    plan = p.fit()
    assert plan.dropped and plan.messages[1]["content"].endswith("[truncated]")
    r = httpx.post(
        f"{llama_server.base_url}/chat/completions",
        json={"messages": plan.messages, "max_tokens": plan.max_tokens, "temperature": 0},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    assert usage["prompt_tokens"] <= plan.input_tokens  # our count is never under
    assert usage["prompt_tokens"] + plan.max_tokens <= llama_server.n_ctx


# ------------------------------------------------------------------ reasoning_content


def thinking_chat(turns: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """User turns and answers; ``(words, thought)``: an answer's size and the words of its
    ``reasoning_content`` (0: none, -1: an empty one)."""
    out: list[dict[str, Any]] = []
    for t, (words, thought) in enumerate(turns):
        out.append({"role": "user", "content": f"question {t} " + "ask " * words})
        answer: dict[str, Any] = {"role": "assistant", "content": f"answer {t} " + "say " * words}
        if thought:
            answer["reasoning_content"] = "" if thought < 0 else f"think {t} " + "hm " * thought
        out.append(answer)
    return out


def bare(m: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in m.items() if k != "reasoning_content"}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sections=st.lists(
        st.tuples(
            st.lists(st.tuples(st.integers(1, 40), st.integers(-1, 80)), min_size=1, max_size=12),
            st.sampled_from(["drop_oldest", "summarize", "required"]),
        ),
        min_size=1,
        max_size=3,
    ),
    window=st.integers(400, 4000),
    max_tokens=st.integers(50, 1000),
    keep=st.booleans(),
    cache_stable=st.booleans(),
)
def test_reasoning_property(
    sections: list[Any], window: int, max_tokens: int, keep: bool, cache_stable: bool
) -> None:
    """Prompt's message sections take reasoning_content out as fit() does: never sent
    unless keep_reasoning=True, each one listed (index over the message sections in
    order, the text, its tokens), every message sent or listed, and the promise holds."""
    model = small(window)
    p = Prompt(
        model,
        max_tokens=max_tokens,
        min_output_tokens=20,
        keep_reasoning=keep,
        cache_stable=cache_stable,
    )
    p.add("system", "You answer briefly.", required=True)
    given_msgs: list[tuple[str, int, dict[str, Any]]] = []  # (section, index in it, message)
    summarized = False
    for n, (turns, how) in enumerate(sections):
        msgs = thinking_chat(turns)
        if how == "summarize" and summarized:
            how = "drop_oldest"  # one summarized section per prompt
        summarized = summarized or how == "summarize"
        if how == "required":
            p.add(f"s{n}", msgs, required=True)
        else:
            p.add(f"s{n}", msgs, shrink=how)
        given_msgs += [(f"s{n}", i, m) for i, m in enumerate(msgs)]
    snapshot = [dict(m) for _, _, m in given_msgs]

    seen: list[Any] = []  # what the summarizer was given (its failures are caught)

    class Summarizer:
        def summarize(self, messages: Any, *, previous_summary: Any, max_tokens: int) -> str:
            seen.extend(messages)
            return "They talked."

    try:
        plan = p.fit(summarizer=Summarizer(), state=tokenflex.state.MemoryStore())
    except ContextOverflowError as exc:
        assert exc.required_tokens + exc.max_tokens + exc.safety_margin > window
        event("overflow")
        return
    assert [m for _, _, m in given_msgs] == snapshot  # the caller's dicts untouched
    assert keep or all("reasoning_content" not in m for m in seen)
    if seen:
        event("summarized")
    assert plan.input_tokens == count_messages(plan.messages, model=model)
    assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= window
    assert plan.max_tokens >= 20
    sent_reasoning = [m for m in plan.messages if "reasoning_content" in m]
    listed = {d.index: d for d in plan.dropped if d.section == "reasoning"}
    if keep:
        assert not listed
    else:
        assert not sent_reasoning
        expected = {
            k: m["reasoning_content"]
            for k, (_, _, m) in enumerate(given_msgs)
            if m.get("reasoning_content")
        }
        assert {k: d.item for k, d in listed.items()} == expected
        for k, d in listed.items():
            assert d.reason == "reasoning"
            assert d.tokens == tokenflex.count_tokens(expected[k], model=model)
        event("reasoning taken out" if listed else "no reasoning")
    dropped = {(d.section, d.index) for d in plan.dropped}
    for name, i, m in given_msgs:  # every message: sent (as fit() sends it) or listed
        form = m if keep else bare(m)
        if not any(x == form for x in plan.messages):
            assert (name, i) in dropped, (name, i)


def test_reasoning_taken_out_is_logged_and_kept_on_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    history = thinking_chat([(5, 10), (5, 0), (5, 12)])
    current = [{"role": "user", "content": "and now?", "reasoning_content": "odd but mine"}]
    p = Prompt("gpt-4o", max_tokens=100)
    p.add("history", history).add("current", current, required=True)
    with caplog.at_level(logging.INFO, logger="tokenflex"):
        plan = p.fit()
    assert all("reasoning_content" not in m for m in plan.messages)
    assert plan.messages == [bare(m) for m in history + current]
    assert [(d.section, d.index, d.reason) for d in plan.dropped] == [
        ("reasoning", 1, "reasoning"),
        ("reasoning", 5, "reasoning"),
        ("reasoning", 6, "reasoning"),  # the current section's message: index 6 of all
    ]
    assert [d.item for d in plan.dropped][2] == "odd but mine"
    assert "dropped reasoning[5:6] (1 items, reason=reasoning)" in caplog.text
    assert "reasoning_content" in history[1]  # the caller's message is not modified
    kept = Prompt("gpt-4o", max_tokens=100, keep_reasoning=True).add("history", history).fit()
    assert kept.messages == history and not kept.dropped
    with pytest.raises(InvalidInputError, match="keep_reasoning"):
        Prompt("gpt-4o", keep_reasoning="yes")  # type: ignore[arg-type]
