"""The proxy's Gemini routes: ``/v1beta/models/{model}:generateContent``,
``:streamGenerateContent`` and ``:countTokens``.

A Gemini request is converted to chat, fitted as chat and sent to the OpenAI-compatible
upstream; the answer comes back as a ``GenerateContentResponse``. End to end against the
native llama.cpp ``llama-server`` (a 2048-token window): a long conversation with
function calls that the server refuses as chat when sent whole is answered through the
proxy, with the input the server reports inside the window minus the output. Then,
against a recording chat upstream on loopback: what is sent, the stream shapes, the count
route, and bad bodies, each a 400 in Google's error shape naming the field, never sent.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_server import LlamaCppServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from test_server import ServerThread, fake_discover

from tokenflex.counting import get_counter
from tokenflex.formats.gemini import gemini_to_chat
from tokenflex.models import get_model
from tokenflex.roundtrip import prepare
from tokenflex.server import ServerConfig, create_app

WINDOW = 2048
SYSTEM = {"parts": [{"text": "You are a concise assistant. Use the tools for the weather."}]}
TOOLS = [
    {
        "functionDeclarations": [
            {
                "name": "get_weather",
                "description": "The current weather for a city.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            }
        ]
    }
]
WORDS = ["river", "budget", "window", "kernel", "packet", "village", "harvest", "signal"]


def _text(rng: random.Random, low: int = 20, high: int = 90) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high))).capitalize() + "."


def conversation(turns: int, seed: int) -> list[dict[str, Any]]:
    """``turns`` rounds of question, functionCall, functionResponse and answer; then a
    question."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(turns):
        call = {"name": "get_weather", "args": {"city": f"t{i}"}}
        answer = {"name": "get_weather", "response": {"result": _text(rng)}}
        out += [
            {"role": "user", "parts": [{"text": f"{_text(rng)} Weather in town {i}?"}]},
            {"role": "model", "parts": [{"functionCall": call}]},
            {"role": "user", "parts": [{"functionResponse": answer}]},
            {"role": "model", "parts": [{"text": _text(rng, 5, 30)}]},
        ]
    out.append({"role": "user", "parts": [{"text": "In one sentence: what did we discuss?"}]})
    return out


def _post(url: str, body: Any, **headers: str) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": "application/json", **headers}
    return httpx.post(url, content=content, headers=headers, timeout=300, trust_env=False)


# -- against the real llama-server --------------------------------------------------------


@pytest.fixture(scope="module")
def real_proxy(llama_cpp_server: LlamaCppServer) -> Iterator[ServerThread]:
    config = ServerConfig.load(upstream=llama_cpp_server.base_url, discovery_timeout=60)
    with ServerThread(create_app(config)) as proxy:
        yield proxy


@pytest.mark.server
def test_a_long_gemini_conversation_is_answered_through_llama_server(
    llama_cpp_server: LlamaCppServer, real_proxy: ServerThread
) -> None:
    contents = conversation(18, 1)
    model = llama_cpp_server.model
    # sent whole (as the chat it converts to), the server refuses it
    chat = gemini_to_chat(contents, SYSTEM)
    whole = _post(
        f"{llama_cpp_server.base_url}/chat/completions",
        {"model": model, "messages": chat, "max_tokens": 16},
    )
    assert whole.status_code == 400, whole.text[:300]
    assert whole.json()["error"]["type"] == "exceed_context_size_error"
    body = {
        "contents": contents,
        "systemInstruction": SYSTEM,
        "tools": TOOLS,
        "generationConfig": {"maxOutputTokens": 16, "temperature": 0},
    }
    r = _post(f"{real_proxy.url}/v1beta/models/{model}:generateContent", body)
    assert r.status_code == 200, r.text[:500]
    assert int(r.headers["x-tokenflex-context-window"]) == WINDOW
    assert int(r.headers["x-tokenflex-dropped"]) > 0
    max_tokens = int(r.headers["x-tokenflex-max-tokens"])
    answer = r.json()
    [candidate] = answer["candidates"]
    assert candidate["content"]["role"] == "model" and candidate["content"]["parts"]
    assert candidate["finishReason"] in ("STOP", "MAX_TOKENS")
    usage = answer["usageMetadata"]
    assert 0 < usage["promptTokenCount"] <= WINDOW - max_tokens
    assert usage["candidatesTokenCount"] <= max_tokens


# -- against a recording chat upstream ------------------------------------------------------


