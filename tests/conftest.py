"""Shared fixtures: isolated env and config, and the real llama.cpp server.

The servers themselves are in ``llama_server.py``: ``LlamaServer`` (llama-cpp-python
serving SmolLM2 on loopback) and ``LlamaCppServer`` (the native llama.cpp ``llama-server``
serving the same GGUF: chat, Anthropic Messages and Responses routes). The fixtures
``llama_server`` and ``llama_cpp_server`` here start each once per session.

Hypothesis runs derandomized by default, so ``make test`` draws the same examples on
every machine and a red CI run is one a developer can reproduce. ``make fuzz``
(``HYPOTHESIS_PROFILE=explore``) draws new random examples on each run, to look for
cases the fixed draw does not reach; a failure it finds becomes an ``@example``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings
from llama_server import LlamaCppServer, LlamaServer, shared_llama_cpp_server, shared_server

from tokenflex import models

settings.register_profile("fixed", derandomize=True, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))


@pytest.fixture(autouse=True)
def _isolate_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """No test sees the developer's TOKENFLEX_* settings, .env file or model overrides."""
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


@pytest.fixture(scope="session")
def llama_cpp_server() -> Iterator[LlamaCppServer]:
    """The native ``llama-server`` (``tests/llama_server.py``), one per test session, stopped
    at its end. Mark tests that use it ``@pytest.mark.server``."""
    with shared_llama_cpp_server() as server:
        yield server
