"""Named input types shared across modules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

Message: TypeAlias = Mapping[str, Any]
"""One OpenAI-style chat message: ``{"role": ..., "content": ..., ...}``."""

Messages: TypeAlias = Sequence[Message]
"""A conversation, oldest first."""

Tool: TypeAlias = Mapping[str, Any]
"""One OpenAI-style tool definition (``{"type": "function", "function": {...}}``)."""

JSON: TypeAlias = dict[str, Any]


class _Unset:
    """Sentinel type for options where ``None`` is meaningful."""

    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Any = _Unset()
