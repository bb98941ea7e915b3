"""Conversation history: atomic groups, lazy sources read only as far as needed, a store.

History is read newest → oldest. A group is the unit that is kept or dropped whole: one
message, or an assistant message with ``tool_calls`` together with its tool results.

Lazy sources give history newest first: a list (oldest first, like any conversation), a
sync or async iterator of messages newest first, or a page fetcher
``fetch(limit, offset)`` returning newest-first pages (a database query with
``ORDER BY id DESC LIMIT ? OFFSET ?``). :class:`SQLiteMessageStore` is such a fetcher.

**Orientation.** A list is oldest first (pass ``iter(newest_first_list)`` for a list
that is newest first); iterators and fetchers are newest first. The likely mistake, a
list or iterator the other way round, is caught as the messages are read (see
:class:`OrderGuard`): a tool result read after the call that made it, or timestamps
(``created_at``, ``timestamp``, ``created``) that rise as history goes back in time.
"""

from __future__ import annotations

import inspect
import json
import sqlite3
import threading
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Callable,
    Generator,
    Iterable,
    Iterator,
    Sequence,
)
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, cast, runtime_checkable

from ._types import Message
from .drivers import adrive, drive
from .errors import InvalidInputError
from .message.groups import group_start, is_tool_call, is_tool_result, role_of

__all__ = [
    "CLEARED_PREFIX",
    "REASONING_KEYS",
    "HistorySource",
    "OrderGuard",
    "PageFetcher",
    "SQLiteMessageStore",
    "aread_newest_first",
    "cleared_tool_result",
    "has_reasoning",
    "is_tool_round",
    "iter_groups",
    "read_newest_first",
    "shrink_candidates",
    "tool_name",
    "tool_text",
    "truncated_text",
    "truncated_tool_result",
    "with_tool_text",
    "without_reasoning",
]


@runtime_checkable
class PageFetcher(Protocol):
    """Returns up to ``limit`` messages, newest first, skipping the ``offset`` newest."""

    def __call__(self, limit: int, offset: int) -> Sequence[Message]: ...


HistorySource: TypeAlias = (
    Sequence[Message] | Iterable[Message] | AsyncIterable[Message] | PageFetcher
)


def is_tool_round(messages: Sequence[Message], start: int) -> bool:
    """Whether the group starting at ``start`` is a tool round: an assistant message with
    tool calls (and its results), or tool results whose call is not in the list."""
    m = messages[start]
    return is_tool_call(m) or is_tool_result(m)


def iter_groups(
    messages: Sequence[Message], lo: int, hi: int, cost: Callable[[Message], int]
) -> Iterator[tuple[int, int, int]]:
    """Atomic groups of ``messages[lo:hi]``, newest first, as ``(start, stop, tokens)``.

    Tool results stay with the assistant message that called them (the rule of
    :mod:`tokenflex.message.groups`). Only the groups the caller consumes are counted.
    """
    i = hi
    while i > lo:
        j = i - 1
        start = group_start(messages, j, lo)
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


_TIME_FIELDS = ("created_at", "timestamp", "created")


class OrderGuard:
    """Checks that history read newest first really is newest first.

    Call it on each message in read order; it raises :class:`InvalidInputError` on the
    first sign that the source is the other way round: a tool result read right after
    the assistant message that made the call (newest first, results come before their
    call), or a timestamp newer than the one read before it.
    """

    def __init__(self, source: Any) -> None:
        self.listed = isinstance(source, Sequence) and not isinstance(source, str | bytes)
        self.size = len(source) if self.listed else 0
        self.calls: dict[str, int] = {}  # ids of the call read just before -> where
        self.last_time: Any = None
        self.n = 0

    def where(self, k: int) -> str:
        if self.listed:
            return f"history[{self.size - 1 - k}]"
        return f"history message {k + 1} (counting from the newest)"

    def mistake(self, what: str) -> InvalidInputError:
        fix = (
            "A list is read oldest first, like messages: pass list(reversed(history)), or "
            "iter(history) if the list is newest first."
            if self.listed
            else "Iterators and fetch(limit, offset) pages are read newest first: reverse "
            "the source, or pass the oldest-first list itself."
        )
        return InvalidInputError(f"history= looks the wrong way round: {what}. {fix}")

    def __call__(self, m: Any) -> None:
        k, self.n = self.n, self.n + 1
        if not isinstance(m, dict):
            return
        role = m.get("role")
        call_id = m.get("tool_call_id")
        if role == "tool" and isinstance(call_id, str) and call_id in self.calls:
            raise self.mistake(
                f"the tool result {self.where(k)} is older than its call "
                f"{self.where(self.calls[call_id])} (tool_call_id {call_id!r:.60})"
            )
        if role != "tool":  # ids may repeat across turns: only the call just read counts
            self.calls = {}
        if role == "assistant" and isinstance(m.get("tool_calls"), list):
            for call in m["tool_calls"]:
                if isinstance(call, dict) and isinstance(call.get("id"), str):
                    self.calls[call["id"]] = k
        for field in _TIME_FIELDS:
            t = m.get(field)
            if isinstance(t, int | float | str) and not isinstance(t, bool):
                last = self.last_time
                if last is not None and type(last) is type(t) and t > last:  # type: ignore[operator]
                    raise self.mistake(
                        f"{self.where(k)} has {field} {t!r:.40}, newer than {last!r:.40} "
                        f"of {self.where(k - 1)} read before it"
                    )
                self.last_time = t
                break


