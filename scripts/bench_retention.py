"""Retention: of the facts a long session planted, how many reach the model, and at what cost.

Seeded sessions plant facts of several kinds (a number with a unit, an amount of money, a
date, a path, a ticket id, an identifier, a name, an e-mail address) in turns that the
budget forces out later, then keep going. At the session's last request each planted
fact is one of:

- **in the request**: its exact text is in the messages sent (verbatim, or kept by a
  summary);
- **recoverable**: it is not sent, but the plan left it where the model can fetch it
  (``recall=True``: a dropped message kept in the state store under a recall id);
- **lost**.

Sessions: *chat* (user and assistant turns; facts said by the user or the assistant) and
*agent* (one user task, then tool rounds; facts in tool results and assistant notes), each
sized to about three windows, at 8K, 32K and 128K windows (o200k counts, 1,000 output
tokens, 100 margin). Variants, all given the whole history every turn:

- tokenflex ``fit`` (drop): the default, oldest history dropped;
- tokenflex ``fit`` + ``ExtractiveSummarizer``, with the fact check (``summary_facts=True``,
  the default) and without it;
- tokenflex ``fit(recall=True)`` (when this tokenflex has recall);
- LangChain ``trim_messages(strategy="last", include_system=True, start_on="human")``
  with the same counter;
- a 0.7/0.4 compactor (when the input passes 70% of the window, drop the oldest messages
  until it is under 40%; hold that start until the next trigger);
- drop-to-fit: the newest messages that fit, oldest dropped first.

"input/turn" is the mean input tokens sent per turn over the session (every turn is
fitted; what each variant pays); "cached prefix" the share of those tokens that open the
request exactly as the turn before opened it (what a provider's prompt cache can reuse).
Run: ``make bench-retention`` (``--quick``: 8K and 32K only, one seed).

``--real``: the same question asked of a real model. SmolLM2-135M (the test model) on the
native llama.cpp ``llama-server`` (2,048-token window), through the tokenflex proxy with
recall on and off: a chat that states one fact of each kind early, then enough filler to
push it out, then asks for the fact. An answer is right when it contains the fact's
text. The proxy answers ``tokenflex_recall`` calls itself, so with recall the model can
get the fact back by calling the tool; whether a 135M model calls a tool at all, and
reads the answer, is what this part shows (not what a frontier model would do).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tokenflex
from tokenflex.counting import get_counter
from tokenflex.state import MemoryStore
from tokenflex.summarize import ExtractiveSummarizer

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "scripts")]

from bench_cache import words  # noqa: E402

Message = dict[str, Any]
MAX_TOKENS = 1000
MARGIN = 100
FIRST = ["Amara", "Jonas", "Priya", "Mateo", "Yuki", "Lena", "Kwame", "Ines"]
LAST = ["Okafor", "Lindqvist", "Raman", "Ferreira", "Tanaka", "Novak", "Mensah", "Duarte"]
MODULES = ["billing", "checkout", "search", "auth", "payments", "ledger"]
UNITS = ["ms", "GB", "requests per second", "days", "%"]


def plant(rng: random.Random, k: int) -> tuple[str, str]:
    """(the fact, a sentence stating it), of the ``k % 8``-th kind."""
    n = rng.randint(1000, 99_999)
    kind = k % 8
    if kind == 0:
        fact = f"{n:,} {rng.choice(UNITS)}"
        return fact, f"The measured limit is {fact} and we keep it."
    if kind == 1:
        fact = f"${n:,}"
        return fact, f"The approved budget is {fact} for this quarter."
    if kind == 2:
        fact = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        return fact, f"The release deadline is {fact}, not later."
    if kind == 3:
        fact = f"services/{rng.choice(MODULES)}/handler_{n}.py"
        return fact, f"The bug lives in {fact} near the top."
    if kind == 4:
        fact = f"OPS-{n}"
        return fact, f"Track this under ticket {fact} please."
    if kind == 5:
        fact = f"retry_budget_{n}"
        return fact, f"The setting to change is {fact} in the config."
    if kind == 6:
        fact = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        return fact, f"The reviewer will be {fact} from the platform team."
    fact = f"{rng.choice(MODULES)}.{n}@example.org"
    return fact, f"Send the report to {fact} when done."


@dataclass
class Session:
    kind: str
    turns: list[list[Message]]
    """The messages appended before each request."""
    facts: list[str] = field(default_factory=list)


def chat_session(rng: random.Random, window: int, n_facts: int = 16) -> Session:
    """About three windows of user/assistant turns (60 turns); facts in the first half."""
    size = max(40, window // 60)  # words per message
    facts: list[str] = []
    turns: list[list[Message]] = []
    previous: list[Message] = [{"role": "system", "content": "You are a helpful assistant."}]
    for t in range(60):
        said_user = said_asst = ""
        if t < 30 and len(facts) < n_facts and t % 2 == 0:
            fact, sentence = plant(rng, len(facts))
            facts.append(fact)
            if rng.random() < 0.6:
                said_user = " " + sentence
            else:
                said_asst = " " + sentence
        user = {"role": "user", "content": f"{words(rng, size)}.{said_user} {words(rng, size)}?"}
        turns.append([*previous, user])
        previous = [
            {"role": "assistant", "content": f"{words(rng, size)}.{said_asst} {words(rng, 20)}."}
        ]
    return Session("chat", turns, facts)


def agent_session(rng: random.Random, window: int, n_facts: int = 16) -> Session:
    """One task, then tool rounds of about three windows in all; facts in the first half
    of the rounds, in tool results (most) and assistant notes."""
    size = max(60, window // 45)
    rounds = 60
    facts: list[str] = []
    task = {"role": "user", "content": "Fix the failing checkout flow. " + words(rng, 60)}
    turns: list[list[Message]] = []
    for k in range(rounds):
        note = result = ""
        if k < rounds // 2 and len(facts) < n_facts and k % 2 == 0:
            fact, sentence = plant(rng, len(facts))
            facts.append(fact)
            if rng.random() < 0.75:
                result = " " + sentence
            else:
                note = " " + sentence
        cid = f"call_{k}"
        step: list[Message] = [
            {
                "role": "assistant",
                "content": f"Step {k}: {words(rng, 12)}.{note}",
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": f'{{"q": "q{k}"}}'},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": cid,
                "content": f"{words(rng, size)}.{result} {words(rng, size)}",
            },
        ]
        if k == 0:
            step = [{"role": "system", "content": "You are a coding agent."}, task, *step]
        turns.append(step)
    return Session("agent", turns, facts)


ROLES = {"human": "user", "ai": "assistant", "system": "system"}
Variant = Callable[[list[Message]], tuple[list[Message], set[str]]]
"""History → (messages sent, texts recoverable by recall)."""

LAST_SUMMARY: dict[str, tuple[str, list[Message]]] = {}
"""Variant name → (its last plan's summary text, the span it covers)."""


def text_of(messages: list[Message]) -> str:
    out = []
    for m in messages:
        c = m.get("content")
        out.append(c if isinstance(c, str) else str(c))
    return "\n".join(out)


def tokenflex_variant(model: tokenflex.Model, name: str, **options: Any) -> Variant:
    store = MemoryStore()
    recall = options.get("recall", False)

    def send(history: list[Message]) -> tuple[list[Message], set[str]]:
        plan = tokenflex.fit(
            history,
            model=model,
            max_tokens=MAX_TOKENS,
            safety_margin=MARGIN,
            state=store,
            **options,
        )
        assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= model.context_window
        if plan.summary is not None:
            a, b = plan.summary.covers
            LAST_SUMMARY[name] = (plan.summary.text, history[a:b])
        recoverable: set[str] = set()
        if recall:
            for rid in recall_ids(plan):
                got = tokenflex.recall(rid, state=store) or []
                recoverable.add(text_of(got))
        return plan.messages, recoverable

    return send


def recall_ids(plan: tokenflex.Plan) -> list[str]:
    """The recall ids a plan names (in its cut note, summary and cleared placeholders)."""
    return list(plan.extras.get("recall", {}).get("ids", []))


def langchain_variant(model: tokenflex.Model, room: int) -> Variant:
    from langchain_core.messages import convert_to_messages, trim_messages

    counter = get_counter(model)

    def count(msgs: list[Any]) -> int:
        return int(counter.count([{"role": ROLES[m.type], "content": m.content} for m in msgs]))

    def send(history: list[Message]) -> tuple[list[Message], set[str]]:
        lc = convert_to_messages(history)
        kept = trim_messages(
            lc,
            max_tokens=room,
            token_counter=count,
            strategy="last",
            include_system=True,
            start_on="human",
            allow_partial=False,
        )
        return [{"role": ROLES[m.type], "content": m.content} for m in kept], set()

    return send


def drop_variant(model: tokenflex.Model, room: int) -> Variant:
    counter = get_counter(model)

    def send(history: list[Message]) -> tuple[list[Message], set[str]]:
        budget = room - counter.base(None) - counter.message(history[0])
        start = len(history)
        while start > 1 and counter.message(history[start - 1]) <= budget:
            budget -= counter.message(history[start - 1])
            start -= 1
        while start < len(history) and history[start].get("role") == "tool":
            start += 1  # a tool result never opens a request
        return [history[0], *history[start:]], set()

    return send


@dataclass
class CompactorVariant:
    model: tokenflex.Model
    room: int
    trigger: float = 0.7
    target: float = 0.4
    start: int = 1

    def __call__(self, history: list[Message]) -> tuple[list[Message], set[str]]:
        counter = get_counter(self.model)

        def size(start: int) -> int:
            return int(counter.count([history[0], *history[start:]]))

        window = self.model.context_window
        if size(self.start) > min(self.trigger * window, self.room):
            while self.start < len(history) - 1 and (
                size(self.start) > self.target * window or history[self.start]["role"] == "tool"
            ):
                self.start += 1
        return [history[0], *history[self.start :]], set()


def has_recall() -> bool:
    return hasattr(tokenflex, "recall")


def variants(model: tokenflex.Model, kind: str) -> list[tuple[str, Variant]]:
    room = model.context_window - MAX_TOKENS - MARGIN
    out: list[tuple[str, Variant]] = [
        ("tokenflex fit (drop)", tokenflex_variant(model, "tokenflex fit (drop)")),
        (
            "tokenflex fit(cache_stable=True)",
            tokenflex_variant(model, "tokenflex fit(cache_stable=True)", cache_stable=True),
        ),
        (
            "tokenflex + summary, checked",
            tokenflex_variant(
                model, "tokenflex + summary, checked", summarizer=ExtractiveSummarizer()
            ),
        ),
        (
            "tokenflex + summary, unchecked",
            tokenflex_variant(
                model,
                "tokenflex + summary, unchecked",
                summarizer=ExtractiveSummarizer(),
                summary_facts=False,
            ),
        ),
    ]
    if has_recall():
        for name, more in (
            ("tokenflex fit(recall=True)", {}),
            ("tokenflex fit(recall=True, cache_stable=True)", {"cache_stable": True}),
        ):
            out.append((name, tokenflex_variant(model, name, recall=True, **more)))
    if kind == "chat":
        out.append(("LangChain trim_messages", langchain_variant(model, room)))
    out += [
        ("compactor 0.7/0.4", CompactorVariant(model, room)),
        ("drop-to-fit", drop_variant(model, room)),
    ]
    return out


@dataclass
class Row:
    in_request: list[float] = field(default_factory=list)
    recoverable: list[float] = field(default_factory=list)
    lost: list[float] = field(default_factory=list)
    input_per_turn: list[float] = field(default_factory=list)
    prefix_share: list[float] = field(default_factory=list)
    span_kept: list[int] = field(default_factory=list)
    span_planted: list[int] = field(default_factory=list)
    seconds: float = 0.0


def run_cell(window: int, kind: str, seeds: list[int], table: dict[str, Row]) -> None:
    model = tokenflex.Model(f"bench-{window}", window, tokenizer="o200k_base")
    counter = get_counter(model)
    for seed in seeds:
        rng = random.Random(seed * 1000 + window)
        session = (chat_session if kind == "chat" else agent_session)(rng, window)
        for name, variant in variants(model, kind):
            row = table.setdefault(name, Row())
            t0 = time.perf_counter()
            history: list[Message] = []
            sent_tokens: list[int] = []
            sent: list[Message] = []
            recoverable: set[str] = set()
            shared: list[int] = []
            for step in session.turns:
                history = [*history, *step]
                before = sent
                sent, recoverable = variant(history)
                sent_tokens.append(int(counter.count(sent)))
                same = 0  # messages at the start sent exactly as the turn before
                while same < min(len(sent), len(before)) and sent[same] == before[same]:
                    same += 1
                shared.append(int(counter.count(sent[:same])) if same else 0)
            row.seconds += time.perf_counter() - t0
            text = text_of(sent)
            found = [f for f in session.facts if f in text]
            back = [f for f in session.facts if f not in text and any(f in r for r in recoverable)]
            n = len(session.facts)
            row.in_request.append(len(found) / n)
            row.recoverable.append(len(back) / n)
            row.lost.append((n - len(found) - len(back)) / n)
            row.input_per_turn.append(statistics.mean(sent_tokens))
            row.prefix_share.append(sum(shared) / sum(sent_tokens))
            if name in LAST_SUMMARY:  # planted facts of the last summary's span it states
                summary, span = LAST_SUMMARY.pop(name)
                in_span = [f for f in session.facts if f in text_of(span)]
                row.span_planted.append(len(in_span))
                row.span_kept.append(sum(f in summary for f in in_span))


QUESTIONS = [
    "What is the approved budget I told you?",
    "What is the release deadline I told you?",
    "Which ticket did I ask you to track this under?",
    "Who did I say the reviewer will be?",
    "Which file did I say the bug lives in?",
    "Where should the report be sent?",
]
"""One question per fact kind of :func:`plant` (kinds 1, 2, 4, 6, 3, 7)."""
KINDS = [1, 2, 4, 6, 3, 7]


def real_model(seeds: int) -> None:
    """The ``--real`` part: SmolLM2 through the proxy, recall on and off."""
    import httpx

    sys.path[:0] = [str(ROOT / "tests")]
    from llama_server import LlamaCppServer
    from test_server import ServerThread

    from tokenflex.server import ServerConfig, create_app

    right = {True: 0, False: 0}
    recalled = {True: 0, False: 0}
    asked = 0
    with LlamaCppServer(n_ctx=2048, startup_timeout=120) as server:
        for recall in (False, True):
            config = ServerConfig.load(
                upstream=f"{server.root_url}/v1", discovery_timeout=60, recall=recall
            )
            with (
                ServerThread(create_app(config)) as proxy,
                httpx.Client(timeout=300, trust_env=False) as client,
            ):
                for seed in range(seeds):
                    for question, kind in zip(QUESTIONS, KINDS, strict=True):
                        rng = random.Random(seed * 100 + kind)
                        fact, sentence = plant(rng, kind)
                        msgs: list[Message] = [
                            {"role": "system", "content": "Answer with the exact value."},
                            {"role": "user", "content": f"Please note: {sentence}"},
                            {"role": "assistant", "content": "Noted."},
                        ]
                        for _ in range(12):  # ~2,400 tokens of filler: the fact is cut
                            msgs.append({"role": "user", "content": words(rng, 120)})
                            msgs.append({"role": "assistant", "content": words(rng, 60)})
                        msgs.append({"role": "user", "content": question})
                        r = client.post(
                            f"{proxy.url}/v1/chat/completions",
                            json={
                                "model": server.model,
                                "messages": msgs,
                                "max_tokens": 48,
                                "temperature": 0,
                            },
                        )
                        r.raise_for_status()
                        answer = r.json()["choices"][0]["message"].get("content") or ""
                        right[recall] += fact.lower() in answer.lower()
                        recalled[recall] += int(r.headers.get("x-tokenflex-recall-rounds", 0)) > 0
                        asked += recall
    print(f"\n### SmolLM2-135M through the proxy, 2,048-token window ({asked} questions)\n")
    print("| recall | answers right | requests where the model called tokenflex_recall |")
    print("|---|---:|---:|")
    for recall in (False, True):
        print(f"| {'on' if recall else 'off'} | {right[recall]} of {asked} | {recalled[recall]} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8K and 32K, one seed")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--real", action="store_true", help="only the real-model part")
    args = parser.parse_args()
    if args.real:
        real_model(max(1, args.seeds))
        return
    windows = [8192, 32768] if args.quick else [8192, 32768, 131072]
    seeds = list(range(1 if args.quick else args.seeds))
    started = time.perf_counter()
    print(f"tokenflex {tokenflex.__version__}; seeds {seeds}; recall: {has_recall()}\n")
    for kind in ("chat", "agent"):
        for window in windows:
            table: dict[str, Row] = {}
            run_cell(window, kind, seeds, table)
            print(f"\n### {kind}, {window:,}-token window\n")
            print(
                "| variant | in the request | recoverable | lost | summary keeps of its span "
                "| input/turn | cached prefix | time |"
            )
            print("|---|---:|---:|---:|---:|---:|---:|---:|")
            for name, row in table.items():
                span = (
                    f"{sum(row.span_kept)} of {sum(row.span_planted)}" if row.span_planted else "—"
                )
                print(
                    f"| {name} | {statistics.mean(row.in_request):.0%} "
                    f"| {statistics.mean(row.recoverable):.0%} | {statistics.mean(row.lost):.0%} "
                    f"| {span} | {statistics.mean(row.input_per_turn):,.0f} "
                    f"| {statistics.mean(row.prefix_share):.0%} | {row.seconds:.1f} s |"
                )
            sys.stdout.flush()
    print(f"\nWhole run: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
