"""Which state store a URL opens (:func:`open_store`), and the process's default one."""

from __future__ import annotations

import threading
from urllib.parse import urlsplit

from ..errors import ConfigError
from .memory import MemoryStore
from .sqlite import SQLiteStore
from .store import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_VALUE_BYTES,
    DEFAULT_TIMEOUT_S,
    DEFAULT_TTL_S,
    StateStore,
)

__all__ = ["default_store", "open_store"]


def open_store(
    url: str,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    ttl_s: float = DEFAULT_TTL_S,
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
) -> StateStore:
    """A state store from a URL.

    Args:
        url: ``memory://``, ``sqlite:///path/file.db`` (``sqlite://:memory:`` for a
            private in-memory database) or ``redis://host:port/db``.
        max_bytes: Bound on keys plus values for the memory and SQLite stores (a Redis
            server is bounded by its own ``maxmemory``).
        timeout_s: Deadline of one call to a SQLite or Redis store.
        ttl_s: Default and longest time to live of a SQLite or Redis key.
        max_value_bytes: Largest value a Redis store keeps.

    Raises:
        ConfigError: an unknown scheme, or a URL without the parts its scheme needs.

    >>> open_store("memory://").get("absent") is None
    True
    """
    parts = urlsplit(url)
    scheme = parts.scheme
    if scheme == "memory":
        return MemoryStore(max_bytes=max_bytes)
    if scheme == "sqlite":
        path = (parts.netloc + parts.path) if parts.netloc == ":memory:" else parts.path
        if not path:
            raise ConfigError(f"state_store={url!r} names no file. Use sqlite:///path/to/state.db.")
        return SQLiteStore(path, max_bytes=max_bytes, timeout_s=timeout_s, default_ttl_s=ttl_s)
    if scheme in ("redis", "rediss", "unix"):
        from .redis import RedisStore

        return RedisStore(
            url, timeout_s=timeout_s, default_ttl_s=ttl_s, max_value_bytes=max_value_bytes
        )
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
            _default = MemoryStore()
        return _default
