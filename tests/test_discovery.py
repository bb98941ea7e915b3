"""Discovering a served model's real window, and counting through a server's tokenizer:
vLLM, llama.cpp and Ollama faked with a mock transport, llama-cpp-python for real."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from llama_server import MODEL_ALIAS, LlamaServer, smollm2_path

from tokenflex.cli import main
from tokenflex.counting import get_counter
from tokenflex.errors import TokenizerUnavailableError, UpstreamError
from tokenflex.models import discovery, register_model
from tokenflex.models.discovery import adiscover_model, compare, discover_model
from tokenflex.models.served_files import local_server_process, parse_command_line
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


SERVER = """
import http.server, json, sys
routes = json.load(open(sys.argv[1]))
class H(http.server.BaseHTTPRequestHandler):
    def answer(self):
        body = routes.get(self.command + " " + self.path)
        data = json.dumps(body).encode()
        self.send_response(200 if body is not None else 404)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self.answer()
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.answer()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[2])), H).serve_forever()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve_here(tmp_path: Path, routes: dict[str, Any], *argv: str) -> Iterator[str]:
    """A loopback server in a child process whose command line ends with ``argv``."""
    pytest.importorskip("psutil")
    (tmp_path / "routes.json").write_text(json.dumps(routes))
    (tmp_path / "server.py").write_text(SERVER)
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(tmp_path / "server.py"),
            str(tmp_path / "routes.json"),
            str(port),
            *argv,
        ]
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "no server"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


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
    found = discover_model("http://box:8080", transport=fake(routes), cache_ttl=0)
    assert found.context_window == 32768


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
    assert await adiscover_model(llama_server.root_url) == m


@pytest.mark.server
def test_without_its_process_or_the_probe_the_window_is_unknown(
    llama_server: LlamaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(discovery, "local_server_process", lambda root: None)
    with pytest.raises(UpstreamError, match="exposes no context window"):
        discover_model(llama_server.base_url, probe_tokens=0, cache_ttl=0)
    # with the probe, the window comes from the server's refusal; counts from its endpoint
    m = discover_model(llama_server.base_url, cache_ttl=0)
    assert m.context_window == 2048
    assert (m.tokenizer, m.chat_format) == (f"server:{llama_server.root_url}", "generic")


@pytest.mark.server
def test_discovery_yields_the_servers_template_and_its_model_file(
    llama_server: LlamaServer,
) -> None:
    m = discover_model(llama_server.base_url)
    gguf = GGUFTokenizer(llama_server.model_path)
    assert m.tokenizer == f"gguf:{llama_server.model_path}"
    assert m.chat_format == "template"
    assert m.chat_template == gguf.chat_template and m.chat_template
    assert (m.bos_token, m.eos_token) == (gguf.bos_token, gguf.eos_token)
    gguf.close()
    counter = get_counter(m)
    for messages in CONVERSATIONS:
        r = httpx.post(
            f"{llama_server.base_url}/chat/completions",
            json={"messages": messages, "max_tokens": 1, "temperature": 0},
            timeout=120,
        )
        assert counter.count_rendered(messages) == r.json()["usage"]["prompt_tokens"]
        assert counter.count(messages) >= r.json()["usage"]["prompt_tokens"]


CONVERSATIONS: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "Hello!"}],
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "héllo 日本語 🎉 " * 20},
        {"role": "assistant", "content": "Yes."},
        {"role": "user", "content": "And <|im_start|> then?"},
    ],
]


