"""Which state store a URL opens (:func:`open_store`), and the process's default one."""

from __future__ import annotations

import threading
from urllib.parse import urlsplit

from ..errors import ConfigError
from .memory import MemoryStore
from .sqlite import SQLiteStore
from .store import DEFAULT_MAX_BYTES, StateStore

__all__ = ["default_store", "open_store"]


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
        return MemoryStore(max_bytes=max_bytes)
    if scheme == "sqlite":
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
            _default = MemoryStore()
        return _default
