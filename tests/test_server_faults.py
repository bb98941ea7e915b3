"""The proxy against a faulty upstream and abusive clients: every fault gets its status in
bounded time, and the next request is answered correctly.

The upstream is ``tests/fault_upstream.py``, a raw asyncio server on loopback (these faults
cannot be provoked from a real server); the proxy is the real app under uvicorn with the
settings ``tokenflex serve`` uses (``limits.uvicorn_options``).
"""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fault_upstream import FaultUpstream
from test_server import ServerThread

from tokenflex.server import ServerConfig, create_app
from tokenflex.server.limits import (
    ARRIVED,
    HANGUP,
    Limits,
    bounded_transports,
    uvicorn_options,
)
from tokenflex.tokenizers import get_tokenizer


class ProxyThread(ServerThread):
    """The proxy under uvicorn, with ``tokenflex serve``'s settings, in a daemon thread."""

    def __init__(self, upstream: str, http: str = "auto", **settings: Any) -> None:
        settings.setdefault("discover", False)
        settings.setdefault("read_timeout", 1.0)
        self.config = ServerConfig.load(upstream=upstream, **settings)
        super().__init__(create_app(self.config), **uvicorn_options(self.config, http=http))


@pytest.fixture
def faulty() -> Iterator[FaultUpstream]:
    # assert_ok times requests, not gpt-4o's first tokenizer load (0.4 s alone, 2 s in a
    # process that has run test_server_llama first)
    get_tokenizer("o200k_base").count("warm")
    with FaultUpstream() as up:
        yield up


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=15, trust_env=False) as c:
        yield c


def chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


def assert_error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert err["code"] == code, err
    assert err["message"]
    return dict(err)


def assert_ok(client: httpx.Client, url: str) -> None:
    t0 = time.monotonic()
    r = client.post(f"{url}/v1/chat/completions", json=chat("gpt-4o"))
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "ok"
    assert time.monotonic() - t0 < 2


# -- desync -------------------------------------------------------------------------------


def test_bytes_past_a_response_never_answer_the_next_request(
    faulty: FaultUpstream, client: httpx.Client
) -> None:
    with ProxyThread(faulty.url) as proxy:
        for _ in range(3):
            assert_ok(client, proxy.url)
        assert faulty.connections == 1  # clean answers: the connection is reused
        for _ in range(3):
            r = client.post(f"{proxy.url}/v1/chat/completions", json=chat("fault-desync"))
            assert r.status_code == 200 and r.json()["id"] == "chatcmpl-ok"
            # the same pooled connection would answer with the stray POISON response
            r = client.post(f"{proxy.url}/v1/chat/completions", json=chat("gpt-4o"))
            assert r.status_code == 200 and r.json()["id"] == "chatcmpl-ok", r.text
    assert faulty.connections >= 4  # each desynced connection was closed, not reused


@pytest.mark.parametrize("transport", ["httpx", "proxy"])
async def test_trailing_bytes_sees_through_the_installed_httpx(
    faulty: FaultUpstream, transport: str
) -> None:
    """The check the proxy relies on reads httpx/httpcore internals: prove it still works
    (clean answer: False; bytes past the end: True), so an upgrade cannot silently turn
    it into 'unknown' (then every connection is closed after use: correct, but slow);
    through httpx's own transport and through the proxy's (its pool on asyncio's
    transports)."""
    from tokenflex.server._upstream import Upstream, trailing_bytes

    upstream = Upstream(ServerConfig.load(upstream=faulty.url, discover=False))
    own = upstream.transport if transport == "proxy" else None
    async with httpx.AsyncClient(trust_env=False, transport=own) as c:
        for model, expected in (("gpt-4o", False), ("fault-desync", True)):
            async with c.stream("POST", f"{faulty.url}/v1", json=chat(model)) as r:
                await r.aread()
                assert trailing_bytes(r) is expected


