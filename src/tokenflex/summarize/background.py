"""Summaries made in the background, so that no request waits for more than one call, and
so that background work never slows a request either.

A span too long for one summarizer call is summarized in several (:mod:`.spans`). A fit
given a :class:`BackgroundSummaries` does not wait for those: it serves its plan without
the new summary (the previous one, if the store has it, plus the newest turns that fit;
the rest dropped and listed as usual) and hands the summary to this runner, which makes
it in a worker thread and stores it under its key. A later fit of the same conversation
finds it there (one call, the same bytes, as any stored summary).

A summary job competes with the requests it was made for: on a server with one slot, a
request queued behind background calls waits for all of them. So a job may be bound to
an :class:`Activity`, the requests in flight to the summarizer's server (the proxy counts
its clients' requests to its upstream), and then starts only while that server is idle
(``when_idle``); at most ``workers`` jobs run at once, whatever the activity. A job that
cannot start yet is deferred, not dropped, and starts when the last request in flight
ends. A job is never started while a request is in flight, and a summarizer that calls
:func:`pause_for_clients` before each of its calls (the proxy's does) pauses between
calls while one is: a request that arrives during a job waits for the call in progress at
most, never for the job's next calls.

Bounds, and the log line (``tokenflex`` logger) that says which one stopped a job, each
with a ``reason=`` word:

- ``idle-wait`` (INFO, once per job, and once per pause between calls): deferred while
  requests are in flight;
- ``max-inflight`` (INFO, once per job): deferred while ``workers`` jobs run;
- ``queue-full`` (WARNING): ``max_jobs`` jobs are held (waiting and running): dropped,
  a later request asks again;
- ``deadline`` (WARNING): waited ``max_wait_s`` without its turn: dropped (checked
  whenever a job is submitted or ends, or a request of its activity ends); or paused
  ``max_wait_s`` between two calls: stopped;
- ``failed`` (WARNING): the summarizer or the store raised; never into the caller;
- ``closed`` (INFO): :meth:`~BackgroundSummaries.close` cancelled it before it started,
  or stopped it while it paused between calls.

One job per summary key at a time: the same span asked for again while it is held starts
nothing (a tenant's keys are its own, see :class:`~tokenflex.state.TenantStore`: one
tenant's job neither stands in for nor tells of another's).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..state.tenant import TenantStore

__all__ = ["Activity", "BackgroundSummaries", "BoundSummaries", "JobStopped", "pause_for_clients"]

log = logging.getLogger("tokenflex")

_running_job = threading.local()
"""In a runner's worker thread, while a job runs: ``(runner, job)``."""


def pause_for_clients() -> None:
    """Call before each summarizer call: inside a background job bound to an
    :class:`Activity` (and ``when_idle``), wait while client requests are in flight to its
    server; anywhere else (a request's own summary, the library), return at once.

    Raises:
        JobStopped: the pause lasted ``max_wait_s``, or the runner was closed meanwhile
            (the job is then logged as stopped, with that reason, not as failed).
    """
    current = getattr(_running_job, "job", None)
    if current is not None:
        runner, job = current
        runner._pause(job)


