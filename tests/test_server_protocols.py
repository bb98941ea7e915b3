"""The proxy's Anthropic Messages and Responses routes.

End to end with the official ``anthropic`` and ``openai`` SDKs as clients, through the
proxy, against the native llama.cpp ``llama-server`` (SmolLM2, 2048-token window): long
conversations with tool use that the server refuses as sent (400
``exceed_context_size_error``) succeed through the proxy, streamed or not, with the input
the server reports inside its window minus the output the proxy negotiated.

Then, against a recording upstream on loopback: what the fitted body keeps
(``previous_response_id``, unknown fields), the count routes, and a small attack corpus
for the new routes (bad JSON, wrong types, wrong media type, GET -> 405), each in the
route's own error shape and never reaching the upstream.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_server import LlamaCppServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from test_server import ServerThread, fake_discover

from tokenflex.server import ServerConfig, create_app

WINDOW = 2048
SYSTEM = "You are a concise assistant. Use the tools when asked about the weather."
ANTHROPIC_TOOLS: list[dict[str, Any]] = [
    {
        "name": "get_weather",
        "description": "The current weather for a city.",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]
RESPONSES_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The current weather for a city.",
        "parameters": ANTHROPIC_TOOLS[0]["input_schema"],
    }
]
WORDS = ["river", "budget", "window", "kernel", "packet", "village", "harvest", "signal"]


def _text(rng: random.Random, low: int = 20, high: int = 90) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high))).capitalize() + "."


def anthropic_conversation(turns: int, seed: int) -> list[dict[str, Any]]:
    """``turns`` rounds of question, tool_use, tool_result and answer; then a question."""
    rng = random.Random(seed)
    msgs: list[dict[str, Any]] = []
    for i in range(turns):
        call = f"toolu_{seed}_{i}"
        msgs += [
            {"role": "user", "content": f"{_text(rng)} What is the weather in town {i}?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me check."},
                    {
                        "type": "tool_use",
                        "id": call,
                        "name": "get_weather",
                        "input": {"city": f"t{i}"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call, "content": _text(rng)}],
            },
            {"role": "assistant", "content": _text(rng, 5, 30)},
        ]
    msgs.append({"role": "user", "content": "In one sentence: what did we discuss?"})
    return msgs


def responses_conversation(turns: int, seed: int) -> list[dict[str, Any]]:
    """The same in Responses items: messages, function_call and function_call_output."""
    rng = random.Random(seed)
    items: list[dict[str, Any]] = []
    for i in range(turns):
        call = f"call_{seed}_{i}"
        items += [
            {
                "type": "message",
                "role": "user",
                "content": f"{_text(rng)} What is the weather in town {i}?",
            },
            {
                "type": "function_call",
                "call_id": call,
                "name": "get_weather",
                "arguments": json.dumps({"city": f"t{i}"}),
            },
            {"type": "function_call_output", "call_id": call, "output": _text(rng)},
            {"type": "message", "role": "assistant", "content": _text(rng, 5, 30)},
        ]
    question = "In one sentence: what did we discuss?"
    items.append({"type": "message", "role": "user", "content": question})
    return items


# -- against the real llama-server --------------------------------------------------------


@pytest.fixture(scope="module")
def real_proxy(llama_cpp_server: LlamaCppServer) -> Iterator[ServerThread]:
    config = ServerConfig.load(upstream=llama_cpp_server.base_url, discovery_timeout=60)
    with ServerThread(create_app(config)) as proxy:
        yield proxy


def _direct(server: LlamaCppServer, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.base_url}/{path}", json=body, timeout=300, trust_env=False)


def _refused_as_sent(server: LlamaCppServer, path: str, body: dict[str, Any]) -> None:
    r = _direct(server, path, body)
    assert r.status_code == 400, r.text[:300]
    error = r.json()["error"]
    assert error["type"] == "exceed_context_size_error"
    assert error["n_prompt_tokens"] > error["n_ctx"] == WINDOW


def _check_plan_headers(headers: httpx.Headers) -> int:
    """The negotiated output; the headers' own budget is inside the window."""
    assert int(headers["x-tokenflex-context-window"]) == WINDOW
    assert int(headers["x-tokenflex-dropped"]) > 0
    max_tokens = int(headers["x-tokenflex-max-tokens"])
    assert int(headers["x-tokenflex-input-tokens"]) + max_tokens <= WINDOW
    return max_tokens


