"""How much of each request a provider's prompt cache can reuse, over long sessions.

Seeded sessions (a tool-heavy agent, and a plain chat) grow request by request; every
variant decides what each request sends. For each variant and window it prints:

- **cached**: share of input tokens that are a prefix of the previous request (messages
  equal, in order, from the first);
- **Anthropic** / **OpenAI**: input cost in units of 1,000 tokens at the input price,
  with Anthropic's cache prices (read 0.1x, write 1.25x) and OpenAI's (cached 0.5x); and
  **no cache**: the same input at the full price;
- **recomputed/turn**: prompt tokens not in the cached prefix, per request (what a
  llama.cpp or vLLM server computes again);
- **kept**: history messages sent per request (mean);
- **sum/100**: summarizer calls per 100 requests.

Variants: tokenflex drop-to-fit (``fit()`` each request, as before cache-stable plans),
tokenflex cache-stable (a ``Conversation``; cut to the low-water mark, held while it
fits), the same with the model given Anthropic's or OpenAI's cache prices (so the default
``low_water="auto"`` picks the mark by expected cost; without prices it is 0.6), the same
with the shrink ladder (old tool results cleared, old reasoning
dropped), the same with a summarizer (the offline extractive one), LangChain
``trim_messages``, litellm ``trim_messages`` (peers imported when installed, else "n/a"),
and a compactor that summarizes when the input passes 70% of the window down to 40%.

Run: ``make bench-cache`` (or ``PYTHONPATH=src .venv/bin/python scripts/bench_cache.py``;
``--requests 100 --windows 8000`` for a quick look). Offline; a few minutes.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import tokenflex
from tokenflex import Conversation
from tokenflex.counting import get_counter
from tokenflex.history import iter_groups
from tokenflex.summarize import ExtractiveSummarizer, summary_message

Message = dict[str, Any]
MARGIN = 100
_TEXT = (
    "the of and to in is that for it as with was on be by this are from at or an not "
    "pump valve pressure sensor reading config deploy error trace line file test build "
    "function return value index cache token window request response user model server "
    "def class import self None True False {} [] () => == != 0 1 2 3 42 100 2048 0x1f"
)
VOCAB = _TEXT.split()


# --------------------------------------------------------------------------- sessions


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(VOCAB, k=max(1, n)))


def session_requests(kind: str, seed: int, requests: int) -> list[list[Message]]:
    """The messages appended before each request, for ``requests`` requests."""
    rng = random.Random(seed)
    out: list[list[Message]] = []
    call = 0
    carry: list[Message] = []
    while len(out) < requests:
        user: Message = {"role": "user", "content": words(rng, rng.randint(15, 80))}
        step = [*carry, user]
        rounds = rng.choice([0, 1, 1, 2, 2, 3]) if kind == "agent" else 0
        for _ in range(rounds):
            out.append(step)
            call += 1
            cid = f"call_{call}"
            tool = rng.choice(["read_file", "grep", "run_tests", "http_get"])
            size = min(1500, int(rng.lognormvariate(5.6, 0.7)))
            step = [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {"name": tool, "arguments": '{"q": "x"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": cid, "content": words(rng, size)},
            ]
        out.append(step)
        answer: Message = {"role": "assistant", "content": words(rng, rng.randint(30, 150))}
        if kind == "agent" and rng.random() < 0.5:
            answer["reasoning_content"] = words(rng, rng.randint(80, 300))
        carry = [answer]
    return out[:requests]


ANTHROPIC_PRICES = {"input_price": 3.0, "cache_read_price": 0.3, "cache_write_price": 3.75}
"""Claude Sonnet's list prices (reads 0.1x, writes 1.25x): what ``low_water="auto"`` weighs."""
OPENAI_PRICES = {"input_price": 2.5, "cache_read_price": 1.25}
"""gpt-4o's (cached input 0.5x, no write premium)."""

SYSTEM: Message = {"role": "system", "content": "You are a careful coding agent. " * 8}


# --------------------------------------------------------------------------- variants


