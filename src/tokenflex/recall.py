"""Recall: nothing a plan leaves out is lost for good.

With ``fit(..., recall=True)`` every message a plan drops or summarizes, and every tool
result it clears or truncates (and the reasoning it drops), is kept in the state store
under a short stable id, in the caller's own format. The cut note, the summary and each
cleared placeholder name their ids (``recall id: 3f9a0c1be27d``), and the request gains
one tool, :data:`RECALL_TOOL` (``tokenflex_recall``, one string argument ``id``), counted
in the plan like any tool, so the window promise holds with it. :func:`recall` gives back
what an id stands for; the proxy serves it at ``GET /tokenflex/recall/{id}`` and answers
the model's ``tokenflex_recall`` calls itself (:func:`resolved_round`).

Ids are a digest of the tenant and the content, so the same dropped item gets the same id
on every turn (the prefix of a cache-stable conversation stays the same) and two tenants
never share one. Records live in the tenant's view of the store
(:class:`~tokenflex.state.TenantStore`), with a time to live (:data:`RECALL_TTL_S`).

The cost model: a history cut is stored as a chain. Each record holds only the messages
the cut newly left out, and the id of the record before it; a small mark per history
(keyed by its first message) says where the stored chain ends. A conversation that grew by
one message stores and fingerprints only what its cut newly dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ._types import Message
from .counting import get_counter
from .engine.passes import TakenOut
from .engine.sections import MessageSection
from .errors import ContextOverflowError
from .formats.native import NativeMessage
from .formats.registry import default_format, get_format
from .history import with_tool_text
from .message.objects import plain
from .plan import SENT_SHRUNK
from .session import Remembered, fingerprint, sized_fingerprint
from .state.tenant import TenantStore, tenant_view

if TYPE_CHECKING:
    from .plan import Plan
    from .state import StateStore

__all__ = [
    "ITEM_REASONS",
    "MAX_ROUNDS",
    "RECALLED_SECTIONS",
    "RECALL_TOOL",
    "RECALL_TTL_S",
    "RecallFit",
    "Recaller",
    "afit_recalling",
    "fit_recalling",
    "left_out",
    "recall",
    "recall_calls",
    "recall_overhead",
    "recall_text",
    "recall_tool",
    "resolved_round",
    "with_recall_tool",
]

RECALL_TOOL = "tokenflex_recall"
"""The name of the tool a plan with recall adds."""
RECALL_TTL_S = 24 * 3600.0
"""How long what a plan left out can be recalled."""
MAX_ROUNDS = 3
"""The proxy resolves at most this many ``tokenflex_recall`` rounds per request."""
_ID_CHARS = 12  # a recall id's length: 12 hex digits

RECALLED_SECTIONS = ("pinned", "history", "current")
"""Sections whose left-out messages are kept for recall (documents are not)."""
ITEM_REASONS = SENT_SHRUNK
"""Reasons of messages sent shrunk: each is kept whole under its own id."""

_DESCRIPTION = (
    "Read back earlier messages or tool results that were left out of this conversation "
    "to fit the context window. Pass the recall id named in the note or placeholder."
)
_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"id": {"type": "string", "description": "The recall id."}},
    "required": ["id"],
}


def recall_tool(format: str) -> dict[str, Any]:
    """The ``tokenflex_recall`` tool definition in ``format``'s shape.

    >>> recall_tool("anthropic")["name"], recall_tool("chat")["function"]["name"]
    ('tokenflex_recall', 'tokenflex_recall')
    """
    return get_format(format).tool(
        {"name": RECALL_TOOL, "description": _DESCRIPTION, "parameters": _PARAMETERS}
    )


_COMPACT = json.JSONEncoder(separators=(",", ":"))
"""``json.dumps(..., separators=(",", ":"))``'s encoder, made once (dumps makes one a call
for any argument but the defaults)."""


def _digest(*parts: Any) -> str:
    text = _COMPACT.encode(parts)
    return hashlib.blake2b(text.encode(), digest_size=_ID_CHARS // 2).hexdigest()


def _items(message: Any) -> list[Any]:
    """The caller's items an internal message stands for, JSON-ready."""
    native = message.native if isinstance(message, NativeMessage) else (message,)
    return [plain(m) for m in native]


