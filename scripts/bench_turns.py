"""The sessions of ``scripts/bench.py`` alone, for an instruction count.

Runs ``bench_fit.session()``'s first 300 turns ``reps`` times, counts cleared before each:
``conv`` (a :class:`tokenflex.Conversation`: append, fit, append; ``window`` tokens of
input), ``list`` (``fit()`` of one growing list, an 8k window), ``floor`` (tiktoken's
``encode_ordinary`` of each new message once: the incremental limit) or ``none`` (nothing:
the imports and the data, to subtract). Under ``valgrind --tool=callgrind`` the
instructions repeat exactly from run to run, where wall-clock time on a shared machine does
not (see docs/benchmarks.md)::

    PYTHONPATH=src valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python scripts/bench_turns.py conv 100000 3

``split`` (``split list``, ``split 8192``: a Conversation's window) splits a session's
wall-clock time into tiktoken's encodes (timed one by one inside the session: its
``encode_ordinary``, or the token buffer a count reads where tiktoken has one) and the
rest, tokenflex's own work, against the floor measured between its runs: the median of
``reps`` rounds (default 7), over the first 300 turns or the number given after ``reps``
(1,000: the full table's sessions)::

    PYTHONPATH=src .venv/bin/python scripts/bench_turns.py split list
    PYTHONPATH=src .venv/bin/python scripts/bench_turns.py split 8192 5 1000

``cuts WINDOW [TURNS]``: a `Conversation` session's time by step (the appends, the fit)
and its fits by the cut they made (1,000 turns)::

    PYTHONPATH=src .venv/bin/python scripts/bench_turns.py cuts 8192

``grown N``: ``fit()`` of an N-message list grown by one turn, a call's median time beside
encoding the two messages new since the last fit (the incremental limit of one turn)::

    PYTHONPATH=src .venv/bin/python scripts/bench_turns.py grown 100000

``request N``: ``fit()`` of an N-message request parsed afresh on every call (as the proxy
reads each one), alone, cache-stable with a state store, and with recall and the cut note
too (the proxy's defaults); ``request N
REPS anthropic``: an agent's Anthropic tool rounds instead of plain chat::

    PYTHONPATH=src .venv/bin/python scripts/bench_turns.py request 10
    PYTHONPATH=src .venv/bin/python scripts/bench_turns.py request 200 5 anthropic
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_fit as bf

import tokenflex


def sessions(
    turns: int = 300,
) -> tuple[Any, Any, list[Any], Callable[[], None], Callable[[], None]]:
    """The bench's model, system message and first ``turns`` turns (300: the quick
    table's; 1,000: the full one's); the floor (tiktoken's ``encode_ordinary`` of each new
    message, looked up on every call) and the growing list's session over them."""
    model = bf.tf_model()
    system, pairs = bf.session()
    pairs = pairs[:turns]
    enc = bf.encoding()
    opts = bf.fit_options(model)

    def floor() -> None:
        for user, assistant in pairs:
            len(enc.encode_ordinary(user["content"]))
            len(enc.encode_ordinary(assistant["content"]))

    def growing() -> None:
        msgs = [system]
        for user, assistant in pairs:
            msgs.append(user)
            tokenflex.fit(msgs, **opts)
            msgs.append(assistant)

    return model, system, pairs, floor, growing


def split(which: str, reps: int, turns: int = 300) -> None:
    """Print a session's time split into tiktoken's encodes and the rest (see above)."""
    import statistics
    import time

    import tiktoken

    model, system, pairs, floor, growing = sessions(turns)
    encode = tiktoken.Encoding.encode_ordinary
    spent = [0.0]

    def timed(self: tiktoken.Encoding, text: str) -> list[int]:
        t = time.perf_counter()
        ids = encode(self, text)
        spent[0] += time.perf_counter() - t
        return ids

    run = growing if which == "list" else bf.conversation_session(system, pairs, model, int(which))
    tokenflex.fit([system], **bf.fit_options(model))
    # tokenflex counts with tiktoken's token buffer where it can: timed as the encodes are
    from tokenflex.tokenizers import get_tokenizer

    tokenizer = get_tokenizer("o200k_base").tokenizer
    buffer = getattr(tokenizer, "buffer", None)

    def timed_buffer(text: str, special: frozenset[str]) -> Any:
        t = time.perf_counter()
        out = buffer(text, special)
        spent[0] += time.perf_counter() - t
        return out

    rounds: list[tuple[float, float, float, float]] = []
    for _ in range(reps):
        bf.clear_tokenflex()
        t = time.perf_counter()
        floor()
        bare = time.perf_counter() - t
        spent[0] = 0.0
        tiktoken.Encoding.encode_ordinary = timed  # type: ignore[method-assign]
        if buffer is not None:
            tokenizer.buffer = timed_buffer
        try:
            floor()
            in_floor = spent[0]
            bf.clear_tokenflex()
            spent[0] = 0.0
            t = time.perf_counter()
            run()
            total, in_session = time.perf_counter() - t, spent[0]
        finally:
            tiktoken.Encoding.encode_ordinary = encode  # type: ignore[method-assign]
            if buffer is not None:
                tokenizer.buffer = buffer
        rounds.append((bare, in_floor, total, in_session))
    bare, in_floor, total, in_session = (statistics.median(r) for r in zip(*rounds, strict=True))
    name = "fit(growing list)" if which == "list" else f"Conversation, B = {int(which):,}"
    print(
        f"{name}, {len(pairs):,} turns: {total * 1000:.1f} ms = encodes {in_session * 1000:.1f} ms "
        f"({in_session / in_floor:.2f}x their time in the floor's loop) + the rest "
        f"{(total - in_session) * 1000:.1f} ms ({(total - in_session) / len(pairs) * 1e6:.0f} us a "
        f"turn); floor {bare * 1000:.1f} ms; ratio {total / bare:.2f}x"
    )


