"""Load test of the proxy: added latency and throughput against a fast local upstream.

Starts, on loopback only, a minimal fake OpenAI upstream and ``tokenflex serve`` in front
of it (two uvicorn processes), then drives the same chat request at a fixed rate with
concurrent httpx clients: first straight to the upstream (baseline), then through the
proxy. Prints latency percentiles, throughput and errors for both, and the difference.
Bounded: at most 120 s per phase and 100,000 requests.

With ``--upstream-delay`` the fake upstream answers after that many seconds, so the
proxy's capacity is known: ``max_inflight / delay`` requests per second (64 / 1 s = 64
req/s by default); at twice that rate the proxy must shed the rest with 503 +
``Retry-After`` and answer no other 5xx. ``--clients`` spreads the requests over that many
credentials (one client may hold only ``max_inflight_per_client`` slots), ``--proxy-only``
skips the direct phase. The proxy's RSS is sampled during the proxied phase (Linux).

With ``--abuse`` it measures memory instead: the proxy's RSS before and after 150
rejected 3.5 MB requests (unique texts over gpt-4's window) and 550 requests with long
unique model names (Linux: RSS from /proc), then the size and time of
``GET /tokenflex/calibration``. ``--name-bytes`` and ``--name-prefix`` shape the names
(``gpt-4o`` resolves through the gpt-4o family, so those requests are fitted and their
usage observed); ``--usage-factor`` makes the fake upstream report that many times the
input tokens, an undercount the calibration would want to learn.

    .venv/bin/python scripts/load_proxy.py                       # 200 req/s for 20 s
    .venv/bin/python scripts/load_proxy.py --rate 400 --duration 10 --messages 200
    .venv/bin/python scripts/load_proxy.py --rate 200 --concurrency 400   # shedding
    .venv/bin/python scripts/load_proxy.py --abuse
    # shedding at 2x capacity (64 slots, 1 s upstream: 64 req/s), issue 25
    .venv/bin/python scripts/load_proxy.py --proxy-only --upstream-delay 1 --rate 128 \
        --duration 120 --concurrency 512 --clients 8
    # calibration under 300 requests with 3 MB model names, issue 25
    .venv/bin/python scripts/load_proxy.py --abuse --rejected 0 --names 300 \
        --name-bytes 3000000 --name-prefix gpt-4o --usage-factor 1.3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

HOST = "127.0.0.1"  # loopback only, by design
MAX_SECONDS = 120.0
MAX_REQUESTS = 100_000

_REPLY = json.dumps(
    {
        "id": "chatcmpl-load",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
).encode()
_MODELS = json.dumps(
    {"object": "list", "data": [{"id": "gpt-4o", "object": "model", "owned_by": "load"}]}
).encode()


UPSTREAM_DELAY = 0.0
"""Seconds the fake upstream waits before each chat answer (``--upstream-delay``)."""
USAGE_FACTOR = 0.0
"""When set, the fake upstream reports this many times the request's input tokens
(``--usage-factor``); otherwise a canned usage of 1 token."""
STREAM_EVENTS = 100
"""A request with ``"stream": true`` is answered with this many SSE events (then
``[DONE]``), each sent on its own after a pause of ``STREAM_PAUSE`` s, as a model
streams tokens: each reaches the proxy as a read of its own (a shorter pause is not
kept: uvloop's timers count whole milliseconds, and the events would arrive together)."""
STREAM_PAUSE = 0.001


async def _stream(send: Any) -> None:
    """An SSE answer of ``STREAM_EVENTS`` chat completion chunks, one send each."""
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream")],
        }
    )
    for i in range(STREAM_EVENTS):
        event = b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,'
        event += b'"delta":{"content":"tok%d"}}]}\n\n' % i
        await send({"type": "http.response.body", "body": event, "more_body": True})
        await asyncio.sleep(STREAM_PAUSE)
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


def _usage_reply(body: bytes) -> bytes:
    """The canned answer, its ``usage.prompt_tokens`` ``USAGE_FACTOR`` x the request's
    messages as gpt-4o counts them."""
    import tokenflex

    messages = json.loads(body)["messages"]
    prompt = math.ceil(tokenflex.count_messages(messages, model="gpt-4o") * USAGE_FACTOR)
    reply = json.loads(_REPLY)
    reply["usage"] = {"prompt_tokens": prompt, "completion_tokens": 1}
    reply["usage"]["total_tokens"] = prompt + 1
    return json.dumps(reply).encode()