@pytest.mark.server
@pytest.mark.parametrize(("turns", "seed"), [(25, 1), (60, 2)])
def test_anthropic_sdk_long_conversation_fits(
    llama_cpp_server: LlamaCppServer, real_proxy: ServerThread, turns: int, seed: int
) -> None:
    messages = anthropic_conversation(turns, seed)
    body = {"model": llama_cpp_server.model, "system": SYSTEM, "messages": messages}
    _refused_as_sent(
        llama_cpp_server, "messages", {**body, "tools": ANTHROPIC_TOOLS, "max_tokens": 16}
    )
    client = anthropic.Anthropic(base_url=real_proxy.url, api_key="sk-test", max_retries=0)
    raw = client.messages.with_raw_response.create(
        model=llama_cpp_server.model,
        system=SYSTEM,
        messages=messages,  # type: ignore[arg-type]
        tools=ANTHROPIC_TOOLS,  # type: ignore[arg-type]
        max_tokens=16,
    )
    max_tokens = _check_plan_headers(raw.http_response.headers)
    reply = raw.parse()
    assert reply.type == "message"
    seen = reply.usage.input_tokens + (reply.usage.cache_read_input_tokens or 0)
    assert 0 < seen <= WINDOW - max_tokens
    assert reply.usage.output_tokens <= max_tokens


@pytest.mark.server
def test_anthropic_sdk_stream_fits(
    llama_cpp_server: LlamaCppServer, real_proxy: ServerThread
) -> None:
    messages = anthropic_conversation(40, 3)
    client = anthropic.Anthropic(base_url=real_proxy.url, api_key="sk-test", max_retries=0)
    with client.messages.stream(
        model=llama_cpp_server.model,
        system=SYSTEM,
        messages=messages,  # type: ignore[arg-type]
        tools=ANTHROPIC_TOOLS,  # type: ignore[arg-type]
        max_tokens=16,
    ) as stream:
        max_tokens = _check_plan_headers(stream.response.headers)
        events = [e.type for e in stream]
        final = stream.get_final_message()
    assert events[-1] == "message_stop"
    assert final.usage.output_tokens <= max_tokens
    # the input the server saw, by its own count of the same fitted request
    plan_id = stream.response.headers["x-tokenflex-plan-id"]
    plan = httpx.get(
        f"{real_proxy.url}/tokenflex/plans/{plan_id}",
        headers={  # the credentials the SDK sent own the plan
            k: v
            for k, v in stream.response.request.headers.items()
            if k in ("authorization", "x-api-key")
        },
        timeout=10,
        trust_env=False,
    ).json()
    assert "messages" in plan, plan
    counted = _direct(
        llama_cpp_server,
        "messages/count_tokens",
        {"model": llama_cpp_server.model, "system": plan["system"], "messages": plan["messages"]},
    )
    assert counted.status_code == 200, counted.text
    assert 0 < counted.json()["input_tokens"] <= WINDOW - max_tokens


