"""The tokenizer protocol and the count cache every backend sits behind."""

from __future__ import annotations

import contextlib
import contextvars
import sys
import threading
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "CountCache",
    "CountScope",
    "CountingBudgetExceeded",
    "Tokenizer",
    "count_scope",
    "encodable",
    "entry_bytes",
    "native",
    "plain_until",
]

ENTRY_BYTES = 160
"""Bytes charged per cached count: the cache keeps a fingerprint of the text (its hash,
and its length beside the count), never the text, so a 100k-message history's counts fit
in a few MiB: two dict slots, two ints."""

_LEN_SHIFT = 40  # a cached value is ``count | len(text) << _LEN_SHIFT``
_COUNT_MASK = (1 << _LEN_SHIFT) - 1


def _natives() -> dict[str, Any]:
    try:
        from ._fastcut import (
            common_prefix,
            find_same,
            is_json,
            json_outline,
            json_scan,
            message_total,
            plain_run,
            plain_total,
            plain_until,
            same_run,
        )
    except ImportError:  # built without a C compiler
        return {}
    return {
        "common_prefix": common_prefix,
        "find_same": find_same,
        "is_json": is_json,
        "json_outline": json_outline,
        "json_scan": json_scan,
        "message_total": message_total,
        "plain_run": plain_run,
        "plain_total": plain_total,
        "plain_until": plain_until,
        "same_run": same_run,
    }


_NATIVES = _natives()


def native(name: str) -> Any:
    """The function ``name`` of ``_fastcut.c`` (the package's C loops: ``plain_total``,
    ``plain_run``, ``plain_until``, ``message_total``, ``is_json``, ``json_scan``,
    ``json_outline``, ``common_prefix``, ``find_same``, ``same_run``), or
    None where the package was built without a C compiler (each caller then reads in
    Python)."""
    return _NATIVES.get(name)


_PLAIN_TOTAL: Callable[..., tuple[int, list[int]] | None] | None = native("plain_total")
_PLAIN_RUN: Callable[..., tuple[list[int], int]] | None = native("plain_run")
_PLAIN_UNTIL: Callable[[list[Any], int, int, dict[str, Any]], int] | None = native("plain_until")
_MESSAGE_TOTAL: Callable[..., tuple[int, int] | None] | None = native("message_total")


def plain_until(messages: Any, lo: int, hi: int, roles: dict[str, Any]) -> int:
    """The index of the first message of ``messages[lo:hi]`` that is not a plain
    ``{"role": str, "content": str}`` dict (exactly: no subclass, no other key) whose role
    is a key of ``roles``; ``hi`` when every one is. A C loop over a list; ``lo`` (read
    nothing) for another sequence, or where the package was built without a C compiler:
    the caller reads those messages itself.

    >>> messages = [{"role": "user", "content": "hi"}, {"role": "tool"}]
    >>> plain_until(messages, 0, 2, {"user": 0}) == (0 if _PLAIN_UNTIL is None else 1)
    True
    """
    if _PLAIN_UNTIL is None or type(messages) is not list:
        return lo
    return _PLAIN_UNTIL(messages, lo, hi, roles)


