"""End to end: the proxy in front of a real llama.cpp server (SmolLM2-135M, n_ctx 2048).

Long, varied conversations that the server refuses with ``context_length_exceeded`` go
through the proxy and all succeed, with the prompt the server counts inside its window
minus the output the proxy negotiated. The window itself is discovered from the server.
Few requests on purpose: each costs a real prompt evaluation.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from llama_server import LlamaCppServer, LlamaServer
from test_server import ServerThread

from tokenflex.server import ServerConfig, create_app

pytestmark = pytest.mark.server

WORDS = [
    *("the", "budget", "window", "token", "model", "answer", "question", "context"),
    *("history", "summary", "river", "mountain", "engineer", "kernel", "packet", "latency"),
    *("cache", "village", "market", "harvest", "library", "query", "index", "vector"),
    *("matrix", "garden", "winter", "signal", "protocol", "storage", "cluster", "compiler"),
]
CODE = [
    "def area(r):\n    return 3.14159 * r * r\n",
    "for (let i = 0; i < n; i++) { total += xs[i] * w[i]; }",
    "SELECT id, name FROM users WHERE created_at > '2024-01-01' ORDER BY id;",
]


def _text(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.6:
        words = rng.randint(15, 140)
        return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."
    if kind < 0.75:
        return "Here is the code:\n```\n" + rng.choice(CODE) * rng.randint(1, 4) + "```"
    if kind < 0.9:
        record = {f"k{i}": rng.randint(0, 10**6) for i in range(rng.randint(3, 25))}
        return "Data: " + json.dumps(record)
    return "Numbers: " + ", ".join(str(rng.randint(0, 99999)) for _ in range(rng.randint(10, 80)))


def long_conversation(n: int, seed: int) -> list[dict[str, Any]]:
    """A system prompt, then ``n`` alternating turns of varied text, ending with a question."""
    rng = random.Random(seed)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a concise assistant."}]
    for i in range(n):
        msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": _text(rng)})
    if msgs[-1]["role"] != "user":
        msgs.append({"role": "user", "content": "In one sentence: what were we discussing?"})
    return msgs


CONVERSATIONS = [
    pytest.param(30, 1, id="30-messages"),
    pytest.param(100, 2, id="100-messages"),
    pytest.param(200, 3, id="200-messages"),
]


@pytest.fixture(scope="module")
def proxy(llama_server: LlamaServer) -> Iterator[ServerThread]:
    # discovery probes the server once (llama-cpp-python states its window only when it
    # refuses a prompt), so give it time on a busy machine
    config = ServerConfig.load(upstream=llama_server.base_url, discovery_timeout=60)
    with ServerThread(create_app(config)) as p:
        yield p


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=300, trust_env=False) as c:
        yield c


@pytest.mark.parametrize(("n", "seed"), CONVERSATIONS)
def test_long_conversations_fail_direct_and_fit_through_the_proxy(
    llama_server: LlamaServer, proxy: ServerThread, client: httpx.Client, n: int, seed: int
) -> None:
    body = {"model": llama_server.model, "messages": long_conversation(n, seed), "max_tokens": 8}

    direct = client.post(f"{llama_server.base_url}/chat/completions", json=body)
    assert direct.status_code == 400, direct.text
    assert direct.json()["error"]["code"] == "context_length_exceeded"

    r = client.post(f"{proxy.url}/v1/chat/completions", json={**body, "temperature": 0})
    assert r.status_code == 200, r.text
    h = r.headers
    assert int(h["x-tokenflex-context-window"]) == llama_server.n_ctx  # discovered, not guessed
    max_tokens = int(h["x-tokenflex-max-tokens"])
    assert 0 < max_tokens <= 8
    assert int(h["x-tokenflex-dropped"]) > 0
    prompt_tokens = r.json()["usage"]["prompt_tokens"]
    # the promise, as the real server counts it
    assert prompt_tokens <= llama_server.n_ctx - max_tokens
    # our count is exact or an overestimate, never an undercount
    assert prompt_tokens <= int(h["x-tokenflex-input-tokens"])


def test_streaming_through_the_proxy(
    llama_server: LlamaServer, proxy: ServerThread, client: httpx.Client
) -> None:
    # the last conversation above again: same fitted prompt, so the server reuses its
    # evaluated prefix (a fresh 1,400-token prompt takes ~12 s on one slow core)
    body = {
        "model": llama_server.model,
        "messages": long_conversation(200, 3),
        "max_tokens": 8,
        "temperature": 0,
        "stream": True,
    }
    events: list[str] = []
    with client.stream("POST", f"{proxy.url}/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert int(r.headers["x-tokenflex-dropped"]) > 0
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line.removeprefix("data: "))
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text.strip()


def test_a_model_nobody_knows_is_refitted_into_the_window_the_refusal_states(
    llama_cpp_server: LlamaCppServer, client: httpx.Client
) -> None:
    # discovery off and a name no registry entry or family matches: the request goes as
    # sent, the native llama-server refuses it (exceed_context_size_error, n_ctx), and the
    # proxy refits it into that window and sends it once more
    config = ServerConfig.load(upstream=llama_cpp_server.base_url, discover=False)
    body = {
        "model": "acme-unlisted-local",
        "messages": long_conversation(100, 4),
        "max_tokens": 8,
        "temperature": 0,
    }
    with ServerThread(create_app(config)) as proxy:
        r = client.post(f"{proxy.url}/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    h = r.headers
    assert h["x-tokenflex-learned-window"] == str(llama_cpp_server.n_ctx)
    assert int(h["x-tokenflex-context-window"]) == llama_cpp_server.n_ctx
    assert int(h["x-tokenflex-dropped"]) > 0
    prompt_tokens = r.json()["usage"]["prompt_tokens"]
    assert prompt_tokens <= llama_cpp_server.n_ctx - int(h["x-tokenflex-max-tokens"])
