"""Which window the proxy fits a request into when the registry does not know the name
(issue 22 item 5): family patterns, pass-through of names nobody knows, and the window
an upstream's context-length refusal teaches (one refit and retry).

The upstream is a real HTTP server on loopback that enforces a window of its own and
refuses, in one of the wordings real servers use, what does not fit it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from test_server import ServerThread

from tokenflex.errors import ConfigError
from tokenflex.models.discovery import refusal
from tokenflex.server import ServerConfig, create_app

WINDOW = 3_000
"""The window the fake upstream enforces for the models it refuses for."""

# The wordings real servers use for a context-length refusal, as (route, status, body)
# given the window and the request's size by the upstream's count.
WORDINGS = {
    "openai": lambda w, n: {
        "error": {
            "message": f"This model's maximum context length is {w} tokens. However, your "
            f"messages resulted in {n} tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    },
    "vllm": lambda w, n: {
        "object": "error",
        "message": f"This model's maximum context length is {w} tokens. However, you "
        f"requested {n} tokens ({n - 100} in the messages, 100 in the completion). Please "
        "reduce the length of the messages or completion.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    },
    "llama.cpp": lambda w, n: {
        "error": {
            "code": 400,
            "message": f"request ({n} tokens) exceeds the available context size ({w} tokens)",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": n,
            "n_ctx": w,
        }
    },
    "llama.cpp-older": lambda w, n: {
        "error": {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": n,
            "n_ctx": w,
        }
    },
    "anthropic": lambda w, n: {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": f"prompt is too long: {n} tokens > {w} maximum",
        },
    },
}


def words(value: Any) -> int:
    """Whitespace-separated words in the text of a message, content block or system."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(words(v) for v in value)
    if isinstance(value, dict):
        return words(value.get("content")) + words(value.get("text"))
    return 0


def upstream_tokens(body: dict[str, Any]) -> int:
    """The fake upstream's count: one token per word of the messages and the system
    prompt, plus the output asked for. Every tokenizer the proxy may count with gives a
    word at least one token, so a request the proxy fitted into the window fits this
    count too."""
    output = body.get("max_tokens") or body.get("max_completion_tokens") or 0
    return words(body.get("system")) + words(body.get("messages", [])) + int(output)


