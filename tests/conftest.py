"""Shared fixtures: isolated env and config; the real llama.cpp server lives in _llama.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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
    yield
    models.reset_registry()
