"""What a state store is (:class:`StateStore`)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_VALUE_BYTES",
    "DEFAULT_TIMEOUT_S",
    "DEFAULT_TTL_S",
    "StateStore",
]

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
"""Default bound on what a memory or SQLite store holds (keys plus values)."""
DEFAULT_MAX_VALUE_BYTES = 1024 * 1024
"""Default bound on one value in a Redis store (larger ones are not stored)."""
DEFAULT_TTL_S = 24 * 3600.0
"""Default (and longest) time to live of a key in a Redis or SQLite store."""
DEFAULT_TIMEOUT_S = 1.0
"""Default deadline of one call to a Redis or SQLite store."""


@runtime_checkable
class StateStore(Protocol):
    """Bytes by key, each with an optional time to live; bounded in bytes (the oldest
    entries go first). Thread-safe."""

    def get(self, key: str) -> bytes | None:
        """The value under ``key``, or None when it is absent or expired."""
        ...

    def set(self, key: str, value: bytes, *, ttl_s: float | None = None) -> None:
        """Store ``value`` under ``key`` for ``ttl_s`` seconds (None: until evicted)."""
        ...

    def delete(self, key: str) -> None:
        """Forget ``key`` (nothing happens when it is absent)."""
        ...