def _key(rid: str) -> str:
    return "recall:" + rid


_STABLE: Remembered[int, tuple[Any, Any, str]] = Remembered(8192, 8 * 1024 * 1024)
"""The fingerprints of the messages of conversations that go on (:class:`Recaller`'s
``stable``: a proxy's parse, whose next turn repeats the same objects), by the message
object's identity: ``(message, its caller's item or None, fingerprint)``, the objects
held so their ids stay theirs. Bounded by entries and by the characters hashed (a
message past a sixteenth of that is not kept)."""


class Recaller:
    """One fit's recall: the ids its notes and placeholders name, and, once the plan is
    made, the records stored for them (:meth:`commit`).

    Args:
        store: The tenant's view of the state store (a plain store is the tenant ``""``).
        source: The engine's messages (the caller's originals, in the engine's order).
        format: The caller's format (a registered format's name).
        given: The caller's chat messages by their index (a list, or a mapping of the
            converted ones), when ``source`` holds converted copies of them (the chat
            messages' reasoning, which is never sent, is recalled with them).
        sections: The plan's sections whose left-out messages index ``source`` and are
            kept (fit()'s :data:`RECALLED_SECTIONS`; a :class:`~tokenflex.Prompt`'s
            history section).
        stable: ``source``'s messages (and ``given``'s items) are objects no one edits
            and the next request repeats (a proxy's parse of a conversation that goes
            on): their fingerprints are kept by the objects' identity for the fits after
            this one (:data:`_STABLE`).
    """

    def __init__(
        self,
        store: Any,
        source: Sequence[Message],
        format: str,
        given: Sequence[Any] | Mapping[int, Any] | None = None,
        sections: Sequence[str] = RECALLED_SECTIONS,
        *,
        stable: bool = False,
    ) -> None:
        self.store: TenantStore = tenant_view(store)
        self.stable = stable
        self.source = source
        self.format = format
        self.given = given
        self.sections = tuple(sections)
        self._fp: dict[int, str] = {}
        self._spans: dict[tuple[int, int], tuple[str, str | None, int, float]] = {}
        """(lo, stop) -> (id, the chain's previous id, where the new part starts, when the
        chain's oldest record was written)."""
        self._marks: dict[int, dict[str, Any] | None] = {}
        self.overhead = (0, 0)
        """Tokens recall adds to a plan that cuts: (the tool, the cut note at most)."""
        self.counter: Any = None
        """The plan's counter (set with :attr:`overhead` by :class:`RecallFit`)."""
        self.lower: tuple[int, int] | None = None
        """A fresh cut keeps this many tokens fewer than the history from this index on
        (see :meth:`low_water`)."""

    def _items_at(self, i: int) -> list[Any]:
        """The caller's items that message ``i`` of the source stands for."""
        m = self.source[i]
        if self.given is not None and isinstance(m, NativeMessage) and m.start >= 0:
            return [plain(self.given[m.start])]
        return _items(m)

    def _fingerprint(self, i: int) -> str:
        fp = self._fp.get(i)
        if fp is None:
            fp = self._fp[i] = self._stable_fingerprint(i)
        return fp

    def _stable_fingerprint(self, i: int) -> str:
        """Message ``i``'s fingerprint, kept by its object (and its caller's item) for
        the next fits: a cut's span is fingerprinted once, not on every request that
        renders a cut short of the chain's mark. Only a :attr:`stable` source's are
        kept; any source reads those kept (an object held there is one no one edits: the
        same conversation's request again, whose parse reused its objects)."""
        m = self.source[i]
        given = self.given
        item = None
        if given is not None and isinstance(m, NativeMessage) and m.start >= 0:
            item = given[m.start]
        known = _STABLE.get(id(m))
        if known is not None and known[0] is m and known[1] is item:
            return known[2]
        if not self.stable:
            return fingerprint(self._items_at(i))
        fp, size = sized_fingerprint(self._items_at(i))
        _STABLE.put(id(m), (m, item, fp), size)
        return fp

    def _mark(self, lo: int) -> dict[str, Any] | None:
        if lo not in self._marks:
            raw = self.store.get(self._mark_key(lo))
            try:
                mark = json.loads(raw) if raw is not None else None
            except ValueError:
                mark = None
            self._marks[lo] = mark if isinstance(mark, dict) else None
        return self._marks[lo]

    def _mark_key(self, lo: int) -> str:
        return "recall-mark:" + _digest(lo, self._fingerprint(lo))

    def span_id(self, lo: int, stop: int) -> str:
        """The id of messages ``[lo, stop)`` of the source (a cut or summarized span):
        the stored chain's id extended by the messages after its end."""
        known = self._spans.get((lo, stop))
        if known is not None:
            return known[0]
        prev: str | None = None
        start, born = lo, time.time()
        mark = self._mark(lo)
        if mark is not None:
            k, at = mark.get("stop"), mark.get("born")
            if (
                isinstance(k, int)
                and lo < k <= stop
                and mark.get("last") == self._fingerprint(k - 1)
                and isinstance(mark.get("id"), str)
                and isinstance(at, float | int)
                # A chain's records expire with their TTL: past half of it, start a new
                # chain (one new id; stored whole once) rather than name expiring records.
                and born - at < RECALL_TTL_S / 2
            ):
                prev, start, born = mark["id"], k, float(at)
        if prev is not None and start == stop:
            rid = prev
        else:
            fps = [self._fingerprint(i) for i in range(start, stop)]
            rid = _digest(self.store.prefix, prev, fps)
        self._spans[lo, stop] = (rid, prev, start, born)
        return rid

    def item_id(self, original: Message) -> str:
        """The id of one message sent shrunk (its original is what is recalled)."""
        return _digest(self.store.prefix, fingerprint(_items(original)))

    def named(self, original: Message, shrunk: Message) -> Message:
        """``shrunk`` (a cleared or truncated tool result) naming its original's id."""
        rid = self.item_id(original)

        def name(text: str) -> str:
            if text.endswith("]") and "\n" not in text:  # a cleared placeholder
                return f"{text[:-1]}; recall id: {rid}]"
            return f"{text}\n[full result: recall id: {rid}]"

        return with_tool_text(shrunk, name)

    def commit(self, runs: Sequence[tuple[str, int, int, str]]) -> list[str]:
        """Store what the plan's dropped ``runs`` (engine indices) left out; the ids,
        in request order."""
        ids: list[str] = []
        spans: list[tuple[int, int]] = []
        last: tuple[str, int, int, str] | None = None
        for section, a, b, reason in runs:
            if section not in self.sections or b <= a:
                continue
            if reason in ITEM_REASONS:
                for i in range(a, b):
                    ids.append(self._store_item(i))
                continue
            if (
                last is not None
                and reason != "summarized"
                and last[3] != "summarized"
                and last[0] == section
                and last[2] == a
                and spans
            ):
                spans[-1] = (spans[-1][0], b)
            else:
                spans.append((a, b))
            last = (section, a, b, reason)
        for a, b in spans:
            ids.append(self._store_span(a, b))
        return list(dict.fromkeys(ids))

    def _put(self, rid: str, record: dict[str, Any]) -> None:
        key = _key(rid)
        if self.store.get(key) is None:
            data = json.dumps(record, ensure_ascii=False, default=str).encode()
            self.store.set(key, data, ttl_s=RECALL_TTL_S)

    def _store_item(self, i: int) -> str:
        rid = self.item_id(self.source[i])
        self._put(rid, {"format": self.format, "prev": None, "items": self._items_at(i)})
        return rid

    def _store_span(self, lo: int, stop: int) -> str:
        rid = self.span_id(lo, stop)
        _, prev, start, born = self._spans[lo, stop]
        if start < stop:
            items = [it for i in range(start, stop) for it in self._items_at(i)]
            self._put(rid, {"format": self.format, "prev": prev, "items": items})
        mark = {"stop": stop, "id": rid, "last": self._fingerprint(stop - 1), "born": born}
        self.store.set(self._mark_key(lo), json.dumps(mark).encode(), ttl_s=RECALL_TTL_S)
        return rid

    def low_water(self, mark: float | Callable[[int], int], hist: Any) -> Callable[[int], int]:
        """A cache-stable cut's low-water ``mark`` (a share of the history's room, or
        tokens for a room) for a plan with recall, where ``hist`` is the history section
        being cut: the tool and the cut note are paid for below the mark, so a cut leaves
        the next turns the room it would leave without recall and the held cut lasts as
        many turns. The room the plan gives the history is already less the tool; the
        mark is taken of the room without it, less the tool and the note.

        With :attr:`lower` set (``(first, tokens)``: see :class:`RecallFit`), the cut
        also keeps at least ``tokens`` fewer than the history from ``first`` on.
        """
        tool, note = self.overhead
        cap: int | None = None
        if self.lower is not None and self.counter is not None:
            first, fewer = self.lower
            count, src = self.counter.message, hist.source
            kept = sum(count(src[i]) for i in range(max(first, hist.lo), hist.hi))
            cap = max(0, kept - fewer)

        def tokens(room: int) -> int:
            whole = room + tool
            base = mark(whole) if callable(mark) else int(mark * whole)
            out = max(0, base - tool - note)
            return out if cap is None else min(out, cap)

        return tokens

    def left_out(self, runs: Sequence[tuple[str, int, int, str]]) -> bool:
        """Whether a plan's dropped runs leave out anything this recaller keeps."""
        return any(s in self.sections and b > a for s, a, b, _ in runs)