class Recorder:
    """Chat bodies that reached the upstream; answers with a text or a tool call."""

    def __init__(self) -> None:
        self.hits: list[tuple[str, str, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def app(self) -> Starlette:
        async def chat(request: Request) -> Response:
            body = json.loads(await request.body())
            with self.lock:
                self.hits.append((request.url.path, request.url.query, body))
            if body.get("model") == "broken":
                error = {"message": "upstream broke", "type": "server_error"}
                return JSONResponse({"error": error}, status_code=500)
            message: dict[str, Any] = {"role": "assistant", "content": "Sunny."}
            if "weather" in json.dumps(body["messages"][-1:]):
                message = {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_9",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                        }
                    ],
                }
            return JSONResponse(
                {
                    "id": "c1",
                    "object": "chat.completion",
                    "model": body["model"],
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13},
                }
            )

        return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@pytest.fixture(scope="module")
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture(scope="module")
def proxy(recorder: Recorder) -> Iterator[ServerThread]:
    with ServerThread(recorder.app()) as upstream:
        config = ServerConfig.load(upstream=upstream.url, read_timeout=5.0)
        with ServerThread(create_app(config, discover=fake_discover)) as server:
            yield server


def test_a_request_that_fits_is_sent_as_the_same_conversation_in_chat(
    proxy: ServerThread, recorder: Recorder
) -> None:
    contents = conversation(2, 2)
    body = {
        "contents": contents,
        "systemInstruction": SYSTEM,
        "tools": TOOLS,
        "generationConfig": {"maxOutputTokens": 40, "temperature": 0.5, "topK": 3},
        "safetySettings": [],
    }
    r = _post(f"{proxy.url}/v1beta/models/gpt-4o:generateContent?key=secret", body)
    assert r.status_code == 200, r.text
    path, query, sent = recorder.hits[-1]
    assert (path, query) == ("/v1/chat/completions", "")  # the client's ?key= stays here
    assert sent["model"] == "gpt-4o" and sent["stream"] is False
    assert sent["messages"] == gemini_to_chat(contents, SYSTEM)
    assert sent["max_tokens"] == 40 and sent["temperature"] == 0.5
    assert sent["tools"][0]["function"]["name"] == "get_weather"
    assert r.json() == {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": "Sunny."}]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 2, "totalTokenCount": 13},
        "modelVersion": "gpt-4o",
    }
    assert int(r.headers["x-tokenflex-dropped"]) == 0


def test_a_long_conversation_is_fitted_into_the_window(
    proxy: ServerThread, recorder: Recorder
) -> None:
    contents = conversation(20, 3)
    body = {"contents": contents, "generationConfig": {"maxOutputTokens": 64}}
    r = _post(f"{proxy.url}/v1beta/models/tiny:generateContent", body)  # a 1,024 window
    assert r.status_code == 200, r.text
    assert int(r.headers["x-tokenflex-dropped"]) > 0
    _, _, sent = recorder.hits[-1]
    # counted as tiny counts (o200k), with the tools sent (the recall tool when added)
    counted = get_counter(get_model("gpt-4o")).count(sent["messages"], tools=sent.get("tools"))
    planned = int(r.headers["x-tokenflex-input-tokens"])
    assert 0 < counted <= planned and planned + sent["max_tokens"] <= 1024
    assert sent["messages"][-1]["content"] == "In one sentence: what did we discuss?"
    assert sent["messages"][0]["role"] == "user"  # a cut history opens at a user turn


def test_a_function_call_comes_back_as_a_function_call(proxy: ServerThread) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "The weather in Oslo?"}]}]}
    r = _post(f"{proxy.url}/v1beta/models/gpt-4o:generateContent", body)
    assert r.status_code == 200, r.text
    [part] = r.json()["candidates"][0]["content"]["parts"]
    assert part == {
        "functionCall": {"id": "call_9", "name": "get_weather", "args": {"city": "Oslo"}}
    }


@pytest.mark.parametrize("sse", [True, False], ids=["alt-sse", "json-array"])
def test_stream_route_answers_with_one_chunk(
    proxy: ServerThread, recorder: Recorder, sse: bool
) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]}
    query = "?alt=sse" if sse else ""
    r = _post(f"{proxy.url}/v1beta/models/gpt-4o:streamGenerateContent{query}", body)
    assert r.status_code == 200, r.text
    assert recorder.hits[-1][2]["stream"] is False
    if sse:
        assert r.headers["content-type"].startswith("text/event-stream")
        [event] = [e for e in r.text.split("\r\n\r\n") if e]
        chunk = json.loads(event.removeprefix("data: "))
    else:
        [chunk] = r.json()
    assert chunk["candidates"][0]["content"]["parts"] == [{"text": "Sunny."}]


def test_count_route_is_the_count_fitting_budgets_with(
    proxy: ServerThread, recorder: Recorder
) -> None:
    contents = conversation(3, 4)
    before = len(recorder.hits)
    for body in (
        {"contents": contents, "systemInstruction": SYSTEM, "tools": TOOLS},
        {"generateContentRequest": {"model": "models/gpt-4o", "contents": contents}},
    ):
        r = _post(f"{proxy.url}/v1beta/models/gpt-4o:countTokens", body)
        assert r.status_code == 200, r.text
        inner = body.get("generateContentRequest", body)
        chat = gemini_to_chat(inner["contents"], inner.get("systemInstruction"))
        prepared = prepare(chat, format=None, system=None, tools=inner.get("tools"))
        expected = get_counter(get_model("gpt-4o")).count(
            list(prepared.messages), tools=prepared.tools
        )
        assert r.json() == {"totalTokens": expected}
    assert len(recorder.hits) == before  # answered by the proxy


