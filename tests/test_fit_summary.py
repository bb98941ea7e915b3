"""Summarization as the history's shrink strategy: offline, failing, rolling, and real."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from llama_server import LlamaServer

import tokenflex
from tokenflex.summarize import ChatSummarizer, ExtractiveSummarizer, is_summary_message


def _chat(turns: int, words: int = 60) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"Question {i}: " + "tell me more " * words})
        msgs.append({"role": "assistant", "content": f"Answer {i}: decided option {i}. " * 8})
    msgs.append({"role": "user", "content": "What did we decide first?"})
    return msgs


def test_summary_replaces_old_history_and_is_counted() -> None:
    msgs = _chat(80)
    before = copy.deepcopy(msgs)
    plan = tokenflex.fit(msgs, model="gpt-4", max_tokens=1500, summarizer=ExtractiveSummarizer())
    assert msgs == before  # the caller's list is not mutated
    assert plan.summary is not None
    assert is_summary_message(plan.messages[1])
    start, stop = plan.summary.covers
    # system and the opening question pinned (after the summary), the last 6 verbatim
    assert (start, stop) == (2, len(msgs) - 6)
    assert plan.messages[2] is msgs[1]
    assert plan.messages[-6:] == msgs[-6:]
    assert plan.summary.saved_tokens > 0
    assert plan.input_tokens == tokenflex.count_messages(plan.messages, model="gpt-4")
    assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= 8192
    assert {d.reason for d in plan.dropped} == {"summarized"}
    assert len(plan.dropped) == stop - start


def test_rolling_summary_summarizes_only_the_newly_aged_out() -> None:
    seen: list[tuple[int, str | None]] = []

    inner = ExtractiveSummarizer()

    class Recording:
        def summarize(
            self, messages: Sequence[Any], *, previous_summary: str | None, max_tokens: int
        ) -> str:
            seen.append((len(messages), previous_summary))
            return inner.summarize(
                messages, previous_summary=previous_summary, max_tokens=max_tokens
            )

    summarizer = Recording()
    plan = tokenflex.fit(_chat(80), model="gpt-4", max_tokens=1500, summarizer=summarizer)
    assert plan.summary is not None and seen[0][1] is None
    # The application keeps the compacted list (Zorac-style) and the chat goes on.
    convo = list(plan.messages)
    convo += _chat(40)[1:]
    seen.clear()
    plan2 = tokenflex.fit(convo, model="gpt-4", max_tokens=1500, summarizer=summarizer)
    assert plan2.summary is not None
    assert seen and seen[0][1] == plan.summary.text  # rolled from the previous summary
    # only the newly aged-out: not the system prompt, the summary, the pinned opening
    # question or the last 6
    assert sum(n for n, _ in seen) == len(convo) - 1 - 1 - 1 - 6


class _Broken:
    def summarize(
        self, messages: Sequence[Any], *, previous_summary: str | None, max_tokens: int
    ) -> str:
        raise tokenflex.SummarizerError("upstream said 500")


def test_failing_summarizer_falls_back_to_dropping_and_says_so() -> None:
    plan = tokenflex.fit(_chat(80), model="gpt-4", max_tokens=1500, summarizer=_Broken())
    assert plan.summary is None
    assert any("Summarizer failed" in w and "upstream said 500" in w for w in plan.warnings)
    assert {d.reason for d in plan.dropped} <= {"share", "budget", "orphan"}
    assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= 8192


def test_stopped_server_falls_back() -> None:
    summarizer = ChatSummarizer("http://127.0.0.1:9/v1", "smollm2", timeout=2)
    plan = tokenflex.fit(_chat(80), model="gpt-4", max_tokens=1500, summarizer=summarizer)
    assert plan.summary is None and any("Summarizer failed" in w for w in plan.warnings)


@pytest.mark.server
async def test_real_model_summarizes_and_the_fitted_request_is_accepted(
    llama_server: LlamaServer,
) -> None:
    from tokenflex.models.discovery import adiscover_model

    model = await adiscover_model(llama_server.base_url)
    summarizer = ChatSummarizer(
        llama_server.base_url, model.name, context_window=llama_server.n_ctx, timeout=180
    )
    msgs = _chat(8, words=15)
    plan = await tokenflex.afit(
        msgs,
        model=model,
        max_tokens=64,
        min_output_tokens=32,
        summarizer=summarizer,
        summary_max_tokens=64,
        max_input_tokens=600,  # seed 002's threshold: crossing it summarizes
    )
    assert plan.summary is not None and plan.summary.text
    assert not plan.summary.text.lower().startswith("error")
    async with httpx.AsyncClient(timeout=120) as client:
        r = await client.post(
            f"{llama_server.base_url}/chat/completions",
            json={**plan.request(), "temperature": 0},
        )
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] + plan.max_tokens <= model.context_window
