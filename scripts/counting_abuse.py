"""Latency of a normal client while others make the proxy count huge texts (issue 25, 12).

Starts, on loopback only, the fake upstream of ``scripts/load_proxy.py`` and ``tokenflex
serve`` in front of it, then measures a normal client's chat latency (a one-line
message, one request at a time) alone, and again while ``--attackers`` clients each send
3.9 MB Thai texts for an estimator-counted model in a loop (each refused with a 400 or,
while another large body is being counted, a 503). Prints both p50s, the attackers'
answers and the proxy's RSS. Bounded: ``--duration`` seconds under attack (at most 120).

    .venv/bin/python scripts/counting_abuse.py                  # 6 attackers, 30 s
    PYTHONPATH=/path/to/other/src .venv/bin/python scripts/counting_abuse.py   # compare
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

HOST = "127.0.0.1"  # loopback only, by design
THAI = ["สวัสดี", "ครับ", "ประเทศไทย", "ภาษา", "การ", "เรียน", "หนังสือ", "โรงเรียน", "นักเรียน", "อาหาร"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _wait_up(url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=2, trust_env=False)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit(f"{url} did not come up")


def _latencies(url: str, seconds: float) -> list[float]:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi there"}]}
    out: list[float] = []
    with httpx.Client(timeout=60, trust_env=False) as client:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t = time.monotonic()
            r = client.post(url, json=body)
            out.append((time.monotonic() - t) * 1000)
            if r.status_code != 200:
                raise SystemExit(f"the normal client got {r.status_code}: {r.text[:200]}")
            time.sleep(0.05)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attackers", type=int, default=6)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--model", default="claude-sonnet-4-5", help="the attackers' model")
    args = ap.parse_args()
    duration = min(args.duration, 120.0)
    rng = random.Random(1)
    bodies = [
        json.dumps(
            {
                "model": args.model,
                "messages": [{"role": "user", "content": "".join(rng.choices(THAI, k=220_000))}],
            },
            ensure_ascii=False,
        ).encode()
        for _ in range(args.attackers)
    ]
    up_port, proxy_port = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOKENFLEX_")}
    load = str(Path(__file__).with_name("load_proxy.py"))
    procs = [
        subprocess.Popen(
            [sys.executable, load, "--serve-upstream", str(up_port)],
            env=env,
            stdout=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            [
                *(sys.executable, "-m", "tokenflex", "serve"),
                *("--upstream", f"http://{HOST}:{up_port}", "--port", str(proxy_port)),
                *("--host", HOST),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
    ]
    url = f"http://{HOST}:{proxy_port}/v1/chat/completions"
    try:
        _wait_up(f"http://{HOST}:{up_port}/v1/models")
        _wait_up(f"http://{HOST}:{proxy_port}/tokenflex/health")
        _latencies(url, 3)  # warm: the tokenizers load
        warm = {"model": args.model, "messages": [{"role": "user", "content": "warm"}]}
        httpx.post(url, json=warm, timeout=120, trust_env=False)
        alone = _latencies(url, 8)
        stop = threading.Event()
        statuses: list[int] = []

        def attack(body: bytes) -> None:
            with httpx.Client(timeout=300, trust_env=False) as client:
                while not stop.is_set():
                    headers = {"content-type": "application/json"}
                    statuses.append(client.post(url, content=body, headers=headers).status_code)

        threads = [threading.Thread(target=attack, args=(b,)) for b in bodies]
        for t in threads:
            t.start()
        time.sleep(2)
        attacked = _latencies(url, duration)
        stop.set()
        for t in threads:
            t.join()
        status = Path(f"/proc/{procs[1].pid}/status").read_text()
        rss = int(status.split("VmRSS:")[1].split()[0]) // 1024
        answers = {s: statuses.count(s) for s in sorted(set(statuses))}
        print(
            json.dumps(
                {
                    "attack_body_bytes": len(bodies[0]),
                    "p50_alone_ms": round(statistics.median(alone)),
                    "p50_attacked_ms": round(statistics.median(attacked)),
                    "p90_attacked_ms": round(statistics.quantiles(attacked, n=10)[-1]),
                    "normal_requests": len(attacked),
                    "attack_answers": answers,
                    "proxy_rss_mb": rss,
                }
            )
        )
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