def test_upstream_errors_come_back_in_googles_shape(proxy: ServerThread) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]}
    r = _post(f"{proxy.url}/v1beta/models/broken:generateContent", body)
    assert r.status_code == 500
    assert r.json() == {"error": {"code": 500, "message": "upstream broke", "status": "INTERNAL"}}


USER = [{"role": "user", "parts": [{"text": "x"}]}]
BAD = [
    pytest.param({"contents": [{"parts": [{"text": "x"}]}]}, "contents[0].role", id="no-role"),
    pytest.param({"contents": [{"role": "bot", "parts": []}]}, "contents[0].role", id="role"),
    pytest.param({"contents": [{"role": "user", "parts": "x"}]}, "contents[0].parts", id="parts"),
    pytest.param(
        {"contents": [{"role": "user", "parts": [{"image": "x"}]}]},
        "contents[0].parts[0]",
        id="part-kind",
    ),
    pytest.param(
        {"contents": [{"role": "user", "parts": [{"text": 5}]}]},
        "contents[0].parts[0]",
        id="text-type",
    ),
    pytest.param(
        {"contents": [{"role": "model", "parts": [{"functionCall": {"args": {}}}]}]},
        "contents[0].parts[0]",
        id="call-name",
    ),
    pytest.param({"contents": []}, "contents", id="empty"),
    pytest.param({"contents": [{"role": "user", "parts": []}]}, "contents[0].parts", id="no-parts"),
    pytest.param({"contents": "hi"}, "contents", id="not-a-list"),
    pytest.param({"contents": USER, "systemInstruction": "x"}, "systemInstruction", id="system"),
    pytest.param(
        {"contents": USER, "generationConfig": {"maxOutputTokens": -1}},
        "generationConfig.maxOutputTokens",
        id="limit",
    ),
    pytest.param(
        {"contents": USER, "tools": [{"functionDeclarations": [{"description": "x"}]}]},
        "tools[0].functionDeclarations[0]",
        id="tool-name",
    ),
]


@pytest.mark.parametrize(("body", "field"), BAD)
@pytest.mark.parametrize("action", ["generateContent", "streamGenerateContent", "countTokens"])
def test_bad_bodies_are_400s_naming_the_field(
    proxy: ServerThread, recorder: Recorder, body: dict[str, Any], field: str, action: str
) -> None:
    before = len(recorder.hits)
    r = _post(f"{proxy.url}/v1beta/models/gpt-4o:{action}", body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT"
    assert field in error["message"]
    assert len(recorder.hits) == before


def test_bad_json_and_methods_in_googles_shape(proxy: ServerThread) -> None:
    url = f"{proxy.url}/v1beta/models/gpt-4o:generateContent"
    r = _post(url, b"{not json")
    assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT"
    r = httpx.get(url, timeout=10, trust_env=False)
    assert r.status_code == 405 and r.json()["error"]["status"] == "FAILED_PRECONDITION"


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
PART_KEYS = st.sampled_from(
    ["text", "inlineData", "fileData", "functionCall", "functionResponse", "thought", "x"]
)


@st.composite
def near_valid(draw: st.DrawFn) -> dict[str, Any]:
    """A Gemini body with random parts: some valid, many broken in one place."""
    part = st.dictionaries(PART_KEYS, JSON, min_size=0, max_size=2)
    content = st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "model", "bot"]) | JSON,
            "parts": st.lists(part, max_size=3) | JSON,
        }
    )
    body: dict[str, Any] = {"contents": draw(st.lists(content, min_size=1, max_size=3) | JSON)}
    if draw(st.booleans()):
        body["systemInstruction"] = draw(
            st.fixed_dictionaries({"parts": st.lists(part, max_size=2)}) | JSON
        )
    if draw(st.booleans()):
        body["generationConfig"] = draw(st.fixed_dictionaries({"maxOutputTokens": JSON}) | JSON)
    if draw(st.booleans()):
        body["tools"] = draw(
            st.lists(st.dictionaries(st.just("functionDeclarations"), JSON), max_size=2) | JSON
        )
    return body


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=near_valid(), action=st.sampled_from(["generateContent", "countTokens"]))
def test_no_body_is_a_500(proxy: ServerThread, body: dict[str, Any], action: str) -> None:
    r = _post(f"{proxy.url}/v1beta/models/gpt-4o:{action}", body)
    assert r.status_code in (200, 400), r.text
    if r.status_code == 400:
        error = r.json()["error"]
        assert error["status"] == "INVALID_ARGUMENT" and error["message"]