@pytest.mark.server
@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "stream"])
def test_openai_sdk_responses_long_conversation_fits(
    llama_cpp_server: LlamaCppServer, real_proxy: ServerThread, stream: bool
) -> None:
    items = responses_conversation(40, 4 + stream)
    body = {"model": llama_cpp_server.model, "instructions": SYSTEM, "input": items}
    _refused_as_sent(
        llama_cpp_server, "responses", {**body, "tools": RESPONSES_TOOLS, "max_output_tokens": 16}
    )
    client = openai.OpenAI(base_url=f"{real_proxy.url}/v1", api_key="sk-test", max_retries=0)
    if not stream:
        raw = client.responses.with_raw_response.create(
            model=llama_cpp_server.model,
            instructions=SYSTEM,
            input=items,  # type: ignore[arg-type]
            tools=RESPONSES_TOOLS,  # type: ignore[arg-type]
            max_output_tokens=16,
        )
        max_tokens = _check_plan_headers(raw.headers)
        response = raw.parse()
    else:
        with client.responses.with_streaming_response.create(
            model=llama_cpp_server.model,
            instructions=SYSTEM,
            input=items,  # type: ignore[arg-type]
            tools=RESPONSES_TOOLS,  # type: ignore[arg-type]
            max_output_tokens=16,
            stream=True,
        ) as raw_stream:
            max_tokens = _check_plan_headers(raw_stream.headers)
            events = list(raw_stream.parse())
        assert events[-1].type == "response.completed"
        response = events[-1].response  # type: ignore[union-attr]
    assert response.status == "completed"
    assert response.usage is not None
    assert 0 < response.usage.input_tokens <= WINDOW - max_tokens
    assert response.usage.output_tokens <= max_tokens


@pytest.mark.server
def test_count_routes_answer_from_the_proxy_count_at_or_above_the_server(
    llama_cpp_server: LlamaCppServer, real_proxy: ServerThread
) -> None:
    """Our count is what fitting budgets with: never below what the server counts."""
    messages = anthropic_conversation(3, 6)
    client = anthropic.Anthropic(base_url=real_proxy.url, api_key="sk-test", max_retries=0)
    ours = client.messages.count_tokens(
        model=llama_cpp_server.model,
        system=SYSTEM,
        messages=messages,  # type: ignore[arg-type]
        tools=ANTHROPIC_TOOLS,  # type: ignore[arg-type]
    ).input_tokens
    theirs = _direct(
        llama_cpp_server,
        "messages/count_tokens",
        {
            "model": llama_cpp_server.model,
            "system": SYSTEM,
            "messages": messages,
            "tools": ANTHROPIC_TOOLS,
        },
    ).json()["input_tokens"]
    assert ours >= theirs > 0
    items = responses_conversation(3, 7)
    r = httpx.post(
        f"{real_proxy.url}/v1/responses/input_tokens",
        json={"model": llama_cpp_server.model, "instructions": SYSTEM, "input": items},
        timeout=60,
        trust_env=False,
    )
    assert r.status_code == 200, r.text
    assert r.json()["object"] == "response.input_tokens"
    theirs = _direct(
        llama_cpp_server,
        "responses/input_tokens",
        {"model": llama_cpp_server.model, "instructions": SYSTEM, "input": items},
    ).json()["input_tokens"]
    assert r.json()["input_tokens"] >= theirs > 0


# -- against a recording upstream -----------------------------------------------------------


class Recorder:
    """Bodies that reached the upstream, by path."""

    def __init__(self) -> None:
        self.hits: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def app(self) -> Starlette:
        async def record(request: Request) -> Response:
            body = json.loads(await request.body())
            with self.lock:
                self.hits.append((request.url.path, body))
            return JSONResponse({"id": "r1", "echo": body})

        return Starlette(
            routes=[
                Route("/v1/messages", record, methods=["POST"]),
                Route("/v1/responses", record, methods=["POST"]),
            ]
        )


@pytest.fixture(scope="module")
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture(scope="module")
def proxy(recorder: Recorder) -> Iterator[ServerThread]:
    with ServerThread(recorder.app()) as upstream:
        config = ServerConfig.load(upstream=upstream.url, read_timeout=5.0)
        with ServerThread(create_app(config, discover=fake_discover)) as server:
            yield server


def _post(proxy: ServerThread, path: str, content: bytes, **headers: str) -> httpx.Response:
    headers = {"content-type": "application/json", **headers}
    return httpx.post(
        f"{proxy.url}{path}", content=content, headers=headers, timeout=30, trust_env=False
    )


