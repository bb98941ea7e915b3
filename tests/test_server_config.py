"""Proxy settings, the plan store and the ``tokenflex serve`` command."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import socket
import subprocess
import sys
import time
import tracemalloc
import types
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

import tokenflex
from tokenflex.cli import main
from tokenflex.errors import ConfigError, UpstreamError
from tokenflex.formats.registry import get_format
from tokenflex.models import Model
from tokenflex.redact import redact
from tokenflex.server import PlanStore, ProxyError, ServerConfig, create_app
from tokenflex.server._models import ModelResolver
from tokenflex.server.app import kept_plan
from tokenflex.server.config import patch_model, split_options
from tokenflex.server.plans import (
    LAZY_DROPPED,
    DeferredPlan,
    LivePlan,
    credential_hash,
    held_bytes,
    scope_headers,
)
from tokenflex.server.protocols import wire_for
from tokenflex.summarize import ExtractiveSummarizer

CONFIG = """
upstream = "http://127.0.0.1:8080/v1/"
port = 9001
proxy_key = "from-file"
max_body_bytes = 1000

[fit]
safety_margin = 64
policy = "reserve"

[models."llama-3.1-8b"]
context_window = 8192
min_output_tokens = 256
default_max_tokens = 512

[routes.flex]
policy = "flex"
max_tokens_field = "max_completion_tokens"
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "proxy.toml"
    path.write_text(CONFIG)
    return path