class JobStopped(Exception):
    """A background job stopped between two summarizer calls (``reason``: ``deadline`` or
    ``closed``); raised through the summarizer to the runner, which logs it."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Activity:
    """Requests in flight to one server, counted by whoever sends them.

    Background jobs bound to it (:meth:`BackgroundSummaries.bound`) start only while it
    is idle. :meth:`begin` and :meth:`end` may be called from any thread.

    >>> upstream = Activity("http://127.0.0.1:8080")
    >>> with upstream.track():
    ...     upstream.in_flight
    1
    >>> upstream.in_flight
    0
    """

    def __init__(self, name: str = "server") -> None:
        self.name = name
        """The server, as the log names it."""
        self._lock = threading.Lock()
        self._count = 0
        self._listeners: list[Callable[[], object]] = []

    @property
    def in_flight(self) -> int:
        """Requests begun and not yet ended."""
        with self._lock:
            return self._count

    def begin(self) -> None:
        """A request to the server starts."""
        with self._lock:
            self._count += 1

    def end(self) -> None:
        """A request to the server is over (its last byte read, or it failed)."""
        with self._lock:
            self._count = max(0, self._count - 1)
            listeners = list(self._listeners)
        for listener in listeners:  # outside the lock: a listener reads in_flight
            listener()

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        """:meth:`begin` on entry, :meth:`end` on exit."""
        self.begin()
        try:
            yield
        finally:
            self.end()

    def listen(self, listener: Callable[[], object]) -> None:
        """Call ``listener()`` after every :meth:`end` (once per listener)."""
        with self._lock:
            if listener not in self._listeners:
                self._listeners.append(listener)


@dataclass(eq=False)
class _Job:
    key: str
    make: Callable[[], str]
    store: Any
    ttl_s: float
    activity: Activity | None
    slot: str = ""
    """The key in the runner's set of held jobs: ``key`` with the store's tenant prefix."""
    submitted: float = field(default_factory=time.monotonic)
    deferred: str | None = None
    """The reason this job was first deferred (logged once), None while it was not."""


class BackgroundSummaries:
    """Makes summaries in worker threads and stores them under their keys.

    Args:
        max_jobs: Most jobs held at once, waiting and running (the bounded queue).
        workers: Most jobs running at once (each may make several summarizer calls).
        when_idle: A job bound to an :class:`Activity` starts only while it is idle.
        max_wait_s: Longest a job waits for its turn before it is dropped.
    """

    def __init__(
        self,
        *,
        max_jobs: int = 8,
        workers: int = 1,
        when_idle: bool = True,
        max_wait_s: float = 600.0,
    ) -> None:
        if max_jobs < 1 or workers < 1:
            raise ValueError(f"max_jobs and workers must be >= 1, got {max_jobs}, {workers}.")
        if not max_wait_s > 0:
            raise ValueError(f"max_wait_s must be > 0, got {max_wait_s!r}.")
        self.max_jobs = max_jobs
        self.workers = workers
        self.when_idle = when_idle
        self.max_wait_s = max_wait_s
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._keys: set[str] = set()
        self._waiting: collections.deque[_Job] = collections.deque()
        self._running = 0
        self._pausing = 0
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False

    def bound(self, activity: Activity) -> BoundSummaries:
        """This runner, for jobs that wait for ``activity`` to be idle (what fit() is
        given as ``background_summaries`` when the summarizer calls that server)."""
        return BoundSummaries(self, activity)

    def submit(
        self,
        key: str,
        make: Callable[[], str],
        store: Any,
        *,
        ttl_s: float,
        activity: Activity | None = None,
    ) -> bool:
        """Make ``make()`` in the background and ``store.set(key, ...)`` it: at once when
        a worker is free (and ``activity``, if given, is idle), later otherwise.

        Returns:
            True if the job is held (started or deferred); False if one for ``key`` is
            already held, the runner is full or closed.
        """
        with self._lock:
            slot = store.prefix + key if isinstance(store, TenantStore) else key
            if self._closed or slot in self._keys:
                return False
            if len(self._keys) >= self.max_jobs:
                log.warning(
                    "tokenflex: background summary %s dropped (reason=queue-full): %d jobs "
                    "held (max_jobs=%d); it is skipped and a later request asks again",
                    key,
                    len(self._keys),
                    self.max_jobs,
                )
                return False
            self._keys.add(slot)
            self._waiting.append(_Job(key, make, store, ttl_s, activity, slot))
        if activity is not None:
            activity.listen(self._wake)
        return slot not in self._dispatch()

    def _dispatch(self) -> set[str]:
        """Drop the jobs past their deadline, start those whose turn it is; the keys of
        jobs that could not be started at all (the interpreter is exiting), dropped."""
        starts: list[tuple[_Job, Future[None]]] = []
        refused: set[str] = set()
        with self._lock:
            if self._closed or not self._waiting:
                return refused
            now = time.monotonic()
            for job in [j for j in self._waiting if now - j.submitted > self.max_wait_s]:
                self._waiting.remove(job)
                self._keys.discard(job.slot)
                log.warning(
                    "tokenflex: background summary %s dropped (reason=deadline): it waited "
                    "%.1f s for its turn (background max_wait_s=%g)%s; a later request asks "
                    "again",
                    job.key,
                    now - job.submitted,
                    self.max_wait_s,
                    f", deferred by {job.deferred}" if job.deferred else "",
                )
            for job in list(self._waiting):
                reason = self._blocked(job)
                if reason is not None:
                    self._defer(job, reason)
                    continue
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(
                        self.workers, thread_name_prefix="tokenflex-summ"
                    )
                if job.deferred:  # logged before it runs: its own lines come after
                    log.info(
                        "tokenflex: background summary %s started after waiting %.1f s (%s)",
                        job.key,
                        now - job.submitted,
                        job.deferred,
                    )
                try:
                    future = self._pool.submit(self._run, job)
                except RuntimeError:  # the interpreter is exiting: no new work is taken
                    self._waiting.remove(job)
                    self._keys.discard(job.slot)
                    refused.add(job.slot)
                    continue
                self._waiting.remove(job)
                self._running += 1
                starts.append((job, future))
            self._changed.notify_all()
        # Outside the lock: on a job already over, the callback runs here at once, and it
        # takes the lock. It also frees the key of a job close() cancelled before it ran.
        for job, future in starts:
            future.add_done_callback(functools.partial(self._finished, job))
        return refused

    def _blocked(self, job: _Job) -> str | None:
        """Why ``job`` cannot start now (lock held); None when it can."""
        if self._running >= self.workers:
            return "max-inflight"
        busy = job.activity.in_flight if self.when_idle and job.activity is not None else 0
        return "idle-wait" if busy else None

    def _defer(self, job: _Job, reason: str) -> None:
        if job.deferred is not None:
            return
        job.deferred = reason
        if reason == "idle-wait":
            assert job.activity is not None
            log.info(
                "tokenflex: background summary %s deferred (reason=idle-wait): %d client "
                "request(s) in flight to %s; it starts when none is",
                job.key,
                job.activity.in_flight,
                job.activity.name,
            )
        else:
            log.info(
                "tokenflex: background summary %s deferred (reason=max-inflight): %d job(s) "
                "running (workers=%d)",
                job.key,
                self._running,
                self.workers,
            )

    def _run(self, job: _Job) -> None:
        _running_job.job = (self, job)
        try:
            text = job.make()
            job.store.set(job.key, text.encode(), ttl_s=job.ttl_s)
            log.info("tokenflex: background summary stored (%s)", job.key)
        except Exception as exc:  # never into the caller: requests keep dropping instead
            stopped = _stopped(exc)
            if stopped is not None:
                level = logging.WARNING if stopped.reason == "deadline" else logging.INFO
                log.log(
                    level,
                    "tokenflex: background summary %s stopped (reason=%s): %s",
                    job.key,
                    stopped.reason,
                    stopped,
                )
                return
            log.warning(
                "tokenflex: background summary %s failed (reason=failed, %s: %s); requests "
                "drop the oldest messages until one is made",
                job.key,
                type(exc).__name__,
                exc,
            )
        finally:
            _running_job.job = None

    def _pause(self, job: _Job) -> None:
        """Wait while ``job``'s activity is busy (between two of its calls)."""
        if not self.when_idle or job.activity is None:
            return
        begun = time.monotonic()
        with self._lock:
            if not job.activity.in_flight:
                return
            log.info(
                "tokenflex: background summary %s paused between calls (reason=idle-wait): "
                "%d client request(s) in flight to %s",
                job.key,
                job.activity.in_flight,
                job.activity.name,
            )
            self._pausing += 1
            try:
                while job.activity.in_flight:
                    if self._closed:
                        raise JobStopped("closed", "the runner was closed while it paused")
                    left = begun + self.max_wait_s - time.monotonic()
                    if left <= 0:
                        raise JobStopped(
                            "deadline",
                            f"paused {self.max_wait_s:g} s between calls (max_wait_s) while "
                            f"{job.activity.name} stayed busy",
                        )
                    self._changed.wait(left)
            finally:
                self._pausing -= 1
        log.info(
            "tokenflex: background summary %s resumed after %.1f s",
            job.key,
            time.monotonic() - begun,
        )

    def _wake(self) -> None:
        """An activity's request ended: paused jobs look again, waiting ones may start."""
        with self._lock:
            self._changed.notify_all()
        self._dispatch()

    def _finished(self, job: _Job, future: Future[None]) -> None:
        with self._lock:
            self._running -= 1
            self._keys.discard(job.slot)
            self._changed.notify_all()
        self._dispatch()

    @property
    def in_flight(self) -> int:
        """Summaries held now: running, or waiting for their turn."""
        with self._lock:
            return len(self._keys)

    @property
    def paused(self) -> int:
        """Running jobs paused between two calls while their server is busy."""
        with self._lock:
            return self._pausing

    @property
    def deferred(self) -> int:
        """Summaries waiting for their turn."""
        with self._lock:
            return len(self._waiting)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until no summary is held (a deferred one must run first); False if
        ``timeout`` passed first."""
        with self._lock:
            return self._changed.wait_for(lambda: not self._keys, timeout)

    def open(self) -> None:
        """Take jobs again after :meth:`close` (an app whose lifespan runs again)."""
        with self._lock:
            self._closed = False

    def close(self) -> None:
        """Start no more jobs; the waiting ones are dropped, running ones finish (this
        does not wait for them: :meth:`wait` does)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
            for job in self._waiting:
                self._keys.discard(job.slot)
                log.info("tokenflex: background summary %s dropped (reason=closed)", job.key)
            self._waiting.clear()
            self._changed.notify_all()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def _stopped(exc: BaseException) -> JobStopped | None:
    """The :class:`JobStopped` behind ``exc`` (a summarizer may wrap it), if any."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return None
        if isinstance(seen, JobStopped):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


class BoundSummaries:
    """A :class:`BackgroundSummaries` whose jobs wait for one :class:`Activity` to be
    idle; fit() takes it as ``background_summaries`` like the runner itself."""

    def __init__(self, runner: BackgroundSummaries, activity: Activity) -> None:
        self.runner = runner
        self.activity = activity

    def submit(self, key: str, make: Callable[[], str], store: Any, *, ttl_s: float) -> bool:
        """:meth:`BackgroundSummaries.submit` bound to this view's activity."""
        return self.runner.submit(key, make, store, ttl_s=ttl_s, activity=self.activity)
