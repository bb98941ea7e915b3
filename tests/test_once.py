"""A slow build holds up only its own key: tokenizers and counters are built under a lock
for each name (``tokenflex.once``), not one for the process.

Before, a tokenizer's load and a counter's set-up (which counts the role names through
the tokenizer: a request to a tokenizer server) ran under one process-wide lock, so a
tokenizer server that answered slowly made every other model's first request wait for
it (and every request after the registry changed). The proxy's version of this is
``tests/test_attacks_round2.py::test_large_bodies_are_counted_one_at_a_time``, whose
small request is fitted while a large one's tokenizer server holds its answer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenflex import get_counter
from tokenflex.models import register_model
from tokenflex.once import KeyedLocks
from tokenflex.tokenizers import get_tokenizer, register_tokenizer

WAIT = 10.0  # seconds a test waits for what must happen at once (a failure, not a pass)


class Held:
    """A tokenizer whose counts (and, with ``at_load``, whose load) wait for ``release``."""

    name, exact = "held", True

    def __init__(self, release: threading.Event, entered: threading.Event, at_load: bool):
        self.release, self.entered = release, entered
        if at_load:
            self.wait()

    def wait(self) -> None:
        self.entered.set()
        assert self.release.wait(WAIT), "never released"

    def count(self, text: str) -> int:
        self.wait()
        return len(text) // 4 + 1


class Quick:
    name, exact = "quick", True

    def count(self, text: str) -> int:
        return len(text) // 4 + 1


def _held(at_load: bool) -> tuple[threading.Event, threading.Event, Callable[[], Any]]:
    release, entered = threading.Event(), threading.Event()
    return release, entered, lambda: Held(release, entered, at_load)


def test_a_tokenizer_that_loads_slowly_holds_up_no_other() -> None:
    release, entered, factory = _held(at_load=True)
    loads = []
    register_tokenizer("once-slow", lambda: loads.append(1) or factory(), replace=True)
    register_tokenizer("once-quick", Quick, replace=True)
    get_tokenizer("o200k_base")  # (loaded before)
    with ThreadPoolExecutor(4) as pool:
        slow = [pool.submit(get_tokenizer, "once-slow") for _ in range(2)]
        assert entered.wait(WAIT)
        quick = pool.submit(get_tokenizer, "once-quick")
        loaded = pool.submit(get_tokenizer, "o200k_base")
        assert quick.result(WAIT).count("abcdefgh") == 3  # while the slow one loads
        assert loaded.result(WAIT).count("Hello, world!") == 4
        assert not any(f.done() for f in slow)  # (the second waits for the first's load)
        release.set()
        first, second = (f.result(WAIT) for f in slow)
    assert first is second and loads == [1]  # one load, read by both


def test_a_counter_whose_tokenizer_answers_slowly_holds_up_no_other() -> None:
    release, entered, factory = _held(at_load=False)
    register_tokenizer("once-server", factory, replace=True)
    register_tokenizer("once-quick", Quick, replace=True)
    register_model(name="once-slow-model", context_window=4096, tokenizer="once-server")
    register_model(name="once-quick-model", context_window=4096, tokenizer="once-quick")
    messages = [{"role": "user", "content": "hi there"}]
    with ThreadPoolExecutor(2) as pool:
        slow = pool.submit(get_counter, "once-slow-model")  # its set-up counts role names
        assert entered.wait(WAIT)
        quick = pool.submit(lambda: get_counter("once-quick-model").count(messages))
        assert quick.result(WAIT) > 0
        assert not slow.done()
        release.set()
        assert slow.result(WAIT).count(messages) > 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from("abc"), min_size=1, max_size=8))
def test_one_key_s_holders_take_turns_and_others_never_wait(keys: list[str]) -> None:
    """Threads hold the lock of their key, all at once: at most one in each key's block
    at any time (the reference: a count kept under a separate lock), every thread gets
    through (a key never waits for another's holder, who waits at the barrier), and no
    lock is kept after."""
    locks: KeyedLocks[str] = KeyedLocks()
    inside: dict[str, int] = {}
    most: dict[str, int] = {}
    guard = threading.Lock()
    distinct = len(set(keys))
    barrier = threading.Barrier(distinct)  # one holder of each key must be in at once

    def hold(key: str, first: bool) -> None:
        with locks.held(key):
            with guard:
                inside[key] = inside.get(key, 0) + 1
                most[key] = max(most.get(key, 0), inside[key])
            if first:
                barrier.wait(WAIT)  # (a key that waited on another's holder: broken)
            with guard:
                inside[key] -= 1

    firsts = {k: keys.index(k) for k in set(keys)}
    threads = [threading.Thread(target=hold, args=(k, firsts[k] == i)) for i, k in enumerate(keys)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert not any(t.is_alive() for t in threads)
    assert not barrier.broken
    assert all(n == 1 for n in most.values())
    assert len(locks) == 0
