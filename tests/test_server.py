"""The proxy against a fast fake upstream: a real HTTP server on loopback, not a mock.

Both the fake upstream and the proxy run under uvicorn in threads of the test process.
The fake records what it receives, so tests see exactly what the proxy forwarded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tokenflex.models import Model
from tokenflex.server import ServerConfig, create_app
from tokenflex.server.plans import LAZY_DROPPED

# -- servers in threads -------------------------------------------------------------------


class ServerThread:
    """A uvicorn server for ``app`` on a free loopback port, in a daemon thread.

    ``options`` go to ``uvicorn.Config`` (``http="h11"``, ``timeout_keep_alive``, ...).
    """

    def __init__(self, app: Any, **options: Any) -> None:
        self.app = app
        # proto=IPPROTO_TCP, or asyncio does not set TCP_NODELAY on accepted connections
        # and Nagle + delayed ACKs add ~40 ms to every response
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        options = {"ws": "none", **options}
        config = uvicorn.Config(
            app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2, **options
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


# -- the fake upstream --------------------------------------------------------------------

SSE_EVENTS = [
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,'
    b'"delta":{"role":"assistant","content":"Hel"}}]}\n\n',
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,'
    b'"delta":{"content":"lo"}}]}\n\n',
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,'
    b'"delta":{},"finish_reason":"stop"}]}\n\n',
    b"data: [DONE]\n\n",
]
RATE_LIMIT = {
    "error": {
        "message": "Rate limit reached for requests",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}
KNOWN = {"tiny", "gpt-4o", "gpt-4", "slow", "rate-limited", "broken-stream"}


class Fake:
    """What the fake upstream received, newest last."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def last(self) -> dict[str, Any]:
        return self.seen[-1]


def fake_upstream(fake: Fake) -> Starlette:
    async def chat(request: Request) -> Response:
        raw = await request.body()
        body = json.loads(raw)
        fake.seen.append({"headers": dict(request.headers), "body": body, "path": request.url.path})
        model = body.get("model")
        if model not in KNOWN:
            return JSONResponse(
                {
                    "error": {
                        "message": f"The model `{model}` does not exist.",
                        "type": "invalid_request_error",
                        "param": "model",
                        "code": "model_not_found",
                    }
                },
                status_code=404,
            )
        if model == "slow":
            await asyncio.sleep(3)
        if model == "rate-limited":
            return JSONResponse(RATE_LIMIT, status_code=429, headers={"retry-after": "7"})
        if body.get("stream"):

            async def events() -> AsyncIterator[bytes]:
                for i, event in enumerate(SSE_EVENTS):
                    if model == "broken-stream" and i == 2:
                        raise RuntimeError("upstream died mid-stream")
                    yield event
                    await asyncio.sleep(0.01)

            return StreamingResponse(events(), media_type="text/event-stream")
        reply = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "ok"},
                    "finish_reason": "stop",
                }
            ],
            # not a count: below any prediction, so the proxy's calibration leaves it be
            "usage": {"prompt_tokens": 1, "completion_tokens": 1},
        }
        return JSONResponse(reply, headers={"x-upstream": "fake"})

    async def models(request: Request) -> Response:
        fake.seen.append({"headers": dict(request.headers), "path": request.url.path})
        return JSONResponse(
            {"object": "list", "data": [{"id": m, "object": "model"} for m in sorted(KNOWN)]}
        )

    async def echo(request: Request) -> Response:
        raw = await request.body()
        fake.seen.append({"headers": dict(request.headers), "path": request.url.path})
        response = JSONResponse(
            {
                "method": request.method,
                "path": request.url.path,
                "raw_path": request.scope["raw_path"].decode(),
                "query": request.url.query,
                "body": raw.decode(errors="replace"),
                "authorization": request.headers.get("authorization"),
                "cookie": request.headers.get("cookie"),
            },
            status_code=201,
        )
        response.set_cookie("session", "for-one-client-only")
        return response

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/{path:path}", echo, methods=["GET", "POST", "PUT", "DELETE"]),
        ]
    )


TINY = Model(
    name="tiny", context_window=1024, tokenizer="o200k_base", chat_format="openai", source="fake"
)


