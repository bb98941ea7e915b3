"""Summarizers: the offline extractive one, the chat one (mocked faults and the real
SmolLM2 server), spans summarized in rolling pieces, and the summary message format."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_server import LlamaServer

from tokenflex.errors import SummarizerError
from tokenflex.summarize import (
    DEFAULT_SYSTEM_PROMPT,
    SUMMARY_PREFIX,
    ChatSummarizer,
    ExtractiveSummarizer,
    Summarizer,
    asummarize_span,
    is_summary_message,
    render_transcript,
    summarize_span,
    summary_message,
)
from tokenflex.summarize.sentences import trim_to_tokens
from tokenflex.tokenizers import get_tokenizer

TRIP = [
    {"role": "user", "content": "Hi, I'm Maria. I'm planning a trip to Lisbon in May."},
    {"role": "assistant", "content": "Lovely! How many days will you stay?"},
    {"role": "user", "content": "Five days. Our budget is 2000 euros and we want to see Sintra."},
    {
        "role": "assistant",
        "content": "Five days on 2000 euros works. Plan one day trip to Sintra by train.",
    },
]


def o200k(text: str) -> int:
    return get_tokenizer("o200k_base").count(text)


# -- summary messages -----------------------------------------------------------------------


def test_summary_message_round_trip() -> None:
    msg = summary_message("  We chose Postgres.  ")
    assert msg == {"role": "system", "content": SUMMARY_PREFIX + "We chose Postgres."}
    assert SUMMARY_PREFIX == "Previous conversation summary: "
    assert is_summary_message(msg)


@pytest.mark.parametrize(
    "msg",
    [
        pytest.param({"role": "user", "content": SUMMARY_PREFIX + "x"}, id="user-role"),
        pytest.param({"role": "system", "content": "You are helpful."}, id="plain-system"),
        pytest.param({"role": "system", "content": [{"type": "text", "text": "x"}]}, id="parts"),
        pytest.param({"role": "system"}, id="no-content"),
        pytest.param("Previous conversation summary: x", id="not-a-dict"),
    ],
)
def test_is_summary_message_rejects(msg: Any) -> None:
    assert not is_summary_message(msg)


def test_transcript_spells_out_tool_calls_parts_and_summaries() -> None:
    text = render_transcript(
        [
            summary_message("Earlier: chose blue."),
            {"role": "user", "content": [{"type": "text", "text": "Look"}, {"type": "image_url"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"c":"Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "name": "weather", "content": "12 C"},
        ]
    )
    assert text.split("\n\n") == [
        "Earlier summary: Earlier: chose blue.",
        "User: Look\n[image]",
        'Assistant: [calls weather({"c":"Oslo"})]',
        "Tool result (weather): 12 C",
    ]


# -- trimming ----------------------------------------------------------------------------------


def test_trim_keeps_whole_sentences() -> None:
    text = "First point. Second point is longer than the first. Third."
    assert trim_to_tokens(text, 100, o200k) == text
    cut = trim_to_tokens(text, o200k("First point. Second point is longer"), o200k)
    assert cut == "First point."


def test_trim_without_a_fitting_sentence_cuts_at_a_word() -> None:
    cut = trim_to_tokens("one two three four five six seven eight", 4, o200k)
    assert cut.endswith(" …") and o200k(cut) <= 4
    assert cut.startswith("one")


@given(st.text(min_size=0, max_size=400), st.integers(min_value=1, max_value=60))
@settings(max_examples=150, deadline=None)
def test_trim_never_exceeds_the_budget(text: str, budget: int) -> None:
    out = trim_to_tokens(text, budget, o200k)
    assert o200k(out) <= budget
    if out != text.strip():  # trimmed only when the text does not fit
        assert o200k(text.strip()) > budget


# -- the extractive summarizer ----------------------------------------------------------------


def test_extractive_is_a_summarizer_and_deterministic() -> None:
    s = ExtractiveSummarizer("o200k_base")
    assert isinstance(s, Summarizer)
    a = s.summarize(TRIP, previous_summary=None, max_tokens=60)
    b = ExtractiveSummarizer("o200k_base").summarize(TRIP, previous_summary=None, max_tokens=60)
    assert a == b and a
    assert o200k(a) <= 60


def test_extractive_keeps_first_user_sentences_then_facts() -> None:
    s = ExtractiveSummarizer("o200k_base")
    tight = s.summarize(TRIP, previous_summary=None, max_tokens=20)
    assert tight.splitlines() == ["User: Hi, I'm Maria.", "User: Five days."]
    roomy = s.summarize(TRIP, previous_summary=None, max_tokens=200)
    assert "User: Our budget is 2000 euros and we want to see Sintra." in roomy.splitlines()
    assert "Assistant: Plan one day trip to Sintra by train." in roomy.splitlines()
    # in conversation order
    lines = roomy.splitlines()
    assert lines.index("User: Hi, I'm Maria.") < lines.index("User: Five days.")


def test_extractive_rolls_the_previous_summary_first() -> None:
    s = ExtractiveSummarizer("o200k_base")
    out = s.summarize(TRIP, previous_summary="Maria likes trains. She hates flying.", max_tokens=30)
    assert out.splitlines()[:2] == ["Maria likes trains.", "She hates flying."]
    long_previous = "word " * 200
    out = s.summarize([], previous_summary=long_previous, max_tokens=10)
    assert 0 < o200k(out) <= 10


def test_extractive_skips_system_and_code() -> None:
    msgs = [
        {"role": "system", "content": "You are a bot."},
        {"role": "user", "content": "Fix this:\n```python\nx = 1/0\n```\nIt must not crash."},
    ]
    out = ExtractiveSummarizer("o200k_base").summarize(msgs, previous_summary=None, max_tokens=50)
    assert "You are a bot" not in out and "1/0" not in out
    assert "It must not crash." in out


_messages = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "assistant", "tool", "system"]),
            "content": st.text(min_size=0, max_size=200),
        }
    ),
    max_size=12,
)


@given(_messages, st.one_of(st.none(), st.text(max_size=200)), st.integers(1, 120))
@settings(max_examples=100, deadline=None)
def test_extractive_property_within_budget_and_extractive(
    msgs: list[dict[str, Any]], previous: str | None, budget: int
) -> None:
    out = ExtractiveSummarizer("o200k_base").summarize(
        msgs, previous_summary=previous, max_tokens=budget
    )
    assert o200k(out) <= budget
    words = " ".join([previous or "", *(m["content"] for m in msgs)]).split()
    for word in out.replace("…", " ").split():
        # every word comes from the input (or is a role label we add)
        assert (
            any(word in w or w in word for w in words)
            or word.rstrip(":") in ("User", "Assistant", "Tool", "result")
            or word in ("[code]",)
        )


# -- spans in pieces --------------------------------------------------------------------------


class Recording:
    """A summarizer that records its calls and returns a fixed-shape text."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[dict[str, Any]], str | None, int]] = []

    def summarize(
        self, messages: Sequence[Any], *, previous_summary: str | None, max_tokens: int
    ) -> str:
        self.calls.append(([dict(m) for m in messages], previous_summary, max_tokens))
        return f"Summary {len(self.calls)} of {len(messages)} messages."

    async def asummarize(
        self, messages: Sequence[Any], *, previous_summary: str | None, max_tokens: int
    ) -> str:
        return self.summarize(messages, previous_summary=previous_summary, max_tokens=max_tokens)