def left_out(runs: Sequence[tuple[str, int, int, str]]) -> bool:
    """Whether a plan's dropped runs leave out anything recall keeps."""
    return any(s in RECALLED_SECTIONS and b > a for s, a, b, _ in runs)


def recall(id: str, *, state: StateStore | None = None) -> list[Any] | None:
    """What a plan left out under ``id``, in the caller's format (chat messages,
    Anthropic messages or Responses items, oldest first); None when the id is unknown
    to this tenant or expired.

    Args:
        id: A recall id from a cut note, summary or cleared placeholder.
        state: The store given to the fit (a :class:`~tokenflex.state.TenantStore`
            for a tenant's own; default: the process's in-memory store).

    >>> import tokenflex
    >>> from tokenflex.state import MemoryStore
    >>> store = MemoryStore()
    >>> chat = [{"role": "user", "content": f"question {i} " + "word " * 200}
    ...         for i in range(40)]
    >>> plan = tokenflex.fit(chat, model="gpt-4o", max_tokens=1000, max_input_tokens=3000,
    ...                      recall=True, state=store)
    >>> [rid] = plan.extras["recall"]["ids"]
    >>> tokenflex.recall(rid, state=store)[0]["content"][:10]
    'question 1'
    """
    from .state import default_store

    store = tenant_view(state if state is not None else default_store())
    out: list[Any] = []
    seen: set[str] = set()
    rid: str | None = str(id).strip()
    while rid is not None and rid not in seen:
        seen.add(rid)
        raw = store.get(_key(rid))
        if raw is None:
            return None
        try:
            record = json.loads(raw)
        except ValueError:
            return None
        out[:0] = list(record.get("items") or ())
        prev = record.get("prev")
        rid = prev if isinstance(prev, str) else None
    return out