def test_responses_body_keeps_previous_response_id_and_unknown_fields(
    proxy: ServerThread, recorder: Recorder
) -> None:
    items = responses_conversation(2, 8)
    body = {
        "model": "gpt-4o",
        "input": items,
        "instructions": SYSTEM,
        "previous_response_id": "resp_abc123",
        "store": False,
        "metadata": {"k": "v"},
    }
    r = _post(proxy, "/v1/responses", json.dumps(body).encode())
    assert r.status_code == 200, r.text
    sent = r.json()["echo"]
    assert sent["previous_response_id"] == "resp_abc123"
    assert sent["store"] is False and sent["metadata"] == {"k": "v"}
    assert sent["instructions"] == SYSTEM
    assert sent["input"] == items  # it fits: nothing dropped, the items as sent
    assert "max_output_tokens" not in sent  # nor a limit added: the client's own body


def test_responses_string_input_and_anthropic_body(proxy: ServerThread) -> None:
    r = _post(proxy, "/v1/responses", json.dumps({"model": "gpt-4o", "input": "Hi"}).encode())
    assert r.status_code == 200, r.text
    assert r.json()["echo"]["input"] == "Hi"  # it fits: the client's body as it came
    messages = anthropic_conversation(2, 9)
    body = {"model": "claude-sonnet-4-5", "system": SYSTEM, "messages": messages, "max_tokens": 64}
    r = _post(proxy, "/v1/messages", json.dumps(body).encode())
    assert r.status_code == 200, r.text
    sent = r.json()["echo"]
    assert sent["messages"] == messages and sent["system"] == SYSTEM
    assert sent["max_tokens"] == 64 == int(r.headers["x-tokenflex-max-tokens"])


def test_anthropic_overflow_is_an_anthropic_error(proxy: ServerThread, recorder: Recorder) -> None:
    before = len(recorder.hits)
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "word " * 200_000}]}
    r = _post(proxy, "/v1/messages", json.dumps({**body, "max_tokens": 10}).encode())
    assert r.status_code == 400
    error = r.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error"
    assert "128,000" in error["error"]["message"]
    assert len(recorder.hits) == before


USER = [{"role": "user", "content": "x"}]
TEXT = {"content-type": "text/plain"}
GZIP = {"content-encoding": "gzip"}


def _j(**fields: Any) -> bytes:
    """A JSON body for model gpt-4o with ``fields`` (``model=None`` leaves it out)."""
    body = {"model": "gpt-4o", **fields}
    return json.dumps({k: v for k, v in body.items() if v is not None}).encode()


# the attack corpus of the new routes: (path, body bytes, headers, status, error code)
MESSAGES, COUNT, RESPONSES, INPUT = (
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/responses",
    "/v1/responses/input_tokens",
)
CORPUS = [
    (MESSAGES, b"{not json", {}, 400, "invalid_json"),
    (MESSAGES, b"[1, 2]", {}, 400, "invalid_type"),
    (MESSAGES, _j(messages="hi", max_tokens=5), {}, 400, "invalid_type"),
    (MESSAGES, _j(messages=[{"role": "system", "content": "x"}]), {}, 400, "invalid_value"),
    (MESSAGES, _j(messages=USER, max_tokens="5"), {}, 400, "invalid_type"),
    (MESSAGES, _j(messages=USER, system=5), {}, 400, "invalid_type"),
    (MESSAGES, _j(messages=USER), TEXT, 415, "unsupported_media_type"),
    (COUNT, _j(model=5, messages=[]), {}, 400, "invalid_type"),
    (COUNT, b"\xff\xfe", {}, 400, "invalid_json"),
    (RESPONSES, b"{not json", {}, 400, "invalid_json"),
    (RESPONSES, _j(input=5), {}, 400, "invalid_type"),
    (RESPONSES, _j(input=[]), {}, 400, "empty_array"),
    (RESPONSES, _j(input="x", stream="yes"), {}, 400, "invalid_type"),
    (RESPONSES, _j(input="x", max_output_tokens=0), {}, 400, "invalid_value"),
    (RESPONSES, _j(input="x"), GZIP, 415, "unsupported_media_type"),
    (INPUT, _j(input=[{"role": "user", "content": 5}]), {}, 400, "invalid_type"),
    (INPUT, _j(model=None, input="x"), {}, 400, "missing_required_parameter"),
]


