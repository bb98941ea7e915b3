"""Summaries made in the background, so that no request waits for more than one call.

A span too long for one summarizer call is summarized in several (:mod:`.spans`). A fit
given a :class:`BackgroundSummaries` does not wait for those: it serves its plan without
the new summary (the previous one, if the store has it, plus the newest turns that fit;
the rest dropped and listed as usual) and hands the summary to this runner, which makes
it in a worker thread and stores it under its key. A later fit of the same conversation
finds it there (one call, the same bytes, as any stored summary).

The runner is bounded: one job per summary key at a time (the same span asked for again
while it is being made waits for nothing and starts nothing; a tenant's keys are its
own, see :class:`~tokenflex.state.TenantStore`), at most ``max_jobs`` in flight (more are
skipped and logged: a later request asks again), ``workers`` threads.
A job that fails is logged through the ``tokenflex`` logger and forgotten; it never
raises into the caller.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..state.tenant import TenantStore

__all__ = ["BackgroundSummaries"]

log = logging.getLogger("tokenflex")


class BackgroundSummaries:
    """Makes summaries in worker threads and stores them under their keys.

    Args:
        max_jobs: Most summaries being made at once (queued ones included).
        workers: Worker threads.
    """

    def __init__(self, *, max_jobs: int = 8, workers: int = 2) -> None:
        if max_jobs < 1 or workers < 1:
            raise ValueError(f"max_jobs and workers must be >= 1, got {max_jobs}, {workers}.")
        self.max_jobs = max_jobs
        self.workers = workers
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._keys: set[str] = set()
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False

    def submit(self, key: str, make: Callable[[], str], store: Any, *, ttl_s: float) -> bool:
        """Make ``make()`` in the background and ``store.set(key, ...)`` it.

        Returns:
            True if a job started; False if one for ``key`` is already running, the
            runner is full or closed.
        """
        # One job per key in the store: a tenant's view names its keys with its prefix, so
        # one tenant's job neither stands in for nor tells of another's.
        slot = store.prefix + key if isinstance(store, TenantStore) else key
        with self._lock:
            if self._closed or slot in self._keys:
                return False
            if len(self._keys) >= self.max_jobs:
                log.warning(
                    "tokenflex: %d summaries are already being made in the background "
                    "(max_jobs=%d); this one is skipped and a later request asks again",
                    len(self._keys),
                    self.max_jobs,
                )
                return False
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="tokenflex-summ")
            try:
                job = self._pool.submit(self._run, key, make, store, ttl_s)
            except RuntimeError:  # the interpreter is exiting: no new work is taken
                return False
            self._keys.add(slot)
        # The key is freed when the job is over, whether it ran or close() cancelled it
        # before it started (a cancelled job never runs _run). Added outside the lock: on
        # a job already over, the callback runs here at once, and it takes the lock.
        job.add_done_callback(lambda _: self._forget(slot))
        return True

    def _run(self, key: str, make: Callable[[], str], store: Any, ttl_s: float) -> None:
        try:
            text = make()
            store.set(key, text.encode(), ttl_s=ttl_s)
            log.info("tokenflex: background summary stored (%s)", key)
        except Exception as exc:  # never into the caller: requests keep dropping instead
            log.warning(
                "tokenflex: background summary failed (%s: %s); requests drop the oldest "
                "messages until one is made",
                type(exc).__name__,
                exc,
            )

    def _forget(self, key: str) -> None:
        with self._lock:
            self._keys.discard(key)
            self._idle.notify_all()

    @property
    def in_flight(self) -> int:
        """Summaries being made now."""
        with self._lock:
            return len(self._keys)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until no summary is being made; False if ``timeout`` passed first."""
        with self._lock:
            return self._idle.wait_for(lambda: not self._keys, timeout)

    def open(self) -> None:
        """Take jobs again after :meth:`close` (an app whose lifespan runs again)."""
        with self._lock:
            self._closed = False

    def close(self) -> None:
        """Start no more jobs; the queued ones are cancelled, running ones finish (this
        does not wait for them: :meth:`wait` does)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
