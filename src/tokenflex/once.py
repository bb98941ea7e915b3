"""What a process builds once per key, and slowly: a lock a key, not one for all.

A tokenizer's load (a vocabulary file, seconds) and a counter's set-up (which counts a few
strings through the tokenizer: a request to a tokenizer server) were built under one
process-wide lock, so the first request for one model waited on the slowest load or the
slowest tokenizer server of any other, and so did every request after the registry
changed (a discovered model registered: every counter is built again). With a lock a
key, the builders of one key wait for each other (one build, the others read it) and
the others never wait.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

__all__ = ["KeyedLocks"]

K = TypeVar("K", bound=Hashable)


class KeyedLocks(Generic[K]):
    """A reentrant lock for each key while anyone holds or waits for it (none kept for a
    key no one builds).

    >>> locks: KeyedLocks[str] = KeyedLocks()
    >>> with locks.held("o200k_base"):
    ...     with locks.held("o200k_base"):  # (reentrant: a build that asks for its own key)
    ...         len(locks)
    1
    >>> len(locks)
    0
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        # key -> (its lock, how many hold it or wait for it)
        self._locks: dict[K, tuple[threading.RLock, int]] = {}

    def __len__(self) -> int:
        return len(self._locks)

    @contextmanager
    def held(self, key: K) -> Iterator[None]:
        """Hold ``key``'s lock over the block (waiting only for holders of ``key``)."""
        with self._guard:
            lock, users = self._locks.get(key) or (threading.RLock(), 0)
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[key]
                if users > 1:
                    self._locks[key] = (lock, users - 1)
                else:
                    del self._locks[key]
