"""The proxy against a minimal pass-through: throughput, added latency, and whether
throughput stays flat over a run.

Starts, on loopback only, the fast fake upstream of ``scripts/load_proxy.py``, ``tokenflex
serve`` in front of it (default config: cache-stable, memory state store, plans kept),
and a minimal Starlette + httpx proxy that forwards the body as it came (the reference:
what any proxy costs). Both run under uvicorn with the same HTTP parser and event loop.
For 10, 200 and 2,000 messages (the request of ``load_proxy.conversation``; 2,000 is
over gpt-4o's window, so it is cut) it measures, the two proxies interleaved:

- **throughput**: completed requests per second with ``CONCURRENCY`` clients in a closed
  loop, in rounds of the two proxies back to back (each first in half of them): the
  median of the rounds' tokenflex / reference ratios, their range beside it (goal >= 0.9
  / 0.9 / 0.75);
- **added p50**: the median latency of one client at a time, minus the reference's;
- **throughput over time** (10 messages): windows alternating between the two proxies over
  the run, so a machine that slows down slows both; the median tokenflex / reference
  ratio of the last third of the windows over that of the first third (goal: flat,
  >= 0.9; one window's ratio swings with the machine, a decay moves the medians). The
  series is printed to stderr.

Bounded: every phase stops by time and by request count; the processes are stopped at
the end. The machine's load (``os.getloadavg``) is printed beside the table: on a shared
2-core machine the ratios move with it.

    .venv/bin/python scripts/bench_proxy.py            # a few minutes
    .venv/bin/python scripts/bench_proxy.py --quick    # about a minute
    .venv/bin/python scripts/bench_proxy.py --soak 600 # throughput over 10 minutes
    .venv/bin/python scripts/bench_proxy.py --cpu      # CPU per request, in process
    .venv/bin/python scripts/bench_proxy.py --cpu --agent  # an agent's Anthropic request
    .venv/bin/python scripts/bench_proxy.py --cpu --turns grown  # a conversation that grows
    .venv/bin/python scripts/bench_proxy.py --split    # CPU per request, by process
    .venv/bin/python scripts/bench_proxy.py --instructions  # served, under callgrind
    .venv/bin/python scripts/bench_proxy.py --noise    # the estimator against itself

``--noise`` puts a second reference proxy (the same code, another process) where tokenflex
was and measures each throughput row's ratio as its row does, four times (``--noise N``: N
times): an A/A test. There is no difference to find, so the spread of its medians around
1.00 is what a row's ratio moves by on this machine with none: a row within that spread
of its goal meets it or not by the machine, not by the proxy.

``--cpu`` measures what the throughput rows cannot tell apart on a shared machine: the CPU
time per request of the two apps themselves, in process (driven through
``httpx.ASGITransport``, each with an in-memory upstream that answers as the fake one
does; no sockets, no uvicorn, one thread): the best of a few rounds, the apps alternated,
with the proxy's log line written (to ``os.devnull``) as ``tokenflex serve`` writes it.
Beside them, a counting floor: the reference plus parsing the body and counting every
message against the window (see :func:`cpu_per_request`): what keeping a request within
the window costs at the least, before any plan, state, log line or header.

``--split`` runs the throughput rows' closed loops again and divides each process's CPU
time over a loop (the fake upstream, the proxy measured, the client) by the requests it
completed: what bounds each proxy's throughput, on the same machine and sockets. It then
prints what each throughput goal leaves for tokenflex's own work (the server CPU a request
the goal's rate allows, less the reference server's) beside what parsing the request and
one ``tokenflex.fit()`` of its messages cost in process (``floor_per_request``), what the
counting floor and tokenflex spend beyond the reference in process (``--cpu``), and the
CPU of the proxy's upstream exchange against the reference's (``upstream_exchange``):
one buffered answer, and a streamed one by the event.

``--instructions`` runs the two proxies as the throughput rows do, each under valgrind's
callgrind, and counts the user-space instructions a request of each server process
executes (uvicorn, the event loop's Python, the collector): exact where the throughput
rows move with the machine, for the rows' requests at their eight clients and the
10-message one a request at a time. It does not see the kernel, and how fast the
instructions run only through a model: callgrind's cache simulation (``CACHES``: a
32 KiB instruction and a 48 KiB data first level, a 2 MiB last level, as one core of
this machine has) counts the reads and writes a request misses in the last level, each
a trip to memory or a shared cache, ~10-100x an instruction. So it complements the
rows, not replaces them. Needs valgrind; a few minutes.

``rows(quick=...)`` returns the table for ``scripts/bench.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import load_proxy  # a sibling script: the fake upstream and the request

HOST = load_proxy.HOST  # loopback only, by design
CONCURRENCY = 8
MAX_REQUESTS = 200_000
SIZES = (10, 200, 2000)
GOALS = {10: 0.9, 200: 0.9, 2000: 0.75}
FLAT_GOAL = 0.9

Row = tuple[str, str, str, str, str, str]

# The reference: forwards the body as it came and returns the upstream's answer.
_REFERENCE = """
import sys, httpx, uvicorn
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route
client = httpx.AsyncClient(base_url=sys.argv[1], timeout=30, trust_env=False)
async def forward(request):
    r = await client.post(request.url.path, content=await request.body(),
                          headers={"content-type": "application/json"})
    return Response(r.content, status_code=r.status_code, media_type="application/json")