# -- faults answered with a status --------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "status", "code"),
    [
        pytest.param("fault-slow", 504, "upstream_timeout", id="slow-headers"),
        pytest.param("fault-never", 504, "upstream_timeout", id="never-answers"),
        pytest.param("fault-trickle", 504, "upstream_timeout", id="trickle-total-deadline"),
        pytest.param("fault-midclose", 502, "upstream_error", id="truncated-body"),
        pytest.param("fault-badframe", 502, "upstream_error", id="not-http"),
        pytest.param("fault-huge", 502, "upstream_response_too_large", id="huge-declared"),
        pytest.param("fault-huge-chunked", 502, "upstream_response_too_large", id="huge-chunked"),
    ],
)
def test_upstream_faults_get_a_json_status_in_bounded_time(
    faulty: FaultUpstream, client: httpx.Client, model: str, status: int, code: str
) -> None:
    # per read 1 s (the trickle sends a byte every 0.2 s), 2 s for the whole exchange
    with ProxyThread(faulty.url, upstream_timeout=2.0, max_response_bytes=8 * 1024 * 1024) as proxy:
        t0 = time.monotonic()
        r = client.post(f"{proxy.url}/v1/chat/completions", json=chat(model))
        elapsed = time.monotonic() - t0
        assert_error(r, status, code)
        assert elapsed < 4, f"{model} took {elapsed:.1f} s"
        assert_ok(client, proxy.url)


def test_a_truncated_plain_stream_aborts_the_client_connection(
    faulty: FaultUpstream, client: httpx.Client
) -> None:
    with ProxyThread(faulty.url) as proxy:
        body = chat("fault-chunked-midclose", stream=True)
        with (
            pytest.raises(httpx.RemoteProtocolError),
            client.stream("POST", f"{proxy.url}/v1/chat/completions", json=body) as r,
        ):
            assert r.status_code == 200
            r.read()  # never a complete-looking 200
        assert_ok(client, proxy.url)


def test_a_truncated_sse_stream_ends_with_an_error_event(
    faulty: FaultUpstream, client: httpx.Client
) -> None:
    with ProxyThread(faulty.url) as proxy:
        body = chat("fault-sse-midclose", stream=True)
        with client.stream("POST", f"{proxy.url}/v1/chat/completions", json=body) as r:
            events = [line for line in r.iter_lines() if line.startswith("data: ")]
        assert events[:2] == ['data: {"n": 1}', 'data: {"n": 2}']
        assert '"code": "upstream_error"' in events[-1]
        assert_ok(client, proxy.url)


