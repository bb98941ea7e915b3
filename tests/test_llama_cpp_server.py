"""The native ``llama-server`` fixture answers the three wire formats and refuses overflows.

What the proxy tests (tests/test_server_protocols.py) rely on: one server on loopback with a
2048-token window that speaks chat completions, Anthropic Messages and Responses, counts
input tokens on the last two, and refuses an over-long prompt on all three with HTTP 400
``exceed_context_size_error`` carrying the numbers.
"""

from __future__ import annotations

import httpx
import pytest
from llama_server import MODEL_ALIAS, LlamaCppServer

pytestmark = pytest.mark.server

HELLO = [{"role": "user", "content": "Hi there, what is 2+2?"}]
LONG = [{"role": "user", "content": "word " * 3000}]


def _post(server: LlamaCppServer, path: str, body: dict[str, object]) -> httpx.Response:
    return httpx.post(f"{server.base_url}/{path}", json=body, timeout=120)


def test_it_is_the_native_server_on_loopback(llama_cpp_server: LlamaCppServer) -> None:
    assert llama_cpp_server.base_url.startswith("http://127.0.0.1:")
    assert llama_cpp_server.n_ctx == 2048
    assert "--ctx-size" in llama_cpp_server.command()
    assert llama_cpp_server.command()[0].endswith("llama-server")
    r = httpx.get(f"{llama_cpp_server.base_url}/models", timeout=10)
    assert r.status_code == 200
    assert MODEL_ALIAS in [m["id"] for m in r.json()["data"]]


def test_chat_completions_answers(llama_cpp_server: LlamaCppServer) -> None:
    r = _post(llama_cpp_server, "chat/completions", {"messages": HELLO, "max_tokens": 4})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["usage"]["prompt_tokens"] > 0
    assert 0 < body["usage"]["completion_tokens"] <= 4


def test_messages_answers_and_counts(llama_cpp_server: LlamaCppServer) -> None:
    body = {"model": MODEL_ALIAS, "messages": HELLO, "max_tokens": 4}
    r = _post(llama_cpp_server, "messages", body)
    assert r.status_code == 200, r.text
    reply = r.json()
    assert reply["type"] == "message"
    assert reply["content"][0]["type"] == "text"
    usage = reply["usage"]
    seen = usage["input_tokens"] + usage.get("cache_read_input_tokens", 0)
    counted = _post(
        llama_cpp_server, "messages/count_tokens", {"model": MODEL_ALIAS, "messages": HELLO}
    )
    assert counted.status_code == 200
    assert counted.json() == {"input_tokens": seen}


def test_responses_answers_and_counts(llama_cpp_server: LlamaCppServer) -> None:
    body = {"model": MODEL_ALIAS, "input": HELLO, "max_output_tokens": 4}
    r = _post(llama_cpp_server, "responses", body)
    assert r.status_code == 200, r.text
    reply = r.json()
    assert reply["object"] == "response"
    assert reply["output"][0]["type"] == "message"
    counted = _post(
        llama_cpp_server, "responses/input_tokens", {"model": MODEL_ALIAS, "input": HELLO}
    )
    assert counted.status_code == 200
    assert counted.json() == {
        "object": "response.input_tokens",
        "input_tokens": reply["usage"]["input_tokens"],
    }


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("chat/completions", {"messages": LONG, "max_tokens": 5}),
        ("messages", {"model": MODEL_ALIAS, "messages": LONG, "max_tokens": 5}),
        ("responses", {"model": MODEL_ALIAS, "input": LONG, "max_output_tokens": 5}),
    ],
)
def test_over_long_request_is_refused_with_numbers(
    llama_cpp_server: LlamaCppServer, path: str, body: dict[str, object]
) -> None:
    r = _post(llama_cpp_server, path, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "exceed_context_size_error"
    assert error["n_ctx"] == 2048
    assert error["n_prompt_tokens"] > 2048
