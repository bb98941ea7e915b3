"""Hardening, round 2 (issue 25, the request-handling items): each attacker's reproduction
against the real app under uvicorn, over loopback, in front of a real upstream that
records what reaches it; clients are raw ``http.client`` requests (the target as
written) or the official ``openai`` / ``anthropic`` SDKs.

:data:`CORPUS` holds the small bodies that must be refused with a 400 of the route's own
shape and never reach the upstream (nesting, content-part types, tools without names,
blocks and items chat-strict checks would refuse), and the other spellings of fitted
routes; the other tests cover cut streams, per-client limits, upstream ``usage``, the
server tokenizer's deadline, large-body counting, forwarding headers, the summarizer's
error text and ``tokenflex count /nonexistent``.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import anthropic
import anyio
import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from test_server import ServerThread, fake_discover
from test_server_attacks import Reply, send

import tokenflex
from tokenflex.models import register_model
from tokenflex.server import ServerConfig, create_app
from tokenflex.server._validate import MAX_DEPTH
from tokenflex.server.limits import uvicorn_options
from tokenflex.tokenizers import register_tokenizer
from tokenflex.tokenizers.server import ServerTokenizer

JSON = {"content-type": "application/json"}
USER = [{"role": "user", "content": "hi"}]
CHEAP = "r2-cheap"
"""A model counted by :class:`Quarters` (no tokenizer file to load: quick to start)."""


class Quarters:
    """A stand-in tokenizer: a token per four characters."""

    name, exact = "quarters", True

    def count(self, text: str) -> int:
        return (len(text) + 3) // 4


# -- the upstream -------------------------------------------------------------------------


class Upstream:
    """What reached the upstream, and a gate that holds ``hold`` requests until opened."""

    def __init__(self) -> None:
        self.hits: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.gate = threading.Event()

    def add(self, hit: dict[str, Any]) -> None:
        with self.lock:
            self.hits.append(hit)

    def __len__(self) -> int:
        with self.lock:
            return len(self.hits)

    def last(self) -> dict[str, Any]:
        with self.lock:
            return self.hits[-1]


def sse(events: Sequence[tuple[str | None, dict[str, Any]]]) -> list[bytes]:
    return [
        (f"event: {name}\n" if name else "").encode()
        + b"data: "
        + json.dumps(data).encode()
        + b"\n\n"
        for name, data in events
    ]


ANTHROPIC_EVENTS = sse(
    [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-sonnet-4-5",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 5, "output_tokens": 0},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hel"},
            },
        ),
    ]
)
RESPONSES_EVENTS = sse(
    [
        (
            "response.created",
            {
                "type": "response.created",
                "sequence_number": 0,
                "response": {"id": "resp_1", "object": "response", "status": "in_progress"},
            },
        ),
        (
            "response.output_text.delta",
            {
                "type": "response.output_text.delta",
                "sequence_number": 1,
                "item_id": "msg_1",
                "output_index": 0,
                "content_index": 0,
                "delta": "Hel",
            },
        ),
    ]
)
CHAT_EVENTS = sse([(None, {"id": "c1", "object": "chat.completion.chunk", "choices": []})])


def upstream_app(seen: Upstream) -> Starlette:
    async def cut(events: list[bytes]) -> AsyncIterator[bytes]:
        for event in events:
            yield event
        raise ConnectionAbortedError("the upstream broke off mid-stream (on purpose)")

    async def answer(request: Request) -> Response:
        body = json.loads(await request.body())
        seen.add({"path": request.url.path, "body": body, "headers": dict(request.headers)})
        model = str(body.get("model", ""))
        if model == "hold":
            await anyio.to_thread.run_sync(seen.gate.wait, 30)
        path = request.url.path
        if body.get("stream"):
            events = {"/v1/messages": ANTHROPIC_EVENTS, "/v1/responses": RESPONSES_EVENTS}
            return StreamingResponse(
                cut(events.get(path, CHAT_EVENTS)), media_type="text/event-stream"
            )
        if model.startswith("usage:"):
            text = (
                '{"id": "c1", "object": "chat.completion", "choices": [{"index": 0, "message": '
                '{"role": "assistant", "content": "ok"}, "finish_reason": "stop"}], '
                f'"usage": {{"prompt_tokens": {model.removeprefix("usage:")}, '
                '"completion_tokens": 1}}'
            )
            return Response(text, media_type="application/json")
        reply = {
            "id": "c1",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
        }
        return JSONResponse(reply)

    async def echo(request: Request) -> Response:
        seen.add({"path": request.url.path, "headers": dict(request.headers)})
        return JSONResponse(
            {"echo": True, "headers": dict(request.headers)},
            headers={
                "connection": "x-up-secret",
                "x-up-secret": "hop",
                "x-up-kept": "yes",
                "x-up-title": UTF8_TITLE,
            },
        )

    return Starlette(
        routes=[
            Route("/v1/chat/completions", answer, methods=["POST"]),
            Route("/v1/messages", answer, methods=["POST"]),
            Route("/v1/responses", answer, methods=["POST"]),
            Route("/{path:path}", echo, methods=["GET", "POST"]),
        ]
    )


@pytest.fixture(autouse=True)
def cheap_model() -> None:
    register_tokenizer("quarters", Quarters, replace=True)
    register_model(name=CHEAP, context_window=8_192, tokenizer="quarters", chat_format="openai")


@pytest.fixture(scope="module")
def seen() -> Upstream:
    return Upstream()


def serve_options(config: ServerConfig) -> dict[str, Any]:
    """The uvicorn settings ``tokenflex serve`` runs with (h11: the raw tests below)."""
    return uvicorn_options(config, http="h11")


@pytest.fixture(scope="module")
def proxies(seen: Upstream) -> Iterator[dict[str, ServerThread]]:
    with ServerThread(upstream_app(seen)) as upstream:

        def proxy(**options: Any) -> ServerThread:
            config = ServerConfig.load(upstream=upstream.url, read_timeout=10.0, **options)
            return ServerThread(create_app(config, discover=fake_discover), **serve_options(config))

        servers = {
            "open": proxy(routes={"x0": {}}),
            "set": proxy(forwarded_for="set"),
            "append": proxy(forwarded_for="append"),
            "perclient": proxy(max_inflight_per_client=2),
            "lane": proxy(large_body_bytes=4_000, queue_timeout=0.5),
        }
        for s in servers.values():
            s.__enter__()
        try:
            yield servers
        finally:
            seen.gate.set()
            for s in servers.values():
                s.__exit__(None, None, None)


# -- the corpus: small bodies that must be a 400, never a 500 or forwarded ----------------


@dataclass
class Case:
    id: str
    target: str
    body: Any
    status: int = 400
    shape: str = "openai"  # or "anthropic": the error body's shape
    param: str | None = None


def nested(depth: int, leaf: Any = "x") -> Any:
    value = leaf
    for _ in range(depth - 1):
        value = [value]
    return value


def deep_messages(levels: int) -> str:
    """Anthropic messages whose tool results nest ``levels`` deep (two JSON levels each:
    10 KB of JSON 900 deep at 450), as JSON text."""
    opening = '{"type": "tool_result", "tool_use_id": "t", "content": ['
    block = opening * levels + '{"type": "text", "text": "x"}' + "]}" * levels
    return f'[{{"role": "user", "content": [{block}]}}]'


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": CHEAP, "messages": USER, **extra}


def claude(messages: Any = None, **extra: Any) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 50, "messages": messages or USER, **extra}


def responses(items: Any, **extra: Any) -> dict[str, Any]:
    return {"model": CHEAP, "input": items, **extra}


def user_blocks(*blocks: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(blocks)}]


CHAT, MESSAGES, COUNT_TOKENS = "/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens"
RESPONSES, INPUT_TOKENS, COUNT = "/v1/responses", "/v1/responses/input_tokens", "/tokenflex/count"
NAMELESS_TOOL = {"description": "d", "input_schema": {"type": "object"}}
CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}

DEEP = "DEEP"  # replaced by deep_messages(450) in the JSON text

CORPUS: list[Case] = []
# item 8: nesting (900 deep is 10 KB; the recursion limit used to answer with a 500)
for target, body in [
    (CHAT, chat(metadata=nested(900))),
    (CHAT, {"model": "gpt-4o", "messages": [{"role": "user", "content": nested(900)}]}),
    (MESSAGES, claude(DEEP)),
    (COUNT_TOKENS, claude(DEEP)),
    (RESPONSES, responses([{"role": "user", "content": "hi", "x": nested(900)}])),
    (INPUT_TOKENS, responses("hi", tools=[{"type": "function", "name": "f", "p": nested(900)}])),
    (COUNT, {"model": "gpt-4o", "text": "hi", "tools": [{"x": nested(900)}]}),
    (CHAT, chat(metadata=nested(MAX_DEPTH + 1))),
]:
    shape = "anthropic" if target.startswith(MESSAGES) else "openai"
    CORPUS.append(Case(f"deep-{len(CORPUS)}", target, body, shape=shape))
# item 8: a content part's "type" that is a list or an object; tools without a name
for kind in (["text"], {"text": 1}):
    bad = {"type": kind, "text": "hi"}
    CORPUS += [
        Case(f"part-type-chat-{type(kind).__name__}", CHAT, chat(messages=user_blocks(bad))),
        Case(f"part-type-count-{type(kind).__name__}", COUNT, chat(messages=user_blocks(bad))),
        Case(
            f"part-type-anthropic-{type(kind).__name__}",
            MESSAGES,
            claude(user_blocks(bad)),
            shape="anthropic",
        ),
        Case(
            f"part-type-responses-{type(kind).__name__}",
            RESPONSES,
            responses([{"role": "user", "content": [bad]}]),
        ),
    ]
for target in (MESSAGES, COUNT_TOKENS):
    CORPUS.append(
        Case(
            f"tool-without-name-{target}",
            target,
            claude(tools=[NAMELESS_TOOL]),
            shape="anthropic",
            param="tools[0].name",
        )
    )
# item 15: blocks and items chat's checks would refuse
ANTHROPIC_BAD = [
    ("tool-result-without-id", user_blocks({"type": "tool_result", "content": "42"})),
    ("tool-result-id-number", user_blocks({"type": "tool_result", "tool_use_id": 7})),
    (
        "tool-use-without-id",
        [{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}],
    ),
    (
        "tool-use-input-string",
        [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "{}"}],
            }
        ],
    ),
    ("unknown-block", user_blocks({"type": "evil", "text": "hi"})),
    ("block-without-type", user_blocks({"text": "hi"})),
    ("text-without-text", user_blocks({"type": "text"})),
    ("image-without-source", user_blocks({"type": "image"})),
    (
        "nested-unknown-block",
        user_blocks({"type": "tool_result", "tool_use_id": "t", "content": [{"type": "evil"}]}),
    ),
]
for name, messages in ANTHROPIC_BAD:
    for target in (MESSAGES, COUNT_TOKENS):
        CORPUS.append(Case(f"{name}-{target}", target, claude(messages), shape="anthropic"))
CORPUS.append(
    Case(
        "unknown-system-block",
        MESSAGES,
        claude(system=[{"type": "evil", "text": "x"}]),
        shape="anthropic",
    )
)
RESPONSES_BAD = [
    ("function-call-without-fields", [{"type": "function_call"}]),
    ("function-call-without-name", [{**CALL, "name": None}]),
    ("function-call-arguments-object", [{**CALL, "arguments": {}}]),
    ("output-without-call-id", [CALL, {"type": "function_call_output", "output": "42"}]),
    ("output-without-output", [CALL, {"type": "function_call_output", "call_id": "c1"}]),
    ("unknown-item", [{"type": "evil", "text": "hi"}]),
    ("item-type-list", [{"type": ["message"], "role": "user", "content": "hi"}]),
    (
        "item-reference",
        [{"type": "item_reference", "id": "msg_123"}, {"role": "user", "content": "hi"}],
    ),
    ("unknown-part", [{"role": "user", "content": [{"type": "evil", "text": "hi"}]}]),
    ("message-without-content", [{"type": "message", "role": "user"}]),
    ("message-bad-role", [{"type": "message", "role": "tool", "content": "hi"}]),
]
for name, items in RESPONSES_BAD:
    for target in (RESPONSES, INPUT_TOKENS):
        CORPUS.append(Case(f"{name}-{target}", target, responses(items)))
# item 16: /tokenflex/count honours tools
for i, tools in enumerate([[1], "x", [{"type": "function"}, None]]):
    CORPUS.append(
        Case(f"count-tools-{i}", COUNT, {"model": "gpt-4o", "text": "hi", "tools": tools})
    )
# item 13: other spellings of fitted routes, which an upstream may read as the same path
for i, path in enumerate(
    [
        "/V1/chat/completions",
        "/v1/Chat/Completions",
        "/v1/chat/completions;x=1",
        "/v1/chat/completions%3Bx",
        "/CHAT/COMPLETIONS/",
        "/v1/Messages",
        "/v1/responses;v=2/",
        "/v1/messages/Count_Tokens",
        "/x0/V1/chat/completions",
        "/x0/Chat/completions",
    ]
):
    CORPUS.append(Case(f"fitted-spelling-{i}", path, chat()))


@pytest.mark.parametrize("case", CORPUS, ids=[c.id for c in CORPUS])
def test_round2_corpus(case: Case, proxies: dict[str, ServerThread], seen: Upstream) -> None:
    before = len(seen)
    body = json.dumps(case.body).replace(f'"{DEEP}"', deep_messages(450)).encode()
    r = send(proxies["open"].port, "POST", case.target, JSON, body)
    assert r.status == case.status, (r.status, r.body[:500])
    assert len(seen) == before, "a refused request reached the upstream"
    data = r.json()
    if case.shape == "anthropic":
        assert data["type"] == "error" and data["error"]["type"] == "invalid_request_error", data
        assert data["error"]["message"]
    else:
        err = r.error()
        assert err["type"] == "invalid_request_error", err
        if case.param is not None:
            assert err["param"] == case.param, err


def test_round2_corpus_is_large() -> None:
    assert len(CORPUS) >= 70, len(CORPUS)


@pytest.mark.parametrize(
    ("target", "body"),
    [
        pytest.param(CHAT, chat(metadata=nested(MAX_DEPTH - 2)), id="chat-nested-to-the-bound"),
        pytest.param(
            MESSAGES,
            claude(
                [
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "thinking", "thinking": "t", "signature": "s"},
                            {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                            {"type": "server_tool_use", "id": "s1", "name": "web_search"},
                            {"type": "web_search_tool_result", "tool_use_id": "s1", "content": []},
                        ],
                    },
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": "t1", "content": "42"},
                            {"type": "text", "text": "and?"},
                        ],
                    },
                ],
                tools=[{"name": "f", "input_schema": {"type": "object"}}],
            ),
            id="anthropic-tool-round",
        ),
        pytest.param(
            RESPONSES,
            responses(
                [
                    {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                    {"type": "reasoning", "id": "r1", "summary": []},
                    CALL,
                    {"type": "function_call_output", "call_id": "c1", "output": "42"},
                    {"type": "web_search_call", "id": "w1", "status": "completed"},
                    {"role": "user", "content": "and?"},
                ]
            ),
            id="responses-tool-round",
        ),
    ],
)
def test_well_formed_requests_still_pass(
    target: str, body: dict[str, Any], proxies: dict[str, ServerThread], seen: Upstream
) -> None:
    raw = json.dumps(body).encode()
    r = send(proxies["open"].port, "POST", target, JSON, raw)
    assert r.status == 200, r.body[:500]
    assert seen.last()["body"] == body  # it fits: forwarded as sent


# -- item 13: alias spellings are fitted ---------------------------------------------------


def long_history() -> list[dict[str, Any]]:
    """A conversation the 1,024-token 'tiny' model cannot take whole."""
    msgs = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"{i} " + "lorem ipsum " * 60}
        for i in range(30)
    ]
    return [*msgs, {"role": "user", "content": "And now?"}]


@pytest.mark.parametrize(
    ("target", "upstream_path", "body"),
    [
        (CHAT + "/", CHAT, {"model": "tiny", "messages": long_history(), "max_tokens": 100}),
        ("/chat/completions", CHAT, {"model": "tiny", "messages": long_history()}),
        ("/chat/completions/", CHAT, {"model": "tiny", "messages": long_history()}),
        ("/x0/chat/completions", CHAT, {"model": "tiny", "messages": long_history()}),
        (
            MESSAGES + "/",
            MESSAGES,
            {"model": "tiny", "max_tokens": 100, "messages": long_history()},
        ),
        ("/messages", MESSAGES, {"model": "tiny", "max_tokens": 100, "messages": long_history()}),
        (RESPONSES + "/", RESPONSES, {"model": "tiny", "input": long_history()}),
        ("/responses", RESPONSES, {"model": "tiny", "input": long_history()}),
    ],
)
def test_alias_spellings_of_fitted_routes_are_fitted(
    target: str,
    upstream_path: str,
    body: dict[str, Any],
    proxies: dict[str, ServerThread],
    seen: Upstream,
) -> None:
    r = send(proxies["open"].port, "POST", target, JSON, json.dumps(body).encode())
    assert r.status == 200, r.body[:500]
    assert int(r.headers["x-tokenflex-input-tokens"]) < 1024
    hit = seen.last()
    assert hit["path"] == upstream_path
    sent = hit["body"].get("messages") or hit["body"]["input"]
    assert len(sent) < len(body.get("messages") or body["input"])  # fitted, not passed through


@pytest.mark.parametrize(
    "target", [COUNT_TOKENS + "/", "/messages/count_tokens", INPUT_TOKENS + "/"]
)
def test_alias_spellings_of_count_routes_are_answered_here(
    target: str, proxies: dict[str, ServerThread], seen: Upstream
) -> None:
    before = len(seen)
    body = claude() if "messages" in target else responses("hi")
    r = send(proxies["open"].port, "POST", target, JSON, json.dumps(body).encode())
    assert r.status == 200, r.body
    assert r.json()["input_tokens"] > 0
    assert len(seen) == before


# -- item 7: a cut stream ends with an error event in the route's shape --------------------


def test_a_cut_anthropic_stream_raises_in_the_anthropic_sdk(
    proxies: dict[str, ServerThread],
) -> None:
    client = anthropic.Anthropic(
        base_url=proxies["open"].url, api_key="sk-test", max_retries=0, timeout=20
    )
    received: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as raised:
        stream = client.messages.create(
            model="claude-r2",  # not a deprecated name: the SDK would warn
            max_tokens=50,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
        )
        for event in stream:
            received.append(event.type)
    assert received == ["message_start", "content_block_start", "content_block_delta"]
    assert "upstream" in str(raised.value)


def test_a_cut_responses_stream_ends_with_a_responses_error_event(
    proxies: dict[str, ServerThread],
) -> None:
    client = openai.OpenAI(
        base_url=proxies["open"].url + "/v1", api_key="sk-test", max_retries=0, timeout=20
    )
    events = list(client.responses.create(model=CHEAP, input="hi", stream=True))
    assert [e.type for e in events] == ["response.created", "response.output_text.delta", "error"]
    assert "upstream" in events[-1].message  # type: ignore[union-attr]
    # on the wire: the Responses API's own error event, never a response.completed
    with httpx.stream(
        "POST",
        proxies["open"].url + RESPONSES,
        json=responses("hi", stream=True),
        timeout=20,
    ) as r:
        lines = [line for line in r.iter_lines() if line]
    assert lines[-2] == "event: error"
    last = json.loads(lines[-1].removeprefix("data: "))
    assert last["type"] == "error" and last["code"] == "upstream_error" and last["message"]


def test_a_cut_chat_stream_still_raises_in_the_openai_sdk(
    proxies: dict[str, ServerThread],
) -> None:
    client = openai.OpenAI(
        base_url=proxies["open"].url + "/v1", api_key="sk-test", max_retries=0, timeout=20
    )
    with pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(model="gpt-4o", messages=USER, stream=True):
            pass


# -- item 9: one client cannot hold every slot ---------------------------------------------


def test_one_client_cannot_hold_every_slot(
    proxies: dict[str, ServerThread], seen: Upstream
) -> None:
    port = proxies["perclient"].port
    held = json.dumps({"model": "hold", "messages": USER}).encode()
    greedy = {**JSON, "authorization": "Bearer sk-greedy"}
    seen.gate.clear()
    before = len(seen)
    replies: list[Reply] = []
    threads = [
        threading.Thread(target=lambda: replies.append(send(port, "POST", CHAT, greedy, held)))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 10
        while len(seen) < before + 2:  # both in flight at the upstream
            assert time.monotonic() < deadline, "the held requests did not arrive"
            time.sleep(0.02)
        r = send(port, "POST", CHAT, greedy, json.dumps(chat()).encode())
        assert r.status == 429, r.body
        assert r.error()["code"] == "client_inflight_limit"
        assert r.headers["retry-after"].isdigit()
        assert len(seen) == before + 2
        other = {**JSON, "authorization": "Bearer sk-other"}
        assert send(port, "POST", CHAT, other, json.dumps(chat()).encode()).status == 200
        assert send(port, "POST", CHAT, JSON, json.dumps(chat()).encode()).status == 200
    finally:
        seen.gate.set()
        for t in threads:
            t.join()
    assert [r.status for r in replies] == [200, 200]
    # its slots are its own again once they are answered
    assert send(port, "POST", CHAT, greedy, json.dumps(chat()).encode()).status == 200


# -- item 10: implausible upstream usage ---------------------------------------------------


@pytest.mark.parametrize(
    "usage",
    [
        "1e308",
        "Infinity",
        "-Infinity",
        "NaN",
        "-1",
        "0",
        "1e20",
        "100000000000000000000",
        '"12"',
        "true",
        "null",
        "[11]",
    ],
)
def test_implausible_upstream_usage_is_ignored(
    usage: str, proxies: dict[str, ServerThread]
) -> None:
    proxy = proxies["open"].app.state.proxy
    register_model(name=f"usage:{usage}", context_window=8_192, tokenizer="quarters")
    body = json.dumps({"model": f"usage:{usage}", "messages": USER}).encode()
    r = send(proxies["open"].port, "POST", CHAT, JSON, body)
    assert r.status == 200, r.body
    assert r.json()["choices"][0]["message"]["content"] == "ok"
    assert "x-tokenflex-calibration" not in r.headers
    factors = [v.get("factor", 1.0) for v in proxy.calibration.snapshot().values()]
    assert all(f == 1.0 for f in factors), proxy.calibration.snapshot()


# -- item 11: the server tokenizer's timeout is per call -----------------------------------


@pytest.mark.parametrize("phase", ["headers", "body"])
def test_a_trickling_tokenize_endpoint_is_cut_off_at_the_deadline(phase: str) -> None:
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))

    def trickle() -> None:  # one byte every 0.2 s: 100 bytes would take 20 s
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            head = (
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n"
            )
            if phase == "body":
                conn.sendall(head)
            for byte in (head if phase == "headers" else b"") + b'{"tokens": [1]}' + b" " * 85:
                if stop.wait(0.2):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    tok = ServerTokenizer(
        f"http://127.0.0.1:{listener.getsockname()[1]}", kind="llama.cpp", timeout=1.0
    )
    started = time.monotonic()
    try:
        with pytest.raises(tokenflex.TokenizerUnavailableError, match="ReadTimeout"):
            tok.count("hello")
        assert time.monotonic() - started < 5  # a per-read timeout would wait 20 s
    finally:
        stop.set()
        tok.close()
        listener.close()
        thread.join(timeout=5)


# -- item 12: large bodies are counted one at a time --------------------------------------


def test_large_bodies_are_counted_one_at_a_time(
    proxies: dict[str, ServerThread], seen: Upstream
) -> None:
    entered = threading.Event()
    release = threading.Event()

    async def tokenize(request: Request) -> Response:
        entered.set()
        await anyio.to_thread.run_sync(release.wait, 20)
        data = await request.json()
        return JSONResponse({"tokens": [1] * (len(data["content"]) // 4 + 1)})

    app = Starlette(routes=[Route("/tokenize", tokenize, methods=["POST"])])
    port = proxies["lane"].port
    with ServerThread(app) as tokenizer:
        register_tokenizer(
            "held-tok",
            lambda: ServerTokenizer(tokenizer.url, kind="llama.cpp", timeout=20),
            replace=True,
        )
        register_model(
            name="held-model", context_window=100_000, tokenizer="held-tok", replace=True
        )
        large = json.dumps(
            {"model": "held-model", "messages": [{"role": "user", "content": "word " * 2_000}]}
        ).encode()
        first: list[Reply] = []
        thread = threading.Thread(
            target=lambda: first.append(send(port, "POST", CHAT, JSON, large))
        )
        thread.start()
        try:
            assert entered.wait(10), "the first large request was not counted"
            before = len(seen)
            second = send(port, "POST", CHAT, JSON, large.replace(b"word", b"more"))
            assert second.status == 503, second.body
            assert second.error()["code"] == "proxy_overloaded"
            assert "large_body_bytes" in second.error()["message"]
            assert second.headers["retry-after"].isdigit()
            small = send(port, "POST", CHAT, JSON, json.dumps(chat(model=CHEAP)).encode())
            assert small.status == 200  # small requests do not wait for the lane
            assert len(seen) == before + 1
        finally:
            release.set()
            thread.join()
        assert first[0].status == 200, first[0].body


# -- item 14: hop-by-hop and forwarding headers --------------------------------------------

UTF8_TITLE = "Café ☕ app".encode().decode("latin-1")
"""UTF-8 bytes as HTTP libraries hand header values on: each byte a latin-1 character."""
LATIN1_NOTE = "café"
"""A value in latin-1 bytes (one byte for é)."""

HOSTILE_HEADERS = {
    "connection": "keep-alive, X-Secret",
    "x-secret": "for-the-next-hop-only",
    "x-forwarded-for": "6.6.6.6",
    "forwarded": "for=6.6.6.6;proto=https",
    "x-real-ip": "6.6.6.6",
    "x-kept": "yes",
}


@pytest.mark.parametrize(
    ("proxy", "forwarded_for"),
    [("open", None), ("set", "127.0.0.1"), ("append", "6.6.6.6, 127.0.0.1")],
)
def test_hop_by_hop_and_forwarding_headers(
    proxy: str, forwarded_for: str | None, proxies: dict[str, ServerThread]
) -> None:
    r = send(proxies[proxy].port, "GET", "/v1/files", HOSTILE_HEADERS)
    assert r.status == 200, r.body
    got = r.json()["headers"]
    assert got["x-kept"] == "yes"
    assert "x-secret" not in got
    assert "forwarded" not in got and "x-real-ip" not in got
    assert got.get("x-forwarded-for") == forwarded_for
    # and on the way back: what the upstream's Connection header names stays there
    assert r.headers["x-up-kept"] == "yes"
    assert "x-up-secret" not in r.headers


@pytest.mark.parametrize("route", ["GET /v1/files", "POST /v1/chat/completions"])
def test_header_bytes_past_ascii_go_through_as_they_came(
    route: str, proxies: dict[str, ServerThread], seen: Upstream
) -> None:
    # obs-text (RFC 9110 §5.5): an app's title in UTF-8, say. It was a 500 each way.
    method, path = route.split()
    body = json.dumps(chat()).encode() if method == "POST" else None
    headers = {**JSON, "x-title": UTF8_TITLE, "x-latin": LATIN1_NOTE}
    r = send(proxies["open"].port, method, path, headers, body)
    assert r.status == 200, r.body
    got = seen.last()["headers"]
    assert (got["x-title"], got["x-latin"]) == (UTF8_TITLE, LATIN1_NOTE)
    if method == "GET":  # the echo's answer carries a header of UTF-8 bytes back
        assert r.headers["x-up-title"] == UTF8_TITLE


TWICE = [
    (b"set-cookie", b"__cf_bm=a1; path=/; expires=Sun, 29-Nov-26 18:00:00 GMT; HttpOnly"),
    (b"set-cookie", b"_cfuvid=b2; path=/; SameSite=None; Secure"),
    (b"x-up-twice", b"one"),
    (b"x-up-twice", b"two"),
]
"""Headers an upstream gives twice (Cloudflare in front of an API sets two cookies): a
cookie's ``expires`` holds a comma, so the two cannot be joined into one line."""


