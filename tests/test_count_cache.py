"""The count cache: bounded by bytes, equal to uncached counts, and scoped by request."""

from __future__ import annotations

import asyncio
import sys
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenflex.tokenizers import CountCache, get_tokenizer
from tokenflex.tokenizers.base import ENTRY_BYTES, count_scope

O200K = get_tokenizer("o200k_base").tokenizer  # the real tokenizer, uncached


def cost(text: str) -> int:
    """What the string really takes now (its UTF-8 copy included, once made)."""
    return sys.getsizeof(text)


def test_a_long_history_stays_warm_within_the_bound() -> None:
    """The cache keeps fingerprints, not texts: 20,000 texts of ~1 KB each (20 MB of
    text) stay cached in a 8 MB cache, and a second pass is all hits (issue 24 item 5)."""
    cache = CountCache(O200K, max_bytes=8_000_000)
    texts = [f"{i} " + "the pump and the valve " * 45 for i in range(20_000)]
    assert sum(map(cost, texts)) > 2 * cache.max_bytes
    for text in texts:
        cache.count(text)
    misses = cache.misses
    for text in texts:
        assert cache.count(text) == O200K.count(text)
    assert cache.misses == misses and cache.bytes <= cache.max_bytes


_texts = st.text(st.characters(codec="utf-8"), max_size=40) | st.builds(
    lambda word, n: word * n, st.sampled_from(["ab ", "é", "日本", "🙂 "]), st.integers(1, 600)
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(_texts, max_size=80),
    st.integers(0, 8_000),
    st.integers(0, 3_000),
)
def test_bytes_never_exceed_the_bound_and_counts_equal_uncached(
    texts: list[str], max_bytes: int, max_entry_bytes: int
) -> None:
    cache = CountCache(O200K, max_bytes=max_bytes, max_entry_bytes=max_entry_bytes)
    seen: set[str] = set()
    for text in texts:
        assert cache.count(text) == O200K.count(text)
        seen.add(text)
        # recounted from what the cache answers for, not from its own bookkeeping
        held = ENTRY_BYTES * sum(1 for t in seen if t in cache)
        assert held <= cache.bytes <= max_bytes
        assert all(cost(t) <= max_entry_bytes for t in seen if t in cache)
    for text in texts:  # a second pass answers the same, cached or not
        assert cache.count(text) == O200K.count(text)


def test_repeated_texts_hit_and_big_texts_are_never_kept() -> None:
    cache = CountCache(O200K, max_bytes=1_000_000, max_entry_bytes=10_000)
    small, big = "hello world " * 10, "x " * 20_000
    for _ in range(3):
        cache.count(small)
        cache.count(big)
    assert small in cache and big not in cache
    assert (cache.hits, cache.misses) == (2, 4)


def test_old_entries_age_out_under_a_stream_of_unique_texts() -> None:
    cache = CountCache(O200K, max_bytes=20_000)
    first = "the very first text"
    cache.count(first)
    for i in range(2_000):
        cache.count(f"unique text number {i}")
        assert cache.bytes <= 20_000
    assert first not in cache
    assert 0 < len(cache) < 2_000


def test_a_discarded_scope_leaves_the_cache_untouched() -> None:
    cache = CountCache(O200K)
    with count_scope() as scope:
        assert cache.count("rejected request text") == O200K.count("rejected request text")
        assert cache.count("rejected request text") == O200K.count("rejected request text")
        assert cache.hits == 1  # the scope answers repeats inside the request
        scope.discard()
    assert len(cache) == 0 and cache.bytes == 0


def test_a_committed_scope_fills_the_cache() -> None:
    cache = CountCache(O200K)
    with count_scope():
        cache.count("accepted")
        assert "accepted" not in cache  # held back until the scope ends
    assert "accepted" in cache


def test_an_exception_discards_and_nested_scopes_commit_into_their_parent() -> None:
    cache = CountCache(O200K)
    with pytest.raises(RuntimeError), count_scope():
        cache.count("dropped with the error")
        raise RuntimeError
    assert len(cache) == 0
    with count_scope() as outer:
        with count_scope():
            cache.count("inner")
        assert "inner" not in cache
        outer.discard()
    assert "inner" not in cache


async def test_worker_threads_count_into_the_scope_of_their_task() -> None:
    cache = CountCache(O200K)
    with count_scope() as scope:
        await asyncio.to_thread(cache.count, "counted in a thread")
        scope.discard()
    assert len(cache) == 0
    # a thread started without the context counts straight into the cache
    with count_scope() as scope:
        t = threading.Thread(target=cache.count, args=("plain thread",))
        t.start()
        t.join()
        scope.discard()
    assert "plain thread" in cache