def test_file_env_and_arguments_in_order(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = ServerConfig.load(config_file)
    assert c.upstream == "http://127.0.0.1:8080"  # trailing /v1 dropped
    assert c.port == 9001 and c.max_body_bytes == 1000
    assert c.proxy_key is not None and c.proxy_key.get_secret_value() == "from-file"
    assert "from-file" not in repr(c)  # secrets stay masked

    monkeypatch.setenv("TOKENFLEX_SERVE_PORT", "9002")
    monkeypatch.setenv("TOKENFLEX_SERVE_PROXY_KEY", "from-env")
    c = ServerConfig.load(config_file)
    assert c.port == 9002 and c.proxy_key is not None
    assert c.proxy_key.get_secret_value() == "from-env"

    c = ServerConfig.load(config_file, port=9003, host=None)  # None: flag not given
    assert c.port == 9003 and c.host == "127.0.0.1"

    monkeypatch.setenv("TOKENFLEX_SERVE_FIT", '{"policy": "flex"}')  # tables as JSON,
    fit = ServerConfig.load(config_file).fit  # merged key by key over the file's
    assert fit == {"policy": "flex", "safety_margin": 64}


def test_options_merge_fit_then_model_then_route(config_file: Path) -> None:
    c = ServerConfig.load(config_file)
    assert c.options_for("gpt-4o") == {"safety_margin": 64, "policy": "reserve"}
    merged = c.options_for("llama-3.1-8b", "flex")
    assert merged["policy"] == "flex" and merged["min_output_tokens"] == 256
    patch, proxy, fit = split_options(merged)
    assert patch == {"context_window": 8192}
    assert proxy == {"default_max_tokens": 512, "max_tokens_field": "max_completion_tokens"}
    assert fit == {"safety_margin": 64, "policy": "flex", "min_output_tokens": 256}
    model = patch_model(Model(name="llama-3.1-8b", context_window=131072), patch)
    assert model.context_window == 8192 and "proxy config" in model.source


@pytest.mark.parametrize(
    ("settings", "needle"),
    [
        pytest.param({}, "upstream: Field required", id="no-upstream"),
        pytest.param({"upstream": "ftp://x"}, "http(s) URL", id="bad-scheme"),
        pytest.param({"upstream": "http://x", "port": 70000}, "port", id="bad-port"),
        pytest.param(
            {"upstream": "http://x", "max_body_bytes": 0}, "max_body_bytes", id="zero-body"
        ),
        pytest.param({"upstream": "http://x", "routes": {"v1": {}}}, "route name", id="route-v1"),
        pytest.param(
            {"upstream": "http://x", "routes": {"a/b": {}}}, "route name", id="route-slash"
        ),
        pytest.param(
            {"upstream": "http://x", "fit": {"max_tokens_field": "tokens"}},
            "max_tokens_field",
            id="bad-field",
        ),
        pytest.param(
            {"upstream": "http://x", "models": {"m": {"default_max_tokens": -1}}},
            "default_max_tokens",
            id="bad-default",
        ),
        pytest.param({"upstream": "http://x", "nonsense": 1}, "nonsense", id="unknown-key"),
        pytest.param(
            {"upstream": "http://x", "passthrough_paths": ["v1/files/*"]},
            "passthrough_paths",
            id="path-without-slash",
        ),
        pytest.param(
            {"upstream": "http://x", "allowed_hosts": ["http://proxy.local"]},
            "allowed_hosts",
            id="host-with-scheme",
        ),
        pytest.param(
            {"upstream": "http://x", "cors_origins": ["https://app.example/"]},
            "cors_origins",
            id="origin-with-slash",
        ),
        pytest.param(
            {"upstream": "http://x", "worker_threads": 0}, "worker_threads", id="no-threads"
        ),
    ],
)
def test_bad_settings_are_config_errors(settings: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError, match="Invalid proxy settings") as info:
        ServerConfig.load(**settings)  # type: ignore[arg-type]
    assert needle in str(info.value)


def test_bad_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Cannot read proxy config"):
        ServerConfig.load(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("upstream = ")
    with pytest.raises(ConfigError, match="not valid TOML"):
        ServerConfig.load(bad)


@pytest.mark.parametrize(
    ("fit", "needle"),
    [
        pytest.param({"polcy": "flex"}, "unknown option(s) ['polcy']", id="typo"),
        pytest.param({"max_tokens": 100}, "default_max_tokens", id="max-tokens"),
        pytest.param({"policy": "greedy"}, "policy", id="bad-value"),
        pytest.param({"history_share": 2.0}, "history_share", id="bad-share"),
        pytest.param({"summarize": "yes"}, "summarize must be true or false", id="summarize-str"),
        pytest.param({"summarizer": "magic"}, "summarizer must be", id="summarizer-name"),
        pytest.param({"summarizer": {"model": "m"}}, "needs ['base_url']", id="summarizer-url"),
        pytest.param(
            {"summarizer": {"base_url": "http://x", "model": "m", "temp": 0}},
            "unknown keys ['temp']",
            id="summarizer-key",
        ),
    ],
)
def test_unknown_or_bad_fit_options_fail_at_startup(fit: dict[str, object], needle: str) -> None:
    config = ServerConfig.load(upstream="http://127.0.0.1:1", routes={"r": fit})
    with pytest.raises(ConfigError) as info:
        create_app(config)
    assert needle in str(info.value) and "[routes.r]" in str(info.value)


class _Plan:
    def __init__(self, n: int) -> None:
        self.n = n

    def to_dict(self) -> dict[str, int]:
        return {"n": self.n}


def test_plan_store_is_bounded_by_count_and_bytes() -> None:
    store = PlanStore(max_plans=3, max_bytes=1000)
    for i in range(5):
        assert store.put(f"p{i}", b"x" * 10)
    assert len(store) == 3 and store.size == 30
    assert store.get("p0") is None and store.get("p1") is None
    assert store.get("p4") == b"x" * 10
    store.put("big", b"y" * 990)
    assert store.get("big") is not None and len(store) == 2  # 990 + 10 bytes: p2, p3 made room
    assert store.get("p3") is None and store.get("p4") is not None
    assert not store.put("too-big", b"z" * 1001)
    assert store.get("too-big") is None  # never kept, nothing evicted for it
    assert store.get("big") is not None
    assert store.put("plan", _Plan(4)) and store.get("plan") == b'{"n":4}'  # serialized
    assert not PlanStore(max_plans=0).put("p", b"{}")


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 8),
    st.integers(8_000, 150_000),
    st.lists(st.tuples(st.integers(0, 7), st.integers(0, 3), st.integers(0, 200)), max_size=40),
)
def test_plan_store_counts_a_body_its_plans_share_once(
    max_plans: int, max_bytes: int, puts: list[tuple[int, int, int]]
) -> None:
    """The byte bound against a reference that recounts what the kept plans hold: each
    plan's own bytes, and each request body (the object) once however many plans hold
    it; the oldest out first while over either bound."""
    # four objects (a plan's own bytes are ~8 KiB: its meta and copies' buffers)
    bodies = [bytes(bytearray(b"b" * n)) for n in (0, 2_000, 9_000, 30_000)]
    store = PlanStore(max_plans=max_plans, max_bytes=max_bytes)
    kept: list[tuple[str, DeferredPlan]] = []

    def held(items: list[tuple[str, DeferredPlan]]) -> int:
        distinct = {id(p.raw): len(p.raw) for _, p in items}
        return sum(p.nbytes - len(p.raw) for _, p in items) + sum(distinct.values())

    for key, body, order in puts:
        plan = DeferredPlan(bodies[body], b"{}", tuple(range(order)), b"[]", parse=json.loads)
        accepted = store.put(f"p{key}", plan)
        assert accepted == (plan.nbytes <= max_bytes)
        if accepted:
            kept = [item for item in kept if item[0] != f"p{key}"] + [(f"p{key}", plan)]
            while len(kept) > max_plans or held(kept) > max_bytes:
                kept.pop(0)
        assert store.size == held(kept) <= max_bytes
        assert list(store._items) == [plan_id for plan_id, _ in kept]
        event(f"{len(kept)} kept")