class CountingSummarizer:
    """The offline extractive summarizer, counting its calls."""

    def __init__(self) -> None:
        self._inner = ExtractiveSummarizer("o200k_base")
        self._calls = 0  # state, not a setting (summary keys read public fields)

    def summarize(self, messages: Any, *, previous_summary: str | None, max_tokens: int) -> str:
        self._calls += 1
        return self._inner.summarize(
            messages, previous_summary=previous_summary, max_tokens=max_tokens
        )


Variant = Callable[[list[Message]], list[Message]]
"""Gets the whole history (the same growing list every request), returns what is sent."""


def tokenflex_drop(model: tokenflex.Model, max_tokens: int) -> Variant:
    def send(history: list[Message]) -> list[Message]:
        return tokenflex.fit(history, model=model, max_tokens=max_tokens).messages

    return send


def tokenflex_stable(
    model: tokenflex.Model, max_tokens: int, summarizer: Any = None, **options: Any
) -> Variant:
    conv = Conversation(model=model, **options)

    def send(history: list[Message]) -> list[Message]:
        conv.extend(history[len(conv) :])
        return conv.fit(max_tokens=max_tokens, summarizer=summarizer).messages

    return send


def langchain_trim(room: int, cost: Callable[[Message], int]) -> Variant | None:
    try:
        from langchain_core.messages import convert_to_messages, trim_messages
    except ImportError:
        return None
    native: list[Any] = []
    back: dict[int, Message] = {}

    def count(messages: list[Any]) -> int:
        return sum(cost(back[id(m)]) for m in messages)

    def send(history: list[Message]) -> list[Message]:
        for m in history[len(native) :]:
            (lc,) = convert_to_messages([m])
            native.append(lc)
            back[id(lc)] = m
        kept = trim_messages(
            native,
            max_tokens=room,
            token_counter=count,
            strategy="last",
            include_system=True,
            start_on="human",
        )
        return [back[id(m)] for m in kept]

    return send


def litellm_trim(window: int, max_tokens: int) -> Variant | None:
    try:
        import litellm
    except ImportError:
        return None

    def send(history: list[Message]) -> list[Message]:
        return list(
            litellm.utils.trim_messages(
                [dict(m) for m in history], model="gpt-4o", max_tokens=window - max_tokens - MARGIN
            )
        )

    return send


@dataclass
class Compactor:
    """When the input passes ``trigger`` of the window, summarize the oldest history
    (rolling the previous summary) until it is under ``target``; between compactions the
    request is system + summary + every message since."""

    model: tokenflex.Model
    room: int
    trigger: float = 0.7
    target: float = 0.4
    summarizer: CountingSummarizer = field(default_factory=CountingSummarizer)
    start: int = 1
    summary: str | None = None

    def __call__(self, history: list[Message]) -> list[Message]:
        counter = get_counter(self.model)
        window = self.model.context_window

        def request(start: int, summary: str | None) -> list[Message]:
            head = [history[0]] + ([summary_message(summary)] if summary else [])
            return head + history[start:]

        sent = request(self.start, self.summary)
        if counter.count(sent) > self.trigger * window:
            # newest groups that stay under the target; the rest is summarized
            cur = max(i for i, m in enumerate(history) if m.get("role") == "user")
            budget = int(self.target * window) - counter.count(request(len(history), None))
            budget -= 600  # the summary's room
            new_start, used = cur, 0
            for a, _b, t in iter_groups(history, self.start, cur, counter.message):
                if used + t > budget:
                    break
                used += t
                new_start = a
            while new_start < cur and history[new_start].get("role") != "user":
                new_start += 1
            if new_start > self.start:
                self.summary = self.summarizer.summarize(
                    history[self.start : new_start], previous_summary=self.summary, max_tokens=512
                )
                self.start = new_start
            sent = request(self.start, self.summary)
        while counter.count(sent) > self.room and self.start < len(history) - 1:
            self.start += 1  # hard limit: drop the oldest (never expected here)
            sent = request(self.start, self.summary)
        return sent


# --------------------------------------------------------------------------- measuring


@dataclass
class Result:
    cached: int = 0
    total: int = 0
    anthropic: float = 0.0
    openai: float = 0.0
    kept: int = 0
    requests: int = 0
    seconds: float = 0.0
    summaries: int = 0
    error: str = ""