async def health(request):
    return Response(b'{"status":"ok"}', media_type="application/json")
app = Starlette(routes=[Route("/v1/chat/completions", forward, methods=["POST"]),
                        Route("/tokenflex/health", health)])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning",
            access_log=False, server_header=False, ws="none")
"""


@dataclass
class Window:
    """Completed requests and their latencies over one stretch of time."""

    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: int = 0

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies) * 1000 if self.latencies else float("nan")


async def closed_loop(
    url: str, body: bytes, *, seconds: float, clients: int, requests: int = MAX_REQUESTS
) -> Window:
    """``clients`` clients, each sending the next request when its answer is in, for
    ``seconds`` or until ``requests`` were sent (answered or failed)."""
    window = Window()
    headers = {"content-type": "application/json", "authorization": "Bearer sk-bench"}
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    left = requests
    async with httpx.AsyncClient(limits=limits, timeout=300, trust_env=False) as client:

        async def one_client() -> None:
            nonlocal left
            while time.perf_counter() < deadline and left > 0:
                left -= 1
                t0 = time.perf_counter()
                try:
                    r = await client.post(url, content=body, headers=headers)
                except httpx.HTTPError:
                    window.errors += 1
                    continue
                if r.status_code != 200:
                    window.errors += 1
                    continue
                window.latencies.append(time.perf_counter() - t0)

        start = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(clients)))
        window.seconds = time.perf_counter() - start
    return window


def _env() -> dict[str, str]:
    """The environment of the processes started here: no ``TOKENFLEX_*`` settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TOKENFLEX_")}


def fake_upstream() -> tuple[subprocess.Popen[bytes], str]:
    """``load_proxy``'s fast fake upstream, started on a free loopback port (not yet
    answering: wait for ``/v1/models``); the process and its base URL."""
    port = load_proxy._free_port()
    proc = subprocess.Popen(
        [sys.executable, load_proxy.__file__, "--serve-upstream", str(port)],
        env=_env(),
        stdout=subprocess.DEVNULL,
    )
    return proc, f"http://{HOST}:{port}"


@contextlib.contextmanager
def servers(
    pids: dict[str, int] | None = None,
    config: str | None = None,
    *,
    wrap: list[str] | None = None,
    start_s: float = 30.0,
    measured: str = "tokenflex",
) -> Iterator[tuple[str, str]]:
    """The fake upstream, tokenflex serve (with the TOML file ``config`` when given) and
    the reference proxy; their base URLs (tokenflex, reference). Stopped on exit.
    ``pids``, when given, is filled with each process's id by name (``upstream``,
    ``tokenflex``, ``reference``). ``wrap``: a command the two proxies run under (a
    profiler), given ``start_s`` seconds to answer. ``measured="reference"``: a second
    reference in tokenflex's place (the estimator against itself, ``--noise``)."""
    tf, ref = (load_proxy._free_port() for _ in range(2))
    upstream, up_url = fake_upstream()
    env = _env()
    if wrap:
        env["PYTHONHASHSEED"] = "0"  # (the same dict orders in every run)
    pre = list(wrap or [])
    log_fd, log_path = tempfile.mkstemp(prefix="tokenflex-bench-proxy-", suffix=".log")
    log = os.fdopen(log_fd, "wb")
    py = sys.executable
    ours = [py, "-m", "tokenflex", "serve", "--upstream", up_url, "--port", str(tf)]
    ours += ["--host", HOST, *(["--config", config] if config else [])]
    if measured == "reference":
        ours = [py, "-c", _REFERENCE, up_url, str(tf)]
    procs = [
        upstream,
        subprocess.Popen([*pre, *ours], env=env, stdout=log, stderr=log),
        subprocess.Popen([*pre, py, "-c", _REFERENCE, up_url, str(ref)], env=env, stderr=log),
    ]
    if pids is not None:
        pids.update(
            zip(("upstream", "tokenflex", "reference"), [p.pid for p in procs], strict=True)
        )
    try:
        load_proxy._wait_up(f"{up_url}/v1/models", procs[0], "fake upstream")
        tf_url, ref_url = f"http://{HOST}:{tf}", f"http://{HOST}:{ref}"
        load_proxy._wait_up(f"{tf_url}/tokenflex/health", procs[1], "tokenflex proxy", start_s)
        load_proxy._wait_up(f"{ref_url}/tokenflex/health", procs[2], "reference proxy", start_s)
        yield tf_url, ref_url
    finally:
        load_proxy.stop(procs)
        log.close()
        os.unlink(log_path)