@pytest.fixture(scope="module")
def twice() -> Iterator[ServerThread]:
    """A proxy in front of an upstream whose every answer carries :data:`TWICE`."""

    async def answer(request: Request) -> Response:
        body = json.loads(await request.body())
        out: Response
        if body.get("stream"):
            out = StreamingResponse(iter(CHAT_EVENTS), media_type="text/event-stream")
        else:
            message = {"role": "assistant", "content": "ok"}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
            out = JSONResponse(
                {
                    "id": "c1",
                    "object": "chat.completion",
                    "model": CHEAP,
                    "choices": [choice],
                    "usage": usage,
                }
            )
        out.raw_headers.extend(TWICE)
        return out

    async def other(request: Request) -> Response:
        out = JSONResponse({"object": "list", "data": [{"id": CHEAP, "object": "model"}]})
        out.raw_headers.extend(TWICE)
        return out

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", answer, methods=["POST"]),
            Route("/{path:path}", other, methods=["GET"]),
        ]
    )
    with ServerThread(app) as upstream:
        # (the model in the config: the module's registration is undone after each test)
        config = ServerConfig.load(upstream=upstream.url, models={CHEAP: {"context_window": 8192}})
        with ServerThread(create_app(config, discover=fake_discover)) as proxy:
            yield proxy