def recall_text(rid: str, items: list[Any] | None) -> str:
    """What a ``tokenflex_recall`` call answers: the items as JSON, or why there are none."""
    if items is None:
        return (
            f"No recall id {rid[:40]!r} for this conversation: unknown or expired "
            f"(kept {RECALL_TTL_S / 3600:.0f} h)."
        )
    return json.dumps(items, ensure_ascii=False, default=str)


def recall_calls(format: str, response: Any) -> list[tuple[str, str]] | None:
    """The ``(call id, recall id)`` of each tool call in an upstream's answer when it
    calls ``tokenflex_recall`` and no other tool; None otherwise."""
    if not isinstance(response, Mapping):
        return None
    calls = get_format(format).tool_calls(response)  # (call id, name, arguments)
    if not calls or any(name != RECALL_TOOL or not isinstance(c, str) for c, name, _ in calls):
        return None
    out: list[tuple[str, str]] = []
    for call_id, _, args in calls:
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                args = {}
        rid = args.get("id") if isinstance(args, Mapping) else None
        out.append((call_id, str(rid) if rid is not None else ""))
    return out


def resolved_round(
    format: str, response: Any, state: Any, *, lookup: Callable[..., Any] = recall
) -> list[Any] | None:
    """The items to append to the request when the upstream's ``response`` calls
    ``tokenflex_recall`` only: the model's call, then each call's result (the recalled
    content as JSON), in ``format``; None when it calls no tool or another tool.

    The caller re-fits the request with them appended (the newest round, so the cached
    prefix is kept) and sends it again.
    """
    calls = recall_calls(format, response)
    if calls is None:
        return None
    answers = [(c, recall_text(r, lookup(r, state=state))) for c, r in calls]
    return get_format(format).tool_round(response, answers)