class Upstream:
    """What the fake received; ``wording[model]`` makes it enforce ``WINDOW`` for a model
    (refusing in that wording); ``lies[model]`` makes it refuse whatever was sent."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes]] = []
        self.wording: dict[str, str] = {}
        self.lies: dict[str, dict[str, Any]] = {}

    def app(self) -> Starlette:
        async def answer(request: Request) -> Response:
            raw = await request.body()
            self.seen.append((request.url.path, raw))
            body = json.loads(raw)
            model = body.get("model", "")
            if model in self.lies:
                return JSONResponse(self.lies[model], status_code=400)
            wording = self.wording.get(model)
            asked = upstream_tokens(body)
            if wording is not None and asked > WINDOW:
                return JSONResponse(WORDINGS[wording](WINDOW, asked), status_code=400)
            if request.url.path == "/v1/messages":
                return JSONResponse(
                    {
                        "id": "msg_1",
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [{"type": "text", "text": "ok"}],
                        "stop_reason": "end_turn",
                        "stop_sequence": None,
                        "usage": {"input_tokens": 1, "output_tokens": 1},
                    }
                )
            return JSONResponse(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "created": 0,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "ok"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }
            )

        return Starlette(
            routes=[
                Route("/v1/chat/completions", answer, methods=["POST"]),
                Route("/v1/messages", answer, methods=["POST"]),
            ]
        )

    def since(self, mark: int) -> list[dict[str, Any]]:
        """The bodies received after ``mark`` requests."""
        return [json.loads(raw) for _, raw in self.seen[mark:]]


@pytest.fixture(scope="module")
def fake() -> Upstream:
    return Upstream()


@pytest.fixture(scope="module")
def upstream(fake: Upstream) -> Iterator[ServerThread]:
    with ServerThread(fake.app()) as server:
        yield server


def proxy_for(upstream: ServerThread, **settings: Any) -> ServerThread:
    # discovery off: the registry (and what refusals teach) is all the proxy knows
    config = ServerConfig.load(upstream=upstream.url, discover=False, cut_note=False, **settings)
    return ServerThread(create_app(config))


@pytest.fixture(scope="module")
def proxy(upstream: ServerThread) -> Iterator[ServerThread]:
    with proxy_for(upstream) as server:
        yield server


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=20, trust_env=False) as c:
        yield c


def conversation(n: int, words: int = 60) -> list[dict[str, Any]]:
    """``n`` turns of ``words`` words each, ending with a user turn (~``n * words`` tokens)."""
    msgs = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "lorem " * words}
        for i in range(n)
    ]
    if msgs[-1]["role"] != "user":
        msgs.append({"role": "user", "content": "and now?"})
    return msgs


@pytest.mark.parametrize("wording", sorted(WORDINGS))
def test_each_wording_states_the_window_and_the_request(wording: str) -> None:
    body = json.dumps(WORDINGS[wording](4_096, 4_476)).encode()
    found = refusal(400, body)
    assert found is not None
    assert (found.window, found.asked) == (4_096, 4_476)
    assert refusal(500, body) is None and refusal(200, body) is None  # only a 4xx refuses


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"not json at all", id="text"),
        pytest.param(b'{"error": {"message": "Rate limit reached", "code": 429}}', id="other"),
        pytest.param(b'{"error": "maximum context length"}', id="no-number"),
        pytest.param(b"[1, 2]", id="json-list"),
        pytest.param(b'{"error": {"type": "exceed_context_size_error"}}', id="no-n_ctx"),
    ],
)
def test_other_errors_state_no_window(body: bytes) -> None:
    assert refusal(400, body) is None


# -- names nobody knows: passed through, or fitted into the default when asked -------------


def test_an_unknown_model_is_passed_through_unfitted(
    proxy: ServerThread, fake: Upstream, client: httpx.Client
) -> None:
    raw = json.dumps(
        {"model": "acme-private-1", "messages": conversation(62, 400), "max_tokens": 500},
        indent=1,  # a body a proxy that re-serialized it would change
    ).encode()
    mark = len(fake.seen)
    r = client.post(
        f"{proxy.url}/v1/chat/completions",
        content=raw,
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-tokenflex-fitted"] == "no; reason=unknown-model"
    assert "x-tokenflex-input-tokens" not in r.headers
    assert fake.seen[mark:] == [("/v1/chat/completions", raw)]  # byte for byte


def test_unknown_models_fit_puts_them_in_the_default_window(
    upstream: ServerThread, fake: Upstream, client: httpx.Client
) -> None:
    msgs = conversation(62, 400)
    with proxy_for(upstream, unknown_models="fit") as proxy:
        mark = len(fake.seen)
        r = client.post(
            f"{proxy.url}/v1/chat/completions",
            json={"model": "acme-private-2", "messages": msgs, "max_tokens": 500},
        )
    assert r.status_code == 200, r.text
    assert "x-tokenflex-fitted" not in r.headers
    assert int(r.headers["x-tokenflex-context-window"]) == 8192
    (sent,) = fake.since(mark)
    assert len(sent["messages"]) < len(msgs)


def test_a_configured_unknown_model_is_fitted(
    upstream: ServerThread, fake: Upstream, client: httpx.Client
) -> None:
    models = {"acme-private-3": {"context_window": 16_384}}
    with proxy_for(upstream, models=models) as proxy:
        r = client.post(
            f"{proxy.url}/v1/chat/completions",
            json={"model": "acme-private-3", "messages": conversation(4), "max_tokens": 50},
        )
    assert r.status_code == 200, r.text
    assert "x-tokenflex-fitted" not in r.headers
    assert int(r.headers["x-tokenflex-context-window"]) == 16_384


# -- names newer than the registry: their family's numbers ----------------------------------


def test_a_newer_claude_is_fitted_in_the_claude_window(proxy: ServerThread, fake: Upstream) -> None:
    # issue 22: 62 messages (~30K tokens) reached the upstream as 5 when claude-sonnet-5
    # was squeezed into 8K; a Claude name the registry does not list gets Claude's window
    msgs = conversation(62, 400)
    mark = len(fake.seen)
    client = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-test", max_retries=0)
    raw = client.messages.with_raw_response.create(
        model="claude-haiku-5", max_tokens=4096, system="be brief", messages=msgs
    )
    assert raw.parse().content[0].text == "ok"  # type: ignore[union-attr]
    assert int(raw.headers["x-tokenflex-context-window"]) == 200_000
    assert raw.headers["x-tokenflex-dropped"] == "0"
    (sent,) = fake.since(mark)
    assert sent["messages"] == msgs


def test_strict_models_refuses_a_family_guess(upstream: ServerThread, client: httpx.Client) -> None:
    with proxy_for(upstream, strict_models=True) as proxy:
        r = client.post(
            f"{proxy.url}/v1/chat/completions",
            json={"model": "claude-haiku-5", "messages": conversation(2)},
        )
    assert r.status_code == 404, r.text
    assert "claude (claude-opus-5)" in r.json()["error"]["message"]


# -- a refusal teaches the window: refit and retry once -------------------------------------


@pytest.mark.parametrize("wording", ["openai", "vllm", "llama.cpp", "llama.cpp-older"])
def test_a_refusal_teaches_an_unknown_models_window(
    proxy: ServerThread, fake: Upstream, client: httpx.Client, wording: str
) -> None:
    model = f"acme-refusing-{wording}"
    fake.wording[model] = wording
    msgs = conversation(40, 100)  # ~4,000 words: over the upstream's 3,000
    mark = len(fake.seen)
    oa = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-test", max_retries=0)
    raw = oa.chat.completions.with_raw_response.create(model=model, messages=msgs, max_tokens=100)  # type: ignore[arg-type]
    assert raw.parse().choices[0].message.content == "ok"
    refused, retried = fake.since(mark)
    assert refused["messages"] == msgs  # first as sent: nobody knew the window
    assert upstream_tokens(retried) <= WINDOW < upstream_tokens(refused)
    assert retried["messages"][-1] == msgs[-1] and len(retried["messages"]) < len(msgs)
    assert raw.headers["x-tokenflex-learned-window"] == str(WINDOW)
    assert int(raw.headers["x-tokenflex-context-window"]) == WINDOW
    assert "x-tokenflex-fitted" not in raw.headers

    # the next request is fitted into the learned window at once
    mark = len(fake.seen)
    r = client.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": model, "messages": conversation(44, 100), "max_tokens": 100},
    )
    assert r.status_code == 200, r.text
    (sent,) = fake.since(mark)
    assert upstream_tokens(sent) <= WINDOW
    assert "x-tokenflex-learned-window" not in r.headers


def test_an_anthropic_refusal_lowers_a_known_window(proxy: ServerThread, fake: Upstream) -> None:
    # claude-opus-4-6 is registered at 1,000,000; this upstream runs it at 3,000
    model = "claude-opus-4-6"
    fake.wording[model] = "anthropic"
    msgs = conversation(40, 100)
    mark = len(fake.seen)
    client = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-test", max_retries=0)
    raw = client.messages.with_raw_response.create(model=model, max_tokens=100, messages=msgs)
    assert raw.headers["x-tokenflex-learned-window"] == str(WINDOW)
    refused, retried = fake.since(mark)
    assert refused["messages"] == msgs  # fitted into 1M: sent whole
    assert upstream_tokens(retried) <= WINDOW


def test_a_refusal_never_raises_a_window_and_is_retried_once(
    proxy: ServerThread, fake: Upstream, client: httpx.Client
) -> None:
    msgs = conversation(6, 20)
    # gpt-4 is registered at 8,192: a refusal that says 100,000 teaches nothing and is
    # passed back as it came
    fake.lies["gpt-4"] = WORDINGS["openai"](100_000, 100_500)
    mark = len(fake.seen)
    r = client.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "gpt-4", "messages": msgs, "max_tokens": 50},
    )
    assert r.status_code == 400
    assert r.json() == fake.lies["gpt-4"]
    assert len(fake.since(mark)) == 1
    # a refusal whose own numbers disagree (the request it got is under the window) is
    # not believed
    fake.lies["gpt-4o"] = WORDINGS["openai"](4_000, 3_000)
    mark = len(fake.seen)
    r = client.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "gpt-4o", "messages": msgs, "max_tokens": 50},
    )
    assert r.status_code == 400 and len(fake.since(mark)) == 1
    # an upstream that refuses whatever it gets: one retry, then its answer
    fake.lies["acme-always-refuses"] = WORDINGS["llama.cpp"](2_000, 2_100)
    mark = len(fake.seen)
    r = client.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "acme-always-refuses", "messages": msgs, "max_tokens": 50},
    )
    assert r.status_code == 400
    assert r.json() == fake.lies["acme-always-refuses"]
    assert r.headers["x-tokenflex-learned-window"] == "2000"
    assert len(fake.since(mark)) == 2


def test_a_refusal_retries_a_streamed_request(
    proxy: ServerThread, fake: Upstream, client: httpx.Client
) -> None:
    model = "acme-refusing-stream"
    fake.wording[model] = "vllm"
    msgs = conversation(40, 100)
    mark = len(fake.seen)
    r = client.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": model, "messages": msgs, "max_tokens": 100, "stream": True},
    )
    assert r.status_code == 200, r.text  # the fake answers JSON even to a stream
    refused, retried = fake.since(mark)
    assert refused["stream"] is True and retried["stream"] is True
    assert upstream_tokens(retried) <= WINDOW


def test_a_models_file_is_loaded_at_startup(
    upstream: ServerThread, fake: Upstream, client: httpx.Client, tmp_path: Path
) -> None:
    path = tmp_path / "model_prices_and_context_window.json"
    path.write_text(json.dumps({"acme-listed": {"max_input_tokens": 5000, "mode": "chat"}}))
    with proxy_for(upstream, models_file=str(path)) as proxy:
        r = client.post(
            f"{proxy.url}/v1/chat/completions",
            json={"model": "acme-listed", "messages": conversation(4), "max_tokens": 50},
        )
    assert r.status_code == 200, r.text
    assert int(r.headers["x-tokenflex-context-window"]) == 5000
    with pytest.raises(ConfigError, match="Cannot read models file"):
        proxy_for(upstream, models_file=str(tmp_path / "missing.json"))