def test_a_trickling_summarizer_is_cut_off_and_history_dropped_instead(
    faulty: FaultUpstream, client: httpx.Client
) -> None:
    model = "fault-summary-trickle"
    with ProxyThread(
        faulty.url,
        models={model: {"context_window": 1024}},
        routes={"sum": {"summarize": True, "keep_recent": 2}},
    ) as proxy:
        words = " ".join(f"word{i}" for i in range(60))
        turns = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"{i}: {words}"}
            for i in range(41)
        ]
        t0 = time.monotonic()
        r = client.post(
            f"{proxy.url}/sum/v1/chat/completions", json={"model": model, "messages": turns}
        )
        elapsed = time.monotonic() - t0
        assert r.status_code == 200, r.text
        assert r.headers["x-tokenflex-summary"] == "no"
        assert int(r.headers["x-tokenflex-dropped"]) > 0
        assert elapsed < 4, f"the summarizer held the request {elapsed:.1f} s"
        # the summarizer was asked, and trickled (inline before the chat call, or in the
        # background beside it when the span needs more than one call)
        assert proxy.app.state.proxy.fitter.background.wait(10)
        assert sorted(faulty.seen) == ["ok", "trickle"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_bounded_transports_end_an_exchange_in_time_and_cap_its_body(
    faulty: FaultUpstream, mode: str
) -> None:
    sync_transport, async_transport = bounded_transports(1.0, 1024 * 1024)
    timeout = httpx.Timeout(1.0)  # per read: the trickle never trips it alone

    def run(model: str) -> httpx.Response:
        url = f"{faulty.url}/v1/chat/completions"
        if mode == "sync":
            with httpx.Client(transport=sync_transport, timeout=timeout) as c:
                return c.post(url, json=chat(model))

        async def go() -> httpx.Response:
            async with httpx.AsyncClient(transport=async_transport, timeout=timeout) as c:
                return await c.post(url, json=chat(model))

        return asyncio.run(go())

    t0 = time.monotonic()
    with pytest.raises(httpx.ReadTimeout, match="within 1 s"):
        run("fault-trickle")
    assert time.monotonic() - t0 < 2.6  # sync: the deadline plus at most one read
    with pytest.raises(httpx.RemoteProtocolError, match="over 1,048,576 bytes"):
        run("fault-huge-chunked")
    assert run("gpt-4o").json()["id"] == "chatcmpl-ok"


# -- clients that hold the proxy ----------------------------------------------------------


@pytest.mark.parametrize("http", ["h11", "httptools"])
def test_slowloris_connections_are_closed_and_others_still_answered(
    faulty: FaultUpstream, client: httpx.Client, http: str
) -> None:
    with ProxyThread(faulty.url, http=http, header_timeout=1.0) as proxy:
        socks = []
        for _ in range(50):
            s = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
            socks.append(s)
        t0 = time.monotonic()
        assert_ok(client, proxy.url)  # answered while the 50 hang
        closed = 0
        for s in socks:
            try:
                closed += s.recv(1024) == b""
            except ConnectionResetError:
                closed += 1
            finally:
                s.close()
        assert closed == 50
        assert time.monotonic() - t0 < 3  # all gone within the 1 s header timeout


@pytest.mark.parametrize("http", ["httptools", "h11"])
def test_a_body_that_never_arrives_gets_a_408(faulty: FaultUpstream, http: str) -> None:
    """Part of the body, then nothing: the body deadline holds under both protocols (the
    server never says it holds the whole body, ``Hangup.body_in``, before it does)."""
    with ProxyThread(faulty.url, http=http, body_timeout=1.0) as proxy:
        s = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model"'
        )
        t0 = time.monotonic()
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
        s.close()
        assert time.monotonic() - t0 < 3
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408")
        assert b"connection: close" in head.lower()
        assert b'"code": "request_timeout"' in body


@pytest.mark.parametrize("http", ["httptools", "h11"])
def test_the_server_says_when_it_holds_a_request_s_whole_body(http: str) -> None:
    """``Hangup.body_in`` is set once the server's parser read the body's end, not
    before: a body sent in two parts (the app starts after the first) is read without
    the body deadline's scope only once all of it is in."""
    seen: list[tuple[bool, bool]] = []
    second_part = threading.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        hangup = scope[HANGUP]
        before = hangup.body_in
        second_part.set()
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        seen.append((before, hangup.body_in))
        length = (b"content-length", str(len(body)).encode())
        await send({"type": "http.response.start", "status": 200, "headers": [length]})
        await send({"type": "http.response.body", "body": body})

    config = ServerConfig.load(upstream="http://127.0.0.1:9", discover=False)
    with ServerThread(app, **uvicorn_options(config, http=http)) as server:
        s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\nfirst")
        assert second_part.wait(5)
        time.sleep(0.05)
        s.sendall(b"2nd")
        with s:
            answer = b""
            while not answer.endswith(b"first2nd"):
                chunk = s.recv(65536)
                assert chunk, answer
                answer += chunk
    assert seen == [(False, True)]


@pytest.mark.parametrize("http", ["h11", "httptools"])
def test_a_request_that_is_not_http_gets_a_json_400(faulty: FaultUpstream, http: str) -> None:
    with ProxyThread(faulty.url, http=http) as proxy:
        s = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        s.sendall(b"NOT HTTP\r\n\r\n")
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
        s.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400")
    assert json.loads(body)["error"]["code"] == "invalid_http_request"