def grown(n: int, calls: int = 200) -> None:
    """Print the median time of ``fit()`` of an ``n``-message list grown by one turn
    (the user's message appended, fitted, the answer appended), beside the incremental
    limit: tiktoken's ``encode_ordinary`` of the two messages new since the last fit
    (the answer before, the question). Each turn's messages are new dicts (with the
    session's texts); the list's first fit is not timed."""
    import statistics
    import time

    model = bf.tf_model()
    system, pairs = bf.session()
    enc = bf.encoding()
    opts = bf.fit_options(model)
    msgs: list[Any] = [system]
    k = 0
    while len(msgs) < n:
        user, assistant = pairs[k % len(pairs)]
        msgs += [dict(user), dict(assistant)]
        k += 1
    tokenflex.fit(msgs, **opts)
    fits: list[float] = []
    limits: list[float] = []
    for i in range(calls):
        user, assistant = pairs[i % len(pairs)]
        user = dict(user)
        msgs.append(user)
        t = time.perf_counter()
        tokenflex.fit(msgs, **opts)
        fits.append(time.perf_counter() - t)
        t = time.perf_counter()
        for new in msgs[-2:]:  # the messages new since the last fit: answer, question
            len(enc.encode_ordinary(new["content"]))
        limits.append(time.perf_counter() - t)
        msgs.append(dict(assistant))
    fit_us, limit_us = statistics.median(fits) * 1e6, statistics.median(limits) * 1e6
    print(
        f"fit() of a {len(msgs) - 2 * calls:,}-message list grown by a turn ({calls} turns): "
        f"{fit_us:.0f} us a call, median; encoding its two new messages {limit_us:.0f} us "
        f"({fit_us / limit_us:.1f}x)"
    )


def by_cut(window: int, turns: int = 1000) -> None:
    """Print a `Conversation` session's time by step (the user's append, the fit, the
    answer's append) and its fits by the cut they made (the reasons of the plan's dropped
    runs: ``held`` a cut kept for the cache, ``low_water`` one moved down): how many,
    the median and the total. Counts cleared first, as in the bench's session."""
    import collections
    import statistics
    import time

    model, system, pairs, _, _ = sessions(turns)
    m = model.replace(name=f"gpt-4o-{window}", context_window=window + bf.MAX_TOKENS + bf.MARGIN)
    tokenflex.fit([system], **bf.fit_options(model))
    bf.clear_tokenflex()
    conv = tokenflex.Conversation(
        [system], model=m, safety_margin=bf.MARGIN, history_share=1.0, pin=0
    )
    steps = [0.0, 0.0, 0.0]
    cuts: dict[tuple[str, ...], list[float]] = collections.defaultdict(list)
    clock = time.perf_counter
    for user, assistant in pairs:
        t0 = clock()
        conv.append(user)
        t1 = clock()
        plan = conv.fit(max_tokens=bf.MAX_TOKENS)
        t2 = clock()
        conv.append(assistant)
        t3 = clock()
        steps[0] += t1 - t0
        steps[1] += t2 - t1
        steps[2] += t3 - t2
        reasons = tuple(dict.fromkeys(r[3] for r in plan.dropped.runs()))
        cuts[reasons or ("nothing dropped",)].append(t2 - t1)
    n = len(pairs)
    print(f"Conversation, B = {window:,}, {n:,} turns, a turn:")
    for name, total in zip(("append the user's", "fit", "append the answer"), steps, strict=True):
        print(f"  {name}: {total / n * 1e6:.1f} us")
    print("  fits by the cut made (reasons of the dropped runs): count, median, total")
    for reasons, times in sorted(cuts.items(), key=lambda kv: -sum(kv[1])):
        print(
            f"    {', '.join(reasons)}: {len(times):,}, {statistics.median(times) * 1e6:.1f} us, "
            f"{sum(times) * 1000:.1f} ms"
        )


