"""RSS of the proxy's plan store when full: serialized plans (now) against live plan objects.

    PYTHONPATH=src .venv/bin/python scripts/plan_store_memory.py [CAP_MIB] [short]

Each round parses a fresh copy of one ~100 kB chat body (as the proxy does: new objects
each time; the same text, so the library's count cache does not grow and blur the
figure), fits it and stores the plan in a store capped at CAP_MIB (default 64) until the
cap has been filled three times; then the same with live plan objects (the old store).
"""

from __future__ import annotations

import gc
import json
import resource
import sys
from typing import Any

from tokenflex import fit
from tokenflex.server.plans import PlanStore

SHORT = "short" in sys.argv[1:]


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def body(i: int) -> bytes:
    """200 long messages, or (SHORT) 3,000 short ones: dict overhead dominates."""
    n, words = (3000, 1) if SHORT else (200, 80)
    msgs = [{"role": "system", "content": "Be terse."}] + [
        {"role": "user" if j % 2 == 0 else "assistant", "content": f"{j} " + "lorem " * words}
        for j in range(n)
    ]
    return json.dumps({"model": "gpt-4o", "messages": msgs}).encode()


def main() -> None:
    sizes = [a for a in sys.argv[1:] if a.isdigit()]
    cap = int(sizes[0] if sizes else 64) * 1024 * 1024
    fit(json.loads(body(0))["messages"], model="gpt-4o", max_tokens=100)  # warm up
    gc.collect()
    start = rss_mib()
    store = PlanStore(max_plans=100_000, max_bytes=cap)
    live: dict[str, Any] = {}
    used = 0
    i = 0
    while used < 3 * cap:
        raw = body(i)
        plan = fit(json.loads(raw)["messages"], model="gpt-4o", max_tokens=100, policy="flex")
        store.put(f"p{i}", plan)
        used += len(raw)
        i += 1
    gc.collect()
    print(
        f"serialized store: {len(store)} plans, {store.size / 2**20:.1f} MiB of JSON, "
        f"RSS {start:.0f} -> {rss_mib():.0f} MiB (cap {cap / 2**20:.0f} MiB)"
    )
    # the old store: live plan objects, counted by request bytes
    del store
    gc.collect()
    start = rss_mib()
    used = 0
    while used < cap:
        raw = body(i)
        live[f"p{i}"] = fit(
            json.loads(raw)["messages"], model="gpt-4o", max_tokens=100, policy="flex"
        )
        used += len(raw)
        i += 1
    gc.collect()
    print(
        f"live objects:     {len(live)} plans, {used / 2**20:.1f} MiB of requests, "
        f"RSS {start:.0f} -> {rss_mib():.0f} MiB"
    )


if __name__ == "__main__":
    main()
