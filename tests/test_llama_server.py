"""The real llama.cpp server fixture behaves as the other tests (and docs) rely on."""

from __future__ import annotations

import os
import signal
import subprocess

import httpx
import pytest
from llama_server import MODEL_ALIAS, LlamaServer

pytestmark = pytest.mark.server

CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi there, what is 2+2?"},
]


def test_models_lists_the_alias(llama_server: LlamaServer) -> None:
    r = httpx.get(f"{llama_server.base_url}/models", timeout=10)
    assert r.status_code == 200
    assert [m["id"] for m in r.json()["data"]] == [MODEL_ALIAS]
    assert llama_server.base_url.startswith("http://127.0.0.1:")
    assert llama_server.base_url.endswith("/v1")
    assert llama_server.n_ctx == 2048
    assert llama_server.model_path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_chat_reports_prompt_tokens(llama_server: LlamaServer) -> None:
    r = httpx.post(
        f"{llama_server.base_url}/chat/completions",
        json={"model": MODEL_ALIAS, "messages": CHAT, "max_tokens": 8, "temperature": 0},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    # the GGUF's ChatML template: 27 tokens for this conversation incl. the reply priming
    assert body["usage"]["prompt_tokens"] == 27
    assert 0 < body["usage"]["completion_tokens"] <= 8
    assert isinstance(body["choices"][0]["message"]["content"], str)


def test_over_long_request_is_context_length_exceeded(llama_server: LlamaServer) -> None:
    messages = [{"role": "user", "content": "word " * 3000}]
    r = httpx.post(
        f"{llama_server.base_url}/chat/completions",
        json={"messages": messages, "max_tokens": 20},
        timeout=60,
    )
    assert r.status_code == 400
    assert r.json() == {
        "error": {
            "message": "This model's maximum context length is 2048 tokens. However, you "
            "requested 3051 tokens (3031 in the messages, 20 in the completion). Please "
            "reduce the length of the messages or completion.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


def test_max_tokens_beyond_window_is_clipped_not_refused(llama_server: LlamaServer) -> None:
    r = httpx.post(
        f"{llama_server.base_url}/chat/completions",
        json={"messages": CHAT, "max_tokens": 100_000, "temperature": 0, "stop": ["\n"]},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == 27


def test_tokenize_endpoints(llama_server: LlamaServer) -> None:
    root = llama_server.root_url
    r = httpx.post(f"{root}/extras/tokenize", json={"input": "Hello world"}, timeout=10)
    assert r.json() == {"tokens": [19556, 905]}  # no BOS for SmolLM2
    # special-token strings in the input are parsed as special tokens
    r = httpx.post(f"{root}/extras/tokenize", json={"input": "<|im_start|>"}, timeout=10)
    assert r.json() == {"tokens": [1]}
    r = httpx.post(f"{root}/extras/tokenize/count", json={"input": "Hello world"}, timeout=10)
    assert r.json() == {"count": 2}
    r = httpx.post(f"{root}/extras/detokenize", json={"tokens": [19556, 905]}, timeout=10)
    assert r.json() == {"text": "Hello world"}


def _user_words(server: LlamaServer, words: int) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": "word " * words}], "max_tokens": 3}
    return httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=60)


def test_start_stop_and_the_refusal_boundary() -> None:
    """A second, tiny server: refused iff prompt_tokens >= n_ctx; max_tokens is clipped.

    An empty user turn renders to 30 tokens, each "word " adds one: 225 words = 256.
    """
    server = LlamaServer(n_ctx=256)
    with server:
        assert server.running
        pid = server._proc.pid if server._proc else 0
        r = _user_words(server, 224)
        assert r.status_code == 200, r.text
        usage = r.json()["usage"]
        assert usage["prompt_tokens"] == 255
        assert usage["completion_tokens"] <= 1  # max_tokens=3 clipped to n_ctx - prompt
        r = _user_words(server, 225)
        assert r.status_code == 400
        assert r.json()["error"]["code"] == "context_length_exceeded"
        assert "maximum context length is 256 tokens" in r.text
        assert "(256 in the messages, 3 in the completion)" in r.text
    assert not server.running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{server.base_url}/models", timeout=2)
    server.stop()  # idempotent


def test_startup_failure_carries_the_log() -> None:
    server = LlamaServer("/nonexistent/model.gguf", startup_timeout=30)
    with pytest.raises(RuntimeError, match="exited with code") as info:
        server.start()
    assert "nonexistent" in str(info.value)
    assert not server.running


def test_killed_parent_takes_the_server_along() -> None:
    """PR_SET_PDEATHSIG: a test run that dies hard does not leave a server behind."""
    code = (
        "import sys; sys.path.insert(0, 'TESTS'); from llama_server import LlamaServer;"
        "s = LlamaServer(n_ctx=256).start(); print(s._proc.pid, s._log_path, flush=True);"
        "import time; time.sleep(60)"
    ).replace("TESTS", os.path.dirname(__file__))
    import sys

    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    log_path = ""
    try:
        assert parent.stdout is not None
        pid, log_path = parent.stdout.readline().split()
        child = int(pid)
        os.kill(child, 0)  # alive
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
        if log_path:
            os.unlink(log_path)
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail(f"server {child} outlived its parent")


def test_over_long_streaming_request_is_an_empty_200_stream(llama_server: LlamaServer) -> None:
    """The hazard a proxy must guard against: no error reaches a streaming client."""
    body = {"messages": [{"role": "user", "content": "word " * 3000}], "stream": True}
    with httpx.stream(
        "POST", f"{llama_server.base_url}/chat/completions", json=body, timeout=60
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert [line for line in r.iter_lines() if line.strip()] == []
