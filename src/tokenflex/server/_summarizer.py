"""Summarizers for the ``summarize`` / ``summarizer`` proxy options."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from .config import ServerConfig

__all__ = ["build_summarizer"]


def build_summarizer(spec: Any, config: ServerConfig, model: str) -> Any:
    """The summarizer a config option names."""
    raise ConfigError(f"summarizer {spec!r} for {model!r}: not available yet")