@pytest.mark.parametrize(
    "route", ["GET /v1/models", "POST chat", "POST chat stream", "POST gemini"]
)
def test_a_header_the_upstream_gives_twice_comes_back_twice(
    route: str, twice: ServerThread
) -> None:
    method, kind = route.split(" ", 1)
    gemini = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    path, body = {
        "/v1/models": ("/v1/models", None),
        "chat": (CHAT, chat()),
        "chat stream": (CHAT, chat(stream=True)),
        "gemini": (f"/v1beta/models/{CHEAP}:generateContent", gemini),
    }[kind]
    with httpx.Client(trust_env=False, timeout=30) as client:
        r = client.request(method, twice.url + path, json=body)
    assert r.status_code == 200, r.text
    for name in (b"set-cookie", b"x-up-twice"):
        sent = [v.decode() for k, v in TWICE if k == name]
        assert r.headers.get_list(name.decode()) == sent
    assert (r.headers.get("x-tokenflex-input-tokens") is not None) == (method == "POST")


def test_expect_is_answered_by_the_proxy_not_forwarded(
    proxies: dict[str, ServerThread],
) -> None:
    headers = {**JSON, "expect": "100-continue"}
    r = send(proxies["open"].port, "POST", "/v1/echo", headers, json.dumps(chat()).encode())
    assert r.status == 200, r.body
    assert "expect" not in r.json()["headers"]