async def fake_upstream(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The fastest OpenAI-ish upstream we can write: a raw ASGI app with canned answers."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    more = True
    chunks: list[bytes] = []
    while more:  # drain the request body
        message = await receive()
        more = message.get("more_body", False)
        chunks.append(message.get("body", b""))
    path = scope["path"]
    tail = chunks[-1][-64:] if len(chunks[-1]) >= 64 else b"".join(chunks)[-64:]
    if path == "/v1/chat/completions" and b'"stream": true' in tail.replace(b":true", b": true"):
        await _stream(send)  # the bench's streamed requests end with "stream": true
        return
    if path == "/v1/chat/completions":
        if UPSTREAM_DELAY:
            await asyncio.sleep(UPSTREAM_DELAY)
        status, body = 200, _usage_reply(b"".join(chunks)) if USAGE_FACTOR else _REPLY
    elif path == "/v1/models":
        status, body = 200, _MODELS
    else:
        status, body = 404, b'{"error": {"message": "not found", "type": "invalid_request_error"}}'
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


# `tokenflex serve` with uvicorn's pure-Python HTTP parser and event loop, same logging
_PLAIN = """
import logging, sys, uvicorn
from tokenflex.server import ServerConfig, create_app
from tokenflex.server.limits import uvicorn_options
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
logging.getLogger("httpx").setLevel(logging.WARNING)
config = ServerConfig.load(upstream=sys.argv[1], port=int(sys.argv[2]))
uvicorn.run(create_app(config), host="127.0.0.1", port=int(sys.argv[2]), loop="asyncio",
            log_level="info", access_log=False, **uvicorn_options(config, http="h11"))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _wait_up(url: str, proc: subprocess.Popen[bytes], what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with code {proc.returncode}")
        try:
            httpx.get(url, timeout=1, trust_env=False)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise SystemExit(f"{what} did not start within {seconds:g} s")


def conversation(n: int) -> list[dict[str, str]]:
    """A system prompt and ``n`` alternating turns of ~60 words, ending with a user turn."""
    msgs = [{"role": "system", "content": "You are a helpful assistant. Answer briefly."}]
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"Turn {i}: " + " ".join(f"word{(i * 7 + j) % 97}" for j in range(60))
        msgs.append({"role": role, "content": text})
    if msgs[-1]["role"] != "user":
        msgs.append({"role": "user", "content": "And then?"})
    return msgs


@dataclass
class Phase:
    """Latencies and failures of one phase."""

    name: str
    latencies: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    elapsed: float = 0.0
    late: int = 0
    """Requests sent more than 10 ms after their scheduled time (the generator fell behind)."""
    rss: list[float] = field(default_factory=list)
    """The proxy's RSS in MB: sampled every 0.5 s from the phase's start to its end."""

    def pct(self, q: float) -> float:
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else float("nan")


async def drive(
    url: str,
    body: bytes,
    *,
    rate: float,
    duration: float,
    concurrency: int,
    name: str,
    clients: int = 1,
    pid: int | None = None,
) -> Phase:
    """Send ``rate`` requests per second for ``duration`` seconds (open loop), in turn
    with ``clients`` credentials; sample process ``pid``'s RSS meanwhile."""
    phase = Phase(name)
    total = min(int(rate * duration), MAX_REQUESTS)
    keys = [
        {"content-type": "application/json", "authorization": f"Bearer sk-load-{k}"}
        for k in range(max(1, clients))
    ]
    # httpx scans its whole pool on each request: many small clients, not one big one,
    # so a high --concurrency (to see the proxy shed load) does not slow the generator
    per = 32
    limits = httpx.Limits(max_connections=per, max_keepalive_connections=per)
    async with contextlib.AsyncExitStack() as stack:
        pool = [
            await stack.enter_async_context(
                httpx.AsyncClient(limits=limits, timeout=10, trust_env=False)
            )
            for _ in range(max(1, -(-concurrency // per)))
        ]
        # At most `concurrency` requests in flight: httpx's pool gets slow with a long
        # queue, and a generator that falls behind should say so, not distort the figures.
        slots = asyncio.Semaphore(concurrency)
        turn = iter(range(1 << 62))

        async def one() -> None:
            t0 = time.perf_counter()
            i = next(turn)
            client, headers = pool[i % len(pool)], keys[i % len(keys)]
            try:
                async with slots:
                    r = await client.post(url, content=body, headers=headers)
                if r.status_code != 200:
                    key = f"HTTP {r.status_code}"
                    if "retry-after" in r.headers:
                        key += " + Retry-After"
                    phase.errors[key] = phase.errors.get(key, 0) + 1
                    return
            except httpx.HTTPError as exc:
                key = type(exc).__name__
                phase.errors[key] = phase.errors.get(key, 0) + 1
                return
            phase.latencies.append(time.perf_counter() - t0)

        async def sample() -> None:
            while pid is not None:
                phase.rss.append(rss_mb(pid))
                await asyncio.sleep(0.5)

        sampler = asyncio.create_task(sample())
        tasks = []
        start = time.perf_counter()
        for i in range(total):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            elif delay < -0.01:
                phase.late += 1
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
        phase.elapsed = time.perf_counter() - start
        sampler.cancel()
        if pid is not None:
            phase.rss.append(rss_mb(pid))
    return phase


def rss_mb(pid: int) -> float:
    """Resident memory of a process, in MB (Linux /proc)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise SystemExit("no VmRSS in /proc: --abuse needs Linux")


async def abuse(
    url: str,
    pid: int,
    console: Console,
    *,
    rejected: int,
    names: int,
    name_bytes: int = 100_000,
    name_prefix: str = "model",
) -> int:
    """RSS before, at its peak and after the two memory-abuse runs of issues 11 and 25,
    then ``GET /tokenflex/calibration``'s size and time; 0 when all went as expected
    (rejected requests answered 400/413, long names answered, the calibration listing
    keeps no long name)."""
    headers = {"content-type": "application/json", "authorization": "Bearer sk-abuse"}
    figures: list[tuple[str, float, float, float, dict[int, int]]] = []
    async with httpx.AsyncClient(timeout=60, trust_env=False) as client:

        async def run(name: str, bodies: Any, concurrency: int = 4) -> None:
            statuses: dict[int, int] = {}
            slots = asyncio.Semaphore(concurrency)
            peak = [rss_mb(pid)]

            async def one(body: bytes) -> None:
                async with slots:
                    r = await client.post(url, content=body, headers=headers)
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                peak.append(rss_mb(pid))

            before = peak[0]
            await asyncio.gather(*(one(b) for b in bodies))
            await asyncio.sleep(1)
            figures.append((name, before, max(peak), rss_mb(pid), statuses))

        def rejected_bodies() -> Any:
            for i in range(rejected):  # 35 unique 100 kB messages: 3.5 MB over gpt-4's window
                msgs = [
                    {"role": "user", "content": f"{i}.{j} " + f"w{i}x{j} " * 14_000}
                    for j in range(35)
                ]
                yield json.dumps({"model": "gpt-4", "messages": msgs}).encode()

        # a question of 40 words: over the 16 text tokens an observation needs to teach
        question = "Which of these pumps " + " ".join(f"p{j}" for j in range(36)) + "?"

        def name_bodies() -> Any:
            for i in range(names):
                model = f"{name_prefix}-{i}-" + "n" * name_bytes
                yield json.dumps(
                    {"model": model, "messages": [{"role": "user", "content": question}]}
                ).encode()

        if rejected:
            await run(f"{rejected} rejected 3.5 MB requests", rejected_bodies())
        if names:
            size = f"{name_bytes / 1e6:g} MB" if name_bytes >= 10**6 else f"{name_bytes:,} B"
            await run(f"{names} requests with {size} unique model names", name_bodies())
        listing = url.split("/v1/")[0] + "/tokenflex/calibration"
        t0 = time.perf_counter()
        r = await client.get(listing, headers=headers)
        took = time.perf_counter() - t0
        rss_end = rss_mb(pid)
    table = Table(title="tokenflex proxy memory under abuse (RSS of the proxy process)")
    for col in ("run", "RSS before MB", "RSS peak MB", "RSS after MB", "statuses"):
        table.add_column(col, justify="left" if col in ("run", "statuses") else "right")
    for name, before, peak, after, statuses in figures:
        table.add_row(name, f"{before:.0f}", f"{peak:.0f}", f"{after:.0f}", str(statuses))
    longest = max((len(m) for m in r.json().get("models", {})), default=0)
    table.add_row(
        "GET /tokenflex/calibration",
        "",
        "",
        f"{rss_end:.0f}",
        f"HTTP {r.status_code}, {len(r.content):,} bytes in {took * 1000:.1f} ms, "
        f"longest model name listed: {longest:,}, total: {r.json().get('total')}",
    )
    console.print(table)
    out: dict[str, Any] = {
        n: {"rss_before_mb": b, "rss_peak_mb": p, "rss_after_mb": a, "statuses": st}
        for n, b, p, a, st in figures
    }
    out["calibration"] = {"status": r.status_code, "bytes": len(r.content), "ms": took * 1000}
    print(json.dumps(out))
    return 0 if r.status_code == 200 and longest <= 200 else 1


def report(console: Console, phases: list[Phase], rate: float) -> None:
    table = Table(title=f"tokenflex proxy load test: target {rate:g} req/s, loopback")
    for col in ("phase", "requests", "errors", "req/s", "p50 ms", "p90 ms", "p99 ms", "max ms"):
        table.add_column(col, justify="right" if col != "phase" else "left")
    for p in phases:
        n = len(p.latencies) + sum(p.errors.values())
        table.add_row(
            p.name,
            f"{n:,}",
            ", ".join(f"{k}: {v}" for k, v in p.errors.items()) or "0",
            f"{len(p.latencies) / p.elapsed:,.0f}" if p.elapsed else "-",
            f"{p.pct(0.50):.2f}",
            f"{p.pct(0.90):.2f}",
            f"{p.pct(0.99):.2f}",
            f"{max(p.latencies) * 1000:.1f}" if p.latencies else "-",
        )
    if len(phases) > 1:  # not with --proxy-only
        direct, proxied = phases[0], phases[-1]
        table.add_row(
            "added by the proxy",
            "",
            "",
            "",
            f"{proxied.pct(0.50) - direct.pct(0.50):+.2f}",
            f"{proxied.pct(0.90) - direct.pct(0.90):+.2f}",
            f"{proxied.pct(0.99) - direct.pct(0.99):+.2f}",
            "",
            style="bold",
        )
    console.print(table)
    for p in phases:
        if p.rss:
            console.print(
                f"{p.name}: proxy RSS start {p.rss[0]:.0f} MB, peak {max(p.rss):.0f} MB, "
                f"end {p.rss[-1]:.0f} MB ({len(p.rss)} samples)"
            )
    late = sum(p.late for p in phases)
    if late:
        console.print(f"[yellow]note:[/yellow] {late} requests were sent >10 ms late.")


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Terminate the processes, then kill the ones still running after 10 s."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=200.0, help="requests per second (200)")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds per phase (20)")
    ap.add_argument("--concurrency", type=int, default=64, help="max open connections (64)")
    ap.add_argument("--messages", type=int, default=20, help="messages per request (20)")
    ap.add_argument("--model", default="gpt-4o", help="model name in the requests (gpt-4o)")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--warmup", type=float, default=2.0, help="warm-up seconds per phase (2)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON too")
    ap.add_argument("--max-inflight", type=int, help="the proxy's max_inflight (default 64)")
    ap.add_argument("--max-queue", type=int, help="the proxy's max_queue (default 64)")
    ap.add_argument("--abuse", action="store_true", help="measure RSS under memory abuse")
    ap.add_argument("--keep-log", action="store_true", help="keep the proxy's log file")
    ap.add_argument("--rejected", type=int, default=150, help="--abuse: rejected requests")
    ap.add_argument("--names", type=int, default=550, help="--abuse: long-name requests")
    ap.add_argument(
        "--name-bytes", type=int, default=100_000, help="--abuse: length of each name (100,000)"
    )
    ap.add_argument(
        "--name-prefix", default="model", help="--abuse: what each name starts with (model)"
    )
    ap.add_argument(
        "--usage-factor",
        type=float,
        default=0.0,
        help="the fake upstream reports this many times the input tokens (off: 1 token)",
    )
    ap.add_argument(
        "--upstream-delay", type=float, default=0.0, help="seconds the fake upstream waits (0)"
    )
    ap.add_argument("--clients", type=int, default=1, help="credentials the load uses (1)")
    ap.add_argument("--proxy-only", action="store_true", help="skip the direct phase")
    ap.add_argument(
        "--plain",
        action="store_true",
        help="run the proxy on uvicorn's pure-Python h11 parser and asyncio loop, as without "
        "uvicorn[standard] (httptools, uvloop)",
    )
    ap.add_argument("--serve-upstream", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.serve_upstream:  # child mode: be the fake upstream
        import uvicorn

        global UPSTREAM_DELAY, USAGE_FACTOR
        UPSTREAM_DELAY, USAGE_FACTOR = args.upstream_delay, args.usage_factor

        uvicorn.run(
            fake_upstream,
            host=HOST,
            port=args.serve_upstream,
            log_level="warning",
            access_log=False,
            ws="none",
        )
        return 0

    # SIGTERM (timeout, kill) ends the run through `finally`: the children are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    duration = min(args.duration, MAX_SECONDS)
    console = Console()
    up_port, proxy_port = _free_port(), _free_port()
    up_url, proxy_url = f"http://{HOST}:{up_port}", f"http://{HOST}:{proxy_port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOKENFLEX_")}
    if args.max_inflight:
        env["TOKENFLEX_SERVE_MAX_INFLIGHT"] = str(args.max_inflight)
    if args.max_queue is not None:
        env["TOKENFLEX_SERVE_MAX_QUEUE"] = str(args.max_queue)
    log_fd, log_path = tempfile.mkstemp(prefix="tokenflex-proxy-", suffix=".log")
    log = os.fdopen(log_fd, "wb")
    procs = [
        subprocess.Popen(
            [
                *(sys.executable, __file__, "--serve-upstream", str(up_port)),
                *("--upstream-delay", str(args.upstream_delay)),
                *("--usage-factor", str(args.usage_factor)),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            [sys.executable, "-c", _PLAIN, up_url, str(proxy_port)]
            if args.plain
            else [
                *(sys.executable, "-m", "tokenflex", "serve"),
                *("--upstream", up_url, "--port", str(proxy_port), "--host", HOST),
            ],
            env=env,
            stdout=log,
            stderr=log,
        ),
    ]
    try:
        _wait_up(f"{up_url}/v1/models", procs[0], "fake upstream")
        _wait_up(f"{proxy_url}/tokenflex/health", procs[1], "proxy")
        if args.abuse:
            return asyncio.run(
                abuse(
                    f"{proxy_url}/v1/chat/completions",
                    procs[1].pid,
                    console,
                    rejected=args.rejected,
                    names=args.names,
                    name_bytes=args.name_bytes,
                    name_prefix=args.name_prefix,
                )
            )
        body = json.dumps(
            {
                "model": args.model,
                "messages": conversation(args.messages),
                "max_tokens": args.max_tokens,
            }
        ).encode()
        r = httpx.post(
            f"{proxy_url}/v1/chat/completions",
            content=body,
            headers={"content-type": "application/json"},
            trust_env=False,
            timeout=60,  # the first request loads the tokenizer
        )
        r.raise_for_status()
        console.print(
            f"request: {len(body):,} bytes, {args.messages} messages, model {args.model}; "
            f"proxy says input={r.headers['x-tokenflex-input-tokens']} "
            f"max_tokens={r.headers['x-tokenflex-max-tokens']} "
            f"dropped={r.headers['x-tokenflex-dropped']}"
        )
        phases = []
        runs = [("direct", up_url, None), ("via proxy", proxy_url, procs[1].pid)]
        for name, url, pid in runs[1:] if args.proxy_only else runs:
            target = f"{url}/v1/chat/completions"
            kw = {"rate": args.rate, "concurrency": args.concurrency, "clients": args.clients}
            asyncio.run(drive(target, body, duration=args.warmup, name="warmup", **kw))
            phases.append(
                asyncio.run(drive(target, body, duration=duration, name=name, pid=pid, **kw))
            )
        report(console, phases, args.rate)
        if args.json:
            print(
                json.dumps(
                    {
                        p.name: {
                            "requests": len(p.latencies),
                            "errors": p.errors,
                            "rps": len(p.latencies) / p.elapsed,
                            "p50_ms": p.pct(0.5),
                            "p99_ms": p.pct(0.99),
                            "mean_ms": statistics.fmean(p.latencies) * 1000,
                            "rss_mb": [p.rss[0], max(p.rss), p.rss[-1]] if p.rss else None,
                        }
                        for p in phases
                    }
                )
            )
        # with a slow upstream the test is of shedding: a 503 with Retry-After is the answer
        shed = "HTTP 503 + Retry-After" if args.upstream_delay else None
        errors = sum(v for p in phases for k, v in p.errors.items() if k != shed)
        return 1 if errors else 0
    finally:
        stop(procs)
        log.close()
        if args.keep_log:
            console.print(f"proxy log: {log_path}")
        else:
            os.unlink(log_path)


if __name__ == "__main__":
    sys.exit(main())