def with_recall_tool(body: dict[str, Any], plan: Any) -> dict[str, Any]:
    """``body`` with the plan's tools (the client's, then ``tokenflex_recall``) when the
    plan added the recall tool; else ``body`` itself."""
    if plan.extras.get("recall"):
        body["tools"] = list(plan.tools)
    return body


# -- fitting with recall: one sequence for fit(), Prompt and Conversation --------------


_OVERHEADS: weakref.WeakKeyDictionary[Any, dict[str, tuple[int, int]]] = weakref.WeakKeyDictionary()
""":func:`recall_overhead` by counter object, then format (gone with the counter)."""
_OVERHEADS_LOCK = threading.Lock()


def recall_overhead(counter: Any, format: str | None = None) -> tuple[int, int]:
    """What the ``tokenflex_recall`` tool in ``format``'s shape (default: the default
    format's) adds to a request counted by ``counter``, and at least what a cut note with
    a recall id costs: the note with the longest count, plus an id's characters each a
    token or more (an id's hex digits tokenize worse than any one sample of them).

    Both are constant for a counter: kept by counter object (one per model and registry
    generation, :func:`~tokenflex.counting.get_counter`), so a fit with recall counts
    them once, not on every call; an entry goes with its counter.

    >>> from tokenflex import get_counter
    >>> recall_overhead(get_counter("gpt-4o")) == recall_overhead(get_counter("gpt-4o"))
    True
    """
    name = format or default_format().name
    by_format = _OVERHEADS.get(counter)
    hit = by_format.get(name) if by_format is not None else None
    if hit is not None:
        return hit
    from .engine import cut_note

    tool_tokens = counter.base([recall_tool(name)]) - counter.base(None)
    note_tokens = counter.message(cut_note(10**6, "")) + 2 * _ID_CHARS
    with _OVERHEADS_LOCK:
        _OVERHEADS.setdefault(counter, {})[name] = (tool_tokens, note_tokens)
    return tool_tokens, note_tokens


class _Deferred:
    """A session memory whose ``remember`` waits until the plan sent is chosen (a fit
    with recall may make two, see :class:`RecallFit`)."""

    def __init__(self, memory: Any) -> None:
        self.memory = memory
        self.args: tuple[Any, ...] | None = None

    def previous_cut(self, source: Sequence[Message]) -> Any:
        return self.memory.previous_cut(source)

    def remember(self, source: Any, cut: Any, messages: Any, counter: Any) -> int | None:
        self.args = (source, cut, messages, counter)
        return None

    def settle(self, plan: Plan) -> Plan:
        """``plan`` with the prefix it shares with the previous one; recorded."""
        if self.args is None:
            return plan
        from .cost import cached_tokens

        prefix = self.memory.remember(*self.args)
        if prefix is None:
            return plan
        return plan.evolved(prefix_tokens=prefix, cached_tokens=cached_tokens(plan.model, prefix))