@pytest.mark.parametrize(("path", "content", "headers", "status", "code"), CORPUS)
def test_attack_corpus(
    proxy: ServerThread,
    recorder: Recorder,
    path: str,
    content: bytes,
    headers: dict[str, str],
    status: int,
    code: str,
) -> None:
    before = len(recorder.hits)
    r = _post(proxy, path, content, **headers)
    assert r.status_code == status, r.text
    body = r.json()
    if path.startswith("/v1/messages"):  # Anthropic's shape, the status tells the code
        assert set(body) == {"type", "error"} and body["type"] == "error"
        assert set(body["error"]) == {"type", "message"}
        assert body["error"]["type"] == "invalid_request_error"  # 400 and 415 alike
    else:
        assert body["error"]["code"] == code
    assert r.headers["x-tokenflex-request-id"].startswith("req_")
    assert len(recorder.hits) == before


@pytest.mark.parametrize(
    "path",
    ["/v1/messages", "/v1/messages/count_tokens", "/v1/responses", "/v1/responses/input_tokens"],
)
def test_get_is_405(proxy: ServerThread, recorder: Recorder, path: str) -> None:
    before = len(recorder.hits)
    r = httpx.get(f"{proxy.url}{path}", timeout=10, trust_env=False)
    assert r.status_code == 405
    assert "POST" in r.headers["allow"]
    body = r.json()
    if path.startswith("/v1/messages"):
        assert body == {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": body["error"]["message"]},
        }
        assert "GET is not allowed" in body["error"]["message"]
    else:
        assert body["error"]["code"] == "method_not_allowed"
    assert len(recorder.hits) == before


def test_proxy_key_and_plan_binding_on_the_new_routes(recorder: Recorder) -> None:
    with ServerThread(recorder.app()) as upstream:
        config = ServerConfig.load(upstream=upstream.url, proxy_key="proxy-secret")
        with ServerThread(create_app(config, discover=fake_discover)) as proxy:
            body = json.dumps({"model": "gpt-4o", "input": "Hi"}).encode()
            refused = _post(proxy, "/v1/messages", b"{}")
            assert refused.status_code == 401
            assert refused.json()["error"]["type"] == "authentication_error"
            r = _post(proxy, "/v1/responses", body, **{"x-tokenflex-key": "proxy-secret"})
            assert r.status_code == 200, r.text
            plan_id = r.headers["x-tokenflex-plan-id"]
            url = f"{proxy.url}/tokenflex/plans/{plan_id}"
            mine = httpx.get(url, headers={"x-tokenflex-key": "proxy-secret"}, trust_env=False)
            assert mine.status_code == 200 and mine.json()["messages"] == [
                {"role": "user", "content": "Hi"}
            ]
            other = httpx.get(
                url,
                headers={"x-tokenflex-key": "proxy-secret", "authorization": "Bearer other"},
                trust_env=False,
            )
            assert other.status_code in (401, 404)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