def agent_body(messages: int) -> bytes:
    """An Anthropic Messages body shaped like a coding agent's (Claude Code's): a system
    prompt, a tool, one task, then tool rounds (an assistant's text and ``tool_use``, the
    user's ``tool_result`` with the file it read), about ``messages`` messages, made from
    ``scripts/bench_proxy.py``'s conversation."""
    import json

    from load_proxy import conversation

    turns = conversation(messages)
    out: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]
    for i, m in enumerate(t for t in turns[1:] if t["role"] == "assistant"):
        call = {
            "type": "tool_use",
            "id": f"t{i}",
            "name": "read_file",
            "input": {"path": f"{i}.py"},
        }
        out.append({"role": "assistant", "content": [{"type": "text", "text": "ok"}, call]})
        out.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"t{i}", "content": m["content"]}
                ],
            }
        )
    tool = {
        "name": "read_file",
        "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
    body = {
        "model": "gpt-4o",
        "system": turns[0]["content"],
        "messages": out,
        "tools": [tool],
        "max_tokens": 256,
    }
    return json.dumps(body).encode()


def request(messages: int, reps: int = 7, shape: str = "chat") -> None:
    """Print ``fit()`` of a request parsed afresh every call (as a proxy reads each one:
    ``scripts/bench_proxy.py``'s body of ``messages`` messages, gpt-4o, counts cached;
    ``shape="anthropic"``: :func:`agent_body`, an agent's tool rounds): the best of
    ``reps`` rounds' mean a call, with nothing else, cache-stable (a state store
    remembers the conversation), and cache-stable with recall and the cut note (the
    proxy's defaults), the three alternated."""
    import json
    import time

    from bench_proxy import request_body

    from tokenflex.state import MemoryStore

    body = request_body(messages) if shape == "chat" else agent_body(messages)
    store = MemoryStore()
    variants: dict[str, dict[str, Any]] = {
        "fit()": {"cache_stable": False, "recall": False},
        "cache-stable": {"cache_stable": True, "recall": False, "state": store},
        "cache-stable + recall + cut note": {
            "cache_stable": True,
            "recall": True,
            "cut_note": True,
            "state": store,
        },
    }

    def one(options: dict[str, Any]) -> None:
        data = json.loads(body)
        if shape == "chat":
            given: dict[str, Any] = {}
        else:
            given = {"format": "anthropic", "system": data["system"], "tools": data["tools"]}
        tokenflex.fit(
            data["messages"], model="gpt-4o", max_tokens=data["max_tokens"], **given, **options
        )

    calls = max(20, 20_000 // messages)
    for options in variants.values():
        for _ in range(20):
            one(options)
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(reps):
        for name, options in variants.items():
            start = time.perf_counter()
            for _ in range(calls):
                one(options)
            best[name] = min(best[name], (time.perf_counter() - start) / calls)
    print(f"a {messages:,}-message {shape} request parsed afresh, best of {reps} rounds a call:")
    for name, seconds in best.items():
        print(f"  {name}: {seconds * 1e6:,.1f} us (the JSON parse included)")


def main() -> None:
    which = sys.argv[1]
    if which == "request":
        request(
            int(sys.argv[2]),
            int(sys.argv[3]) if len(sys.argv) > 3 else 7,
            sys.argv[4] if len(sys.argv) > 4 else "chat",
        )
        return
    if which == "cuts":
        by_cut(int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 1000)
        return
    if which == "grown":
        grown(int(sys.argv[2]))
        return
    if which == "split":
        reps = int(sys.argv[3]) if len(sys.argv) > 3 else 7
        split(sys.argv[2], reps, int(sys.argv[4]) if len(sys.argv) > 4 else 300)
        return
    window = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    model, system, pairs, floor, growing = sessions()
    opts = bf.fit_options(model)

    def nothing() -> None:
        return None

    conv = bf.conversation_session(system, pairs, model, window)
    run = {"floor": floor, "conv": conv, "list": growing, "none": nothing}[which]
    tokenflex.fit([system], **opts)  # the imports and first-use work, in every run
    for _ in range(reps):
        bf.clear_tokenflex()
        run()


if __name__ == "__main__":
    main()