class _Unheld(_Deferred):
    """A deferred memory whose previous cut is not held (what a cut made afresh at
    this turn keeps), its other marks kept."""

    def previous_cut(self, source: Sequence[Message]) -> Any:
        cut = self.memory.previous_cut(source)
        return None if cut is None else cut._replace(start=0)


class RecallFit:
    """The steps of a fit with recall (``fit(..., recall=True)``, :class:`~tokenflex.Prompt`,
    :class:`~tokenflex.Conversation`), driven by :func:`fit_recalling` and
    :func:`afit_recalling`.

    0. Fit without the tool (and without a summarizer). When that plan leaves nothing
       out it is the one sent, and nothing else is made: a request that fits costs one
       pass (:func:`recall_flow`).
    1. Fit with the ``tokenflex_recall`` tool counted and the ids named. A
       cache-stable cut pays for the tool and the note below its low-water mark
       (:meth:`Recaller.low_water`).
    2. When that plan cuts the history afresh and sends more than a cut made afresh
       without recall would (the mark falls between the same message boundaries), fit
       it again cut by that much more: a cut with recall leaves the next turns at least
       the room a cut without recall would leave, so it is held as many turns and
       costs no share of the cached prefix.
    3. When that plan leaves nothing out, or leaves out no more than the room the tool
       took plus the room it left unused (so that without the tool it may fit whole), or
       cannot be made (the required input does not fit with the tool), fit as without
       recall: a request that fits goes out unchanged, and the tool is never what makes
       a request drop a message or be refused.
    4. A summarizer is called only for the plan that is sent: the plan with the tool is
       made without one first, and made again with it once it is known to be the one
       sent (a request that fits without the tool costs no summarizer call).
    5. The plan chosen: with the tool, its left-out messages are stored and
       :attr:`tools` says what to send (the caller's tools, then ``tokenflex_recall`` in
       the caller's format); its conversation's memory records it.

    Args:
        layout: The caller's layout (a dataclass with ``tools`` and ``recall`` fields).
        recaller: Where what is left out goes, and in which format.
        memory: The conversation's session memory (cache-stable cuts), or None.
        summarizer: The fit's summarizer, or None.
        given_tools: The caller's tools, as given (sent before ``tokenflex_recall``).
    """

    def __init__(
        self,
        layout: Any,
        recaller: Recaller,
        memory: Any,
        summarizer: Any,
        given_tools: Sequence[Any] | None,
    ) -> None:
        self.layout, self.recaller, self.memory = layout, recaller, memory
        self.summarizer, self.given_tools = summarizer, given_tools
        counted = recall_tool(default_format().name)
        counter = get_counter(layout.model)
        self.tool_tokens, self.note_tokens = recall_overhead(counter, default_format().name)
        """What the recall tool costs, and at least what a cut note with a recall id
        costs (:func:`recall_overhead`)."""
        recaller.overhead, recaller.counter = (self.tool_tokens, self.note_tokens), counter
        self.with_tool = replace(layout, tools=[*(layout.tools or ()), counted], recall=recaller)
        self.mem1 = _Deferred(memory) if memory is not None else None
        self.mem2 = _Deferred(memory) if memory is not None else None
        self.unheld = _Unheld(memory) if memory is not None else None
        self.alt_memory = self.mem2
        """The memory the plan without recall was made with (settled if it is sent)."""
        self.tools: list[Any] | None = None
        """After :meth:`chosen`: the tools to send when the plan has recall, else None."""
        self.cut_before = self._held(memory)
        """The conversation's previous plan cut its history (a cut this plan may hold):
        :func:`recall_flow` makes the plan with the tool first."""

    def _held(self, memory: Any) -> bool:
        """Whether ``memory`` holds a cut of the layout's history (read once: the fit
        reads the same memory)."""
        if memory is None:
            return False
        from .engine.layout import stable_target

        target = stable_target(self.layout, self.layout.model)
        if target is None:
            return False
        cut = memory.previous_cut(target.source)
        return cut is not None and cut.start > target.lo

    def first(self) -> tuple[Any, Any, Any]:
        return self.with_tool, self.mem1, self.summarizer

    def second(self, plan: Plan | None) -> tuple[Any, Any, Any] | None:
        if plan is None:  # the required input does not fit with the tool: no recall
            return self.layout, self.mem2, self.summarizer
        if not self.recaller.left_out(plan.dropped.runs()):
            return self.layout, self.mem2, self.summarizer
        if self._fresh_cut(plan) is not None:  # what a cut now would keep without recall
            self.alt_memory = self.unheld
            return self.layout, self.unheld, None
        if self._cuts_without_tool(plan):
            return None
        return self.layout, self.mem2, None  # nothing summarized for a plan maybe not sent

    def _cuts_without_tool(self, plan: Plan) -> bool:
        """Whether the request, without the tool, surely leaves something out too: what
        this plan dropped whole is more than the room the tool, the cut note and the
        summary took plus the room the plan left unused (a cut may stop well below the
        window, at a low-water mark). A lower bound of the whole request, so a request
        that fits without the tool is always fitted again without it. Counted lazily:
        stops as soon as it is over, so a long history is never read whole."""
        room = plan.context_window - plan.safety_margin
        room -= min(plan.requested_max_tokens, plan.min_output_tokens)
        added = self.tool_tokens + self.note_tokens
        if plan.summary is not None:
            added += plan.summary.tokens
        slack = room - (plan.input_tokens - added)
        total = 0
        dropped = plan.dropped
        # by run (no record per item), newest first: the running counts hold those, and a
        # sum over nonnegative counts passes the slack in any order if it does at all
        for section, a, b, reason in reversed(dropped.runs()):
            if section == TakenOut.section or reason in (*ITEM_REASONS, "summarized"):
                continue  # never sent, or sent shrunk (its stand-in is in the input)
            source = dropped.source(section)
            if isinstance(source, MessageSection):
                total = source.tokens_until(a, b, total, slack, dropped.counter)
            else:
                for i in range(a, b):
                    total += dropped.cost_of(section, i)
                    if total > slack:
                        break
            if total > slack:
                return True
        return False

    def _fresh_cut(self, plan: Plan) -> int | None:
        """Where a cache-stable cut made afresh (down to the low-water mark) starts the
        history in ``plan``; None for a plan that holds its cut, cuts no history or
        has a summary."""
        if plan.summary is not None:
            return None
        runs = [r for r in plan.dropped.runs() if r[0] in self.recaller.sections]
        if not any(reason == "low_water" for *_, reason in runs):
            return None
        return max(b for _, _, b, reason in runs if reason not in (*ITEM_REASONS, "summarized"))

    def third(self, plan: Plan | None, alt: Plan | None) -> tuple[Any, Any, Any] | None:
        """A cut made afresh, no lower than the same cut without recall: the plan again,
        the history cut by what it sends more than ``alt`` (the plan without recall), so
        the held cut lasts as many turns as without recall. None: ``plan`` stands."""
        if plan is None or alt is None or alt.summary is not None:
            return None
        first = self._fresh_cut(plan)
        more = plan.input_tokens - alt.input_tokens
        if first is None or more <= 0:
            return None
        self.recaller.lower = (first, more)
        return self.first()

    def sends_alt(self, plan: Plan | None, alt: Plan | None) -> bool:
        """Whether :meth:`chosen` sends ``alt``, the plan without recall: there is one,
        and the plan with the tool cannot be made, or one of them leaves nothing out."""
        left_out = self.recaller.left_out
        return alt is not None and (
            plan is None or not left_out(plan.dropped.runs()) or not left_out(alt.dropped.runs())
        )

    def chosen(self, plan: Plan | None, alt: Plan | None) -> Plan:
        self.recaller.lower = None
        if self.sends_alt(plan, alt):
            assert alt is not None
            return alt if self.alt_memory is None else self.alt_memory.settle(alt)
        assert plan is not None
        ids = self.recaller.commit(plan.dropped.runs())
        extras = {**plan.extras, "recall": {"ids": ids, "tool": RECALL_TOOL}}
        plan = plan.evolved(extras=extras)
        if self.mem1 is not None:
            plan = self.mem1.settle(plan)
        self.tools = [*(self.given_tools or ()), recall_tool(self.recaller.format)]
        return plan


