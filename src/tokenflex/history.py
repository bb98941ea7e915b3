"""Conversation history: atomic groups, lazy sources read only as far as needed, a store.

History is read newest → oldest. A group is the unit that is kept or dropped whole: one
message, or an assistant message with ``tool_calls`` together with its tool results.

Lazy sources give history newest first: a list (oldest first, like any conversation), a
sync or async iterator of messages newest first, or a page fetcher
``fetch(limit, offset)`` returning newest-first pages (a database query with
``ORDER BY id DESC LIMIT ? OFFSET ?``). :class:`SQLiteMessageStore` is such a fetcher.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, TypeAlias, runtime_checkable

from ._types import Message
from .errors import InvalidInputError

__all__ = [
    "HistorySource",
    "PageFetcher",
    "SQLiteMessageStore",
    "aread_newest_first",
    "iter_groups",
    "read_newest_first",
]


@runtime_checkable
class PageFetcher(Protocol):
    """Returns up to ``limit`` messages, newest first, skipping the ``offset`` newest."""

    def __call__(self, limit: int, offset: int) -> Sequence[Message]: ...


HistorySource: TypeAlias = (
    Sequence[Message] | Iterable[Message] | AsyncIterable[Message] | PageFetcher
)


def _role(m: Any) -> Any:
    return m.get("role") if isinstance(m, dict) else getattr(m, "get", lambda _k: None)("role")


def _is_tool_call(m: Any) -> bool:
    return _role(m) == "assistant" and bool(m.get("tool_calls") or m.get("function_call"))


def iter_groups(
    messages: Sequence[Message], lo: int, hi: int, cost: Callable[[Message], int]
) -> Iterator[tuple[int, int, int]]:
    """Atomic groups of ``messages[lo:hi]``, newest first, as ``(start, stop, tokens)``.

    Tool results stay with the assistant message that called them. Only the groups the
    caller consumes are counted.
    """
    i = hi
    while i > lo:
        j = i - 1
        role = _role(messages[j])
        start = j
        if role == "tool" or role == "function":
            while start > lo and _role(messages[start - 1]) in ("tool", "function"):
                start -= 1
            if start > lo and _is_tool_call(messages[start - 1]):
                start -= 1
        if start == j:
            yield j, i, cost(messages[j])
        else:
            yield start, i, sum(cost(messages[k]) for k in range(start, i))
        i = start


def _check_page(page: Any, limit: int) -> list[Message]:
    if not isinstance(page, Sequence) or isinstance(page, (str, bytes)):
        raise InvalidInputError(
            f"History fetcher returned {type(page).__name__}; it must return a list of "
            "message dicts, newest first."
        )
    if len(page) > limit:
        raise InvalidInputError(
            f"History fetcher returned {len(page)} messages for limit={limit}; "
            "return at most `limit`."
        )
    return list(page)


def read_newest_first(
    source: HistorySource,
    *,
    enough: Callable[[Message], bool],
    page_size: int = 50,
) -> tuple[list[Message], bool]:
    """Read messages newest first until ``enough(message)`` says stop.

    ``enough`` is called on each message as it arrives (it accumulates tokens); reading
    stops after the first message for which it returns True — that one is included so
    the caller can tell the budget was reached. Returns the messages read (newest first)
    and whether the source ran out.
    """
    out: list[Message] = []
    if isinstance(source, Sequence) and not isinstance(source, (str, bytes)):
        for m in reversed(source):
            out.append(m)
            if enough(m):
                return out, False
        return out, True
    if callable(source) and not isinstance(source, Iterable):
        offset = 0
        while True:
            page = _check_page(source(page_size, offset), page_size)
            for m in page:
                out.append(m)
                if enough(m):
                    return out, False
            if len(page) < page_size:
                return out, True
            offset += len(page)
    if isinstance(source, Iterable):
        for m in source:
            out.append(m)
            if enough(m):
                return out, False
        return out, True
    raise InvalidInputError(
        f"history={type(source).__name__} is not a list, an iterator, an async iterator or "
        "a fetch(limit, offset) function. Use afit() for async sources."
    )


async def aread_newest_first(
    source: HistorySource | AsyncIterable[Message],
    *,
    enough: Callable[[Message], bool],
    page_size: int = 50,
) -> tuple[list[Message], bool]:
    """Async twin of :func:`read_newest_first`; also takes async iterators and async
    page fetchers."""
    if isinstance(source, AsyncIterable):
        out: list[Message] = []
        it: AsyncIterator[Message] = aiter(source)
        async for m in it:
            out.append(m)
            if enough(m):
                return out, False
        return out, True
    if callable(source) and not isinstance(source, Iterable):
        import inspect

        offset = 0
        out = []
        while True:
            page_or_coro = source(page_size, offset)
            page = await page_or_coro if inspect.isawaitable(page_or_coro) else page_or_coro
            page = _check_page(page, page_size)
            for m in page:
                out.append(m)
                if enough(m):
                    return out, False
            if len(page) < page_size:
                return out, True
            offset += len(page)
    return read_newest_first(source, enough=enough, page_size=page_size)


class SQLiteMessageStore:
    """A message store in SQLite, readable newest first in pages: a history source.

    >>> store = SQLiteMessageStore(":memory:")
    >>> store.add("room-1", {"role": "user", "content": "hi"})
    >>> store.fetcher("room-1")(10, 0)
    [{'role': 'user', 'content': 'hi'}]
    """

    def __init__(self, path: str = ":memory:") -> None:
        self._db = sqlite3.connect(path, check_same_thread=False)
        self._lock = threading.Lock()
        self.rows_read = 0
        """Rows returned by fetches so far (tests use it to prove laziness)."""
        with self._lock:
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                "conversation TEXT NOT NULL, body TEXT NOT NULL)"
            )
            self._db.execute(
                "CREATE INDEX IF NOT EXISTS messages_conv ON messages (conversation, id)"
            )

    def add(self, conversation: str, message: Message) -> None:
        self.extend(conversation, [message])

    def extend(self, conversation: str, messages: Iterable[Message]) -> None:
        rows = [(conversation, json.dumps(dict(m), ensure_ascii=False)) for m in messages]
        with self._lock, self._db:
            self._db.executemany("INSERT INTO messages (conversation, body) VALUES (?, ?)", rows)

    def count(self, conversation: str) -> int:
        with self._lock:
            row = self._db.execute(
                "SELECT COUNT(*) FROM messages WHERE conversation = ?", (conversation,)
            ).fetchone()
        return int(row[0])

    def fetcher(self, conversation: str) -> Callable[[int, int], list[dict[str, Any]]]:
        """A ``fetch(limit, offset)`` page fetcher over one conversation, newest first."""

        def fetch(limit: int, offset: int) -> list[dict[str, Any]]:
            with self._lock:
                rows = self._db.execute(
                    "SELECT body FROM messages WHERE conversation = ? "
                    "ORDER BY id DESC LIMIT ? OFFSET ?",
                    (conversation, limit, offset),
                ).fetchall()
            self.rows_read += len(rows)
            return [json.loads(r[0]) for r in rows]

        return fetch

    def close(self) -> None:
        with self._lock:
            self._db.close()