# The fake's own behaviour names: the registry does not know them (the proxy would pass
# their requests through unfitted), so the fake reports a window for them.
SERVED = {
    name: Model(name=name, context_window=8192, tokenizer="o200k_base", source="fake")
    for name in ("slow", "rate-limited", "broken-stream")
}


async def fake_discover(base_url: str, name: str | None, api_key: str | None) -> Model | None:
    """The fake upstream 'reports' a 1,024-token window for 'tiny' and 8,192 for its
    behaviour names; others: registry."""
    return TINY if name == "tiny" else SERVED.get(name or "")


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake() -> Fake:
    return Fake()


@pytest.fixture(scope="module")
def upstream(fake: Fake) -> Iterator[ServerThread]:
    with ServerThread(fake_upstream(fake)) as server:
        yield server


def start_proxy(upstream_url: str, **settings: Any) -> ServerThread:
    config = ServerConfig.load(upstream=upstream_url, read_timeout=1.0, **settings)
    return ServerThread(create_app(config, discover=fake_discover))


def dead_url() -> str:
    """A loopback URL nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture(scope="module")
def proxy(upstream: ServerThread) -> Iterator[ServerThread]:
    routes = {
        "flex": {"policy": "flex"},
        "extractive": {"summarizer": "extractive", "keep_recent": 4},
        "upsum": {"summarize": True, "keep_recent": 4},
        "deadsum": {"summarizer": {"base_url": f"{dead_url()}/v1", "model": "m", "timeout": 2}},
    }
    # these tests count the messages sent against those dropped: no cut note among them
    # (the note is tested in test_cache_stable.py and test_summaries_once.py), and no
    # recall (which names its ids in the note; tested in test_server_recall.py)
    with start_proxy(upstream.url, routes=routes, cut_note=False, recall=False) as server:
        yield server


@pytest.fixture(scope="module")
def keyed_proxy(upstream: ServerThread) -> Iterator[ServerThread]:
    with start_proxy(
        upstream.url, proxy_key="proxy-secret", upstream_api_key="sk-upstream"
    ) as server:
        yield server


def make_client() -> httpx.Client:
    return httpx.Client(timeout=10, trust_env=False)


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with make_client() as c:
        yield c


def conversation(n: int, words: int = 60) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        msgs.append({"role": role, "content": f"message {i}: " + "lorem ipsum " * words})
    if msgs[-1]["role"] != "user":
        msgs.append({"role": "user", "content": "And now?"})
    return msgs


def assert_openai_error(r: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    if code is not None:
        assert err["code"] == code, err
    return dict(err)


# -- chat ---------------------------------------------------------------------------------


def test_chat_is_fitted_and_says_so(proxy: ServerThread, fake: Fake, client: httpx.Client) -> None:
    msgs = conversation(40)
    r = client.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "tiny", "messages": msgs, "max_tokens": 200, "temperature": 0.2},
    )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "ok"
    assert r.headers["x-upstream"] == "fake"  # upstream headers come back
    sent = fake.last()["body"]
    assert sent["temperature"] == 0.2  # other fields unchanged
    assert sent["messages"][0] == msgs[0]  # system pinned
    assert sent["messages"][-1] == msgs[-1]  # current turn kept
    assert len(sent["messages"]) < len(msgs)
    h = r.headers
    assert int(h["x-tokenflex-dropped"]) == len(msgs) - len(sent["messages"])
    assert h["x-tokenflex-summary"] == "no"
    assert int(h["x-tokenflex-max-tokens"]) == sent["max_tokens"] == 200
    assert int(h["x-tokenflex-context-window"]) == 1024
    assert int(h["x-tokenflex-input-tokens"]) + 200 + 100 <= 1024
    assert h["x-tokenflex-request-id"].startswith("req_")

    plan = client.get(f"{proxy.url}/tokenflex/plans/{h['x-tokenflex-plan-id']}")
    assert plan.status_code == 200
    data = plan.json()
    assert data["input_tokens"] == int(h["x-tokenflex-input-tokens"])
    assert data["max_tokens"] == 200
    assert data["dropped_count"] == int(h["x-tokenflex-dropped"])
    assert data["messages"] == sent["messages"]


def test_a_long_cut_plan_lists_its_dropped_items_when_asked(
    proxy: ServerThread, fake: Fake, client: httpx.Client
) -> None:
    """A plan that left out many messages is kept live: its dropped items are listed and
    counted on GET (not on the request's path), and read back complete and consistent
    with what was sent and the input count."""
    msgs = conversation(300, words=10)
    r = client.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "tiny", "messages": msgs, "max_tokens": 200},
    )
    assert r.status_code == 200, r.text
    sent = fake.last()["body"]["messages"]
    h = r.headers
    assert int(h["x-tokenflex-dropped"]) == len(msgs) - len(sent) > LAZY_DROPPED
    data = client.get(f"{proxy.url}/tokenflex/plans/{h['x-tokenflex-plan-id']}").json()
    assert data["messages"] == sent
    dropped = data["dropped"]
    assert data["dropped_count"] == len(dropped) == len(msgs) - len(sent)
    kept = {i for i, m in enumerate(msgs) if m in sent}  # every message's text differs
    assert {d["index"] for d in dropped} == set(range(len(msgs))) - kept
    assert all(d["tokens"] > 0 for d in dropped), {d["reason"] for d in dropped}
    assert data["full_input_tokens"] == data["input_tokens"] + sum(d["tokens"] for d in dropped)
    assert data["savings"]["saved_tokens"] == data["full_input_tokens"] - data["input_tokens"]


def test_unknown_plan_is_404(proxy: ServerThread, client: httpx.Client) -> None:
    r = client.get(f"{proxy.url}/tokenflex/plans/plan_nope")
    assert_openai_error(r, 404, "plan_not_found")


def test_output_is_negotiated_in_both_fields(
    proxy: ServerThread, fake: Fake, client: httpx.Client
) -> None:
    # flex route: input is kept, output shrinks to what is left
    msgs = conversation(4, words=100)
    r = client.post(
        f"{proxy.url}/flex/v1/chat/completions",
        json={"model": "tiny", "messages": msgs, "max_completion_tokens": 900},
    )
    assert r.status_code == 200, r.text
    sent = fake.last()["body"]
    assert fake.last()["path"] == "/v1/chat/completions"  # route prefix stripped
    assert "max_tokens" not in sent
    h = r.headers
    assert sent["max_completion_tokens"] == int(h["x-tokenflex-max-tokens"]) <= 900
    assert int(h["x-tokenflex-input-tokens"]) + sent["max_completion_tokens"] + 100 <= 1024
    plan = client.get(f"{proxy.url}/tokenflex/plans/{h['x-tokenflex-plan-id']}").json()
    assert plan["policy"] == "flex"  # the route's option

    # more output asked than the window holds: negotiated down, not an error
    r = client.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "tiny", "messages": msgs, "max_tokens": 5000},
    )
    assert r.status_code == 200, r.text
    sent = fake.last()["body"]
    assert sent["max_tokens"] == int(r.headers["x-tokenflex-max-tokens"]) < 1024
    assert int(r.headers["x-tokenflex-input-tokens"]) + sent["max_tokens"] + 100 <= 1024

    # no limit asked and the request fits: sent as it came, nothing added (do no harm)
    r = client.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert r.status_code == 200
    assert "max_tokens" not in fake.last()["body"]
    # no limit asked and history cut: the negotiated limit is added as max_tokens
    r = client.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "tiny", "messages": conversation(12, words=100)},
    )
    assert r.status_code == 200, r.text
    assert int(r.headers["x-tokenflex-dropped"]) > 0
    assert fake.last()["body"]["max_tokens"] == int(r.headers["x-tokenflex-max-tokens"])


def test_routes_can_summarize_instead_of_dropping(
    proxy: ServerThread, fake: Fake, client: httpx.Client
) -> None:
    msgs = conversation(40)
    body = {"model": "tiny", "messages": msgs, "max_tokens": 100}

    r = client.post(f"{proxy.url}/extractive/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    assert r.headers["x-tokenflex-summary"] == "yes"
    sent = fake.last()["body"]["messages"]
    assert sent[0] == msgs[0]
    assert sent[1]["role"] == "system"
    assert sent[1]["content"].startswith("Previous conversation summary: ")
    assert sent[-4:] == msgs[-4:]  # keep_recent

    # the upstream summarizes with the request's model. The span does not fit the
    # 1,024-token window in one call: the request does not wait for the pieces; it is
    # served without a summary (the oldest dropped) and the summary is made in the
    # background, then sent by the next request of the conversation.
    before = len(fake.seen)
    r = client.post(
        f"{proxy.url}/upsum/v1/chat/completions",
        json=body,
        headers={"authorization": "Bearer sk-client"},
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-tokenflex-summary"] == "no"
    assert int(r.headers["x-tokenflex-dropped"]) > 0
    plan = client.get(
        f"{proxy.url}/tokenflex/plans/{r.headers['x-tokenflex-plan-id']}",
        headers={"authorization": "Bearer sk-client"},
    ).json()
    assert any("in the background" in w for w in plan["warnings"]), plan
    assert proxy.app.state.proxy.fitter.background.wait(10)  # the summary is stored
    calls = len(fake.seen)
    r = client.post(
        f"{proxy.url}/upsum/v1/chat/completions",
        json=body,
        headers={"authorization": "Bearer sk-client"},
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-tokenflex-summary"] == "yes"
    assert len(fake.seen) == calls + 1  # the stored summary: no call, only the chat

    def summarizing(call: dict[str, Any]) -> bool:
        return str(call["body"]["messages"][0]["content"]).startswith("You summarize")

    # the first request's chat call and the background summary's calls, in any order
    summary_calls = [c for c in fake.seen[before:calls] if summarizing(c)]
    assert len(summary_calls) == calls - before - 1
    chat_call = fake.seen[-1]
    assert len(summary_calls) >= 2  # in pieces
    for call in summary_calls:
        assert call["body"]["model"] == "tiny"
        assert call["headers"]["authorization"] == "Bearer sk-client"
    assert chat_call["body"]["messages"][1]["content"] == "Previous conversation summary: ok"

    # a summarizer that cannot be reached: dropped instead, and the plan says why
    r = client.post(f"{proxy.url}/deadsum/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    assert r.headers["x-tokenflex-summary"] == "no"
    assert int(r.headers["x-tokenflex-dropped"]) > 0
    plan = client.get(f"{proxy.url}/tokenflex/plans/{r.headers['x-tokenflex-plan-id']}").json()
    assert any("unreachable" in w for w in plan["warnings"]), plan["warnings"]


def test_streaming_passes_through_unchanged(proxy: ServerThread, client: httpx.Client) -> None:
    chunks: list[bytes] = []
    with client.stream(
        "POST",
        f"{proxy.url}/v1/chat/completions",
        json={"model": "tiny", "messages": conversation(30), "max_tokens": 50, "stream": True},
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert int(r.headers["x-tokenflex-dropped"]) > 0
        assert r.headers["x-tokenflex-plan-id"].startswith("plan_")
        chunks.extend(r.iter_raw())
    assert b"".join(chunks) == b"".join(SSE_EVENTS)
    assert len(chunks) > 1  # streamed, not buffered into one body


def test_broken_stream_ends_with_an_error_event(proxy: ServerThread, client: httpx.Client) -> None:
    r = client.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "broken-stream", "messages": conversation(1), "stream": True},
    )
    assert r.status_code == 200
    body = r.content
    assert body.startswith(SSE_EVENTS[0] + SSE_EVENTS[1])
    last = json.loads(body.strip().split(b"\n\n")[-1].removeprefix(b"data: "))
    assert last["error"]["code"] == "upstream_error"


def test_client_authorization_is_forwarded_and_never_logged(
    proxy: ServerThread, fake: Fake, client: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="tokenflex")
    secret = "sk-client-abc123"
    secret_text = "the-words-of-the-conversation"
    r = client.post(
        f"{proxy.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {secret}"},
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": secret_text}]},
    )
    assert r.status_code == 200
    assert fake.last()["headers"]["authorization"] == f"Bearer {secret}"
    assert "x-tokenflex-key" not in fake.last()["headers"]
    chat_lines = [
        rec.getMessage() for rec in caplog.records if rec.getMessage().startswith("chat ")
    ]
    assert len(chat_lines) == 1
    assert "status=200" in chat_lines[0] and "input=" in chat_lines[0]
    assert secret not in caplog.text and secret_text not in caplog.text


def test_proxy_key_is_enforced(keyed_proxy: ServerThread, fake: Fake, client: httpx.Client) -> None:
    url = f"{keyed_proxy.url}/v1/chat/completions"
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    assert_openai_error(client.post(url, json=body), 401, "invalid_api_key")
    wrong = {"x-tokenflex-key": "nope", "authorization": "Bearer nope"}
    assert_openai_error(client.post(url, json=body, headers=wrong), 401, "invalid_api_key")
    assert_openai_error(client.get(f"{keyed_proxy.url}/v1/models"), 401)
    assert client.get(f"{keyed_proxy.url}/tokenflex/health").status_code == 200

    # key in its own header: the client's Authorization goes upstream untouched
    ok = {"x-tokenflex-key": "proxy-secret", "authorization": "Bearer sk-client"}
    assert client.post(url, json=body, headers=ok).status_code == 200
    assert fake.last()["headers"]["authorization"] == "Bearer sk-client"
    assert "x-tokenflex-key" not in fake.last()["headers"]

    # key as the bearer token (an OpenAI SDK's apiKey): the upstream key replaces it
    r = client.post(url, json=body, headers={"authorization": "Bearer proxy-secret"})
    assert r.status_code == 200
    assert fake.last()["headers"]["authorization"] == "Bearer sk-upstream"


def test_upstream_errors_pass_back_unchanged(proxy: ServerThread, client: httpx.Client) -> None:
    r = client.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "rate-limited", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert r.status_code == 429
    assert r.json() == RATE_LIMIT
    assert r.headers["retry-after"] == "7"
    assert "x-tokenflex-plan-id" in r.headers

    r = client.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert_openai_error(r, 404, "model_not_found")


def test_upstream_timeout_is_504_and_unreachable_is_502(
    proxy: ServerThread, client: httpx.Client
) -> None:
    body = {"model": "slow", "messages": [{"role": "user", "content": "hi"}]}
    started = time.monotonic()
    err = assert_openai_error(
        client.post(f"{proxy.url}/v1/chat/completions", json=body), 504, "upstream_timeout"
    )
    assert time.monotonic() - started < 2.5
    assert "read_timeout" in err["message"]

    dead = dead_url()
    with start_proxy(dead) as lonely:
        body["model"] = "gpt-4o"
        r = client.post(f"{lonely.url}/v1/chat/completions", json=body)
        err = assert_openai_error(r, 502, "upstream_unreachable")
        assert dead in err["message"]
        assert_openai_error(client.get(f"{lonely.url}/v1/models"), 502)
        assert_openai_error(client.get(f"{lonely.url}/anything"), 502)


def test_models_pass_through_or_come_from_config(proxy: ServerThread, client: httpx.Client) -> None:
    r = client.get(f"{proxy.url}/v1/models")
    assert r.status_code == 200
    assert {m["id"] for m in r.json()["data"]} == KNOWN

    with start_proxy(dead_url(), models={"local-llm": {"context_window": 4096}}) as lonely:
        r = client.get(f"{lonely.url}/v1/models")
        assert r.status_code == 200
        assert [m["id"] for m in r.json()["data"]] == ["local-llm"]


def test_other_paths_pass_through(proxy: ServerThread, client: httpx.Client) -> None:
    r = client.put(
        f"{proxy.url}/v1/files/a%20b%C3%A9?purpose=x&n=2",
        content=b"raw bytes \xff",
        headers={"authorization": "Bearer sk-1"},
    )
    assert r.status_code == 201
    assert r.json() == {
        "method": "PUT",
        "path": "/v1/files/a bé",
        "raw_path": "/v1/files/a%20b%C3%A9",  # escapes reach the upstream as sent
        "query": "purpose=x&n=2",
        "body": "raw bytes \ufffd",
        "authorization": "Bearer sk-1",
        "cookie": None,
    }
    assert r.cookies["session"] == "for-one-client-only"  # Set-Cookie reaches the client
    with make_client() as other:
        # ... and is not replayed by the proxy's shared client for someone else
        assert other.get(f"{proxy.url}/v1/files/abc").json()["cookie"] is None
    r = client.get(f"{proxy.url}/flex/extras/tokenize")
    assert r.json()["path"] == "/extras/tokenize"
    # a slash hidden in a segment could climb out of an upstream's base path: refused
    assert_openai_error(client.get(f"{proxy.url}/v1/files/a%2Fbc"), 400, "invalid_path")


def test_count_endpoint(proxy: ServerThread, client: httpx.Client) -> None:
    msgs = [{"role": "user", "content": "Hello there!"}]
    for path in ("/tokenflex/count", "/v1/tokenize"):
        r = client.post(f"{proxy.url}{path}", json={"model": "gpt-4o", "messages": msgs})
        assert r.status_code == 200, r.text
        data = r.json()
        assert data["tokens"] == 10  # cookbook rules: 3 + 4 + 3 priming
        assert data["exact"] is True
    r = client.post(f"{proxy.url}/tokenflex/count", json={"model": "gpt-4o", "text": "hello world"})
    assert r.json()["tokens"] == 2
    r = client.post(f"{proxy.url}/tokenflex/count", json={"model": "gpt-4o"})
    assert_openai_error(r, 400, "missing_required_parameter")
    # a model with an exact tokenizer installed names the one it counted with
    r = client.post(f"{proxy.url}/tokenflex/count", json={"model": "mistral-nemo", "text": "hi"})
    assert r.json()["tokenizer"] == "mistral:tekken" and r.json()["exact"] is True, r.text


# -- bad input ----------------------------------------------------------------------------

USER = [{"role": "user", "content": "hi"}]
BAD_INPUT = [
    pytest.param(b"{not json", 400, "invalid_json", id="invalid-json"),
    pytest.param(b"", 400, "invalid_json", id="empty-body"),
    pytest.param(b"\xff\xfe\x00garbage", 400, "invalid_json", id="not-utf8"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, 400, "invalid_json", id="nested-too-deep"),
    pytest.param([1, 2], 400, "invalid_type", id="body-is-a-list"),
    pytest.param({"messages": USER}, 400, "missing_required_parameter", id="no-model"),
    pytest.param({"model": 7, "messages": USER}, 400, "invalid_type", id="model-int"),
    pytest.param({"model": " ", "messages": USER}, 400, "invalid_type", id="model-blank"),
    pytest.param({"model": "tiny"}, 400, "missing_required_parameter", id="no-messages"),
    pytest.param({"model": "tiny", "messages": "hi"}, 400, "invalid_type", id="messages-str"),
    pytest.param({"model": "tiny", "messages": {}}, 400, "invalid_type", id="messages-dict"),
    pytest.param({"model": "tiny", "messages": []}, 400, "empty_array", id="messages-empty"),
    pytest.param({"model": "tiny", "messages": ["hi"]}, 400, "invalid_type", id="message-str"),
    pytest.param(
        {"model": "tiny", "messages": [{"content": "x"}]}, 400, None, id="message-no-role"
    ),
    pytest.param(
        {"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]},
        400,
        "invalid_value",
        id="unknown-role",
    ),
    pytest.param(
        {"model": "tiny", "messages": [{"role": 1, "content": "x"}]}, 400, None, id="role-int"
    ),
    pytest.param(
        {"model": "tiny", "messages": [{"role": "user", "content": 42}]},
        400,
        "invalid_type",
        id="content-int",
    ),
    pytest.param(
        {"model": "tiny", "messages": [{"role": "user", "content": [42]}]},
        400,
        None,
        id="content-part-int",
    ),
    pytest.param(
        {"model": "tiny", "messages": [{"role": "user", "content": {"text": "x"}}]},
        400,
        "invalid_type",
        id="content-dict",
    ),
    pytest.param(
        {"model": "tiny", "messages": USER, "max_tokens": -5}, 400, "invalid_value", id="neg-max"
    ),
    pytest.param(
        {"model": "tiny", "messages": USER, "max_tokens": 0}, 400, "invalid_value", id="zero-max"
    ),
    pytest.param(
        {"model": "tiny", "messages": USER, "max_tokens": "10"}, 400, "invalid_type", id="max-str"
    ),
    pytest.param(
        {"model": "tiny", "messages": USER, "max_tokens": True}, 400, "invalid_type", id="max-bool"
    ),
    pytest.param(
        {"model": "tiny", "messages": USER, "max_tokens": 1.5}, 400, "invalid_type", id="max-float"
    ),
    pytest.param(
        {"model": "tiny", "messages": USER, "max_completion_tokens": -1},
        400,
        "invalid_value",
        id="neg-max-completion",
    ),
    pytest.param(
        {"model": "tiny", "messages": USER, "stream": "yes"}, 400, "invalid_type", id="stream-str"
    ),
    pytest.param(
        {"model": "tiny", "messages": USER, "tools": {"a": 1}}, 400, "invalid_type", id="tools-dict"
    ),
    pytest.param(
        {"model": "tiny", "messages": [{"role": "user", "content": "word " * 5000}]},
        400,
        "context_length_exceeded",
        id="one-message-larger-than-window",
    ),
    pytest.param(
        {"model": "tiny", "messages": [{"role": "user", "content": "x" * 5_000_000}]},
        413,
        "request_too_large",
        id="huge-body",
    ),
    pytest.param(
        {"model": "unknown-model-xyz", "messages": USER},
        404,
        "model_not_found",
        id="unknown-model",
    ),
]


@pytest.mark.parametrize(("body", "status", "code"), BAD_INPUT)
def test_bad_input_gets_an_openai_error(
    proxy: ServerThread, client: httpx.Client, body: Any, status: int, code: str | None
) -> None:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = client.post(
        f"{proxy.url}/v1/chat/completions",
        content=content,
        headers={"content-type": "application/json"},
    )
    err = assert_openai_error(r, status, code)
    if code == "context_length_exceeded":
        assert "1,024" in err["message"]  # our message, with the numbers
        # advice a proxy client can follow, not fit()'s keyword arguments
        assert "proxy config" in err["message"] and "=[...]" not in err["message"]
    assert client.get(f"{proxy.url}/tokenflex/health").json() == {"status": "ok"}


def test_huge_body_without_content_length_is_413(proxy: ServerThread, client: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"model": "tiny", "messages": [{"role": "user", "content": "'
        for _ in range(50):
            yield b"x" * 100_000
        yield b'"}]}'

    r = client.post(
        f"{proxy.url}/v1/chat/completions",
        content=chunks(),
        headers={"content-type": "application/json"},
    )
    assert_openai_error(r, 413, "request_too_large")


def test_strict_models_rejects_unknown_names(upstream: ServerThread, client: httpx.Client) -> None:
    with start_proxy(upstream.url, strict_models=True, discover=False) as strict:
        r = client.post(
            f"{strict.url}/v1/chat/completions",
            json={"model": "gpt-4o-mni", "messages": USER},
        )
        err = assert_openai_error(r, 404, "model_not_found")
        assert "gpt-4o-mini" in err["message"]  # close matches suggested


_json_leaf = st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats() | st.text(max_size=8)
_json = st.recursive(
    _json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
_message = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["user", "assistant", "system", "tool", "bogus"]) | _json,
        "content": st.text(max_size=30) | _json,
        "name": _json,
        "tool_calls": _json,
    },
)
_chat_body = st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from(["tiny", "gpt-4o", "gpt-4"]) | _json,
        "messages": st.lists(_message | _json, max_size=5) | _json,
        "max_tokens": st.integers(-10, 5000) | _json,
        "max_completion_tokens": st.integers(-10, 5000) | _json,
        "stream": st.booleans() | _json,
        "tools": _json,
    },
)


@pytest.fixture(scope="module")
def shared_client() -> Iterator[httpx.Client]:
    with make_client() as c:
        yield c


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=_chat_body | _json)
def test_random_bodies_never_get_a_500(
    proxy: ServerThread, shared_client: httpx.Client, body: Any
) -> None:
    content = json.dumps(body).encode()  # NaN / Infinity too: Python's json reads them
    r = shared_client.post(
        f"{proxy.url}/v1/chat/completions",
        content=content,
        headers={"content-type": "application/json"},
    )
    assert r.status_code < 500, r.text
    assert r.status_code != 415
    if r.status_code >= 400:
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_unexpected_exception_is_an_openai_500(
    upstream: ServerThread, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = create_app(ServerConfig.load(upstream=upstream.url), discover=fake_discover)

    def boom(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(app.state.proxy.plans, "put", boom)
    with ServerThread(app) as server:
        r = client.post(
            f"{server.url}/v1/chat/completions", json={"model": "tiny", "messages": USER}
        )
        err = assert_openai_error(r, 500, "internal_error")
        assert r.headers["x-tokenflex-request-id"] in err["message"]
        assert "a bug" not in err["message"]
        assert client.get(f"{server.url}/tokenflex/health").status_code == 200