def _long_chat(n: int) -> list[dict[str, Any]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"Message {i}. " + "blah " * 30}
        for i in range(n)
    ]


def test_span_without_a_window_is_one_call() -> None:
    rec = Recording()
    out = summarize_span(rec, _long_chat(10), previous_summary="Before.", max_tokens=50)
    assert out == "Summary 1 of 10 messages."
    assert len(rec.calls) == 1 and rec.calls[0][1] == "Before." and rec.calls[0][2] == 50


def test_span_in_rolling_pieces_covers_everything_in_order() -> None:
    rec = Recording()
    span = _long_chat(12)
    out = summarize_span(
        rec,
        span,
        previous_summary="Start.",
        max_tokens=40,
        window_tokens=200,
        counter="o200k_base",
        check_facts=False,  # the summarizer's own text, to follow the roll
    )
    assert len(rec.calls) > 2
    assert out == f"Summary {len(rec.calls)} of {len(rec.calls[-1][0])} messages."
    # rolling: each call gets the previous call's output
    assert rec.calls[0][1] == "Start."
    for k in range(1, len(rec.calls)):
        assert rec.calls[k][1] == f"Summary {k} of {len(rec.calls[k - 1][0])} messages."
    # every message once, in order
    assert [m for piece, _, _ in rec.calls for m in piece] == span
    for piece, _, _ in rec.calls:
        assert o200k(render_transcript(piece)) <= 200 - 40


