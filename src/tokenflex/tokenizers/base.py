"""The tokenizer protocol and the count cache every backend sits behind."""

from __future__ import annotations

import threading
from typing import Protocol, runtime_checkable

__all__ = ["CountCache", "Tokenizer"]


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

    Two generations of dicts give O(1) lookups with bounded memory: when the young
    generation reaches ``max_entries`` it becomes the old one and the previous old one is
    discarded; a hit in the old generation is promoted. Python caches ``str`` hashes on
    the object, so a repeated lookup of the same message text does not even rehash it.
    """

    __slots__ = ("_lock", "_new", "_old", "hits", "max_entries", "misses", "tokenizer")

    def __init__(self, tokenizer: Tokenizer, max_entries: int = 200_000) -> None:
        self.tokenizer = tokenizer
        self.max_entries = max_entries
        self._new: dict[str, int] = {}
        self._old: dict[str, int] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def name(self) -> str:
        return self.tokenizer.name

    @property
    def exact(self) -> bool:
        return self.tokenizer.exact

    def count(self, text: str) -> int:
        n = self._new.get(text)
        if n is not None:
            self.hits += 1
            return n
        n = self._old.get(text)
        if n is None:
            self.misses += 1
            n = self.tokenizer.count(text)
        else:
            self.hits += 1
        with self._lock:
            if len(self._new) >= self.max_entries:
                self._old, self._new = self._new, {}
            self._new[text] = n
        return n

    def clear(self) -> None:
        with self._lock:
            self._new, self._old = {}, {}
            self.hits = self.misses = 0