@dataclass(frozen=True, slots=True)
class _Page:
    """A step of the reading flow: the driver answers with ``fetch(limit, offset)``."""

    limit: int
    offset: int


@dataclass(frozen=True, slots=True)
class _Next:
    """A step of the reading flow: the driver answers with the iterator's next message,
    or :data:`_END` when it is exhausted."""

    iterator: Iterator[Message] | AsyncIterator[Message]


_END: Any = object()

_Reading = Generator["_Page | _Next", Any, tuple[list[Message], bool]]


def _reading(
    source: Any, enough: Callable[[Message], bool], page_size: int, *, asynchronous: bool
) -> _Reading:
    """Read ``source`` newest first until ``enough`` says stop, written once (sans I/O):
    a list is read here; a page fetcher's pages (:class:`_Page`) and an iterator's
    messages (:class:`_Next`) are asked of the driver, sync or async."""
    guard = OrderGuard(source)
    out: list[Message] = []

    def take(m: Message) -> bool:
        guard(m)
        out.append(m)
        return enough(m)

    stream: Iterator[Message] | AsyncIterator[Message] | None = None
    if asynchronous and isinstance(source, AsyncIterable):
        stream = aiter(source)
    elif isinstance(source, Sequence) and not isinstance(source, (str, bytes)):
        for m in reversed(source):
            if take(m):
                return out, False
        return out, True
    elif callable(source) and not isinstance(source, Iterable):
        offset = 0
        while True:
            page = _check_page((yield _Page(page_size, offset)), page_size)
            for m in page:
                if take(m):
                    return out, False
            if len(page) < page_size:
                return out, True
            offset += len(page)
    elif isinstance(source, Iterable):
        stream = iter(source)
    if stream is None:
        raise InvalidInputError(
            f"history={type(source).__name__} is not a list, an iterator, an async iterator "
            "or a fetch(limit, offset) function. Use afit() for async sources."
        )
    while (m := (yield _Next(stream))) is not _END:
        if take(m):
            return out, False
    return out, True


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

    Raises:
        InvalidInputError: the source is not a history source, or it reads the wrong way
            round (see :class:`OrderGuard`).
    """

    def answer(step: _Page | _Next) -> Any:
        if isinstance(step, _Page):
            return source(step.limit, step.offset)  # type: ignore[operator]
        return next(cast(Iterator[Message], step.iterator), _END)  # sync: never async

    return drive(_reading(source, enough, page_size, asynchronous=False), answer)


async def aread_newest_first(
    source: HistorySource | AsyncIterable[Message],
    *,
    enough: Callable[[Message], bool],
    page_size: int = 50,
) -> tuple[list[Message], bool]:
    """Async twin of :func:`read_newest_first`; also takes async iterators and async
    page fetchers."""

    async def answer(step: _Page | _Next) -> Any:
        if isinstance(step, _Page):
            page = source(step.limit, step.offset)  # type: ignore[operator]
            return await page if inspect.isawaitable(page) else page
        if isinstance(step.iterator, AsyncIterator):
            return await anext(step.iterator, _END)
        return next(step.iterator, _END)

    return await adrive(_reading(source, enough, page_size, asynchronous=True), answer)


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


# -- shrinking old turns in place ---------------------------------------------------

CLEARED_PREFIX = "[tool result cleared"
"""How a cleared tool result's placeholder starts."""
REASONING_KEYS = ("reasoning_content", "reasoning", "thinking")
"""Message keys that carry a model's reasoning."""
_THINKING_PARTS = ("thinking", "redacted_thinking", "reasoning")


def tool_name(messages: Sequence[Message], i: int) -> str | None:
    """The name of the tool whose result is ``messages[i]``: its own ``name``, else the
    name in the call with its ``tool_call_id``."""
    m = messages[i]
    if m.get("name"):
        return str(m["name"])
    call_id = m.get("tool_call_id")
    j = i - 1
    while j >= 0 and is_tool_result(messages[j]):
        j -= 1
    if j >= 0 and is_tool_call(messages[j]):
        for call in messages[j].get("tool_calls") or ():
            if isinstance(call, dict) and call.get("id") == call_id:
                fn = call.get("function") or {}
                return str(fn.get("name")) if fn.get("name") else None
    return None