def test_a_message_larger_than_the_window_is_split() -> None:
    rec = Recording()
    huge = {"role": "user", "content": " ".join(f"Sentence number {i}." for i in range(300))}
    summarize_span(rec, [huge], max_tokens=30, window_tokens=230, counter="o200k_base")
    assert len(rec.calls) > 3
    parts = [piece[0]["content"] for piece, _, _ in rec.calls]
    assert parts[0].startswith(f"(part 1/{len(parts)}) Sentence number 0.")
    assert all(p["role"] == "user" for piece, _, _ in rec.calls for p in piece)
    assert all(o200k(render_transcript(piece)) <= 200 for piece, _, _ in rec.calls)
    text = " ".join(p.split(") ", 1)[1] for p in parts)
    assert text == huge["content"]


def test_span_result_is_trimmed_to_the_budget() -> None:
    class Verbose(Recording):
        def summarize(self, messages: Sequence[Any], **kw: Any) -> str:
            return "A fact. " * 100

    out = summarize_span(Verbose(), TRIP, max_tokens=12, counter="o200k_base", check_facts=False)
    assert 0 < o200k(out) <= 12 and out.endswith(".")
    checked = summarize_span(Verbose(), TRIP, max_tokens=12, counter="o200k_base")
    assert 0 < o200k(checked) <= 12


def test_extractive_in_a_span_counts_with_the_callers_tokenizer() -> None:
    def span(**kw: Any) -> str:
        return summarize_span(ExtractiveSummarizer(), TRIP, max_tokens=25, check_facts=False, **kw)

    out = span(counter="o200k_base")
    assert o200k(out) <= 25
    assert len(out.splitlines()) > 2  # the estimator alone would keep fewer lines
    assert span() != out


def test_window_too_small_for_the_summary_raises() -> None:
    with pytest.raises(SummarizerError, match="leaves"):
        summarize_span(Recording(), TRIP, max_tokens=100, window_tokens=120, counter="o200k_base")


def test_empty_span_without_summary_raises() -> None:
    with pytest.raises(SummarizerError, match="Nothing to summarize"):
        summarize_span(Recording(), [], max_tokens=10)
    assert summarize_span(Recording(), [], previous_summary="Kept.", max_tokens=10) == "Kept."


def test_chat_summarizer_window_drives_the_pieces() -> None:
    s = ChatSummarizer("http://127.0.0.1:9/v1", "m", context_window=600)
    w = s.window_tokens(100, o200k)
    assert w is not None and 0 < w < 500
    assert ChatSummarizer("http://x/v1", "m").window_tokens(100, o200k) is None


async def test_async_span_matches_sync() -> None:
    span = _long_chat(9)
    a, b = Recording(), Recording()
    kw: dict[str, Any] = {"max_tokens": 40, "window_tokens": 220, "counter": "o200k_base"}
    assert await asummarize_span(a, span, **kw) == summarize_span(b, span, **kw)
    assert a.calls == b.calls


# -- the chat summarizer, faults provoked with a mock transport -----------------------------


def _completion(content: Any, finish: str = "stop") -> dict[str, Any]:
    return {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish,
            }
        ]
    }


def _mock(status: int = 200, body: Any = None, *, seen: list[httpx.Request] | None = None) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        if isinstance(body, Exception):
            raise body
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    return httpx.MockTransport(handler)


