"""Shared fixtures: isolated env and config, and the real llama.cpp server.

The server itself (``LlamaServer``: llama-cpp-python serving SmolLM2 on loopback) is in
``llama_server.py``; the fixture ``llama_server`` here starts it once per session.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from llama_server import LlamaServer, shared_server

from tokenflex import models


@pytest.fixture(autouse=True)
def _isolate_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """No test sees the developer's TOKENFLEX_* settings, .env file or model overrides."""
    import os

    for key in list(os.environ):
        if key.startswith("TOKENFLEX_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
    # discovered models are cached on disk: each test its own cache, never the user's
    monkeypatch.setenv("TOKENFLEX_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    yield
    models.reset_registry()


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LlamaServer]:
    """The real server (``tests/llama_server.py``), one per test session, stopped at its
    end. Mark tests that use it ``@pytest.mark.server``."""
    with shared_server() as server:
        yield server
