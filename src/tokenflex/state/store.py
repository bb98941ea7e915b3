"""What a state store is (:class:`StateStore`)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["DEFAULT_MAX_BYTES", "StateStore"]

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
"""Default bound on what a memory or SQLite store holds (keys plus values)."""


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