def request_body(messages: int, *, stream: bool = False) -> bytes:
    body: dict[str, Any] = {
        "model": "gpt-4o",
        "messages": load_proxy.conversation(messages),
        "max_tokens": 256,
    }
    if stream:  # last: the fake upstream looks for it at the end of the body
        body["stream"] = True
    return json.dumps(body).encode()


TURNS = ("same", "edited", "grown", "new")
"""What ``--cpu --turns`` sends request after request: the same body; the same body with its
last message edited (new text each request: a retry of a turn said otherwise); a
conversation grown by an answer and a question each request (40 turns, then from the
start again: an agent's loop); or a conversation of its own each request (its first
message told apart: nothing to reuse)."""


def request_bodies(messages: int, turns: str, count: int, *, agent: bool = False) -> list[bytes]:
    """The bodies ``--cpu`` sends, in order (cycled): see :data:`TURNS`."""
    from bench_turns import agent_body  # a sibling script: the agent's Anthropic body

    body = agent_body(messages) if agent else request_body(messages)
    if turns == "same":
        return [body]
    if turns in ("edited", "new"):  # the last (first) message's text, told apart
        key = b'"text": "' if agent else b'"content": "'
        at = (body.rindex if turns == "edited" else body.index)(key) + len(key)
        return [body[:at] + b"(%d) " % k + body[at:] for k in range(count)]
    data = json.loads(body)
    items = data["messages"]
    out = []
    for k in range(40):  # an answer and a question more each request
        out.append(json.dumps({**data, "messages": items}).encode())
        items = [
            *items,
            {
                "role": "assistant",
                "content": f"Answer {k}: " + " ".join(f"w{j}" for j in range(50)),
            },
            {"role": "user", "content": f"Question {k}: " + " ".join(f"q{j}" for j in range(30))},
        ]
    return out


@dataclass
class Rounds:
    """Two proxies' closed loops at one request size, interleaved round after round."""

    rps: tuple[list[float], list[float]]
    """Each proxy's throughput in each round (eight clients)."""
    p50: tuple[list[float], list[float]]
    """Each proxy's median latency in each round (one client)."""

    @property
    def ratios(self) -> list[float]:
        """The first proxy's throughput over the second's, each round's, sorted: the two
        loops of a round run back to back, so a machine slower for a while slows both."""
        return sorted(a / b for a, b in zip(*self.rps, strict=True) if b)

    @property
    def ratio(self) -> float:
        """The estimate of a throughput row: the median of the rounds' ratios."""
        return statistics.median(self.ratios)


def interleaved(a: str, b: str, messages: int, *, seconds: float, rounds: int) -> Rounds:
    """The proxies at base URLs ``a`` and ``b`` measured at one request size, each first
    in half the rounds."""
    body = request_body(messages)
    path = "/v1/chat/completions"
    for url in (a, b):  # warm up: model lookup, tokenizer, connections
        asyncio.run(closed_loop(url + path, body, seconds=min(1.0, seconds), clients=2))
    rps: dict[str, list[float]] = {a: [], b: []}
    p50: dict[str, list[float]] = {a: [], b: []}
    for k in range(rounds):
        for url in (b, a) if k % 2 == 0 else (a, b):
            w = asyncio.run(closed_loop(url + path, body, seconds=seconds, clients=CONCURRENCY))
            if w.errors:
                raise SystemExit(f"{w.errors} failed requests through {url}")
            rps[url].append(w.rps)
            one = asyncio.run(closed_loop(url + path, body, seconds=seconds / 2, clients=1))
            p50[url].append(one.p50_ms)
    return Rounds((rps[a], rps[b]), (p50[a], p50[b]))


def compare(tf: str, ref: str, messages: int, *, seconds: float, rounds: int) -> list[Row]:
    """Throughput and added p50 at one request size, the two proxies interleaved."""
    measured = interleaved(tf, ref, messages, seconds=seconds, rounds=rounds)
    t, r = (statistics.median(x) for x in measured.rps)
    ratios, ratio = measured.ratios, measured.ratio
    goal = GOALS[messages]
    pt, pr = (statistics.median(x) for x in measured.p50)
    return [
        (
            f"proxy throughput, {messages:,} messages",
            f"{t:,.0f} req/s",
            f"{r:,.0f} req/s",
            f"{ratio:.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f})",
            f">= {goal}",
            "yes" if ratio >= goal else "no",
        ),
        (
            f"proxy added p50, {messages:,} messages",
            f"{pt:.2f} ms",
            f"{pr:.2f} ms",
            f"{pt - pr:+.2f} ms",
            "-",
            "-",
        ),
    ]