async def test_overload_is_shed_with_503_and_retry_after(faulty: FaultUpstream) -> None:
    with ProxyThread(
        faulty.url, read_timeout=2.0, max_inflight=2, max_queue=1, queue_timeout=0.5
    ) as proxy:
        async with httpx.AsyncClient(timeout=10, trust_env=False) as c:
            url = f"{proxy.url}/v1/chat/completions"
            t0 = time.monotonic()
            tasks = [asyncio.create_task(c.post(url, json=chat("fault-never"))) for _ in range(6)]
            await asyncio.sleep(0.2)
            health = await c.get(f"{proxy.url}/tokenflex/health")  # never shed
            answers = await asyncio.gather(*tasks)
            elapsed = time.monotonic() - t0
        assert health.status_code == 200
        statuses = sorted(r.status_code for r in answers)
        assert statuses == [503, 503, 503, 503, 504, 504], statuses
        for r in answers:
            if r.status_code == 503:
                assert_error(r, 503, "proxy_overloaded")
                assert r.headers["retry-after"] == "1"
        assert elapsed < 4


@pytest.mark.parametrize("http", ["httptools", "h11", "plain"])
def test_a_client_that_goes_away_cancels_the_upstream_call(
    faulty: FaultUpstream, http: str
) -> None:
    """Under ``tokenflex serve``'s protocols (uvicorn's httptools and h11) the
    connection's loss is told to the request (``limits.Hangup``); under a server
    without them (plain uvicorn) a task waits for the disconnect. Either way the upstream
    call is cancelled at once."""
    if http == "plain":
        config = ServerConfig.load(upstream=faulty.url, discover=False, read_timeout=30.0)
        server: ServerThread = ServerThread(create_app(config))
    else:
        server = ProxyThread(faulty.url, http=http, read_timeout=30.0)
    with server as proxy:
        with (
            httpx.Client(timeout=0.5, trust_env=False) as c,
            pytest.raises(httpx.ReadTimeout),
        ):
            c.post(f"{proxy.url}/v1/chat/completions", json=chat("fault-never"))
        deadline = time.monotonic() + 5
        while faulty.abandoned == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert faulty.abandoned == 1  # not after read_timeout (30 s): at once


