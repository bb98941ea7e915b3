"""Load test of the proxy: added latency and throughput against a fast local upstream.

Starts, on loopback only, a minimal fake OpenAI upstream and ``tokenflex serve`` in front
of it (two uvicorn processes), then drives the same chat request at a fixed rate with
concurrent httpx clients: first straight to the upstream (baseline), then through the
proxy. Prints latency percentiles, throughput and errors for both, and the difference.
Bounded: at most 120 s per phase and 100,000 requests.

With ``--abuse`` it measures memory instead: the proxy's RSS before and after 150
rejected 3.5 MB requests (unique texts over gpt-4's window) and 550 requests with long
unique model names (Linux: RSS from /proc).

    .venv/bin/python scripts/load_proxy.py                       # 200 req/s for 20 s
    .venv/bin/python scripts/load_proxy.py --rate 400 --duration 10 --messages 200
    .venv/bin/python scripts/load_proxy.py --rate 200 --concurrency 400   # shedding
    .venv/bin/python scripts/load_proxy.py --abuse
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
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
    while more:  # drain the request body
        message = await receive()
        more = message.get("more_body", False)
    path = scope["path"]
    if path == "/v1/chat/completions":
        status, body = 200, _REPLY
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


def _wait_up(url: str, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with code {proc.returncode}")
        try:
            httpx.get(url, timeout=1, trust_env=False)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise SystemExit(f"{what} did not start within 30 s")


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

    def pct(self, q: float) -> float:
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else float("nan")


async def drive(
    url: str, body: bytes, *, rate: float, duration: float, concurrency: int, name: str
) -> Phase:
    """Send ``rate`` requests per second for ``duration`` seconds (open loop)."""
    phase = Phase(name)
    total = min(int(rate * duration), MAX_REQUESTS)
    headers = {"content-type": "application/json", "authorization": "Bearer sk-load"}
    # httpx scans its whole pool on each request: many small clients, not one big one,
    # so a high --concurrency (to see the proxy shed load) does not slow the generator
    per = 32
    limits = httpx.Limits(max_connections=per, max_keepalive_connections=per)
    async with contextlib.AsyncExitStack() as stack:
        clients = [
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
            client = clients[next(turn) % len(clients)]
            try:
                async with slots:
                    r = await client.post(url, content=body, headers=headers)
                if r.status_code != 200:
                    key = f"HTTP {r.status_code}"
                    phase.errors[key] = phase.errors.get(key, 0) + 1
                    return
            except httpx.HTTPError as exc:
                key = type(exc).__name__
                phase.errors[key] = phase.errors.get(key, 0) + 1
                return
            phase.latencies.append(time.perf_counter() - t0)

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
    return phase


def rss_mb(pid: int) -> float:
    """Resident memory of a process, in MB (Linux /proc)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise SystemExit("no VmRSS in /proc: --abuse needs Linux")


async def abuse(url: str, pid: int, console: Console, *, rejected: int, names: int) -> int:
    """RSS before and after the two memory-abuse runs of issue 11; 0 when all went as
    expected (rejected requests answered 400/413, long names answered)."""
    headers = {"content-type": "application/json", "authorization": "Bearer sk-abuse"}
    figures: list[tuple[str, float, float, dict[int, int]]] = []
    async with httpx.AsyncClient(timeout=60, trust_env=False) as client:

        async def run(name: str, bodies: Any, concurrency: int = 4) -> None:
            statuses: dict[int, int] = {}
            slots = asyncio.Semaphore(concurrency)

            async def one(body: bytes) -> None:
                async with slots:
                    r = await client.post(url, content=body, headers=headers)
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1

            before = rss_mb(pid)
            await asyncio.gather(*(one(b) for b in bodies))
            await asyncio.sleep(1)
            figures.append((name, before, rss_mb(pid), statuses))

        def rejected_bodies() -> Any:
            for i in range(rejected):  # 35 unique 100 kB messages: 3.5 MB over gpt-4's window
                msgs = [
                    {"role": "user", "content": f"{i}.{j} " + f"w{i}x{j} " * 14_000}
                    for j in range(35)
                ]
                yield json.dumps({"model": "gpt-4", "messages": msgs}).encode()

        def name_bodies() -> Any:
            for i in range(names):
                model = f"model-{i}-" + "n" * 100_000
                yield json.dumps(
                    {"model": model, "messages": [{"role": "user", "content": "hi"}]}
                ).encode()

        await run(f"{rejected} rejected 3.5 MB requests", rejected_bodies())
        await run(f"{names} requests with 100 kB unique model names", name_bodies())
    table = Table(title="tokenflex proxy memory under abuse (RSS of the proxy process)")
    for col in ("run", "RSS before MB", "RSS after MB", "statuses"):
        table.add_column(col, justify="left" if col in ("run", "statuses") else "right")
    for name, before, after, statuses in figures:
        table.add_row(name, f"{before:.0f}", f"{after:.0f}", str(statuses))
    console.print(table)
    print(json.dumps({n: {"rss_before_mb": b, "rss_after_mb": a} for n, b, a, _ in figures}))
    return 0


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
        "--plain",
        action="store_true",
        help="run the proxy on uvicorn's pure-Python h11 parser and asyncio loop, as without "
        "uvicorn[standard] (httptools, uvloop)",
    )
    ap.add_argument("--serve-upstream", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.serve_upstream:  # child mode: be the fake upstream
        import uvicorn

        uvicorn.run(
            fake_upstream,
            host=HOST,
            port=args.serve_upstream,
            log_level="warning",
            access_log=False,
            ws="none",
        )
        return 0

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
            [sys.executable, __file__, "--serve-upstream", str(up_port)],
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
        )
        r.raise_for_status()
        console.print(
            f"request: {len(body):,} bytes, {args.messages} messages, model {args.model}; "
            f"proxy says input={r.headers['x-tokenflex-input-tokens']} "
            f"max_tokens={r.headers['x-tokenflex-max-tokens']} "
            f"dropped={r.headers['x-tokenflex-dropped']}"
        )
        phases = []
        for name, url in (("direct", up_url), ("via proxy", proxy_url)):
            target = f"{url}/v1/chat/completions"
            kw = {"rate": args.rate, "concurrency": args.concurrency}
            asyncio.run(drive(target, body, duration=args.warmup, name="warmup", **kw))
            phases.append(asyncio.run(drive(target, body, duration=duration, name=name, **kw)))
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
                        }
                        for p in phases
                    }
                )
            )
        errors = sum(sum(p.errors.values()) for p in phases)
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
