"""What a state store is (:class:`StateStore`), and how one is opened from a URL."""

from __future__ import annotations

import threading
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit

from ..errors import ConfigError

__all__ = ["DEFAULT_MAX_BYTES", "StateStore", "default_store", "open_store"]

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


def open_store(url: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> StateStore:
    """A state store from a URL.

    Args:
        url: ``memory://``, ``sqlite:///path/file.db`` (``sqlite://:memory:`` for a
            private in-memory database) or ``redis://host:port/db``.
        max_bytes: Bound on keys plus values for the memory and SQLite stores (a Redis
            server is bounded by its own ``maxmemory``).

    Raises:
        ConfigError: an unknown scheme, or a URL without the parts its scheme needs.

    >>> open_store("memory://").get("absent") is None
    True
    """
    parts = urlsplit(url)
    scheme = parts.scheme
    if scheme == "memory":
        from .memory import MemoryStore

        return MemoryStore(max_bytes=max_bytes)
    if scheme == "sqlite":
        from .sqlite import SQLiteStore

        path = (parts.netloc + parts.path) if parts.netloc == ":memory:" else parts.path
        if not path:
            raise ConfigError(f"state_store={url!r} names no file. Use sqlite:///path/to/state.db.")
        return SQLiteStore(path, max_bytes=max_bytes)
    if scheme in ("redis", "rediss", "unix"):
        from .redis import RedisStore

        return RedisStore(url)
    raise ConfigError(
        f"state_store={url!r} has an unknown scheme {scheme!r}. Use memory://, "
        "sqlite:///path/to/state.db or redis://host:port/0."
    )


_default: StateStore | None = None
_lock = threading.Lock()


def default_store() -> StateStore:
    """The process's in-memory store (what cache-stable fit() uses when given none)."""
    global _default
    with _lock:
        if _default is None:
            from .memory import MemoryStore

            _default = MemoryStore()
        return _default