BLOCKS = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "tool_use", "tool_result", "image", "thinking", "x"])},
    optional={"text": JSON_VALUES, "id": JSON_VALUES, "input": JSON_VALUES, "content": JSON_VALUES},
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"]) | JSON_VALUES},
    optional={"content": st.text(max_size=40) | st.lists(BLOCKS, max_size=3) | JSON_VALUES},
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    messages=st.lists(MESSAGE, max_size=4) | JSON_VALUES,
    extra=st.dictionaries(
        st.sampled_from(["system", "max_tokens", "tools", "stream", "metadata"]), JSON_VALUES
    ),
)
def test_any_messages_body_is_answered_in_anthropic_shape(
    proxy: ServerThread, messages: Any, extra: dict[str, Any]
) -> None:
    """Whatever the fields hold, the answer is the upstream's 200 or our 4xx in Anthropic's
    shape: never a 500, never a body the SDK cannot read."""
    r = _post(proxy, "/v1/messages", _j(messages=messages, **extra))
    if r.status_code == 200:
        assert "echo" in r.json()
        return
    assert 400 <= r.status_code < 500, r.text
    body = r.json()
    assert body["type"] == "error" and isinstance(body["error"]["message"], str)


ITEM = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["message", "function_call", "function_call_output", "reasoning"]),
        "role": st.sampled_from(["user", "assistant", "system", "developer"]) | JSON_VALUES,
        "content": st.text(max_size=40) | JSON_VALUES,
        "call_id": JSON_VALUES,
        "arguments": JSON_VALUES,
        "output": JSON_VALUES,
    },
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    items=st.lists(ITEM, max_size=4) | JSON_VALUES,
    extra=st.dictionaries(
        st.sampled_from(["instructions", "max_output_tokens", "tools", "stream"]), JSON_VALUES
    ),
)
def test_any_responses_body_is_answered_in_openai_shape(
    proxy: ServerThread, items: Any, extra: dict[str, Any]
) -> None:
    """The same for /v1/responses, in OpenAI's shape."""
    r = _post(proxy, "/v1/responses", _j(input=items, **extra))
    if r.status_code == 200:
        assert "echo" in r.json()
        return
    assert 400 <= r.status_code < 500, r.text
    error = r.json()["error"]
    assert isinstance(error["message"], str) and isinstance(error["code"], str)


def test_route_tables_apply_to_the_new_routes(recorder: Recorder) -> None:
    """``/ROUTE/v1/messages`` fits with ``[routes.ROUTE]``: here a 300-token input cap
    that the same body under ``/v1`` does not meet."""
    messages = anthropic_conversation(3, 10)
    body = json.dumps({"model": "gpt-4o", "messages": messages, "max_tokens": 16}).encode()
    with ServerThread(recorder.app()) as upstream:
        config = ServerConfig.load(
            upstream=upstream.url, routes={"tight": {"max_input_tokens": 300}}
        )
        with ServerThread(create_app(config, discover=fake_discover)) as proxy:
            wide = _post(proxy, "/v1/messages", body)
            tight = _post(proxy, "/tight/v1/messages", body)
            counted = _post(proxy, "/tight/v1/messages/count_tokens", body)
            items = responses_conversation(3, 11)
            whole = json.dumps({"model": "gpt-4o", "input": items, "instructions": SYSTEM})
            sent = _post(proxy, "/v1/responses", whole.encode())
            summed = _post(proxy, "/v1/responses/input_tokens", whole.encode())
    assert wide.status_code == tight.status_code == counted.status_code == 200
    assert wide.headers["x-tokenflex-dropped"] == "0"
    # the count routes say what fitting budgets: the plan's input when nothing is dropped
    assert counted.json()["input_tokens"] == int(wide.headers["x-tokenflex-input-tokens"])
    assert sent.headers["x-tokenflex-dropped"] == "0"
    assert summed.json()["input_tokens"] == int(sent.headers["x-tokenflex-input-tokens"])
    assert int(counted.json()["input_tokens"]) > 300
    assert int(tight.headers["x-tokenflex-dropped"]) > 0
    assert int(tight.headers["x-tokenflex-input-tokens"]) <= 300
    kept = tight.json()["echo"]["messages"]
    # the opening question pinned, then the newest messages
    assert kept[0] == messages[0]
    assert kept[1:] == messages[len(messages) - len(kept) + 1 :]