def recall_flow(
    rf: RecallFit,
) -> Generator[tuple[Any, Any, Any], Plan | None, tuple[Any, Any]]:
    """The steps of ``rf``, written once (sans I/O): it yields ``(layout, memory,
    summarizer)`` for each plan it needs and receives the plan (a
    :class:`~tokenflex.errors.ContextOverflowError` thrown in means that plan's required
    input does not fit); it returns the plans for :meth:`RecallFit.chosen`.
    :func:`fit_recalling`, :func:`afit_recalling` and fit()'s own flow drive it.

    The plan without the tool comes first (no summarizer: it may not be the one sent),
    unless the conversation's previous plan cut its history (:attr:`RecallFit.cut_before`:
    this one most likely cuts too). When it leaves nothing out, it is sent and nothing
    else is made: a request that fits costs one pass, as without recall. Otherwise the
    steps of :class:`RecallFit` follow, reusing that plan wherever they would make the
    same one again. Either order sends the same plan.
    """
    layout, memory, summarizer = rf.first()
    plain_layout, plain_memory = rf.layout, rf.mem2
    made: Plan | None = None  # the plan without the tool and without a summarizer
    if not rf.cut_before:
        try:
            made = yield plain_layout, plain_memory, None
        except ContextOverflowError:
            # Without the tool the required input does not fit, so with it neither (the
            # tool only adds): the flow below would send the plan without recall,
            # summarized where there is a summarizer.
            if summarizer is None:
                raise
            summarized = yield plain_layout, plain_memory, summarizer
            return None, summarized
        assert made is not None
        if not rf.recaller.left_out(made.dropped.runs()):
            return None, made  # fits without the tool (rf.sends_alt): sent as it is
    tried: Plan | None = None
    with contextlib.suppress(ContextOverflowError):  # the tool's tokens: fit without
        # no summary yet: the plan without the tool may be the one sent
        tried = yield layout, memory, None
    again = rf.second(tried)
    alt: Plan | None = None
    if again is not None and made is not None and _same(again, plain_layout, plain_memory):
        alt = made  # the plan without the tool made above
    elif again is not None:
        alt = yield again
    if summarizer is not None and tried is not None and not rf.sends_alt(tried, alt):
        with contextlib.suppress(ContextOverflowError):
            tried = yield layout, memory, summarizer  # the plan sent: summarized now
    lower = rf.third(tried, alt)
    if lower is not None:
        tried = yield lower
    return tried, alt