@pytest.mark.parametrize("http", ["httptools", "h11", "plain"])
def test_a_client_that_leaves_a_stream_closes_the_upstream_stream(
    faulty: FaultUpstream, http: str
) -> None:
    """A client that goes away in the middle of a streamed answer: the proxy stops
    reading the upstream's stream and closes it, under every server."""
    if http == "plain":
        config = ServerConfig.load(upstream=faulty.url, discover=False, read_timeout=30.0)
        server: ServerThread = ServerThread(create_app(config))
    else:
        server = ProxyThread(faulty.url, http=http, read_timeout=30.0)
    with server as proxy, httpx.Client(timeout=5, trust_env=False) as c:
        body = chat("fault-sse-endless") | {"stream": True}
        with c.stream("POST", f"{proxy.url}/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            next(r.iter_raw())  # the stream is under way
        c.close()  # the client hangs up
        deadline = time.monotonic() + 10
        while faulty.abandoned == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert faulty.abandoned == 1  # not after the upstream's 30 s of events


# -- memory -------------------------------------------------------------------------------


def test_texts_of_rejected_requests_are_not_cached(
    faulty: FaultUpstream, client: httpx.Client
) -> None:
    cache = get_tokenizer("cl100k_base")  # gpt-4's
    rejected = "rejected " + " ".join(f"r{i}" for i in range(20_000))
    accepted = f"accepted text {time.time()}"
    with ProxyThread(faulty.url) as proxy:
        r = client.post(
            f"{proxy.url}/v1/chat/completions",
            json={"model": "gpt-4", "messages": [{"role": "user", "content": rejected}]},
        )
        assert_error(r, 400, "context_length_exceeded")
        r = client.post(
            f"{proxy.url}/v1/chat/completions",
            json={"model": "gpt-4", "messages": [{"role": "user", "content": accepted}]},
        )
        assert r.status_code == 200, r.text
    assert rejected not in cache
    assert accepted in cache  # the same path caches what an answered request counted


_SERVED_BY = ("tokenflex", "uvicorn", "starlette")
"""The modules of the objects a served request makes (the test's own client is httpx's)."""


@pytest.mark.parametrize("http", ["httptools", "h11"])
def test_a_served_request_leaves_nothing_to_the_cyclic_collector(
    faulty: FaultUpstream, client: httpx.Client, http: str
) -> None:
    """A request's objects are freed when it ends, not left in a reference cycle for the
    collector (which walks everything young on a busy proxy, and holds the request's
    memory until it runs): a chat request, one that is cut, an Anthropic one and a
    request whose client went away, under both of ``tokenflex serve``'s protocols."""
    long = [{"role": "user", "content": f"turn {i} " + "words " * 400} for i in range(40)]
    requests = [
        ("/v1/chat/completions", chat("gpt-4o")),
        ("/v1/chat/completions", {"model": "gpt-4", "messages": long, "max_tokens": 100}),
        ("/v1/messages", {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": long[:3]}),
    ]
    with ProxyThread(faulty.url, http=http) as proxy:
        for path, body in requests:  # warm: first loads (tokenizers, routes) are kept
            r = client.post(proxy.url + path, json=body)
            assert r.status_code == 200, r.text
        assert r.headers["x-tokenflex-dropped"] == "0"  # the Anthropic one fits
        cut = client.post(proxy.url + requests[1][0], json=requests[1][1])
        assert int(cut.headers["x-tokenflex-dropped"]) > 0  # the long one is cut
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for path, body in requests * 3:
                r = client.post(proxy.url + path, json=body)
                assert r.status_code == 200, r.text
            with httpx.Client(timeout=0.3, trust_env=False) as c, pytest.raises(httpx.ReadTimeout):
                c.post(f"{proxy.url}/v1/chat/completions", json=chat("fault-never"))
            time.sleep(0.2)  # the proxy hears the hang-up and ends the request
            gc.collect()
            left = sorted(
                type(o).__module__ + "." + type(o).__qualname__
                for o in gc.garbage
                if type(o).__module__.startswith(_SERVED_BY)
            )
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    assert left == []


async def test_a_request_the_event_loop_reached_late_is_shed_at_once() -> None:
    """Time before the middleware sees a request (a saturated loop) counts as queue time."""
    config = ServerConfig.load(
        upstream="http://127.0.0.1:9", max_inflight=1, max_queue=4, queue_timeout=1.0
    )
    release = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:  # holds the only slot
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    limits = Limits(app, config)

    async def request(arrived: float | None) -> tuple[int, float]:
        sent: list[dict[str, Any]] = []
        delivered: list[bool] = []

        async def receive() -> dict[str, Any]:
            if not delivered:  # the (empty) body once, then a disconnect when released
                delivered.append(True)
                return {"type": "http.request", "body": b"", "more_body": False}
            await release.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "GET", "path": "/v1/models", "headers": []}
        if arrived is not None:
            scope[ARRIVED] = arrived
        t0 = time.monotonic()
        await limits(scope, receive, send)
        return int(sent[0]["status"]), time.monotonic() - t0

    loop = asyncio.get_running_loop()
    first = asyncio.create_task(request(loop.time()))
    await asyncio.sleep(0.05)
    status, took = await request(loop.time() - 2.0)  # read 2 s ago: stale already
    assert status == 503 and took < 0.5
    status, took = await request(loop.time())  # fresh: waits its queue_timeout
    assert status == 503 and 0.8 < took < 2.0
    release.set()
    assert (await first)[0] == 200