@pytest.mark.server
def test_counting_and_discovery_do_not_wait_on_a_busy_server(llama_server: LlamaServer) -> None:
    m = discover_model(llama_server.base_url)  # cached on disk from here on
    counter = get_counter(m)
    messages = CONVERSATIONS[1]
    expected = counter.count(messages)

    def generate() -> None:
        # EOS suppressed: the server stays busy for the whole max_tokens
        httpx.post(
            f"{llama_server.base_url}/completions",
            json={
                "prompt": "Once upon a time",
                "max_tokens": 400,
                "logit_bias": {"0": -100, "1": -100, "2": -100},
            },
            timeout=120,
        )

    worker = threading.Thread(target=generate)
    worker.start()
    try:
        time.sleep(0.5)
        # the server's own endpoints wait for the generation lock ...
        with pytest.raises(httpx.TimeoutException):
            httpx.post(f"{llama_server.root_url}/extras/tokenize", json={"input": "x"}, timeout=1)
        # ... counting and a second discovery do not
        t0 = time.monotonic()
        assert get_counter(discover_model(llama_server.base_url)).count(messages) == expected
        assert time.monotonic() - t0 < 1.0
        assert worker.is_alive()  # it was busy all along
    finally:
        worker.join(timeout=120)


def test_the_disk_cache(tmp_path: Path) -> None:
    calls: list[httpx.Request] = []
    first = discover_model("http://gpu:8000/v1", transport=fake(VLLM, calls))
    assert len(calls) == 1
    files = list(discovery.discovery_cache_dir().glob("*.json"))
    assert len(files) == 1
    down = fake({("GET", "/v1/models"): httpx.Response(500, text="busy")})
    assert discover_model("http://gpu:8000/v1", transport=down) == first  # from disk
    # another model of that server, or no cache: the server is asked
    with pytest.raises(UpstreamError, match="HTTP 500"):
        discover_model("http://gpu:8000/v1", model="other", transport=down)
    with pytest.raises(UpstreamError, match="HTTP 500"):
        discover_model("http://gpu:8000/v1", transport=down, cache_ttl=0)
    # an entry older than the TTL is asked again
    entry = json.loads(files[0].read_text())
    entry["saved"] -= 7200
    files[0].write_text(json.dumps(entry))
    with pytest.raises(UpstreamError, match="HTTP 500"):
        discover_model("http://gpu:8000/v1", transport=down)
    # an unreadable entry is ignored
    files[0].write_text("{not json")
    assert discover_model("http://gpu:8000/v1", transport=fake(VLLM)) == first


def test_vllm_local_folder_counts_with_its_tokenizer(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}")
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}",
                "bos_token": {"content": "<s>"},
                "eos_token": "</s>",
            }
        )
    )
    routes = {"GET /v1/models": {"data": [{"id": "m", "root": str(folder), "max_model_len": 4096}]}}
    # the folder is used because the server's process here serves it (vllm serve FOLDER)
    with serve_here(tmp_path, routes, "serve", str(folder)) as url:
        m = discover_model(url, cache_ttl=0)
        assert (m.tokenizer, m.chat_format) == (f"hf:{folder}", "template")
        assert (m.bos_token, m.eos_token) == ("<s>", "</s>")
        assert m.chat_template is not None and "m.content" in m.chat_template


def test_llama_cpp_model_path_here_counts_offline(tmp_path: Path) -> None:
    path = smollm2_path()
    routes = {
        "GET /v1/models": LLAMA_CPP[("GET", "/v1/models")],
        "GET /props": {**LLAMA_CPP[("GET", "/props")], "model_path": str(path)},
    }
    with serve_here(tmp_path, routes, "-m", str(path)) as url:
        m = discover_model(url, cache_ttl=0)
        assert (m.tokenizer, m.chat_format) == (f"gguf:{path}", "template")
        assert m.chat_template == LLAMA_CPP[("GET", "/props")]["chat_template"]  # the server's
    # another machine's path, or one its process does not run: never opened
    m = discover_model("http://box:8080/v1", transport=fake({**LLAMA_CPP}), cache_ttl=0)
    assert m.tokenizer == "server:http://box:8080"