def encodable(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD, as tiktoken does (native
    tokenizers such as fastokens and SentencePiece raise on them)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def entry_bytes(text: str) -> int:
    """What ``text`` itself takes (the string, and the UTF-8 copy CPython keeps beside a
    non-ASCII string once it was encoded, charged whether made yet or not): a text larger
    than a cache's ``max_entry_bytes`` is counted but not cached (a one-off document)."""
    return sys.getsizeof(text) + (0 if text.isascii() else 4 * len(text))


@runtime_checkable
class Tokenizer(Protocol):
    """How text becomes a number.

    ``exact`` is True when ``count`` is the model's real tokenizer, False for estimates
    (which are built to be upper bounds).
    """

    name: str
    exact: bool

    def count(self, text: str) -> int:
        """Tokens in ``text`` (ordinary text: special-token strings count as text)."""
        ...


class CountCache:
    """Memoizes ``count(text)`` per tokenizer so a kept message is never re-tokenized.

    The cache keeps a fingerprint of each text, not the text: its ``hash()`` as the key
    and its length beside the count, checked on every hit. An entry costs
    :data:`ENTRY_BYTES` whatever the text's size, so a whole long history stays warm
    (100,000 messages take ~16 MB); two different texts of the same length whose 64-bit
    hashes collide would share a count (with Python's per-process random hash key, about
    one chance in 10^8 for a million cached texts, and not something a client can aim
    at). Memory is bounded by bytes: the cache holds at most ``max_bytes`` in all, and a
    text over ``max_entry_bytes`` (:func:`entry_bytes`) is counted but not kept. Two
    generations of dicts give O(1) lookups: when the young generation would pass half of
    ``max_bytes`` it becomes the old one and the previous old one is discarded; a hit in
    the old generation is promoted. Python caches ``str`` hashes on the object, so a
    repeated lookup of the same message text does not even rehash it.

    Inside :func:`count_scope`, new counts are held by the scope and reach the cache only
    when the scope commits (the proxy discards the counts of a rejected request).

    >>> from tokenflex.tokenizers import get_tokenizer
    >>> cache = CountCache(get_tokenizer("o200k_base").tokenizer, max_bytes=1_000_000)
    >>> cache.count("Hello, world!"), cache.count("Hello, world!"), cache.hits
    (4, 4, 1)
    >>> cache.bytes <= cache.max_bytes
    True
    """

    __slots__ = (
        "_lock",
        "_new",
        "_new_bytes",
        "_old",
        "_old_bytes",
        "hits",
        "max_bytes",
        "max_entry_bytes",
        "misses",
        "tokenizer",
    )

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        max_bytes: int = 64 * 1024 * 1024,
        max_entry_bytes: int = 1024 * 1024,
    ) -> None:
        """Args:
        tokenizer: The backend that counts a miss.
        max_bytes: Most bytes the cache holds (texts plus per-entry overhead).
        max_entry_bytes: Texts larger than this are never cached (at most half of
            ``max_bytes``).
        """
        if max_bytes < 0 or max_entry_bytes < 0:
            raise ValueError(
                f"max_bytes and max_entry_bytes must be >= 0, got {max_bytes} and {max_entry_bytes}"
            )
        self.tokenizer = tokenizer
        self.max_bytes = max_bytes
        self.max_entry_bytes = min(max_entry_bytes, max_bytes // 2)
        self._new: dict[int, int] = {}  # hash(text) -> count | len(text) << _LEN_SHIFT
        self._old: dict[int, int] = {}
        self._new_bytes = 0
        self._old_bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def name(self) -> str:
        return self.tokenizer.name

    @property
    def exact(self) -> bool:
        return self.tokenizer.exact

    @property
    def bytes(self) -> int:
        """Bytes charged for what the cache holds now (never above ``max_bytes``)."""
        return self._new_bytes + self._old_bytes

    def __len__(self) -> int:
        return len(self._new) + len(self._old)

    def __contains__(self, text: object) -> bool:
        if not isinstance(text, str):
            return False
        key, length = hash(text), len(text)
        return any(
            v is not None and v >> _LEN_SHIFT == length
            for v in (self._new.get(key), self._old.get(key))
        )

    def count(self, text: str) -> int:
        key = hash(text)
        v = self._new.get(key)
        if v is not None and v >> _LEN_SHIFT == len(text):
            self.hits += 1
            return v & _COUNT_MASK
        v = self._old.get(key)
        if v is not None and v >> _LEN_SHIFT == len(text):
            self.hits += 1
            self._store(text, v & _COUNT_MASK)
            return v & _COUNT_MASK
        scope = _scope.get()
        if scope is not None:
            held = scope.get(self, text)
            if held is not None:
                self.hits += 1
                return held
            if scope.budget is not None:
                scope.spend(len(text))  # raises past the scope's budget: nothing counted
        self.misses += 1
        n = self.tokenizer.count(text)
        if scope is not None:
            scope.put(self, text, n)
        else:
            self._store(text, n, key)
        return n

    def plain_total(self, messages: list[Any], envelopes: dict[str, int]) -> int | None:
        """``sum(envelopes[m["role"]] + self.count(m["content"]) for m in messages)`` for a
        chat history of plain ``{"role", "content"}`` dicts of strings whose roles are in
        ``envelopes``, the cached counts looked up in one C loop (a warm recount of a
        whole history makes no Python call per message); None for another shape, or where
        the native part was not built (the caller counts message by message)."""
        if _PLAIN_TOTAL is None:
            return None
        # (inside a count scope too: a hit is in the cache; a miss is counted by count())
        got = _PLAIN_TOTAL(messages, envelopes, self._new, _LEN_SHIFT)
        if got is None:
            return None
        total, misses = got
        self.hits += len(messages) - len(misses)
        for i in misses:  # not in the newer half: count() looks in the older, then counts
            total += self.count(messages[i]["content"])
        return total

    def plain_run(
        self,
        messages: list[Any],
        hi: int,
        lo: int,
        envelopes: dict[str, int],
        total: int,
        bound: int,
        limit: int,
    ) -> tuple[list[int], int] | None:
        """``envelopes[m["role"]] + self.count(m["content"])`` of ``messages[hi - 1]``,
        ``messages[hi - 2]``, ... down to ``messages[lo]`` (newest first), while each is a
        plain ``{"role", "content"}`` dict of strings whose role is in ``envelopes`` and
        whose text the newer half holds, with ``total`` plus their sum: one C loop. It
        stops before the first other message (the caller counts it as it would) and after
        the one that takes the sum past ``bound`` or makes ``limit`` counts. None where the
        native part was not built."""
        if _PLAIN_RUN is None:
            return None
        counts, total = _PLAIN_RUN(
            messages, hi, lo, envelopes, self._new, _LEN_SHIFT, total, bound, limit
        )
        self.hits += len(counts)
        return counts, total

    def message_total(
        self,
        msg: Any,
        roles: frozenset[str],
        text_parts: dict[str, str],
        envelope: tuple[int, int, int, int],
    ) -> int | None:
        """One chat message's count under the envelope rule (``envelope``: tokens per
        message, per name, per tool result, per tool call; ``roles``: the valid roles;
        ``text_parts``: content part type -> the key of its text), read in one C call
        where every text it counts is in the newer half and the message is of the shapes
        it reads (content a str or text parts, tool calls of str names and arguments, str
        fields); None otherwise, or where the native part was not built (the caller
        counts it, and raises for a malformed message)."""
        if _MESSAGE_TOTAL is None:
            return None
        per_message, per_name, tool_result, tool_call = envelope
        got = _MESSAGE_TOTAL(
            msg,
            roles,
            text_parts,
            per_message,
            per_name,
            tool_result,
            tool_call,
            self._new,
            _LEN_SHIFT,
        )
        if got is None:
            return None
        total, hits = got
        self.hits += hits
        return total

    def _store(self, text: str, n: int, key: int | None = None) -> None:
        # (a text whose size cannot pass max_entry_bytes is not sized: entry_bytes is at
        # most 96 + 8 bytes a character, a UCS-4 string and its UTF-8 copy)
        size = 96 + 8 * len(text)
        if size > self.max_entry_bytes and entry_bytes(text) > self.max_entry_bytes:
            return
        if self.max_bytes // 2 < ENTRY_BYTES:
            return
        if key is None:
            key = hash(text)
        value = n | len(text) << _LEN_SHIFT
        with self._lock:
            if key in self._new:
                self._new[key] = value  # the same text, or a colliding one: the newest
                return
            if self._new_bytes + ENTRY_BYTES > self.max_bytes // 2:
                self._old, self._new = self._new, {}
                self._old_bytes, self._new_bytes = self._new_bytes, 0
            self._new[key] = value
            self._new_bytes += ENTRY_BYTES

    def clear(self) -> None:
        with self._lock:
            self._new, self._old = {}, {}
            self._new_bytes = self._old_bytes = 0
            self.hits = self.misses = 0


class CountingBudgetExceeded(BaseException):
    """Raised by a count in a :func:`count_scope` given a ``budget``, when the texts it
    has tokenized (the cache's misses) would pass that many characters: the work is
    longer than its caller was willing to do where it was (the proxy fits a request on
    its event loop until then, and in a worker thread after). A ``BaseException``, as
    ``KeyboardInterrupt`` is, so that no ``except Exception`` on the way takes it for a
    failed count: it ends the work, and the caller starts it again elsewhere."""

    def __init__(self, budget: int) -> None:
        super().__init__(
            f"more than {budget:,} characters of new text to count "
            f"(count_scope(budget={budget})): do this work where it may take longer, "
            "or give the scope a larger budget"
        )
        self.budget = budget


class CountScope:
    """Counts made while the scope is active, held back from the caches until
    :meth:`commit` (see :func:`count_scope`)."""

    __slots__ = ("_pending", "budget", "left", "parent", "settled")

    def __init__(self, parent: CountScope | None = None, budget: int | None = None) -> None:
        self.parent = parent
        self.settled = False
        self._pending: dict[CountCache, dict[str, int]] = {}
        self.budget = budget
        """Characters of new text (the caches' misses) this scope lets be tokenized
        (None: no bound); see :class:`CountingBudgetExceeded`."""
        self.left = budget if budget is not None else 0

    def spend(self, chars: int) -> None:
        """Charge the tokenizing of ``chars`` characters to the budget.

        Raises:
            CountingBudgetExceeded: the budget would be passed (nothing is charged).
        """
        if self.budget is not None:
            if chars > self.left:
                raise CountingBudgetExceeded(self.budget)
            self.left -= chars

    def get(self, cache: CountCache, text: str) -> int | None:
        scope: CountScope | None = self
        while scope is not None:
            pending = scope._pending.get(cache)
            n = None if pending is None else pending.get(text)
            if n is not None:
                return n
            scope = scope.parent
        return None

    def put(self, cache: CountCache, text: str, n: int) -> None:
        if entry_bytes(text) <= cache.max_entry_bytes:
            self._pending.setdefault(cache, {})[text] = n

    def commit(self) -> None:
        """Hand the held counts to the enclosing scope, or to the caches."""
        if self.settled:
            return
        self.settled = True
        pending, self._pending = self._pending, {}
        for cache, counts in pending.items():
            for text, n in counts.items():
                if self.parent is not None and not self.parent.settled:
                    self.parent.put(cache, text, n)
                else:
                    cache._store(text, n)

    def discard(self) -> None:
        """Forget the held counts: nothing reaches the caches."""
        self.settled = True
        self._pending = {}


_scope: contextvars.ContextVar[CountScope | None] = contextvars.ContextVar(
    "tokenflex_count_scope", default=None
)


def count_scope(budget: int | None = None) -> contextlib.AbstractContextManager[CountScope]:
    """Hold new counts back from the count caches until the work that made them is
    accepted; with ``budget``, tokenize at most that many characters of new text in it
    (a count that would pass it raises :class:`CountingBudgetExceeded`).

    Counts made inside (in this context, and in worker threads started from it with a
    copy of it, as ``anyio.to_thread`` and ``asyncio.to_thread`` do) are kept by the
    scope. On a normal exit they are committed, on an exception discarded; call
    :meth:`CountScope.discard` or :meth:`CountScope.commit` first to decide yourself.
    The proxy discards the counts of every request it rejects, so a client cannot fill
    the caches with texts it never gets answered.

    >>> from tokenflex.tokenizers import get_tokenizer
    >>> cache = CountCache(get_tokenizer("o200k_base").tokenizer)
    >>> with count_scope() as scope:
    ...     cache.count("rejected text")
    ...     scope.discard()
    3
    >>> len(cache)
    0
    >>> with count_scope(budget=10):  # doctest: +ELLIPSIS
    ...     cache.count("a text longer than ten characters")
    Traceback (most recent call last):
    ...
    tokenflex.tokenizers.base.CountingBudgetExceeded: more than 10 characters of new text ...
    """
    return _Scoped(budget)


class _Scoped:
    """:func:`count_scope`'s context manager (a class: a generator's costs a request
    about 3 µs more, and the proxy opens two)."""

    __slots__ = ("budget", "scope", "token")

    def __init__(self, budget: int | None) -> None:
        self.budget = budget

    def __enter__(self) -> CountScope:
        self.scope = scope = CountScope(_scope.get(), self.budget)
        self.token = _scope.set(scope)
        return scope

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        try:
            if kind is None:
                self.scope.commit()
            else:
                self.scope.discard()
        finally:
            _scope.reset(self.token)