def test_plans_belong_to_the_credentials_that_made_them() -> None:
    store = PlanStore()
    mine = credential_hash({"authorization": "Bearer sk-mine"})
    store.put("p", b"{}", owner=mine)
    assert store.get("p", owner=mine) == b"{}"
    for other in ({}, {"authorization": "Bearer sk-other"}, {"x-api-key": "sk-mine"}):
        assert store.get("p", owner=credential_hash(other)) is None


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            ["authorization", "Authorization", "X-API-KEY", "x-api-key", "api-key",
             "x-goog-api-key", "X-Tokenflex-Key", "x-tokenflex-key", "host", "origin"]
        ),
        st.text(max_size=12),
        max_size=6,
    )
)  # fmt: skip
def test_a_credential_hash_is_the_digest_of_the_credentials_named_in_any_case(
    headers: dict[str, str],
) -> None:
    """The owner digest (made from a copy of a started hash, in one update) is the
    SHA-256 of the five credential headers' values, each after its name, in order, as
    every version wrote it; names in any case, other headers left out (red when a name
    is read case-sensitively or a value is left out)."""
    import hashlib

    lowered = {k.lower(): v for k, v in headers.items()}
    reference = hashlib.sha256(b"tokenflex-plan-owner")
    for name in ("authorization", "x-api-key", "api-key", "x-goog-api-key", "x-tokenflex-key"):
        reference.update(b"\0" + name.encode() + b"\0" + lowered.get(name, "").encode())
    assert credential_hash(headers) == reference.hexdigest()
    assert credential_hash(headers) == credential_hash(lowered)


_HEADER_NAMES = st.sampled_from(
    [b"authorization", b"Authorization", b"x-api-key", b"origin", b"Origin", b"content-type"]
)


@settings(max_examples=300, deadline=None)
@given(
    raw=st.lists(st.tuples(_HEADER_NAMES, st.binary(max_size=12)), max_size=8),
    names=st.lists(st.sampled_from(["authorization", "x-api-key", "origin", "host"]), max_size=4),
)
def test_scope_headers_answer_as_starlette_headers_do(
    raw: list[tuple[bytes, bytes]], names: list[str]
) -> None:
    """The request's headers read once into a dict (scope_headers) answer every lookup as
    Starlette's Headers.get does (the reference: the first of a name given twice, any
    byte value read as latin-1, a name not lowercased as ASGI requires not found), and
    the second call is the dict kept in the scope."""
    from starlette.datastructures import Headers

    scope: dict[str, Any] = {"type": "http", "headers": raw}
    reference = Headers(scope=scope)
    mine = scope_headers(scope)
    for name in [*names, *(k.decode().lower() for k, _ in raw)]:
        assert mine.get(name) == reference.get(name)
    assert set(mine) == {k.decode() for k, _ in raw}
    assert scope_headers(scope) is mine