def test_ollama_blob_here_gives_tokenizer_and_template(tmp_path: Path) -> None:
    blobs = tmp_path / "models" / "blobs"
    blobs.mkdir(parents=True)
    blob = blobs / ("sha256-" + "ab" * 32)
    blob.symlink_to(smollm2_path())
    show = {
        **ollama("num_ctx 8192")[("POST", "/api/show")],
        "modelfile": f"# Modelfile\nFROM {blob}\nTEMPLATE x\n",
    }
    routes = {"GET /v1/models": {"data": [{"id": "llama3.2:3b"}]}, "POST /api/show": show}
    with serve_here(tmp_path, routes) as url:  # an Ollama on this machine
        m = discover_model(url, cache_ttl=0)
        assert (m.context_window, m.tokenizer, m.chat_format) == (8192, f"gguf:{blob}", "template")
        gguf = GGUFTokenizer(blob)
        assert m.chat_template == gguf.chat_template
        gguf.close()


def test_command_line_of_a_llama_cpp_python_server() -> None:
    path = smollm2_path()
    p = parse_command_line(1, ["python", "-c", "...", "--model", str(path), "--n_ctx", "4096"])
    assert (p.model_path, p.n_ctx, p.chat_format) == (path, 4096, None)
    p = parse_command_line(1, ["python", "-m", "llama_cpp.server", "--model=/no.gguf", "--n_ctx=x"])
    assert (p.model_path, p.n_ctx) == (None, None)
    assert local_server_process("https://api.openai.com") is None  # never a remote one


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


# -- the registry against a running server ------------------------------------------------------


def test_compare_names_each_difference() -> None:
    c = compare("http://gpu:8000/v1", "mistral-small-24b", transport=fake(VLLM))
    assert c.served.name == "mistralai/Mistral-Small-24B"  # unlisted name: the served model
    assert c.registry is not None and c.registry.name == "mistral-small-24b"
    fields = {d.field: d for d in c.differences}
    assert (fields["context_window"].registry, fields["context_window"].server) == (32768, 16384)
    assert "smaller window" in fields["context_window"].note
    assert not c.matches
    unknown = compare("http://gpu:8000/v1", "other", transport=fake(VLLM))
    assert (unknown.served.context_window, unknown.registry) == (4096, None)
    assert [d.field for d in unknown.differences] == ["name"]


def test_compare_matches_when_the_registry_says_what_the_server_does() -> None:
    register_model(
        name="mistralai/mistral-small-24b",
        context_window=16384,
        tokenizer="server:http://gpu:8000",
        chat_format="generic",
    )
    c = compare("http://gpu:8000/v1", "mistralai/Mistral-Small-24B", transport=fake(VLLM))
    assert c.matches, c.differences


@pytest.mark.server
def test_compare_and_the_cli_check_against_the_real_server(
    llama_server: LlamaServer, capsys: pytest.CaptureFixture[str]
) -> None:
    register_model(name="smollm2-check", context_window=8192, max_output_tokens=4096)
    c = compare(llama_server.base_url, "smollm2-check")
    assert c.served.context_window == 2048
    fields = {d.field: (d.registry, d.server) for d in c.differences}
    assert fields["context_window"] == (8192, 2048)
    assert fields["max_output_tokens"] == (4096, None)  # above the server's window
    assert fields["tokenizer"] == (
        "estimate (generic)",
        f"gguf:{llama_server.model_path} (template)",
    )
    assert main(["models", "--check", llama_server.base_url, "smollm2-check", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["matches"] is False and data["context_window"] == 2048
    assert {d["field"] for d in data["differences"]} == set(fields)
    assert main(["models", "--check", llama_server.base_url, "smollm2-check"]) == 1
    out = capsys.readouterr().out
    assert "8,192" in out and "2,048" in out and "smaller window" in out
    # once the registry says what the server runs, the check passes
    register_model(c.served.replace(name="smollm2-check"))
    assert main(["models", "--check", llama_server.base_url, "smollm2-check"]) == 0
    assert "matches" in capsys.readouterr().out
