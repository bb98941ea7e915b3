"""The background summary runner (:class:`~tokenflex.summarize.background.BackgroundSummaries`)
with real worker threads and real state stores (in-process and a SQLite file).

Jobs are held on a :class:`threading.Event` (a gate) so that a test decides what is
running, what is queued and when they finish; every wait has a timeout, so a broken
runner fails a test instead of hanging it.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tokenflex.state import StateStore, open_store
from tokenflex.summarize.background import Activity, BackgroundSummaries, pause_for_clients

WAIT_S = 10.0
"""Longest any test waits for a job (a timeout here is a failure, not a slow pass)."""

TTL_S = 60.0


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'state.db'}"
    opened = open_store(url)
    yield opened
    close = getattr(opened, "close", None)
    if close is not None:
        close()


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Jobs made by :func:`held` wait on this; opened at the end of every test, so no
    worker thread outlives it."""
    event = threading.Event()
    yield event
    event.set()


class Calls:
    """What the jobs did, in order (thread-safe)."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.running = threading.Event()
        self.changed = threading.Condition()

    def wait_started(self, n: int) -> bool:
        """Wait until ``n`` jobs have started (False after :data:`WAIT_S`)."""
        with self.changed:
            return self.changed.wait_for(lambda: len(self.started) >= n, WAIT_S)

    def held(self, text: str, gate: threading.Event) -> Callable[[], str]:
        """A job that records its start, waits for ``gate`` and returns ``text``."""

        def make() -> str:
            with self.changed:
                self.started.append(text)
                self.changed.notify_all()
            self.running.set()
            gate.wait(WAIT_S)
            return text

        return make


@pytest.fixture
def runners(gate: threading.Event) -> Iterator[list[BackgroundSummaries]]:
    """Runners to close after the test (the gate is opened first, so they drain)."""
    made: list[BackgroundSummaries] = []
    yield made
    gate.set()
    for runner in made:
        runner.close()
        runner.wait(WAIT_S)


def runner_for(runners: list[BackgroundSummaries], **options: Any) -> BackgroundSummaries:
    runner = BackgroundSummaries(**options)
    runners.append(runner)
    return runner


def wait_until(done: Callable[[], bool]) -> bool:
    """Poll ``done()`` until it holds (False after :data:`WAIT_S`): for states no event
    announces, such as a job paused inside the runner."""
    deadline = time.monotonic() + WAIT_S
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def infos_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "tokenflex" and r.levelno == logging.INFO
    ]


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "tokenflex" and r.levelno == logging.WARNING
    ]


# -- the job limit ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "max_jobs,workers",
    [
        pytest.param(1, 1, id="one-job"),
        pytest.param(3, 1, id="queued-jobs"),
        pytest.param(3, 3, id="a-worker-each"),
    ],
)
def test_the_job_after_max_jobs_is_refused_and_logged_until_jobs_finish(
    max_jobs: int,
    workers: int,
    store: StateStore,
    gate: threading.Event,
    runners: list[BackgroundSummaries],
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = runner_for(runners, max_jobs=max_jobs, workers=workers)
    calls = Calls()
    with caplog.at_level(logging.WARNING, logger="tokenflex"):
        for i in range(max_jobs):
            assert runner.submit(f"k{i}", calls.held(f"s{i}", gate), store, ttl_s=TTL_S)
        assert runner.in_flight == max_jobs
        assert warnings_of(caplog) == []
        # the same key again: already being made, refused without a warning
        assert not runner.submit("k0", calls.held("again", gate), store, ttl_s=TTL_S)
        assert warnings_of(caplog) == []
        # one distinct key too many: refused, and the log says why
        assert not runner.submit("extra", calls.held("extra", gate), store, ttl_s=TTL_S)
        (warning,) = warnings_of(caplog)
        assert f"max_jobs={max_jobs}" in warning and "skipped" in warning
        assert "reason=queue-full" in warning
        assert runner.in_flight == max_jobs

        gate.set()
        assert runner.wait(WAIT_S)
        assert runner.in_flight == 0
        assert [store.get(f"k{i}") for i in range(max_jobs)] == [
            f"s{i}".encode() for i in range(max_jobs)
        ]
        assert store.get("extra") is None
        assert sorted(calls.started) == sorted(f"s{i}" for i in range(max_jobs))

        # room again: the refused key is made now
        assert runner.submit("extra", calls.held("extra", gate), store, ttl_s=TTL_S)
        assert runner.wait(WAIT_S)
        assert store.get("extra") == b"extra"
        assert len(warnings_of(caplog)) == 1


def test_wait_times_out_while_a_job_runs(
    store: StateStore, gate: threading.Event, runners: list[BackgroundSummaries]
) -> None:
    runner = runner_for(runners)
    calls = Calls()
    assert runner.wait(0)  # nothing submitted yet
    assert runner.submit("k", calls.held("s", gate), store, ttl_s=TTL_S)
    assert not runner.wait(0.05)
    gate.set()
    assert runner.wait(WAIT_S)


# -- background work never slows the user ------------------------------------------------


def test_a_bound_job_waits_while_requests_are_in_flight_and_runs_after(
    store: StateStore,
    gate: threading.Event,
    runners: list[BackgroundSummaries],
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = runner_for(runners)
    upstream = Activity("the upstream")
    calls = Calls()
    gate.set()  # jobs run through once started
    with caplog.at_level(logging.INFO, logger="tokenflex"):
        upstream.begin()
        upstream.begin()  # two client requests in flight
        assert runner.bound(upstream).submit("k", calls.held("s", gate), store, ttl_s=TTL_S)
        assert (runner.in_flight, runner.deferred) == (1, 1)
        upstream.end()  # one still in flight: still deferred
        assert not runner.wait(0.05)
        assert calls.started == [] and runner.deferred == 1
        # the same span asked for again while it waits: held once, started never
        assert not runner.bound(upstream).submit("k", calls.held("s", gate), store, ttl_s=TTL_S)
        upstream.end()  # idle: it starts
        assert runner.wait(WAIT_S)
    assert calls.started == ["s"]
    assert store.get("k") == b"s"
    infos = infos_of(caplog)
    deferred = [m for m in infos if "deferred" in m]
    assert len(deferred) == 1  # once per job, however often it was looked at
    assert "reason=idle-wait" in deferred[0]
    assert "2 client request(s) in flight to the upstream" in deferred[0]
    started = [i for i, m in enumerate(infos) if "started after waiting" in m]
    stored = [i for i, m in enumerate(infos) if "background summary stored (k)" in m]
    assert len(started) == len(stored) == 1 and started[0] < stored[0]
    assert "idle-wait" in infos[started[0]]
    assert warnings_of(caplog) == []


def test_a_running_job_pauses_between_calls_while_requests_are_in_flight(
    store: StateStore,
    gate: threading.Event,
    runners: list[BackgroundSummaries],
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = runner_for(runners)
    upstream = Activity("the upstream")
    calls: list[str] = []
    first_done = threading.Event()

    def make() -> str:  # a summary in two calls, as a summarizer makes them
        pause_for_clients()
        calls.append("call 1")
        first_done.set()
        gate.wait(WAIT_S)  # the test makes the upstream busy meanwhile
        pause_for_clients()
        calls.append("call 2")
        return "s"

    pause_for_clients()  # outside a job (a request's own summary): returns at once
    with caplog.at_level(logging.INFO, logger="tokenflex"):
        assert runner.bound(upstream).submit("k", make, store, ttl_s=TTL_S)
        assert first_done.wait(WAIT_S)
        upstream.begin()  # a client request arrives during the job
        gate.set()
        assert wait_until(lambda: runner.paused == 1)
        assert calls == ["call 1"]
        upstream.end()
        assert runner.wait(WAIT_S)
    assert calls == ["call 1", "call 2"]
    assert store.get("k") == b"s"
    infos = infos_of(caplog)
    (paused,) = [m for m in infos if "paused between calls" in m]
    assert "reason=idle-wait" in paused and "1 client request(s) in flight" in paused
    assert any("resumed after" in m for m in infos)


@pytest.mark.parametrize("stop", ["deadline", "closed"])
def test_a_job_paused_too_long_or_closed_stops_and_says_why(
    stop: str,
    store: StateStore,
    gate: threading.Event,
    runners: list[BackgroundSummaries],
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = runner_for(runners, max_wait_s=0.2 if stop == "deadline" else WAIT_S * 10)
    upstream = Activity("the upstream")
    calls: list[str] = []
    started = threading.Event()

    def make() -> str:
        started.set()
        gate.wait(WAIT_S)
        pause_for_clients()
        calls.append("call 2")
        return "s"

    with caplog.at_level(logging.INFO, logger="tokenflex"):
        assert runner.bound(upstream).submit("k", make, store, ttl_s=TTL_S)
        assert started.wait(WAIT_S)
        upstream.begin()  # and it stays busy
        gate.set()
        if stop == "closed":
            assert wait_until(lambda: runner.paused == 1)
            runner.close()
        assert runner.wait(WAIT_S)
    upstream.end()
    assert calls == [] and store.get("k") is None
    stopped = [r for r in caplog.records if "stopped (reason=" in r.getMessage()]
    assert len(stopped) == 1 and f"reason={stop}" in stopped[0].getMessage()
    assert stopped[0].levelno == (logging.WARNING if stop == "deadline" else logging.INFO)
    assert not any("failed" in m for m in warnings_of(caplog))


@pytest.mark.parametrize(
    "bound,when_idle",
    [pytest.param(False, True, id="unbound"), pytest.param(True, False, id="when-idle-off")],
)
def test_a_job_not_bound_or_not_waiting_for_idle_runs_at_once(
    bound: bool, when_idle: bool, store: StateStore, runners: list[BackgroundSummaries]
) -> None:
    runner = runner_for(runners, when_idle=when_idle)
    upstream = Activity("the upstream")
    upstream.begin()
    target: Any = runner.bound(upstream) if bound else runner
    assert target.submit("k", lambda: "s", store, ttl_s=TTL_S)
    assert runner.wait(WAIT_S)  # while the request is still in flight
    assert upstream.in_flight == 1
    assert store.get("k") == b"s"


def test_jobs_over_the_worker_count_wait_for_a_free_worker(
    store: StateStore,
    gate: threading.Event,
    runners: list[BackgroundSummaries],
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = runner_for(runners, workers=1, max_jobs=4)
    calls = Calls()
    with caplog.at_level(logging.INFO, logger="tokenflex"):
        assert runner.submit("a", calls.held("a", gate), store, ttl_s=TTL_S)
        assert calls.wait_started(1)
        assert runner.submit("b", calls.held("b", gate), store, ttl_s=TTL_S)
        assert (runner.in_flight, runner.deferred) == (2, 1)
        assert calls.started == ["a"]
        gate.set()
        assert runner.wait(WAIT_S)
    assert calls.started == ["a", "b"]
    assert [store.get(k) for k in "ab"] == [b"a", b"b"]
    (deferred,) = [m for m in infos_of(caplog) if "deferred" in m]
    assert "reason=max-inflight" in deferred and "workers=1" in deferred


def test_a_job_past_its_deadline_is_dropped_logged_and_its_key_freed(
    store: StateStore, runners: list[BackgroundSummaries], caplog: pytest.LogCaptureFixture
) -> None:
    runner = runner_for(runners, max_wait_s=0.2)
    upstream = Activity("the upstream")
    upstream.begin()
    upstream.begin()
    made: list[str] = []

    def make() -> str:
        made.append("s")
        return "s"

    with caplog.at_level(logging.INFO, logger="tokenflex"):
        assert runner.bound(upstream).submit("k", make, store, ttl_s=TTL_S)
        time.sleep(0.3)  # past max_wait_s, the upstream still busy
        upstream.end()  # a request ends: the runner looks again, one is still in flight
        assert runner.in_flight == 0 and runner.deferred == 0
        (warning,) = warnings_of(caplog)
        assert "reason=deadline" in warning and "max_wait_s=0.2" in warning
        assert "deferred by idle-wait" in warning
        upstream.end()
        assert runner.wait(WAIT_S)
    assert made == [] and store.get("k") is None
    # the key is free: asked again while idle, it is made
    assert runner.bound(upstream).submit("k", make, store, ttl_s=TTL_S)
    assert runner.wait(WAIT_S)
    assert store.get("k") == b"s"


def test_close_drops_deferred_jobs_and_says_why(
    store: StateStore, runners: list[BackgroundSummaries], caplog: pytest.LogCaptureFixture
) -> None:
    runner = runner_for(runners)
    upstream = Activity("the upstream")
    upstream.begin()
    with caplog.at_level(logging.INFO, logger="tokenflex"):
        assert runner.bound(upstream).submit("k", lambda: "s", store, ttl_s=TTL_S)
        runner.close()
        assert runner.in_flight == 0 and runner.wait(0)
        upstream.end()  # nothing starts after close
    assert store.get("k") is None
    assert any("reason=closed" in m for m in infos_of(caplog))


# -- one job per key ----------------------------------------------------------------------


def test_submits_racing_for_one_key_start_one_job(
    store: StateStore, gate: threading.Event, runners: list[BackgroundSummaries]
) -> None:
    runner = runner_for(runners, max_jobs=4, workers=4)
    calls = Calls()
    threads_n = 32
    barrier = threading.Barrier(threads_n)
    results: list[bool] = []
    results_lock = threading.Lock()

    def racer() -> None:
        barrier.wait(WAIT_S)
        started = runner.submit("same", calls.held("the summary", gate), store, ttl_s=TTL_S)
        with results_lock:
            results.append(started)

    threads = [threading.Thread(target=racer) for _ in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    # every submit is over before the job may finish: a later True would be a second job
    assert len(results) == threads_n
    assert results.count(True) == 1
    assert runner.in_flight == 1
    gate.set()
    assert runner.wait(WAIT_S)
    assert calls.started == ["the summary"]
    assert store.get("same") == b"the summary"


# -- failures -----------------------------------------------------------------------------


def test_a_failing_job_is_logged_and_its_key_freed(
    store: StateStore, runners: list[BackgroundSummaries], caplog: pytest.LogCaptureFixture
) -> None:
    runner = runner_for(runners)

    def broken() -> str:
        raise ValueError("the summarizer said no")

    with caplog.at_level(logging.WARNING, logger="tokenflex"):
        assert runner.submit("k", broken, store, ttl_s=TTL_S)  # no exception here
        assert runner.wait(WAIT_S)
    (warning,) = warnings_of(caplog)
    assert "ValueError: the summarizer said no" in warning
    assert "reason=failed" in warning
    assert runner.in_flight == 0
    assert store.get("k") is None
    # the key is free: asked again, it is made
    assert runner.submit("k", lambda: "made", store, ttl_s=TTL_S)
    assert runner.wait(WAIT_S)
    assert store.get("k") == b"made"


def test_a_store_that_fails_to_write_is_logged_and_the_key_freed(
    tmp_path: Path, runners: list[BackgroundSummaries], caplog: pytest.LogCaptureFixture
) -> None:
    from tokenflex.state.sqlite import SQLiteStore

    (tmp_path / "state.db").mkdir()  # a folder where the file should be
    broken = SQLiteStore(str(tmp_path / "state.db"))  # opened on first use: set() raises
    runner = runner_for(runners)
    with caplog.at_level(logging.WARNING, logger="tokenflex"):
        assert runner.submit("k", lambda: "summary", broken, ttl_s=TTL_S)
        assert runner.wait(WAIT_S)
    (warning,) = warnings_of(caplog)
    assert "OperationalError" in warning
    assert runner.in_flight == 0
    working = open_store("memory://")
    assert runner.submit("k", lambda: "summary", working, ttl_s=TTL_S)
    assert runner.wait(WAIT_S)
    assert working.get("k") == b"summary"


def test_the_summary_is_stored_with_the_ttl_given(
    store: StateStore, runners: list[BackgroundSummaries]
) -> None:
    runner = runner_for(runners)
    assert runner.submit("short", lambda: "brief", store, ttl_s=0.3)
    assert runner.submit("long", lambda: "lasting", store, ttl_s=TTL_S)
    assert runner.wait(WAIT_S)
    assert store.get("short") == b"brief"
    time.sleep(0.4)
    assert store.get("short") is None
    assert store.get("long") == b"lasting"


# -- close --------------------------------------------------------------------------------


def test_close_cancels_queued_jobs_lets_running_ones_finish_and_frees_their_keys(
    store: StateStore, gate: threading.Event, runners: list[BackgroundSummaries]
) -> None:
    runner = runner_for(runners, max_jobs=4, workers=1)
    calls = Calls()
    assert runner.submit("running", calls.held("running", gate), store, ttl_s=TTL_S)
    assert calls.running.wait(WAIT_S)  # the one worker holds it: the next ones queue
    assert runner.submit("queued-1", calls.held("queued-1", gate), store, ttl_s=TTL_S)
    assert runner.submit("queued-2", calls.held("queued-2", gate), store, ttl_s=TTL_S)
    assert runner.in_flight == 3

    begun = time.monotonic()
    runner.close()
    assert time.monotonic() - begun < 1.0  # close() does not wait for the running job
    assert not runner.submit("late", calls.held("late", gate), store, ttl_s=TTL_S)
    # the queued jobs are cancelled: only the running one is still being made
    assert runner.in_flight == 1
    assert not runner.wait(0.05)

    gate.set()
    assert runner.wait(WAIT_S)
    assert runner.in_flight == 0
    assert calls.started == ["running"]
    assert store.get("running") == b"running"
    assert [store.get(k) for k in ("queued-1", "queued-2", "late")] == [None, None, None]
    runner.close()  # twice: nothing more to do
    assert runner.in_flight == 0


def test_close_before_any_job(store: StateStore) -> None:
    runner = BackgroundSummaries()
    runner.close()
    assert not runner.submit("k", lambda: "s", store, ttl_s=TTL_S)
    assert runner.in_flight == 0
    assert runner.wait(0)
    assert store.get("k") is None


def test_a_submit_at_interpreter_exit_is_refused_not_raised(tmp_path: Path) -> None:
    """At interpreter exit the executor takes no new work: a fit running then (a daemon
    thread, an atexit hook) gets False from submit, not a RuntimeError, and no key stays
    held."""
    script = tmp_path / "late.py"
    script.write_text(
        textwrap.dedent(
            """
            import atexit
            from tokenflex.state import open_store
            from tokenflex.summarize.background import BackgroundSummaries

            runner, store = BackgroundSummaries(), open_store("memory://")

            def late():
                started = runner.submit("k", lambda: "s", store, ttl_s=60)
                print(started, runner.in_flight, runner.wait(0))

            atexit.register(late)
            """
        )
    )
    src = Path(__file__).resolve().parent.parent / "src"
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(src)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "0", "True"], (done.stdout, done.stderr)


def test_the_proxy_closes_its_runner_at_shutdown_without_waiting(
    monkeypatch: pytest.MonkeyPatch, gate: threading.Event
) -> None:
    """The proxy's lifespan closes the runner: no job starts after shutdown, a queued one
    is cancelled (its key freed), a running one is not waited for and still stored."""
    from starlette.testclient import TestClient

    from tokenflex.server import ServerConfig, create_app

    monkeypatch.delenv("TOKENFLEX_CONFIG", raising=False)
    app = create_app(ServerConfig.load(upstream="http://127.0.0.1:9"))
    fitter = app.state.proxy.fitter
    runner: BackgroundSummaries = fitter.background
    calls = Calls()
    with TestClient(app) as client:
        assert client.get("/tokenflex/health").status_code == 200
        for i in range(runner.workers):  # every worker busy, then one job queued
            assert runner.submit(f"busy-{i}", calls.held("busy", gate), fitter.store, ttl_s=TTL_S)
        assert calls.wait_started(runner.workers)
        assert runner.submit("queued", calls.held("queued", gate), fitter.store, ttl_s=TTL_S)
        begun = time.monotonic()
    assert time.monotonic() - begun < 5.0  # shutdown did not wait for the gate
    assert not runner.submit("late", calls.held("late", gate), fitter.store, ttl_s=TTL_S)
    assert runner.in_flight == runner.workers  # the queued one is gone, the running remain
    gate.set()
    assert runner.wait(WAIT_S)
    assert [fitter.store.get(f"busy-{i}") for i in range(runner.workers)] == [b"busy"] * (
        runner.workers
    )
    assert fitter.store.get("queued") is None
    assert calls.started == ["busy"] * runner.workers

    # the same app started again (a second lifespan) makes background summaries again
    with TestClient(app) as client:
        assert client.get("/tokenflex/health").status_code == 200
        assert runner.submit("again", lambda: "again", fitter.store, ttl_s=TTL_S)
        assert runner.wait(WAIT_S)
    assert fitter.store.get("again") == b"again"


# -- the proxy: background summaries wait for the client requests -------------------------


@pytest.mark.parametrize(
    "summarizer,gated",
    [
        pytest.param(None, True, id="upstream-by-default"),
        pytest.param("upstream", True, id="upstream"),
        pytest.param("extractive", False, id="extractive"),
        pytest.param({"base_url": "http://127.0.0.1:8080/v1", "model": "m"}, True, id="same-host"),
        pytest.param(
            {"base_url": "http://127.0.0.1:8081/v1", "model": "m"}, False, id="other-port"
        ),
        pytest.param({"base_url": "https://127.0.0.1:8080/v1", "model": "m"}, False, id="https"),
        pytest.param({"base_url": "http://summaries.local/v1", "model": "m"}, False, id="other"),
    ],
)
def test_only_jobs_of_a_summarizer_on_the_upstream_wait_for_its_clients(
    summarizer: Any, gated: bool
) -> None:
    from tokenflex.server import ServerConfig
    from tokenflex.server._summarizer import calls_upstream

    config = ServerConfig.load(upstream="http://127.0.0.1:8080/v1")
    options = {} if summarizer is None else {"summarizer": summarizer}
    assert calls_upstream(options, config) is gated


class HeldUpstream:
    """A chat upstream on loopback that records each call (``chat`` or ``summary``, by
    the summarizer's system prompt) and holds a request carrying ``x-hold`` until
    ``release`` is set: a slow client request, on demand."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.holding = threading.Event()
        self.release = threading.Event()
        self.summary_gate: threading.Event | None = None
        """When set to an event, summarizer calls wait for it (``summary_holding`` set)."""
        self.summary_holding = threading.Event()

    def app(self) -> Any:
        import anyio.to_thread
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse, Response
        from starlette.routing import Route

        async def chat(request: Request) -> Response:
            body = json.loads(await request.body())
            first = body["messages"][0].get("content")
            summary = isinstance(first, str) and first.startswith("You summarize")
            self.calls.append("summary" if summary else "chat")
            if "x-hold" in request.headers:
                self.holding.set()
                await anyio.to_thread.run_sync(self.release.wait, WAIT_S)
            if summary and self.summary_gate is not None:
                self.summary_holding.set()
                await anyio.to_thread.run_sync(self.summary_gate.wait, WAIT_S)
            message = {"role": "assistant", "content": "ok"}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            return JSONResponse({"id": "c", "object": "chat.completion", "choices": [choice]})

        return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def test_the_proxy_makes_background_summaries_only_while_no_request_is_in_flight(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    import httpx
    from test_server import ServerThread, conversation, fake_discover

    from tokenflex.server import ServerConfig, create_app

    held = HeldUpstream()
    with ServerThread(held.app()) as up:
        config = ServerConfig.load(
            upstream=up.url, cut_note=False, routes={"upsum": {"summarize": True, "keep_recent": 4}}
        )
        app = create_app(config, discover=fake_discover)
        runner: BackgroundSummaries = app.state.proxy.fitter.background
        with (
            ServerThread(app) as proxy,
            ThreadPoolExecutor(1) as pool,
            caplog.at_level(logging.INFO, logger="tokenflex"),
        ):
            short = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
            slow = pool.submit(
                httpx.post,
                f"{proxy.url}/v1/chat/completions",
                json=short,
                headers={"x-hold": "1"},
                timeout=WAIT_S * 2,
            )
            assert held.holding.wait(WAIT_S)  # a client request is in flight upstream
            # a long conversation: its summary takes several calls, made in the background
            long = {"model": "tiny", "messages": conversation(40), "max_tokens": 100}
            r = httpx.post(f"{proxy.url}/upsum/v1/chat/completions", json=long, timeout=WAIT_S)
            assert r.status_code == 200, r.text
            assert r.headers["x-tokenflex-summary"] == "no"
            assert runner.deferred == 1  # the job waits for the slow request
            assert held.calls.count("summary") == 0
            held.release.set()
            assert slow.result(WAIT_S).status_code == 200
            assert runner.wait(WAIT_S)  # idle now: it ran
            assert held.calls.count("summary") >= 2
            # the next request of the conversation sends the summary made meanwhile
            r = httpx.post(f"{proxy.url}/upsum/v1/chat/completions", json=long, timeout=WAIT_S)
            assert r.headers["x-tokenflex-summary"] == "yes"
    infos = infos_of(caplog)
    (deferred,) = [m for m in infos if "background summary" in m and "deferred" in m]
    assert "reason=idle-wait" in deferred and "in flight to http://127.0.0.1:" in deferred
    assert any("started after waiting" in m for m in infos)
    assert warnings_of(caplog) == []


def test_the_proxy_pauses_a_running_summary_while_a_request_is_in_flight(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client request that arrives while a background summary runs waits for the call in
    progress at most: the job's next call waits for the request to end."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx
    from test_server import ServerThread, conversation, fake_discover

    from tokenflex.server import ServerConfig, create_app

    held = HeldUpstream()
    held.summary_gate = threading.Event()
    with ServerThread(held.app()) as up:
        config = ServerConfig.load(
            upstream=up.url, cut_note=False, routes={"upsum": {"summarize": True, "keep_recent": 4}}
        )
        app = create_app(config, discover=fake_discover)
        runner: BackgroundSummaries = app.state.proxy.fitter.background
        with (
            ServerThread(app) as proxy,
            ThreadPoolExecutor(1) as pool,
            caplog.at_level(logging.INFO, logger="tokenflex"),
        ):
            long = {"model": "tiny", "messages": conversation(40), "max_tokens": 100}
            r = httpx.post(f"{proxy.url}/upsum/v1/chat/completions", json=long, timeout=WAIT_S)
            assert r.status_code == 200, r.text
            assert held.summary_holding.wait(WAIT_S)  # the job's first call is at the upstream
            short = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
            slow = pool.submit(
                httpx.post,
                f"{proxy.url}/v1/chat/completions",
                json=short,
                headers={"x-hold": "1"},
                timeout=WAIT_S * 2,
            )
            assert held.holding.wait(WAIT_S)  # a client request in flight
            held.summary_gate.set()  # the first call ends: the next one must wait
            assert wait_until(lambda: runner.paused == 1)
            assert held.calls.count("summary") == 1
            held.release.set()
            assert slow.result(WAIT_S).status_code == 200
            assert runner.wait(WAIT_S)
            assert held.calls.count("summary") >= 2
    infos = infos_of(caplog)
    assert any("paused between calls (reason=idle-wait)" in m for m in infos)
    assert warnings_of(caplog) == []