def over_time(tf: str, ref: str, *, seconds: float, window: float) -> Row:
    """Throughput of the 10-message request over the run, in windows alternating between
    the two proxies (so a machine that slows down slows both): the median tokenflex /
    reference ratio of the last third of the windows over that of the first third. A
    proxy that decays shows as a falling ratio; one window's ratio is noise."""
    body = request_body(10)
    path = "/v1/chat/completions"
    ratios, rates = [], []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = asyncio.run(closed_loop(tf + path, body, seconds=window / 2, clients=CONCURRENCY))
        r = asyncio.run(closed_loop(ref + path, body, seconds=window / 2, clients=CONCURRENCY))
        rates.append(t.rps)
        ratios.append(t.rps / r.rps if r.rps else 0.0)
        print(
            f"  window {len(ratios)}: tokenflex {t.rps:,.0f} req/s, reference {r.rps:,.0f} "
            f"req/s, ratio {ratios[-1]:.2f}, load {os.getloadavg()[0]:.1f}",
            file=sys.stderr,
        )
    third = max(1, len(ratios) // 3)
    first = statistics.median(ratios[:third])
    last = statistics.median(ratios[-third:])
    flat = last / first if first else 0.0
    return (
        f"proxy throughput over {seconds:.0f} s ({window:.0f} s windows), 10 messages",
        f"{min(rates):,.0f}-{max(rates):,.0f} req/s",
        f"ratio {min(ratios):.2f}-{max(ratios):.2f}; medians {first:.2f} -> {last:.2f}",
        f"{flat:.2f}",
        f"flat (>= {FLAT_GOAL})",
        "yes" if flat >= FLAT_GOAL else "no",
    )


class _Reply(httpx.AsyncByteStream):
    """The fake upstream's answer as a stream (the proxy reads it streamed)."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield load_proxy._REPLY


def _in_memory_transport() -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        request.read()
        headers = {
            "content-type": "application/json",
            "content-length": str(len(load_proxy._REPLY)),
        }
        return httpx.Response(200, stream=_Reply(), headers=headers)

    return httpx.MockTransport(answer)


def _in_memory_upstream() -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=_in_memory_transport(), base_url="http://upstream")


class _Collector:
    """The time the garbage collector spends in this process (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started


def cpu_per_request(
    sizes: tuple[int, ...] = SIZES,
    *,
    rounds: int = 5,
    config: str | None = None,
    agent: bool = False,
    collector: dict[int, float] | None = None,
    turns: str = "same",
) -> dict[int, tuple[float, float, float]]:
    """CPU ms per request of (tokenflex, reference, counting floor) by request size, in
    process: the best of ``rounds`` runs of each app, alternated (see ``--cpu``);
    ``config``: the proxy's TOML config file. ``agent``: an agent's Anthropic Messages
    request on ``/v1/messages`` instead (``scripts/bench_turns.py``'s ``agent_body``: a
    task, then tool rounds of ``tool_use`` and ``tool_result`` blocks); the floor, which
    counts chat messages, is not measured then (NaN). ``turns``: what is sent request
    after request (:data:`TURNS`).

    The counting floor is the least a proxy that keeps requests within the window does:
    the reference plus parsing the body and counting every message (tokenflex's cached
    o200k counts, the chat envelope's constants) against the window, with the count in a
    response header; it forwards the body as it came (a request that fits goes out
    unchanged) and refuses one that does not fit (it never cuts: the 2,000-message request
    is refused there, so that row measures the count alone). ``collector``, when given,
    is filled with the ms a request tokenflex's best round spent in the garbage
    collector, by size (part of its CPU). As ``tokenflex serve`` does once its app is
    made, what lives now is taken out of the collector's walks
    (:func:`~tokenflex.server.limits.freeze_startup`; undone after)."""
    import gc
    import logging

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from tokenflex.server import ServerConfig, create_app
    from tokenflex.server._validate import parse_json
    from tokenflex.server.limits import freeze_startup
    from tokenflex.tokenizers import get_tokenizer

    reference_upstream = _in_memory_upstream()
    tokens = get_tokenizer("o200k_base")

    async def forward(request: Request) -> Response:  # as _REFERENCE does
        r = await reference_upstream.post(
            request.url.path,
            content=await request.body(),
            headers={"content-type": "application/json"},
        )
        return Response(r.content, status_code=r.status_code, media_type="application/json")

    async def count_and_forward(request: Request) -> Response:
        body = await request.body()
        data = parse_json(body)
        used = 3 + sum(4 + tokens.count(m["content"]) for m in data["messages"])
        if used + data["max_tokens"] > 128_000:
            return Response(b'{"error": "too long"}', status_code=400)
        r = await reference_upstream.post(
            request.url.path, content=body, headers={"content-type": "application/json"}
        )
        return Response(
            r.content,
            status_code=r.status_code,
            media_type="application/json",
            headers={"x-tokenflex-input-tokens": str(used)},
        )

    path = "/v1/messages" if agent else "/v1/chat/completions"
    reference = Starlette(routes=[Route(path, forward, methods=["POST"])])
    floor = None if agent else Starlette(routes=[Route(path, count_and_forward, methods=["POST"])])
    app = create_app(ServerConfig.load(config, upstream="http://upstream", discover=False))
    proxy = app.state.proxy
    freeze_startup()
    logger = logging.getLogger("tokenflex")
    with open(os.devnull, "w") as sink:
        handler = logging.StreamHandler(sink)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        level, propagate = logger.level, logger.propagate
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        timer = _Collector()
        gc.callbacks.append(timer)
        try:
            return asyncio.run(
                _cpu_rounds(
                    app,
                    proxy,
                    reference,
                    floor,
                    sizes,
                    rounds,
                    path=path,
                    agent=agent,
                    timer=timer,
                    collector=collector if collector is not None else {},
                    turns=turns,
                )
            )
        finally:
            gc.callbacks.remove(timer)
            gc.unfreeze()
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate


async def _cpu_rounds(
    app: Any,
    proxy: Any,
    reference: Any,
    floor: Any,
    sizes: tuple[int, ...],
    rounds: int,
    *,
    path: str,
    agent: bool,
    timer: _Collector,
    collector: dict[int, float],
    turns: str,
) -> dict[int, tuple[float, float, float]]:
    counts = {10: 1000, 200: 300, 2000: 40}
    headers = {"content-type": "application/json", "authorization": "Bearer sk-bench"}
    out: dict[int, tuple[float, float, float]] = {}
    answers = {"ref": {200}, "tf": {200}, "floor": {200, 400}}
    apps = [("ref", reference), ("floor", floor), ("tf", app)]
    async with proxy.lifespan(app):
        proxy.upstream._transport = _in_memory_transport()
        for n in sizes:
            count = counts.get(n, 100)
            bodies = request_bodies(n, turns, count + 5, agent=agent)
            best = {k: float("inf") for k, a in apps if a is not None}
            for _ in range(rounds):
                for name, target in ((k, a) for k, a in apps if a is not None):
                    transport = httpx.ASGITransport(app=target)
                    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as c:
                        for k in range(5):  # warm up: tokenizer, counts, connections
                            await c.post(path, content=bodies[k % len(bodies)], headers=headers)
                        start, collected = time.process_time(), timer.seconds
                        for k in range(5, count + 5):
                            body = bodies[k % len(bodies)]
                            r = await c.post(path, content=body, headers=headers)
                            if r.status_code not in answers[name]:
                                raise SystemExit(f"{name}: HTTP {r.status_code}: {r.text[:200]}")
                            # a turn of the event loop between requests, as a server's
                            # loop takes one on every socket read: in process nothing
                            # else suspends, and the timers a request cancelled (its
                            # deadlines) would stay in the loop's heap, and in every
                            # garbage collection's walk, until the run ends
                            await asyncio.sleep(0)
                        ms = (time.process_time() - start) / count * 1000
                        if ms < best[name] and name == "tf":
                            collector[n] = (timer.seconds - collected) / count * 1000
                        best[name] = min(best[name], ms)
            out[n] = (best["tf"], best["ref"], best.get("floor", float("nan")))
    return out


def cpu_split(
    sizes: tuple[int, ...] = SIZES, *, seconds: float = 4.0, config: str | None = None
) -> list[tuple[int, str, float, dict[str, float]]]:
    """Where the CPU of a throughput run goes: for each size, each proxy's closed loop
    (``CONCURRENCY`` clients, as the throughput rows run it) with the CPU time each
    process spent over it divided by the requests completed: ``(size, proxy, req/s,
    {process: ms a request})``, the processes being the fake upstream, the proxy measured
    and the client (this process). A proxy's server is one event loop: it serves at most
    1 / (its CPU a request) requests a second, and the three processes share 2 cores."""
    import psutil

    pids: dict[str, int] = {}
    out: list[tuple[int, str, float, dict[str, float]]] = []
    with servers(pids, config) as (tf, ref):
        client = psutil.Process()
        for n in sizes:
            body = request_body(n)
            for url in (tf, ref):  # warm up
                asyncio.run(closed_loop(url + "/v1/chat/completions", body, seconds=1.0, clients=2))
            for name, url in (("reference", ref), ("tokenflex", tf)):
                procs = {
                    "upstream": psutil.Process(pids["upstream"]),
                    name: psutil.Process(pids[name]),
                }
                procs["client"] = client
                before = {k: sum(p.cpu_times()[:2]) for k, p in procs.items()}
                faults = _minor_faults(pids[name])
                w = asyncio.run(
                    closed_loop(
                        url + "/v1/chat/completions", body, seconds=seconds, clients=CONCURRENCY
                    )
                )
                done = max(1, len(w.latencies))
                cpu = {
                    k: (sum(p.cpu_times()[:2]) - before[k]) / done * 1000 for k, p in procs.items()
                }
                cpu["faults"] = (_minor_faults(pids[name]) - faults) / done
                out.append((n, name, w.rps, cpu))
    return out


def floor_per_request(sizes: tuple[int, ...] = SIZES) -> dict[int, tuple[float, float]]:
    """CPU ms of what any fitting proxy must do for each request, in this process:
    ``(parse, fit)``: the body parsed as the proxy parses it, and one ``tokenflex.fit()``
    of its messages as a list never seen (the counts cached, no state, no recall, no plan
    kept: the library alone), best of 3 rounds."""
    import tokenflex
    from tokenflex.server._validate import parse_json

    out: dict[int, tuple[float, float]] = {}
    for n in sizes:
        raw = request_body(n)
        k = max(20, 20_000 // n)
        best = [float("inf"), float("inf")]
        for _ in range(3):
            bodies = [parse_json(raw) for _ in range(k)]
            tokenflex.fit(bodies[0]["messages"], model="gpt-4o", max_tokens=256)
            start = time.process_time()
            for _ in range(k):
                parse_json(raw)
            best[0] = min(best[0], (time.process_time() - start) / k * 1000)
            start = time.process_time()
            for body in bodies:
                tokenflex.fit(body["messages"], model="gpt-4o", max_tokens=256)
            best[1] = min(best[1], (time.process_time() - start) / k * 1000)
        out[n] = (best[0], best[1])
    return out


def upstream_exchange(
    messages: int = 10, count: int = 2000, *, stream: bool = False
) -> tuple[float, float]:
    """CPU ms of one upstream exchange over a real socket to the fake upstream, one
    request at a time, in this process: ``(tokenflex, plain)``, the proxy's
    (:class:`~tokenflex.server._upstream.Upstream`: the client's headers filtered, the
    send under its deadline, the answer read streamed and bounded, its headers filtered)
    against an ``httpx.AsyncClient.post`` as the reference proxy sends; best of 3 rounds,
    alternated, on the event loop uvicorn serves them on. ``stream``: a streamed answer
    instead (``load_proxy.STREAM_EVENTS`` SSE events, each its own read), passed on event
    by event as the proxy streams it (``Upstream.streamed``'s body) against an
    ``httpx.AsyncClient.stream`` read with ``aiter_raw``; ``count`` answers a round."""
    from starlette.datastructures import Headers

    from tokenflex.server import ServerConfig
    from tokenflex.server._upstream import Upstream

    proc, url = fake_upstream()
    body = request_body(messages, stream=stream)
    client_headers = Headers(
        {
            "content-type": "application/json",
            "authorization": "Bearer sk-bench",
            "host": f"{HOST}:8787",
            "accept": "*/*",
            "accept-encoding": "gzip, deflate",
            "connection": "keep-alive",
            "content-length": str(len(body)),
        }
    )
    path, json_type = "/v1/chat/completions", {"content-type": "application/json"}

    async def rounds() -> tuple[float, float]:
        upstream = Upstream(ServerConfig.load(upstream=url, discover=False))
        plain = httpx.AsyncClient(base_url=url, timeout=30, trust_env=False)
        target = upstream.url(path)

        async def ours() -> None:
            headers = upstream.request_headers(client_headers, HOST)
            response = await upstream.send("POST", target, headers, body)
            if stream:
                async for _ in upstream.streamed(response).body_iterator:
                    pass
            else:
                await upstream.buffered(response, {"x-tokenflex-input-tokens": "1"})

        async def reference() -> None:
            if stream:
                async with plain.stream("POST", path, content=body, headers=json_type) as r:
                    async for _ in r.aiter_raw():
                        pass
            else:
                r = await plain.post(path, content=body, headers=json_type)
                _ = r.content

        best = {"ours": float("inf"), "reference": float("inf")}
        try:
            for _ in range(3):
                for name, one in (("ours", ours), ("reference", reference)):
                    for _ in range(max(3, count // 40)):  # warm: the connection
                        await one()
                    start = time.process_time()
                    for _ in range(count):
                        await one()
                    best[name] = min(best[name], (time.process_time() - start) / count * 1000)
        finally:
            await upstream.aclose()
            await plain.aclose()
        return best["ours"], best["reference"]

    try:
        load_proxy._wait_up(f"{url}/v1/models", proc, "fake upstream")
        with asyncio.Runner(loop_factory=_served_loop()) as runner:
            return runner.run(rounds())
    finally:
        load_proxy.stop([proc])


def _served_loop() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop uvicorn serves the proxies on: uvloop's where it is installed."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _minor_faults(pid: int) -> float:
    """The minor page faults process ``pid`` has taken (Linux: /proc; NaN elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return float(f.read().rpartition(")")[2].split()[7])
    except OSError:
        return float("nan")


def print_split(config: str | None = None) -> None:
    """``--split``: each process's CPU a request, then what each goal leaves for
    tokenflex's own work against what parsing and one fit of the request cost."""
    load = os.getloadavg()
    split = cpu_split(config=config)
    for n, name, rps, cpu in split:
        faults = cpu.pop("faults")
        shown = ", ".join(f"{k} {v:.2f}" for k, v in cpu.items())
        print(
            f"{n:>5,} messages, {name:<9}: {rps:6,.0f} req/s; ms of CPU a request: {shown}; "
            f"{faults:.0f} minor page faults a request in the proxy"
        )
    print(
        f"{CONCURRENCY} clients; load average {load[0]:.1f} before, {os.getloadavg()[0]:.1f} after"
    )
    floor = floor_per_request()
    in_process = cpu_per_request(config=config)
    print(
        "\nThe budget (a proxy's server is one event loop: it serves at most 1 / its CPU a "
        "request); in process (--cpu), what each app spends beyond the reference:"
    )
    for n, name, rps, cpu in split:
        if name != "reference":
            continue
        allowed = 1000 / (GOALS[n] * rps)  # ms of server CPU a request at the goal's rate
        own = allowed - cpu["reference"]  # beyond what the pass-through's server spends
        parse, fit = floor[n]
        tf, ref, counting = in_process[n]
        print(
            f"{n:>5,} messages: goal {GOALS[n]} of {rps:,.0f} req/s allows {allowed:.2f} ms "
            f"of server CPU, {own:.2f} ms beyond the reference's {cpu['reference']:.2f}; "
            f"parse {parse:.3f} + fit() of a fresh list {fit:.3f} = {parse + fit:.3f} ms; "
            f"in process, the counting floor {counting - ref:.3f} ms, tokenflex "
            f"{tf - ref:.3f} ms beyond the reference"
        )
    ours, plain = upstream_exchange()
    print(
        f"\nOne upstream exchange (10 messages, real socket, one at a time): tokenflex's "
        f"{ours:.3f} ms of CPU, an httpx post {plain:.3f} ms"
    )
    events = load_proxy.STREAM_EVENTS
    ours, plain = (ms * 1000 / events for ms in upstream_exchange(count=20, stream=True))
    print(
        f"One streamed answer ({events} SSE events, each its own read): tokenflex's "
        f"{ours:.1f} us of CPU an event, an httpx stream's {plain:.1f} us"
    )


def rows(*, quick: bool, soak: float | None = None, config: str | None = None) -> list[Row]:
    """The proxy rows of the benchmark: (case, tokenflex, reference, ratio, goal, met).

    ``quick``: short phases (about a minute in all); else a few minutes. ``soak``: the
    seconds of the throughput-over-time check (default 15 quick, 120 else)."""
    seconds, rounds = (1.5, 3) if quick else (2.5, 6)
    if soak is None:
        soak = 15.0 if quick else 120.0
    out: list[Row] = []
    with servers(config=config) as (tf, ref):
        for n in SIZES:
            out += compare(tf, ref, n, seconds=seconds, rounds=rounds)
        out.append(over_time(tf, ref, seconds=soak, window=5.0 if quick else 10.0))
    return out


def noise_floor(reps: int, *, quick: bool) -> list[Row]:
    """The throughput rows' estimator against itself (A/A): a second reference proxy in
    tokenflex's place, each size measured ``reps`` times as its row is. Its medians'
    spread around 1.00 is what a row's ratio can move by with no difference at all."""
    seconds, rounds = (1.5, 3) if quick else (2.5, 6)
    out: list[Row] = []
    with servers(measured="reference") as (other, ref):
        for n in SIZES:
            medians = sorted(
                interleaved(other, ref, n, seconds=seconds, rounds=rounds).ratio
                for _ in range(reps)
            )
            out.append(
                (
                    f"A/A: a reference against another, {n:,} messages, {reps} runs",
                    "-",
                    "-",
                    f"{statistics.median(medians):.2f} ({medians[0]:.2f}-{medians[-1]:.2f})",
                    "1.00",
                    "-",
                )
            )
    return out


INSTRUCTION_CASES = ((10, 8), (10, 1), (200, 8), (2000, 8))
"""(messages, clients) of ``--instructions``: the throughput rows' requests at their
eight clients, and the 10-message one a request at a time."""


CACHES = ("--I1=32768,8,64", "--D1=49152,12,64", "--LL=2097152,16,64")
"""The caches ``--instructions`` simulates (size, ways, line): one core's of this machine
(``lscpu``: 2 MiB of L2 a core; its L3 is shared with the host's other guests)."""


def served_instructions(messages: int, clients: int, count: int) -> dict[str, tuple[float, float]]:
    """User-space instructions and last-level cache misses a request of each served proxy
    (uvicorn, the collector and all), by name: both run under ``valgrind
    --tool=callgrind --instr-atstart=no --cache-sim=yes`` (:data:`CACHES`), a warm-up of
    60 requests, then collection on (``callgrind_control -i on``) for ``count`` requests
    of a closed loop of ``clients``, off and dumped. Exact where the throughput rows move
    with the machine (the fake upstream and the client run outside valgrind)."""
    out_dir = tempfile.mkdtemp(prefix="tokenflex-bench-callgrind-")
    wrap = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--cache-sim=yes",
        *CACHES,
        f"--callgrind-out-file={out_dir}/cg.%p",
    ]
    body = request_body(messages)
    found: dict[str, tuple[float, float]] = {}
    pids: dict[str, int] = {}
    with servers(pids, wrap=wrap, start_s=600) as (tf, ref):
        for name, base in (("tokenflex", tf), ("reference", ref)):
            url = base + "/v1/chat/completions"
            loops = [  # a warm-up, then the requests counted
                functools.partial(closed_loop, url, body, seconds=3600, clients=clients, requests=n)
                for n in (60, count)
            ]
            warm = asyncio.run(loops[0]())
            pid = str(pids[name])
            subprocess.run(["callgrind_control", "-i", "on", pid], check=True, capture_output=True)
            counted = asyncio.run(loops[1]())
            if warm.errors or counted.errors:
                raise SystemExit(f"failed requests through {name} under callgrind")
            subprocess.run(["callgrind_control", "-i", "off", pid], check=True, capture_output=True)
            subprocess.run(["callgrind_control", "-d", pid], check=True, capture_output=True)
            events: list[str] = []
            totals: dict[str, int] = {}
            for path in Path(out_dir).glob(f"cg.{pid}*"):
                for line in path.read_text(errors="replace").splitlines():
                    if line.startswith("events:"):
                        events = line.split()[1:]
                    elif line.startswith(("summary:", "totals:")):
                        values = dict(zip(events, map(int, line.split()[1:]), strict=False))
                        if values.get("Ir", 0) > totals.get("Ir", 0):
                            totals = values
            missed = sum(totals.get(e, 0) for e in ("ILmr", "DLmr", "DLmw"))
            found[name] = (totals.get("Ir", 0) / count, missed / count)
    for path in Path(out_dir).glob("*"):
        path.unlink()
    os.rmdir(out_dir)
    return found


def print_instructions(count: int) -> None:
    """The ``--instructions`` table (needs valgrind; minutes: each proxy starts under it)."""
    import shutil

    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("--instructions needs valgrind (and its callgrind_control)")
    print("                   M instructions a request   k last-level misses a request")
    print("messages  clients  tokenflex  reference  ratio  tokenflex  reference  ratio")
    for messages, clients in INSTRUCTION_CASES:
        n = max(40, count // 5) if messages >= 2000 else count
        got = served_instructions(messages, clients, n)
        (tf, tf_missed), (ref, ref_missed) = got["tokenflex"], got["reference"]
        ref_missed = max(ref_missed, 1e-9)
        print(
            f"{messages:>8,}  {clients:>7}  {tf / 1e6:>9.2f}  {ref / 1e6:>9.2f}  {tf / ref:>5.2f}"
            f"  {tf_missed / 1e3:>9.2f}  {ref_missed / 1e3:>9.2f}  {tf_missed / ref_missed:>5.1f}",
            flush=True,
        )
    print(f"each server process, user space, {count} requests a case; misses: reads")
    print("and writes missed in a simulated 2 MiB last-level cache (CACHES)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short phases (about a minute)")
    ap.add_argument("--soak", type=float, help="seconds of the throughput-over-time check")
    ap.add_argument(
        "--cpu", action="store_true", help="CPU per request of the two apps, in process"
    )
    ap.add_argument(
        "--split",
        action="store_true",
        help="CPU per request of each process (upstream, proxy, client) in a throughput run",
    )
    ap.add_argument(
        "--config", help="a TOML config file for tokenflex serve (default: none, the defaults)"
    )
    ap.add_argument(
        "--agent",
        action="store_true",
        help="with --cpu: an agent's Anthropic request (tool rounds) on /v1/messages",
    )
    ap.add_argument(
        "--turns",
        choices=TURNS,
        default="same",
        help="with --cpu: the same body each request, its last message edited, grown, or new",
    )
    ap.add_argument(
        "--instructions",
        type=int,
        nargs="?",
        const=300,
        metavar="REQUESTS",
        help="instructions a request of each served proxy, under callgrind (default 300)",
    )
    ap.add_argument(
        "--noise",
        type=int,
        nargs="?",
        const=4,
        metavar="RUNS",
        help="the throughput estimator against itself: two references, each row's "
        "measurement RUNS times (default 4)",
    )
    args = ap.parse_args()
    if args.instructions:
        print_instructions(args.instructions)
        return 0
    if args.split:
        print_split(args.config)
        return 0
    if args.cpu:
        load = os.getloadavg()
        collected: dict[int, float] = {}
        measured = cpu_per_request(
            config=args.config, agent=args.agent, collector=collected, turns=args.turns
        )
        for n, (tf, ref, floor) in measured.items():
            shown = "" if args.agent else f", counting floor {floor:.2f} ms"
            what = "Anthropic agent messages" if args.agent else "messages"
            print(
                f"{n:>5,} {what}: tokenflex {tf:.2f} ms (collector {collected[n]:.2f}), "
                f"reference {ref:.2f} ms{shown} of CPU a request"
            )
        print(
            f"in process, best of 5 rounds, {args.turns} bodies; load average "
            f"{load[0]:.1f} before, {os.getloadavg()[0]:.1f} after"
        )
        return 0
    started = time.monotonic()
    load = os.getloadavg()
    if args.noise:
        table = noise_floor(args.noise, quick=args.quick)
    else:
        table = rows(quick=args.quick, soak=args.soak, config=args.config)
    header = ("case", "tokenflex", "reference", "ratio", "goal", "met")
    widths = [max(len(r[i]) for r in (header, *table)) for i in range(len(header))]
    for r in (header, tuple("-" * w for w in widths), *table):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    print(
        f"reference: minimal Starlette + httpx pass-through; load average "
        f"{load[0]:.1f} before, {os.getloadavg()[0]:.1f} after; "
        f"{time.monotonic() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