def tool_text(message: Message) -> str:
    """The text of a tool result, as one string (text parts joined)."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def with_tool_text(message: Message, text: Callable[[str], str]) -> Message:
    """A copy of a tool result whose text is ``text(old text)``; the role, ``tool_call_id``
    and ``name`` stay, so the call keeps its answer. A message that stands for another
    API's items (Anthropic ``tool_result`` blocks, Responses ``function_call_output``
    items) shrinks those items too, through its own ``with_tool_text``, so the body sent
    is one that API accepts."""
    own = getattr(message, "with_tool_text", None)
    if callable(own):
        shrunk: Message = own(text)
        return shrunk
    out = dict(message)
    out["content"] = text(tool_text(message))
    return out


def cleared_tool_result(message: Message) -> Message:
    """A copy of a tool result whose content is a short placeholder saying it was cleared
    (see :func:`with_tool_text`)."""
    return with_tool_text(message, lambda _old: f"{CLEARED_PREFIX} to fit the context window]")


TRUNCATED_MARK = "[... {n:,} tokens of this tool result truncated to fit the context window ...]"
"""The counted marker between the head and the tail of a truncated tool result."""


def truncated_text(text: str, count: Callable[[str], int], cap: int) -> str:
    """``text`` cut to at most ``cap`` tokens (by ``count``, or as near as a marker
    allows): its head (two thirds) and tail (one third) kept, with a marker between them
    that says how many tokens were left out."""
    total = count(text)
    if total <= cap:
        return text
    keep = len(text) * cap // max(total, 1)
    while True:
        head, tail = keep * 2 // 3, keep // 3
        end = text[len(text) - tail :] if tail else ""
        mark = TRUNCATED_MARK.format(n=max(0, total - count(text[:head] + end)))
        cut = f"{text[:head]}\n{mark}\n{end}"
        if keep == 0 or count(cut) <= cap:
            return cut
        keep = keep * 4 // 5


def truncated_tool_result(message: Message, count: Callable[[str], int], cap: int) -> Message:
    """A copy of a tool result whose text is cut to about ``cap`` tokens (each result it
    carries to its share of ``cap``, see :func:`truncated_text`); a result within
    ``cap`` is returned as it is.

    >>> m = {"role": "tool", "tool_call_id": "a", "content": "x " * 1000}
    >>> out = truncated_tool_result(m, lambda t: len(t.split()), 100)
    >>> len(out["content"].split()) <= 100, "truncated" in out["content"]
    (True, True)
    """
    total = count(tool_text(message))
    if total <= cap:
        return message

    def cut(old: str) -> str:
        n = count(old)
        return truncated_text(old, count, max(1, cap * n // total)) if n else old

    return with_tool_text(message, cut)


def has_reasoning(message: Message) -> bool:
    """Whether an assistant message carries reasoning that can be dropped."""
    if role_of(message) != "assistant":
        return False
    if any(message.get(k) for k in REASONING_KEYS):
        return True
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") in _THINKING_PARTS for p in content
    )


def without_reasoning(message: Message) -> Message:
    """A copy of an assistant message without its reasoning keys and thinking parts."""
    out = {k: v for k, v in message.items() if k not in REASONING_KEYS}
    content = out.get("content")
    if isinstance(content, list):
        kept = [
            p for p in content if not (isinstance(p, dict) and p.get("type") in _THINKING_PARTS)
        ]
        out["content"] = kept if kept else ""
    return out


def shrink_candidates(
    messages: Sequence[Message], lo: int, hi: int, *, keep_results: int, keep_tools: Sequence[str]
) -> tuple[list[int], list[int]]:
    """Indices in ``messages[lo:hi]``, oldest first, of the tool results that may be
    cleared (all but the newest ``keep_results`` and those of ``keep_tools``, none
    already cleared) and of the assistant messages whose reasoning may be dropped."""
    results = [i for i in range(lo, hi) if is_tool_result(messages[i])]
    if keep_results:
        results = results[:-keep_results]
    short = len(CLEARED_PREFIX) + 32  # a placeholder would cost as much
    clear = [
        i
        for i in results
        if len(text := tool_text(messages[i])) > short
        and not text.startswith(CLEARED_PREFIX)
        and (not keep_tools or tool_name(messages, i) not in keep_tools)
    ]
    reasoning = [i for i in range(lo, hi) if has_reasoning(messages[i])]
    return clear, reasoning