def _same(step: tuple[Any, Any, Any], layout: Any, memory: Any) -> bool:
    """Whether ``step`` is ``(layout, memory, None)`` (by identity: layouts hold lists)."""
    return step[0] is layout and step[1] is memory and step[2] is None


def fit_recalling(rf: RecallFit, solve: Callable[[Any, Any, Any], Plan]) -> Plan:
    """Drive ``rf``: ``solve(layout, memory, summarizer)`` makes one plan."""
    flow = recall_flow(rf)
    step = next(flow)
    while True:
        try:
            plan = solve(*step)
        except ContextOverflowError as exc:
            thrown: Any = exc
        else:
            thrown = None
        try:
            step = flow.throw(thrown) if thrown is not None else flow.send(plan)
        except StopIteration as done:
            return rf.chosen(*done.value)


async def afit_recalling(rf: RecallFit, solve: Callable[[Any, Any, Any], Awaitable[Plan]]) -> Plan:
    """Async twin of :func:`fit_recalling` (what is left out is stored in a worker thread)."""
    flow = recall_flow(rf)
    step = next(flow)
    while True:
        try:
            plan = await solve(*step)
        except ContextOverflowError as exc:
            thrown: Any = exc
        else:
            thrown = None
        try:
            step = flow.throw(thrown) if thrown is not None else flow.send(plan)
        except StopIteration as done:
            return await asyncio.to_thread(rf.chosen, *done.value)
