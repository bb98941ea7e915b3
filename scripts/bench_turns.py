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
wall-clock time into tiktoken's encodes (timed one by one inside the session) and the
rest, tokenflex's own work, against the floor measured between its runs: the median of
``reps`` rounds (default 7), over the first 300 turns or the number given after ``reps``
(1,000: the full table's sessions)::

    PYTHONPATH=src .venv/bin/python scripts/bench_turns.py split list
    PYTHONPATH=src .venv/bin/python scripts/bench_turns.py split 8192 5 1000
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
    rounds: list[tuple[float, float, float, float]] = []
    for _ in range(reps):
        bf.clear_tokenflex()
        t = time.perf_counter()
        floor()
        bare = time.perf_counter() - t
        spent[0] = 0.0
        tiktoken.Encoding.encode_ordinary = timed  # type: ignore[method-assign]
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
        rounds.append((bare, in_floor, total, in_session))
    bare, in_floor, total, in_session = (statistics.median(r) for r in zip(*rounds, strict=True))
    name = "fit(growing list)" if which == "list" else f"Conversation, B = {int(which):,}"
    print(
        f"{name}, {len(pairs):,} turns: {total * 1000:.1f} ms = encodes {in_session * 1000:.1f} ms "
        f"({in_session / in_floor:.2f}x their time in the floor's loop) + the rest "
        f"{(total - in_session) * 1000:.1f} ms ({(total - in_session) / len(pairs) * 1e6:.0f} us a "
        f"turn); floor {bare * 1000:.1f} ms; ratio {total / bare:.2f}x"
    )


def main() -> None:
    which = sys.argv[1]
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
