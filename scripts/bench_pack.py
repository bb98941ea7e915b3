"""Benchmark: pack 10,000 ranked chunks per policy, with the estimator and with o200k_base.

Usage: .venv/bin/python scripts/bench_pack.py [--chunks 10000] [--repeat 3]

"cold" counts every chunk's text and envelope with a fresh cache (what the first call of a
request costs); "warm" repeats the call with the cache filled (only selection, rendering
and the whole-context check). Times are the best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import math
import random
import time

from tokenflex.documents import Chunk, pack_chunks
from tokenflex.tokenizers import CountCache, get_tokenizer

WORDS = [
    "the",
    "budget",
    "of",
    "every",
    "request",
    "is",
    "counted",
    "with",
    "the",
    "model",
    "tokenizer",
    "and",
    "retrieval",
    "context",
    "citation",
    "graph",
    "vector",
    "web",
    "search",
    "rerank",
    "passage",
    "chunk",
    "identifier",
    "source",
    "def",
    "pack(chunks):",
    "return",
    "sorted(chunks)",
    "{'page':",
    "12}",
    "2024-05-06",
    "https://example.org",
    "数据",
    "检索",
    "Übersicht",
]


def make_chunks(n: int, seed: int = 0) -> list[Chunk]:
    rng = random.Random(seed)
    chunks = []
    for i in range(n):
        words = rng.randint(20, 400)
        chunks.append(
            Chunk(
                " ".join(rng.choice(WORDS) for _ in range(words)),
                source=f"provider-{i % 3}",
                identifier=f"https://example.org/doc/{i}",
                extras={"rank": i, "page": rng.randint(1, 300)},
                score=rng.random(),
                id=f"chunk-{i}",
            )
        )
    return chunks


def lp_bound(result: object, chunks: list[Chunk], budget: int) -> float:
    """Upper bound on any selection's total score: the fractional (LP) knapsack over the
    same room, with the same per-chunk costs as the packer (from a pack with no limit)."""
    costs = dict(zip(result.admitted_indices, result.admitted_costs, strict=True))  # type: ignore[attr-defined]
    room = budget - 64
    bound, left = 0.0, room
    for i in sorted(costs, key=lambda i: -(chunks[i].score or 0.0) / costs[i]):
        take = min(1.0, left / costs[i])
        bound += take * (chunks[i].score or 0.0)
        left -= take * costs[i]
        if left <= 0:
            break
    return bound


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    chunks = make_chunks(args.chunks)
    print(f"{args.chunks:,} chunks, 20-400 words each, markdown format, safety buffer 64\n")
    head = (
        f"{'tokenizer':<11} {'budget':>8} {'policy':<8} {'admitted':>8} {'dropped':>8} "
        f"{'tokens':>8} {'score':>8} {'LP bound':>8} {'cold ms':>8} {'warm ms':>8}"
    )
    print(head)
    print("-" * len(head))
    notes: list[str] = []
    for name in ("estimate", "o200k_base"):
        backend = get_tokenizer(name).tokenizer
        everything = pack_chunks(chunks, budget=10**9, tokenizer=CountCache(backend))
        for budget in (8_000, 128_000):
            for policy in ("skip", "stop", "optimal"):
                cold = math.inf
                for _ in range(args.repeat):
                    tok = CountCache(backend)
                    t0 = time.perf_counter()
                    r = pack_chunks(chunks, budget=budget, tokenizer=tok, policy=policy)  # type: ignore[arg-type]
                    cold = min(cold, time.perf_counter() - t0)
                warm = math.inf
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    r = pack_chunks(chunks, budget=budget, tokenizer=tok, policy=policy)  # type: ignore[arg-type]
                    warm = min(warm, time.perf_counter() - t0)
                assert backend.count(r.rendered) == r.tokens <= budget - 64
                score = math.fsum(c.score or 0.0 for c in r.admitted)
                if r.knapsack:
                    notes.append(f"{name} {budget:,}: {r.knapsack}")
                print(
                    f"{name:<11} {budget:>8,} {policy:<8} {len(r.admitted):>8,} "
                    f"{r.dropped_count:>8,} {r.tokens:>8,} {score:>8.2f} "
                    f"{lp_bound(everything, chunks, budget):>8.2f} "
                    f"{cold * 1000:>8.0f} {warm * 1000:>8.0f}"
                )
    print("\noptimal:\n" + "\n".join(notes))


if __name__ == "__main__":
    main()
