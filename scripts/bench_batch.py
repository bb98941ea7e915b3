"""Lines per second of ``tokenflex batch`` on 1 and 2 local workers and on a Dask
LocalCluster (2 worker processes).

The input is an OpenAI Batch API file of chat requests for gpt-4 (8k window):
conversations of 4-12 messages of 10-60 words, every twentieth one long enough (~10k
tokens) that it must be cut; the rest go out unchanged. Offline, no network.

    python scripts/bench_batch.py --lines 100000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

from tokenflex.cli import main as tokenflex

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "wizards",
    "quietly",
    "judge",
    "boxing",
]


def write_input(path: Path, n: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            long = i % 20 == 0
            count = 20 if long else rng.randint(4, 12)
            size = 400 if long else rng.randint(10, 60)
            messages = [{"role": "system", "content": "You are a helpful assistant."}]
            for j in range(count):
                text = " ".join(rng.choices(WORDS, k=size))
                messages.append({"role": "user" if j % 2 == 0 else "assistant", "content": text})
            messages.append({"role": "user", "content": "Sum it up."})
            body = {"model": "gpt-4", "messages": messages, "max_tokens": 1000}
            line = {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions"}
            f.write(json.dumps({**line, "body": body}) + "\n")


def measure(source: Path, out: Path, *how: str) -> float:
    """Seconds ``tokenflex batch`` takes, its summary table printed."""
    started = time.perf_counter()
    code = tokenflex(["batch", str(source), "-o", str(out), "--no-progress", *how])
    assert code == 0, code
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--skip-dask", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "in.jsonl"
        write_input(source, args.lines)
        mb = source.stat().st_size / 1e6
        print(f"{args.lines:,} lines, {mb:,.0f} MB, {os.cpu_count()} cores")
        out = Path(tmp) / "out.jsonl"
        rows = [("1 worker", measure(source, out, "--workers", "1"))]
        rows.append(("2 workers", measure(source, out, "--workers", "2")))
        if not args.skip_dask:
            from distributed import LocalCluster

            with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as c:
                name = "Dask LocalCluster (2 processes)"
                rows.append((name, measure(source, out, "--dask", c.scheduler_address)))
        print("| run | seconds | lines/s |\n|---|---:|---:|")
        for name, seconds in rows:
            print(f"| {name} | {seconds:,.1f} | {args.lines / seconds:,.0f} |")


if __name__ == "__main__":
    main()