def _chat(transport: Any, **kw: Any) -> ChatSummarizer:
    return ChatSummarizer(
        "http://llm.test/v1", "tiny", transport=transport, async_transport=transport, **kw
    )


def test_chat_request_shape() -> None:
    seen: list[httpx.Request] = []
    s = _chat(_mock(body=_completion("Maria plans Lisbon."), seen=seen), api_key="sk-1")
    assert s.summarize(TRIP, previous_summary="Earlier.", max_tokens=80) == "Maria plans Lisbon."
    (req,) = seen
    assert str(req.url) == "http://llm.test/v1/chat/completions"
    assert req.headers["authorization"] == "Bearer sk-1"
    body = json.loads(req.content)
    assert body["model"] == "tiny" and body["temperature"] == 0.1
    assert body["max_tokens"] == 80 and body["stream"] is False
    assert body["messages"][0] == {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}
    user = body["messages"][1]["content"]
    assert user.startswith("Summary of the conversation so far:\nEarlier.")
    assert "User: Hi, I'm Maria." in user and "at most 48 words" in user


@pytest.mark.parametrize(
    ("status", "body", "match"),
    [
        pytest.param(500, {"error": {"message": "boom"}}, "HTTP 500", id="http-500"),
        pytest.param(503, "Service Unavailable", "HTTP 503", id="http-503-text"),
        pytest.param(200, "not json", "without a chat completion", id="not-json"),
        pytest.param(200, {"choices": []}, "without a chat completion", id="no-choices"),
        pytest.param(200, _completion(""), "empty", id="empty"),
        pytest.param(200, _completion("  \n\t "), "empty", id="whitespace"),
        pytest.param(200, _completion(None), "empty", id="null-content"),
        pytest.param(200, _completion("Summary:   "), "empty", id="only-a-label"),
        pytest.param(
            200, _completion("Error: upstream timed out"), "error message", id="error-colon"
        ),
        pytest.param(
            200, _completion('{"error": "rate limited"}'), "error message", id="json-error"
        ),
        pytest.param(
            200, _completion("<!DOCTYPE html><html>502</html>"), "error message", id="html"
        ),
        pytest.param(200, _completion("Internal Server Error"), "error message", id="ise"),
        pytest.param(
            200, _completion("Traceback (most recent call last):\n  File"), "error", id="traceback"
        ),
        pytest.param(
            200,
            _completion("This model's maximum context length is 2048 tokens. However, ..."),
            "error message",
            id="context-length",
        ),
        pytest.param(200, _completion("null"), "error message", id="null-text"),
    ],
)
async def test_chat_faults_raise_and_never_return_error_text(
    status: int, body: Any, match: str
) -> None:
    s = _chat(_mock(status, body))
    with pytest.raises(SummarizerError, match=match):
        s.summarize(TRIP, previous_summary=None, max_tokens=50)
    with pytest.raises(SummarizerError, match=match):
        await s.asummarize(TRIP, previous_summary=None, max_tokens=50)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        pytest.param(401, "Incorrect API key provided: my-summary-key-42", id="http-401"),
        pytest.param(200, {"echo": "key my-summary-key-42"}, id="not-a-completion"),
        pytest.param(200, _completion("Error: bad key my-summary-key-42"), id="error-text"),
    ],
)
def test_a_server_echoing_the_key_never_puts_it_in_the_error(status: int, body: Any) -> None:
    # the message reaches plan warnings and logs (also outside the proxy): no credentials
    s = ChatSummarizer(
        "http://user:hunter22@llm.test/v1",
        "tiny",
        api_key="my-summary-key-42",
        transport=_mock(status, body),
    )
    with pytest.raises(SummarizerError) as err:
        s.summarize(TRIP, previous_summary=None, max_tokens=50)
    assert "my-summary-key-42" not in str(err.value)
    assert "hunter22" not in str(err.value)
    assert "***" in str(err.value)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param(
            "The build error was fixed.", "The build error was fixed.", id="mentions-error"
        ),
        pytest.param("Errors in the CSV were found.", "Errors in the CSV were found.", id="errors"),
        pytest.param("Summary: Maria goes to Lisbon.", "Maria goes to Lisbon.", id="label"),
        pytest.param("**Summary:** Maria goes.", "Maria goes.", id="bold-label"),
        pytest.param(SUMMARY_PREFIX + "Maria goes.", "Maria goes.", id="echoed-prefix"),
    ],
)
def test_chat_output_cleanup(content: str, expected: str) -> None:
    assert _chat(_mock(body=_completion(content))).summarize(TRIP, max_tokens=50) == expected


