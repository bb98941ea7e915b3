"""Discovering a served model's real window, and counting through a server's tokenizer:
vLLM, llama.cpp and Ollama faked with a mock transport, llama-cpp-python for real."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from llama_server import MODEL_ALIAS, LlamaServer

from tokenflex.errors import TokenizerUnavailableError, UpstreamError
from tokenflex.models.discovery import adiscover_model, discover_model
from tokenflex.tokenizers import get_tokenizer
from tokenflex.tokenizers.gguf import GGUFTokenizer
from tokenflex.tokenizers.server import ServerTokenizer, server_root

Routes = dict[tuple[str, str], Any]


def fake(routes: Routes, seen: list[httpx.Request] | None = None) -> httpx.MockTransport:
    """A server answering ``routes[(method, path)]`` (JSON, or a callable of the request);
    404 for anything else."""

    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        answer = routes.get((request.method, request.url.path))
        if answer is None:
            return httpx.Response(404, json={"detail": "Not Found"})
        if callable(answer):
            answer = answer(request)
        if isinstance(answer, httpx.Response):
            return answer
        return httpx.Response(200, json=answer)

    return httpx.MockTransport(handler)


VLLM: Routes = {
    ("GET", "/v1/models"): {
        "object": "list",
        "data": [
            {"id": "mistralai/Mistral-Small-24B", "object": "model", "max_model_len": 16384},
            {"id": "other", "object": "model", "max_model_len": 4096},
        ],
    }
}
LLAMA_CPP: Routes = {
    ("GET", "/v1/models"): {
        "object": "list",
        "data": [{"id": "qwen2.5-7b.gguf", "meta": {"n_ctx_train": 32768, "n_vocab": 152064}}],
    },
    ("GET", "/props"): {
        "default_generation_settings": {"n_ctx": 4096},
        "chat_template": (
            "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
            "{% endfor %}"
        ),
        "bos_token": "<|endoftext|>",
        "eos_token": "<|im_end|>",
    },
}


def ollama(parameters: str) -> Routes:
    return {
        ("GET", "/v1/models"): {"object": "list", "data": [{"id": "llama3.2:3b"}]},
        ("POST", "/api/show"): {
            "parameters": parameters,
            "model_info": {"general.architecture": "llama", "llama.context_length": 131072},
        },
    }


# -- discovery with faked servers --------------------------------------------------------------


async def test_vllm_max_model_len() -> None:
    m = discover_model("http://gpu:8000/v1", transport=fake(VLLM))
    assert (m.name, m.context_window, m.source, m.provider) == (
        "mistralai/Mistral-Small-24B",
        16384,
        "server",
        "vllm",
    )
    assert m.tokenizer == "server:http://gpu:8000"
    m = discover_model("http://gpu:8000", model="other", transport=fake(VLLM))
    assert m.context_window == 4096
    a = await adiscover_model("http://gpu:8000/v1/", transport=fake(VLLM))
    assert a == discover_model("http://gpu:8000/v1", transport=fake(VLLM))


def test_llama_cpp_props_n_ctx_and_template() -> None:
    m = discover_model("http://box:8080/v1", transport=fake(LLAMA_CPP))
    assert m.context_window == 4096  # the running n_ctx, not n_ctx_train
    assert (m.provider, m.chat_format, m.tokenizer) == (
        "llama.cpp",
        "template",
        "server:http://box:8080",
    )
    assert m.chat_template is not None and "<|im_start|>" in m.chat_template
    assert (m.bos_token, m.eos_token) == ("<|endoftext|>", "<|im_end|>")


def test_llama_cpp_newer_props_and_train_fallback() -> None:
    routes = {**LLAMA_CPP, ("GET", "/props"): {"n_ctx": 8192}}
    assert discover_model("http://box:8080", transport=fake(routes)).context_window == 8192
    routes = {**LLAMA_CPP, ("GET", "/props"): {"default_generation_settings": {}}}
    assert discover_model("http://box:8080", transport=fake(routes)).context_window == 32768


@pytest.mark.parametrize(
    ("parameters", "window"),
    [
        pytest.param("num_ctx 8192\nstop <|eot_id|>", 8192, id="num_ctx"),
        pytest.param("stop <|eot_id|>", 2048, id="default-2048"),
        pytest.param("num_ctx 999999", 131072, id="capped-by-training"),
    ],
)
def test_ollama_num_ctx(parameters: str, window: int) -> None:
    seen: list[httpx.Request] = []
    m = discover_model("http://localhost:11434/v1", transport=fake(ollama(parameters), seen))
    assert (m.name, m.context_window, m.provider) == ("llama3.2:3b", window, "ollama")
    show = next(r for r in seen if r.url.path == "/api/show")
    assert json.loads(show.content) == {"model": "llama3.2:3b"}


def test_no_window_known_model_uses_the_registry() -> None:
    routes: Routes = {("GET", "/v1/models"): {"data": [{"id": "gpt-4o", "object": "model"}]}}
    m = discover_model("https://api.example/v1", transport=fake(routes))
    assert m.name == "gpt-4o" and m.context_window == 128000 and m.source != "server"


def test_no_window_unknown_model_raises() -> None:
    routes: Routes = {("GET", "/v1/models"): {"data": [{"id": "mystery-7b"}]}}
    with pytest.raises(UpstreamError, match="exposes no context window"):
        discover_model("http://x/v1", transport=fake(routes))


def test_wrong_model_name_lists_the_served_ones() -> None:
    with pytest.raises(UpstreamError, match=r"does not serve 'nope'.*'other'"):
        discover_model("http://gpu:8000", model="nope", transport=fake(VLLM))


@pytest.mark.parametrize(
    ("status", "match"),
    [
        pytest.param(401, "HTTP 401", id="unauthorized"),
        pytest.param(500, "HTTP 500", id="server-error"),
    ],
)
def test_error_status_is_an_upstream_error(status: int, match: str) -> None:
    routes: Routes = {("GET", "/v1/models"): httpx.Response(status, text="nope")}
    with pytest.raises(UpstreamError, match=match) as info:
        discover_model("http://x/v1", transport=fake(routes))
    assert info.value.status_code == status


def test_api_key_is_sent() -> None:
    seen: list[httpx.Request] = []
    discover_model("http://gpu:8000/v1", api_key="sk-1", transport=fake(VLLM, seen))
    assert seen[0].headers["authorization"] == "Bearer sk-1"


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_unreachable_is_a_quick_upstream_error() -> None:
    url = f"http://127.0.0.1:{_dead_port()}/v1"
    t0 = time.monotonic()
    with pytest.raises(UpstreamError, match="Cannot reach"):
        discover_model(url)
    with pytest.raises(UpstreamError, match="Cannot reach"):
        await adiscover_model(url)
    assert time.monotonic() - t0 < 2


@pytest.mark.parametrize(
    ("url", "root"),
    [
        ("http://h:1/v1", "http://h:1"),
        ("http://h:1/v1/", "http://h:1"),
        ("http://h:1", "http://h:1"),
        ("h:1/v1", "http://h:1"),
        ("https://api.x/v1", "https://api.x"),
    ],
)
def test_server_root(url: str, root: str) -> None:
    assert server_root(url) == root


# -- the server tokenizer's dialects ----------------------------------------------------------


def _tokens_of(field: str, bos: list[int] | None = None) -> Callable[[httpx.Request], Any]:
    def answer(request: httpx.Request) -> Any:
        text = json.loads(request.content)[field]
        return {"tokens": [*(bos or []), *range(len(text.split()))]}

    return answer


def test_llama_cpp_dialect() -> None:
    seen: list[httpx.Request] = []
    routes: Routes = {("POST", "/tokenize"): _tokens_of("content")}
    client = httpx.Client(transport=fake(routes, seen))
    tok = ServerTokenizer("http://box:8080/v1", client=client)
    assert tok.count("one two three") == 3
    assert tok.kind == "llama.cpp"
    body = json.loads(seen[-1].content)
    assert body == {"content": "one two three", "add_special": False, "parse_special": True}


def test_vllm_dialect() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> Any:
        body = json.loads(request.content)
        if "prompt" not in body:
            return httpx.Response(400, json={"error": "prompt required"})
        return {"tokens": list(range(len(body["prompt"].split()))), "count": 0}

    client = httpx.Client(transport=fake({("POST", "/tokenize"): answer}, seen))
    tok = ServerTokenizer("http://gpu:8000/v1", model="m", client=client)
    assert tok.count("a b") == 2 and tok.kind == "vllm"
    assert json.loads(seen[-1].content) == {
        "prompt": "a b",
        "add_special_tokens": False,
        "model": "m",
    }


def test_llama_cpp_python_dialect_drops_the_bos() -> None:
    routes: Routes = {("POST", "/extras/tokenize"): _tokens_of("input", bos=[1])}
    tok = ServerTokenizer("http://x/v1", client=httpx.Client(transport=fake(routes)))
    assert tok.encode("a b c") == [0, 1, 2]
    assert tok.kind == "llama-cpp-python"
    explicit = ServerTokenizer(
        "http://x", kind="llama-cpp-python", client=httpx.Client(transport=fake(routes))
    )
    assert explicit.count("a b c") == 3


def test_no_tokenize_endpoint() -> None:
    tok = ServerTokenizer("http://x/v1", client=httpx.Client(transport=fake({})))
    with pytest.raises(TokenizerUnavailableError, match=r"tried /extras/tokenize.*HTTP 404"):
        tok.count("x")


def test_tokenize_answer_without_tokens() -> None:
    routes: Routes = {("POST", "/tokenize"): {"nope": 1}}
    tok = ServerTokenizer("http://x", kind="llama.cpp", client=httpx.Client(transport=fake(routes)))
    with pytest.raises(TokenizerUnavailableError, match="did not answer"):
        tok.count("x")


def test_unknown_kind() -> None:
    with pytest.raises(TokenizerUnavailableError, match="Unknown server kind"):
        ServerTokenizer("http://x", kind="tgi")  # type: ignore[arg-type]


def test_unreachable_tokenizer() -> None:
    tok = ServerTokenizer(f"http://127.0.0.1:{_dead_port()}", timeout=2)
    with pytest.raises(TokenizerUnavailableError, match="Cannot reach"):
        tok.count("x")
    tok.close()


# -- the real llama-cpp-python server ---------------------------------------------------------


@pytest.mark.server
async def test_discovers_the_real_window(llama_server: LlamaServer) -> None:
    m = discover_model(llama_server.base_url)
    assert m.context_window == llama_server.n_ctx == 2048
    assert (m.name, m.provider, m.source) == (MODEL_ALIAS, "llama-cpp-python", "server")
    assert m.tokenizer == f"server:{llama_server.root_url}"
    assert await adiscover_model(llama_server.root_url) == m


@pytest.mark.server
def test_without_the_probe_the_window_is_unknown(llama_server: LlamaServer) -> None:
    with pytest.raises(UpstreamError, match="exposes no context window"):
        discover_model(llama_server.base_url, probe_tokens=0)


@pytest.mark.server
def test_server_tokenizer_equals_the_gguf_vocabulary(llama_server: LlamaServer) -> None:
    server = get_tokenizer(f"server:{llama_server.root_url}")
    assert server.exact
    gguf = GGUFTokenizer(llama_server.model_path)
    texts = ["", "Hello world", "héllo 日本語 🎉", "<|im_start|>user\nhi<|im_end|>", "x " * 500]
    for text in texts:
        assert server.count(text) == gguf.count(text), text
    tok = server.tokenizer
    assert isinstance(tok, ServerTokenizer) and tok.kind == "llama-cpp-python"
    gguf.close()
