"""Discovery against a hostile or mistaken server (issue 25 item 6): a chat template from
``/props`` is code from the network, rendered with CPU and size bounds; a path a server
sends is never opened unless the server's own process on this machine runs it; the disk
cache does not bring a hostile answer back after a restart.

Servers are faked with httpx's mock transport, or (where the server's process must be on
this machine) a small HTTP server in a child process on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from llama_server import smollm2_path
from test_discovery import LLAMA_CPP, Routes, fake, ollama, serve_here

from tokenflex import chat_template as templates
from tokenflex.errors import UpstreamError
from tokenflex.models import discovery
from tokenflex.models.discovery import adiscover_model, discover_model
from tokenflex.models.served_files import served_path

# -- templates rendered with bounds --------------------------------------------------------------

CPU_BOMBS = {
    "nested-loops": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    ),
    "recursion": (
        "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
        "{{ f(40) }}"
    ),
    "output": (
        "{% for i in range(100000) %}{% for j in range(100000) %}xxxxxxxx{% endfor %}{% endfor %}"
    ),
}
MEMORY_BOMBS = {
    "multiply": "{{ 'x' * 1000000000 }}",
    "center": "{{ 'x' | center(1000000000) }}",
    "ljust": "{{ 'x'.ljust(1000000000) }}",
    "format": "{{ '%*s' % (1000000000, 'x') }}",
    "power": "{{ 10 ** 100000000 }}",
    "doubling-tilde": (
        "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
        "{% endfor %}{{ ns.s | length }}"
    ),
    "doubling-replace": (
        "{% set ns = namespace(s='x') %}{% for i in range(40) %}"
        "{% set ns.s = ns.s | replace('x', 'xx') %}{% endfor %}{{ ns.s | length }}"
    ),
    "replace-message": "{{ messages[0].content.replace('a', 'a' * 100000) }}",
}
MESSAGES = [{"role": "user", "content": "a" * 1000}]


def _stopped(source: str) -> str:
    """The refusal a render of ``source`` ends with (within a guard: a render that is not
    stopped fails the test instead of hanging it)."""
    outcome: list[BaseException | str] = []

    def work() -> None:
        try:
            template = templates.compile_template(source)
            outcome.append(templates.render(template, MESSAGES, add_generation_prompt=True))
        except BaseException as exc:  # the outcome is what is checked
            outcome.append(exc)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert outcome, "the render was not stopped"
    assert isinstance(outcome[0], templates.TemplateRejected), outcome[0]
    return str(outcome[0])


@pytest.mark.parametrize("source", CPU_BOMBS.values(), ids=CPU_BOMBS.keys())
def test_a_template_that_computes_forever_is_stopped(
    source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(templates, "RENDER_SECONDS", 0.3)
    message = _stopped(source)
    assert "chat template was stopped" in message
    assert "RENDER_SECONDS" in message or "characters" in message


@pytest.mark.parametrize("source", MEMORY_BOMBS.values(), ids=MEMORY_BOMBS.keys())
def test_a_template_that_builds_a_huge_value_is_stopped_before_it_does(source: str) -> None:
    message = _stopped(source)
    assert "chat template was stopped" in message


def test_compiling_evaluates_nothing_and_is_bounded_in_size() -> None:
    templates.compile_template("{{ 'x' | center(1000000000) }}")  # not folded at compile time
    with pytest.raises(Exception, match="at most"):
        templates.compile_template("{# #}" + "x" * (templates.MAX_TEMPLATE_CHARS + 1))


def test_real_templates_render_as_before() -> None:
    source = (
        "{% for m in messages %}{{ '<|im_start|>' ~ m.role ~ '\\n' }}"
        "{{ m.content | trim }}{{ '<|im_end|>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    big = [{"role": "user", "content": "word " * 400_000}]  # a 2 MB message renders
    text = templates.render(templates.compile_template(source), big, add_generation_prompt=True)
    assert text.startswith("<|im_start|>user\nword") and text.endswith("<|im_start|>assistant\n")


def test_a_hostile_props_template_is_not_used() -> None:
    routes: Routes = {
        **LLAMA_CPP,
        ("GET", "/props"): {
            **LLAMA_CPP[("GET", "/props")],
            "chat_template": MEMORY_BOMBS["center"],
        },
    }
    m = discover_model("http://box:8080/v1", transport=fake(routes))
    assert m.chat_template is None and m.chat_format == "generic"
    (cached,) = discovery.discovery_cache_dir().glob("*.json")
    assert "center" not in cached.read_text()


# -- no path from the network is opened ---------------------------------------------------------


def test_a_props_model_path_is_not_opened_on_the_servers_word() -> None:
    for path in (str(smollm2_path()), "/etc/passwd", "/dev/zero", "relative/model.gguf"):
        routes: Routes = {
            **LLAMA_CPP,
            ("GET", "/props"): {**LLAMA_CPP[("GET", "/props")], "model_path": path},
        }
        for url in ("http://box:8080/v1", "http://127.0.0.1:9/v1"):
            m = discover_model(url, transport=fake(routes), cache_ttl=0)
            assert m.tokenizer.startswith("server:"), (path, url, m.tokenizer)


def test_a_vllm_root_and_an_ollama_blob_are_not_opened_on_the_servers_word(
    tmp_path: Path,
) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    routes: Routes = {
        ("GET", "/v1/models"): {"data": [{"id": "m", "root": str(tmp_path), "max_model_len": 4096}]}
    }
    m = discover_model("http://gpu:8000/v1", transport=fake(routes), cache_ttl=0)
    assert m.tokenizer == "server:http://gpu:8000"
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    blob = blobs / ("sha256-" + "0" * 64)
    blob.symlink_to(smollm2_path())
    for source in (str(smollm2_path()), str(blob)):  # not a blob; no Ollama here
        routes = ollama("num_ctx 8192")
        routes[("POST", "/api/show")]["modelfile"] = f"FROM {source}\n"
        m = discover_model("http://localhost:1/v1", transport=fake(routes), cache_ttl=0)
        assert not m.tokenizer.startswith("gguf:"), source


@pytest.fixture
def llama_cpp_here(tmp_path: Path) -> Iterator[str]:
    """A llama.cpp-like server here that runs ``-m SMOLLM2`` and says so in /props."""
    gguf = str(smollm2_path())
    routes = {
        "GET /v1/models": {"data": [{"id": "smol"}]},
        "GET /props": {"default_generation_settings": {"n_ctx": 2048}, "model_path": gguf},
    }
    with serve_here(tmp_path, routes, "-m", gguf) as url:
        yield url


def test_the_model_file_its_process_here_runs_is_used(llama_cpp_here: str) -> None:
    path = smollm2_path()
    assert served_path(llama_cpp_here, str(path)) == path
    assert served_path(llama_cpp_here, "/etc/passwd") is None
    m = discover_model(llama_cpp_here, cache_ttl=0)
    assert m.tokenizer == f"gguf:{path}"


# -- the disk cache does not bring a hostile answer back ------------------------------------------


def _cache_entry() -> tuple[Path, dict[str, Any]]:
    (file,) = discovery.discovery_cache_dir().glob("*.json")
    return file, json.loads(file.read_text())


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param({"chat_template": CPU_BOMBS["nested-loops"]}, id="template"),
        pytest.param({"tokenizer": f"gguf:{smollm2_path()}"}, id="model-file"),
        pytest.param({"tokenizer": "server:http://evil:1"}, id="other-server"),
        pytest.param({"context_window": 10**12}, id="window"),
    ],
)
def test_a_tampered_cache_entry_is_not_used(
    tamper: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(templates, "RENDER_SECONDS", 0.3)
    first = discover_model("http://box:8080/v1", transport=fake(LLAMA_CPP))
    down = fake({("GET", "/v1/models"): httpx.Response(500, text="busy")})
    assert discover_model("http://box:8080/v1", transport=down) == first  # a good entry: used
    file, entry = _cache_entry()
    entry["model"].update(tamper)
    file.write_text(json.dumps(entry))
    with pytest.raises(UpstreamError, match="HTTP 500"):  # not used: the server is asked
        discover_model("http://box:8080/v1", transport=down)


def test_an_answer_over_the_size_bound_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(discovery, "MAX_ANSWER_BYTES", 2000)
    routes: Routes = {
        **LLAMA_CPP,
        ("GET", "/props"): {**LLAMA_CPP[("GET", "/props")], "chat_template": "x" * 5000},
    }
    with pytest.raises(UpstreamError, match="exposes no context window"):  # /props not read
        discover_model("http://box:8080/v1", transport=fake(routes), cache_ttl=0)


async def test_the_async_driver_reads_with_the_same_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(discovery, "MAX_ANSWER_BYTES", 2000)
    routes: Routes = {
        **LLAMA_CPP,
        ("GET", "/props"): {**LLAMA_CPP[("GET", "/props")], "chat_template": "x" * 5000},
    }
    with pytest.raises(UpstreamError, match="exposes no context window"):
        await adiscover_model("http://box:8080/v1", transport=fake(routes), cache_ttl=0)
    monkeypatch.setattr(discovery, "MAX_ANSWER_BYTES", 20_000)  # under the bound: read
    m = await adiscover_model("http://box:8080/v1", transport=fake(routes), cache_ttl=0)
    assert m.context_window == 4096