def test_plan_store_memory_stays_near_its_cap() -> None:
    """Real plans of ~100 kB conversations through a 2 MiB store: the memory it holds
    (tracemalloc) stays within 1.5x the cap, where live plan objects cost ~10x."""
    from tokenflex import fit

    cap = 2 * 1024 * 1024
    msgs = [{"role": "system", "content": "Be terse."}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"{i} " + "lorem ipsum " * 40}
        for i in range(200)
    ]
    plan = fit(msgs, model="gpt-4o", max_tokens=100)
    store = PlanStore(max_plans=10_000, max_bytes=cap)
    assert store.put("warm", plan)
    one = store.size
    assert one > 50_000
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(3 * cap // one):
            store.put(f"p{i}", plan)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert store.size <= cap and len(store) == cap // one
    assert held < 1.5 * cap, f"{held:,} bytes held for a {cap:,}-byte cap"


CONFIG_MODEL_ERRORS = [
    ({"tiny": {"tokenizer": "o200k_base", "chat_format": "template"}}, {}, "chat_template"),
    ({"tiny": {"tokenizer": "gguf:/no/such/model.gguf"}}, {}, "does not exist"),
    ({"tiny": {"tokenizer": "bogus:x"}}, {}, "Unknown tokenizer"),
    ({}, {"r": {"tokenizer": "o200k_base", "chat_format": "template"}}, "chat_template"),
]


@pytest.mark.parametrize(("models", "routes", "needle"), CONFIG_MODEL_ERRORS)
def test_models_that_cannot_be_counted_stop_startup(
    models: dict[str, dict[str, object]], routes: dict[str, dict[str, object]], needle: str
) -> None:
    config = ServerConfig.load(upstream="http://127.0.0.1:9", models=models, routes=routes)
    with pytest.raises(ConfigError, match=needle):
        create_app(config)


def test_serve_stops_on_a_model_it_cannot_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "proxy.toml"
    path.write_text(
        'upstream = "http://127.0.0.1:9"\n[models.local]\ntokenizer = "gguf:/no/such.gguf"\n'
        'chat_format = "template"\n'
    )
    root, ours = logging.getLogger(), logging.getLogger("tokenflex")
    before = (root.handlers[:], root.level, ours.level, logging.logThreads)
    assert main(["serve", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "local" in err and "gguf" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    # the server's logging is undone: no handler left on this test's stderr, which is
    # closed when it ends (a later command's warnings would fail to print)
    assert (root.handlers, root.level, ours.level, logging.logThreads) == before


def test_serve_rejects_bad_config_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "upstream" in err and "Traceback" not in err
    assert main(["serve", "--upstream", "http://x", "--log-level", "loud"]) == 2
    assert main(["serve", "--config", str(tmp_path / "nope.toml")]) == 2
    assert main(["serve", "--upstream", "http://x", "--mode", "dry-run"]) == 2
    err = capsys.readouterr().err
    assert "mode" in err and "observe" in err and "Traceback" not in err


def test_serve_runs_the_proxy(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOKENFLEX_")}
    env["TOKENFLEX_SERVE_PROXY_KEY"] = "k"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokenflex", "serve", "-u", "http://127.0.0.1:9", "-p", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/tokenflex/health", trust_env=False)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "tokenflex serve did not start"
                time.sleep(0.1)
        assert r.json() == {"status": "ok"}
        r = httpx.get(f"http://127.0.0.1:{port}/v1/models", trust_env=False)
        assert r.status_code == 401  # the key from the environment is enforced
        r = httpx.get(
            f"http://127.0.0.1:{port}/v1/models", headers={"x-tokenflex-key": "k"}, trust_env=False
        )
        assert r.status_code == 502  # nothing listens upstream
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            headers={"x-tokenflex-key": "k"},
            json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
            trust_env=False,
            timeout=30,
        )
        assert r.status_code == 502
    finally:
        proc.terminate()
        out = proc.communicate(timeout=10)[0].decode()
    assert f"http://127.0.0.1:{port}/v1 -> http://127.0.0.1:9 (proxy key required)" in out
    # the library's warning (the model not discovered) is one timestamped line: the
    # server's handler prints it, not the command line's too
    assert out.count("Cannot discover 'gpt-4o'") == 1, out
    assert "WARNING tokenflex: Cannot discover 'gpt-4o'" in out


SERVED = Model(name="served-model", context_window=32_768, tokenizer="estimate", source="server")


async def _discover(base_url: str, name: str | None, api_key: str | None) -> Model | None:
    """An upstream that lists only 'served-model' and serves it under any name."""
    if name is None or name == "served-model":
        return SERVED
    raise UpstreamError(f"{base_url} does not serve {name!r}", status_code=404)


@pytest.mark.parametrize(
    ("name", "window", "source"),
    [
        pytest.param("served-model", 32_768, "server", id="listed"),
        pytest.param("my-local-name", 32_768, "server", id="unlisted-unknown-name"),
        pytest.param("gpt-4", 8_192, "tokenflex registry", id="unlisted-smaller-registry-window"),
        pytest.param("gpt-4o", 32_768, "server", id="unlisted-larger-registry-window"),
    ],
)
async def test_window_comes_from_the_upstream_or_the_safer_registry(
    name: str, window: int, source: str
) -> None:
    resolver = ModelResolver(ServerConfig.load(upstream="http://127.0.0.1:1"), _discover)
    model = await resolver.resolve(name)
    assert model.context_window == window
    assert model.source == source


async def test_unlisted_names_share_one_question_about_the_served_model() -> None:
    asked: list[str | None] = []

    async def counting(base_url: str, name: str | None, api_key: str | None) -> Model | None:
        asked.append(name)
        return await _discover(base_url, name, api_key)

    resolver = ModelResolver(ServerConfig.load(upstream="http://127.0.0.1:1"), counting)
    for name in ("a", "b", "c"):
        assert (await resolver.resolve(name)).name == "served-model"
    assert asked == ["a", None, "b", "c"]


async def test_resolver_asks_once_and_falls_back_when_the_upstream_cannot_say() -> None:
    calls: list[str | None] = []

    async def flaky(base_url: str, name: str | None, api_key: str | None) -> Model | None:
        calls.append(name)
        await asyncio.sleep(0.01)
        raise UpstreamError("connection refused", status_code=502)

    resolver = ModelResolver(ServerConfig.load(upstream="http://127.0.0.1:1"), flaky)
    models = await asyncio.gather(*(resolver.resolve("gpt-4o") for _ in range(5)))
    assert calls == ["gpt-4o"]  # concurrent requests share one question
    assert {m.context_window for m in models} == {128_000}  # the registry answered
    await resolver.resolve("gpt-4o")
    assert calls == ["gpt-4o"]  # cached (retried only after RETRY_SECONDS)

    strict = ModelResolver(
        ServerConfig.load(upstream="http://127.0.0.1:1", strict_models=True), _discover
    )
    with pytest.raises(ProxyError) as info:
        await strict.resolve("no-such-model")
    assert info.value.status_code == 404 and info.value.code == "model_not_found"
    off = ModelResolver(ServerConfig.load(upstream="http://127.0.0.1:1", discover=False), flaky)
    assert (await off.resolve("gpt-4")).context_window == 8_192
    assert calls == ["gpt-4o"]


def _request(fmt: str, turns: int, system: bool, reasoning: bool = False) -> dict[str, Any]:
    """A request body of ``turns`` turns in format ``fmt`` (chat turns call a tool;
    ``reasoning``: chat answers carry ``reasoning_content``)."""
    msgs: list[dict[str, Any]] = []
    for t in range(turns):
        words = " ".join(f"w{(t * 7 + k) % 31}" for k in range(20 + 13 * (t % 5)))
        msgs.append({"role": "user", "content": f"turn {t}: {words}"})
        if fmt == "chat" and t % 2:
            call = {"id": f"c{t}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
            msgs.append({"role": "tool", "tool_call_id": f"c{t}", "content": words * 3})
        msgs.append({"role": "assistant", "content": f"answer {t}: {words}"})
        if fmt == "chat" and reasoning and t % 3 != 2:
            msgs[-1]["reasoning_content"] = f"thinking about {t}: {words}"
    msgs.append({"role": "user", "content": "and now?"})
    body: dict[str, Any] = {"model": "gpt-4o", "max_tokens": 100}
    if fmt == "chat":
        if system:
            msgs.insert(0, {"role": "system", "content": "Be brief."})
        return body | {"messages": msgs}
    if fmt == "anthropic":
        return body | {"messages": msgs} | ({"system": "Be brief."} if system else {})
    return {"model": "gpt-4o", "max_output_tokens": 100, "input": msgs} | (
        {"instructions": "Be brief."} if system else {}
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fmt=st.sampled_from(["chat", "anthropic", "responses"]),
    turns=st.integers(1, 40),
    window=st.sampled_from([1200, 3000, 6000, 100_000]),
    system=st.booleans(),
    clear=st.booleans(),
    summarize=st.booleans(),
    lazy=st.sampled_from([LAZY_DROPPED, 0, None]),
    reasoning=st.booleans(),
    stable=st.booleans(),
)
@example(
    fmt="chat", turns=20, window=6000, system=True, clear=True, summarize=False, lazy=0,
    reasoning=False, stable=False,
)  # fmt: skip
@example(
    fmt="anthropic", turns=20, window=3000, system=True, clear=False, summarize=True, lazy=0,
    reasoning=False, stable=False,
)  # fmt: skip
@example(
    fmt="responses", turns=40, window=1200, system=True, clear=False, summarize=False, lazy=0,
    reasoning=False, stable=False,
)  # fmt: skip
@example(
    fmt="chat", turns=30, window=1200, system=True, clear=False, summarize=False, lazy=0,
    reasoning=True, stable=True,
)  # fmt: skip
@example(
    fmt="anthropic", turns=40, window=1200, system=False, clear=False, summarize=False, lazy=0,
    reasoning=False, stable=True,
)  # fmt: skip
def test_a_kept_plan_reads_back_as_plan_to_dict(
    fmt: str,
    turns: int,
    window: int,
    system: bool,
    clear: bool,
    summarize: bool,
    lazy: int | None,
    reasoning: bool,
    stable: bool,
) -> None:
    """The plan store keeps the request body and the plan without its conversation
    (:class:`DeferredPlan`), its dict made when it is asked for, its dropped items read
    again from the body; where an item was sent shrunk (cleared) and more than ``lazy``
    items were left out, the plan itself (:class:`LivePlan`). What GET
    serves is ``plan.to_dict()`` of the plan as it was made, warnings redacted, whether
    the plan sent the request as it came, cut it (cache-stable, with recall), cleared
    or summarized it, or took reasoning out."""
    from tokenflex.plan import SENT_SHRUNK
    from tokenflex.state import MemoryStore

    wire = wire_for(get_format(fmt))[0]  # the format's main route
    raw = json.dumps(_request(fmt, turns, system, reasoning)).encode()
    req = wire.parse(raw)
    options: dict[str, Any] = (
        {"cache_stable": True, "recall": True, "cut_note": True, "state": MemoryStore()}
        if stable
        else {}
    )
    plan = tokenflex.fit(
        req.messages,
        model=Model("kept", window, tokenizer="o200k_base", chat_format="openai"),
        max_tokens=100,
        tools=req.tools,
        **({} if fmt == "chat" else {"format": fmt, "system": req.system}),
        clear_tool_results=clear,
        keep_tool_results=1,
        summarizer=ExtractiveSummarizer() if summarize else None,
        **options,
    )
    expected = plan.to_dict()  # (the live plan's own: its dropped items from its sources)
    expected["warnings"] = [redact(str(w)) for w in expected["warnings"]]
    kept = kept_plan(plan, req, raw, wire, lazy_dropped=lazy)
    assert kept is not None
    shrunk = any(reason in SENT_SHRUNK and section != "reasoning" for section, *_, reason in
                 plan.dropped.runs())  # fmt: skip
    # made when asked for wherever its dropped items can be read again from the body;
    # kept live where they cannot and are many; else its dict made now
    later = lazy is not None and not shrunk
    live = lazy is not None and shrunk and len(plan.dropped) > lazy
    assert isinstance(kept, LivePlan if live else DeferredPlan)
    assert isinstance(kept, LivePlan) or (kept.later is not None) == later
    assert json.loads(kept.render()) == json.loads(json.dumps(expected))
    event(f"plan sent the request as it came: {not len(plan.dropped)}")
    event(f"kept: {type(kept).__name__}, made later: {later}")


def _body(shape: str, n: int) -> bytes:
    """A chat body of ``n`` messages: long ASCII text, tiny texts (the objects cost most
    against their JSON), content parts, or non-ASCII text."""
    text = {
        "long": "lorem ipsum dolor " * 20,
        "tiny": "",
        "parts": "",
        "wide": "déjà vu, 東京 " * 10,
    }[shape]
    msgs: list[dict[str, Any]] = []
    for i in range(n):
        content: Any = f"{i}{text}"
        if shape == "parts":
            content = [{"type": "text", "text": str(i)} for _ in range(6)]
        msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": content})
    msgs.append({"role": "user", "content": "and now?"})
    return json.dumps({"model": "gpt-4o", "messages": msgs}).encode()


@pytest.mark.parametrize("shape", ["long", "tiny", "parts", "wide"])
def test_a_live_plan_is_charged_at_least_what_it_holds(shape: str) -> None:
    """A plan kept live holds the request's parsed messages and the fit's records of
    them (recall and a cache-stable cut, as the proxy fits): the bytes it is charged
    against the store's bound (:func:`held_bytes`) are at least what ``tracemalloc``
    sees it keep, for long, tiny, multi-part and non-ASCII messages alike."""
    from tokenflex.state import MemoryStore, TenantStore

    wire = wire_for(get_format("chat"))[0]
    raw = _body(shape, 1500)
    store = TenantStore(MemoryStore(), "tenant")
    options: dict[str, Any] = dict(
        model="gpt-4o", max_tokens=100, max_input_tokens=2000, recall=True, state=store
    )

    def kept() -> Any:
        req = wire.parse(raw)
        plan = tokenflex.fit(req.messages, cache_stable=True, **options)
        return LivePlan(plan, held_bytes(raw, len(req.messages)))  # as kept_plan keeps one

    kept()  # counts cached, recall records and the held cut stored: what is kept is new
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        live = kept()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert isinstance(live, LivePlan) and len(live.plan.dropped) > 1000
    assert held <= live.nbytes, f"{shape}: holds {held:,} bytes, charged {live.nbytes:,}"
    assert live.nbytes < 4 * held  # an upper estimate, not a wild one


def _reachable(root: Any, shared: Any = None) -> set[int]:
    """The objects the garbage collector tracks that ``root`` leads to (what a full
    collection walks for it on every pass), less those ``shared`` leads to (a model's
    counter, with its tokenizer and caches) and code (classes, functions, modules)."""
    skip = set() if shared is None else _reachable(shared)
    seen: set[int] = set()
    todo = [root]
    while todo:
        obj = todo.pop()
        if (
            id(obj) in seen
            or id(obj) in skip
            or not gc.is_tracked(obj)
            or isinstance(obj, type | types.FunctionType | types.ModuleType)
        ):
            continue
        seen.add(id(obj))
        todo.extend(gc.get_referents(obj))
    return seen


@pytest.mark.parametrize("fmt", ["chat", "anthropic", "responses"])
def test_a_plan_counted_later_holds_nothing_of_its_request(fmt: str) -> None:
    """A cut plan (cache-stable, recall, as the proxy fits) whose dropped items are read
    again from its body holds none of the request's parsed objects: the objects it leads
    the garbage collector to do not grow with the conversation (a long-running proxy's
    full collections walked every kept plan's conversation: an agent's 2,000-message
    request spent a third of its CPU there), and what it holds is within its charge."""
    from tokenflex.state import MemoryStore, TenantStore

    wire = wire_for(get_format(fmt))[0]
    store = TenantStore(MemoryStore(), "tenant")

    def kept(turns: int) -> Any:
        raw = json.dumps(_request(fmt, turns, system=True)).encode()
        req = wire.parse(raw)
        plan = tokenflex.fit(
            req.messages,
            model="gpt-4o",
            max_tokens=100,
            max_input_tokens=2000,
            tools=req.tools,
            **({} if fmt == "chat" else {"format": fmt, "system": req.system}),
            cache_stable=True,
            recall=True,
            state=store,
        )
        assert len(plan.dropped) > 100
        return kept_plan(plan, req, raw, wire, lazy_dropped=0), plan

    (short, _), (long, plan) = kept(150), kept(600)
    assert isinstance(long, DeferredPlan) and long.later is not None
    counter = plan.dropped.counter
    held = len(_reachable(long, counter))
    assert held <= len(_reachable(short, counter)) + 8  # (the runs may differ by one)
    assert held < 100 < len(_reachable(LivePlan(plan, 0), counter))
    tracemalloc.start()
    try:
        again, plan = kept(600)
        charged = again.nbytes
        del plan
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        del again  # what it alone held goes with it
        gc.collect()
        freed = before - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert 0 < freed <= charged, f"holds {freed:,} bytes, charged {charged:,}"