def run(
    variant: Variant | None,
    steps: list[list[Message]],
    model: tokenflex.Model,
    summarizer: Any = None,
) -> Result | None:
    if variant is None:
        return None
    counter = get_counter(model)
    base = counter.base(None)
    history: list[Message] = [SYSTEM]
    previous: list[Message] = []
    r = Result()
    for step in steps:
        history.extend(step)
        t0 = time.perf_counter()
        try:
            sent = variant(history)
        except Exception as exc:  # a peer that cannot take this history
            r.error = f"{type(exc).__name__}"
            return r
        r.seconds += time.perf_counter() - t0
        tokens = [counter.message(m) for m in sent]
        total = base + sum(tokens)
        shared = 0
        for a, b, t in zip(previous, sent, tokens, strict=False):
            if a is not b and a != b:
                break
            shared += t
        r.cached += shared
        r.total += total
        r.anthropic += (0.1 * shared + 1.25 * (total - shared)) / 1000
        r.openai += (0.5 * shared + (total - shared)) / 1000
        r.kept += sum(1 for m in sent if m.get("role") != "system")
        r.requests += 1
        previous = sent
    if summarizer is not None:
        r.summaries = summarizer._calls
    return r


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--windows", default="8000,32000,128000")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--kinds", default="agent,chat")
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    print(
        f"# bench_cache: {args.requests} requests per session, seed {args.seed}, "
        f"Python {sys.version.split()[0]}, tokenflex {tokenflex.__version__}\n"
    )
    for kind in args.kinds.split(","):
        steps = session_requests(kind, args.seed, args.requests)
        for window in (int(w) for w in args.windows.split(",")):
            max_tokens = min(4000, window // 8)
            model = tokenflex.Model(
                f"bench-{window}", window, tokenizer="o200k_base", chat_format="openai"
            )
            counter = get_counter(model)
            room = window - max_tokens - MARGIN
            stable_sum = CountingSummarizer()
            compactor = Compactor(model, room)
            variants: list[tuple[str, Variant | None, Any]] = [
                ("tokenflex drop-to-fit", tokenflex_drop(model, max_tokens), None),
                ("tokenflex cache-stable", tokenflex_stable(model, max_tokens), None),
                (
                    "tokenflex cache-stable, auto mark, Anthropic prices",
                    tokenflex_stable(model.replace(**ANTHROPIC_PRICES), max_tokens),
                    None,
                ),
                (
                    "tokenflex cache-stable, auto mark, OpenAI prices",
                    tokenflex_stable(model.replace(**OPENAI_PRICES), max_tokens),
                    None,
                ),
                (
                    "tokenflex cache-stable + ladder",
                    tokenflex_stable(
                        model, max_tokens, clear_tool_results=True, drop_reasoning=True
                    ),
                    None,
                ),
                (
                    "tokenflex cache-stable + summary",
                    tokenflex_stable(model, max_tokens, summarizer=stable_sum),
                    stable_sum,
                ),
                (
                    "LangChain trim_messages",
                    langchain_trim(room - counter.base(None), counter.message),
                    None,
                ),
                ("litellm trim_messages", litellm_trim(window, max_tokens), None),
                ("compactor 0.7/0.4", compactor, compactor.summarizer),
            ]
            print(f"## {kind} session, {window:,}-token window, max_tokens {max_tokens:,}\n")
            print(
                "| variant | cached | Anthropic | OpenAI | no cache | recomputed/turn | kept "
                "| sum/100 | ms/req |"
            )
            print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
            for name, variant, summ in variants:
                r = run(variant, steps, model, summ)
                if r is None or r.error:
                    why = "n/a" if r is None else f"failed ({r.error})"
                    print(f"| {name} | {why} | | | | | | | |")
                    continue
                n = r.requests
                print(
                    f"| {name} | {r.cached / r.total:.0%} | {r.anthropic:,.0f} | "
                    f"{r.openai:,.0f} | {r.total / 1000:,.0f} | {(r.total - r.cached) / n:,.0f} "
                    f"| {r.kept / n:.1f} | {100 * r.summaries / n:.1f} | "
                    f"{1000 * r.seconds / n:.2f} |"
                )
            print()


if __name__ == "__main__":
    main()
