"""The in-process state store: a dict in least-recently-used order, bounded in bytes."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from .store import DEFAULT_MAX_BYTES

__all__ = ["MemoryStore"]


class MemoryStore:
    """A :class:`~tokenflex.state.StateStore` in this process's memory.

    >>> s = MemoryStore(max_bytes=1000)
    >>> s.set("k", b"v")
    >>> s.get("k")
    b'v'
    """

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._data: OrderedDict[str, tuple[bytes, float | None]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes | None:
        with self._lock:
            entry = self._data.get(key)
            if entry is None:
                return None
            value, expires = entry
            if expires is not None and time.monotonic() >= expires:
                self._pop(key)
                return None
            self._data.move_to_end(key)
            return value

    def set(self, key: str, value: bytes, *, ttl_s: float | None = None) -> None:
        size = len(key) + len(value)
        with self._lock:
            self._pop(key)
            if size > self.max_bytes:
                return  # larger than the whole store: not kept
            expires = None if ttl_s is None else time.monotonic() + ttl_s
            self._data[key] = (value, expires)
            self._bytes += size
            while self._bytes > self.max_bytes:
                self._pop(next(iter(self._data)))

    def delete(self, key: str) -> None:
        with self._lock:
            self._pop(key)

    @property
    def size_bytes(self) -> int:
        """Keys plus values held now."""
        return self._bytes

    def _pop(self, key: str) -> None:
        entry = self._data.pop(key, None)
        if entry is not None:
            self._bytes -= len(key) + len(entry[0])