# -- item 16: the summarizer's error text; tokenflex count /nonexistent -------------------


class _ErrorText:
    """A custom summarizer that returns its HTTP client's error text as the summary."""

    def summarize(
        self, messages: Sequence[Any], *, previous_summary: str | None, max_tokens: int
    ) -> str:
        return "Error: 500 Internal Server Error"


def test_a_summarizers_error_text_is_never_a_summary() -> None:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "Be terse."}]
    for i in range(60):
        msgs.append({"role": "user", "content": f"Question {i}: " + "tell me more " * 60})
        msgs.append({"role": "assistant", "content": f"Answer {i}."})
    msgs.append({"role": "user", "content": "And now?"})
    plan = tokenflex.fit(msgs, model=CHEAP, max_tokens=1000, summarizer=_ErrorText())
    assert plan.summary is None
    assert not any("Internal Server Error" in str(m.get("content")) for m in plan.messages)
    assert any("looks like an error message" in w for w in plan.warnings), plan.warnings


def test_count_of_a_missing_absolute_path_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    from tokenflex.cli import main

    assert main(["count", "/nonexistent"]) == 2
    assert "No such file '/nonexistent'" in capsys.readouterr().err


# -- item 8: the library ------------------------------------------------------------------


def deep_dict(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"a": 1}
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param(
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "hi", "x": deep_dict(3000)}],
                    }
                ]
            },
            id="deep-part",
        ),
        pytest.param(
            {
                "messages": USER,
                "tools": [
                    {"type": "function", "function": {"name": "f", "parameters": deep_dict(3000)}}
                ],
            },
            id="deep-tool",
        ),
        pytest.param(
            {"messages": USER, "tools": [NAMELESS_TOOL], "format": "anthropic"},
            id="anthropic-tool-without-name",
        ),
    ],
)
async def test_the_library_refuses_with_its_own_errors(kwargs: dict[str, Any]) -> None:
    model = "claude-sonnet-4-5" if kwargs.get("format") == "anthropic" else "gpt-4o"
    with pytest.raises(tokenflex.InvalidInputError):
        tokenflex.fit(model=model, **kwargs)
    with pytest.raises(tokenflex.InvalidInputError):
        await tokenflex.afit(model=model, **kwargs)