def test_chat_output_cut_by_max_tokens_keeps_whole_sentences() -> None:
    s = _chat(_mock(body=_completion("Maria goes to Lisbon. She has 2000 eu", finish="length")))
    assert s.summarize(TRIP, max_tokens=12) == "Maria goes to Lisbon."


async def test_chat_timeout_raises() -> None:
    s = _chat(_mock(body=httpx.ReadTimeout("slow")), timeout=0.5)
    with pytest.raises(SummarizerError, match=r"timed out after 0\.5 s"):
        s.summarize(TRIP, max_tokens=10)
    with pytest.raises(SummarizerError, match="timed out"):
        await s.asummarize(TRIP, max_tokens=10)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A listening socket that never answers: requests hang until the client times out."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield int(sock.getsockname()[1])


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_real_timeout_on_a_server_that_never_answers(silent_port: int) -> None:
    s = ChatSummarizer(f"http://127.0.0.1:{silent_port}/v1", "m", timeout=0.3)
    t0 = time.monotonic()
    with pytest.raises(SummarizerError, match="timed out"):
        s.summarize(TRIP, max_tokens=10)
    with pytest.raises(SummarizerError, match="timed out"):
        await s.asummarize(TRIP, max_tokens=10)
    assert time.monotonic() - t0 < 5


async def test_stopped_server_raises_quickly() -> None:
    s = ChatSummarizer(f"http://127.0.0.1:{_dead_port()}/v1", "m", timeout=30)
    t0 = time.monotonic()
    with pytest.raises(SummarizerError, match="unreachable"):
        s.summarize(TRIP, max_tokens=10)
    with pytest.raises(SummarizerError, match="unreachable"):
        await s.asummarize(TRIP, max_tokens=10)
    assert time.monotonic() - t0 < 2


def test_span_failure_propagates_and_nothing_is_returned() -> None:
    calls = []

    class FailsSecond(Recording):
        def summarize(self, messages: Sequence[Any], **kw: Any) -> str:
            calls.append(1)
            if len(calls) == 2:
                raise SummarizerError("piece 2 failed")
            return "ok."

    with pytest.raises(SummarizerError, match="piece 2"):
        summarize_span(
            FailsSecond(), _long_chat(12), max_tokens=40, window_tokens=200, counter="o200k_base"
        )


# -- the real model -----------------------------------------------------------------------------

_FACTS = ("lisbon", "maria", "sintra", "2000", "five", "5 days", "budget", "trip", "may")


@pytest.mark.server
def test_real_model_summarizes(llama_server: LlamaServer) -> None:
    s = ChatSummarizer(llama_server.base_url, llama_server.model, timeout=120)
    out = s.summarize(TRIP, previous_summary=None, max_tokens=60)
    assert out.strip() and not out.lower().startswith("error")
    assert any(f in out.lower() for f in _FACTS), out


@pytest.mark.server
async def test_real_model_summarizes_async_in_rolling_pieces(llama_server: LlamaServer) -> None:
    calls: list[int] = []

    class Counting(ChatSummarizer):
        async def asummarize(self, messages: Sequence[Any], **kw: Any) -> str:
            calls.append(len(messages))
            return await super().asummarize(messages, **kw)

    # pretend the window is 400 tokens: the span must go in pieces that each fit it
    s = Counting(llama_server.base_url, llama_server.model, timeout=120, context_window=400)
    span = TRIP * 3
    out = await asummarize_span(s, span, max_tokens=40, counter="o200k_base")
    assert len(calls) >= 2 and sum(calls) == len(span)
    assert out.strip() and o200k(out) <= 40
