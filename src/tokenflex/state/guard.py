"""A state store whose failures degrade instead of failing the caller.

A cut held between requests or a summary kept for later makes fitting cheaper and more
cache-friendly; none of it is needed to fit a request. So when the store fails (a Redis
server down, stalled or unreachable, a SQLite file locked by another process), a fit goes
on *stateless*: reads find nothing, writes are dropped, the caller is told
(:attr:`GuardedStore.failed`; the proxy answers with ``x-tokenflex-state: unavailable``)
and the log says why once per outage. After a failure the store is left alone for
``retry_s`` seconds, so an outage costs each request nothing rather than a timeout per call.

Each backend bounds its own calls (Redis socket timeouts, SQLite's busy timeout and lock
wait): the guard turns what they raise into "unavailable".
"""

from __future__ import annotations

import logging
import threading
import time

from .store import StateStore

__all__ = ["GuardedStore", "StoreHealth"]

log = logging.getLogger("tokenflex")


class StoreHealth:
    """Whether a store is usable now, shared by every request's :class:`GuardedStore`.

    >>> health = StoreHealth("memory://", retry_s=60)
    >>> health.available()
    True
    >>> health.failed(OSError("down"))
    >>> health.available(), health.failures
    (False, 1)
    """

    def __init__(self, name: str, *, retry_s: float = 5.0) -> None:
        self.name = name
        self.retry_s = retry_s
        self.failures = 0
        """Store calls that failed since the process started."""
        self.skipped = 0
        """Store calls not made because the store was down."""
        self._down_until = 0.0
        self._down = False
        self._lock = threading.Lock()

    def available(self) -> bool:
        """False for ``retry_s`` seconds after a failure."""
        if not self._down:  # (read without the lock: a store that is up takes none)
            return True
        with self._lock:
            if self._down and time.monotonic() < self._down_until:
                self.skipped += 1
                return False
            return True

    def failed(self, exc: BaseException) -> None:
        """A call failed: the store is left alone for ``retry_s`` seconds."""
        with self._lock:
            self.failures += 1
            first = not self._down
            self._down = True
            self._down_until = time.monotonic() + self.retry_s
        if first:
            log.warning(
                "tokenflex: state store %s unavailable (%s: %s); fitting without held cuts "
                "or stored summaries, retrying in %g s",
                self.name,
                type(exc).__name__,
                str(exc)[:200],
                self.retry_s,
            )

    def ok(self) -> None:
        """A call succeeded."""
        if not self._down:
            return
        with self._lock:
            if not self._down:
                return
            self._down = False
        log.warning("tokenflex: state store %s is available again", self.name)


class GuardedStore:
    """``store`` for one caller: a failing call reads as absent or is dropped, and
    :attr:`failed` says it happened (see the module docstring)."""

    def __init__(self, store: StateStore, health: StoreHealth) -> None:
        self.store = store
        self.health = health
        self.failed = False
        """Whether a call through this view failed or was skipped."""

    def get(self, key: str) -> bytes | None:
        if not self.health.available():
            self.failed = True
            return None
        try:
            value = self.store.get(key)
        except Exception as exc:
            self._failed(exc)
            return None
        self.health.ok()
        return value

    def set(self, key: str, value: bytes, *, ttl_s: float | None = None) -> None:
        if not self.health.available():
            self.failed = True
            return
        try:
            self.store.set(key, value, ttl_s=ttl_s)
        except Exception as exc:
            self._failed(exc)
            return
        self.health.ok()

    def delete(self, key: str) -> None:
        if not self.health.available():
            self.failed = True
            return
        try:
            self.store.delete(key)
        except Exception as exc:
            self._failed(exc)
            return
        self.health.ok()

    def _failed(self, exc: Exception) -> None:
        self.failed = True
        self.health.failed(exc)

    def __repr__(self) -> str:
        return f"GuardedStore({self.store!r})"
