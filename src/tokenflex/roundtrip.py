"""What fit() does around the engine for a request format: in, then back out.

:func:`prepare` reads the caller's list (detecting the format unless ``format=`` names
it) into internal messages and chat-shaped tools for counting; the plain-chat fast path
converts nothing. :func:`finish` turns the engine's plan back into the caller's format:
the kept internal messages give back the caller's own items, system text the plan added
(a summary, packed documents) goes into Anthropic's ``system`` or becomes a Responses
message, dropped runs are re-indexed to the caller's list (each item read from its unit by a
dict look-up), and the warnings say which counts are estimates. The reasoning taken out
of chat messages (``Converted.reasoning``) is listed by the engine's plan itself
(:class:`tokenflex.engine.TakenOut`).

Pay for what is read, once: :func:`prepare` remembers the last few lists it read (by
identity, with a record of their items that a list grown by appending extends), so a
list fitted again, or grown by appending, is converted and checked only where it is new;
:func:`check_prepared` checks each unit once per model, and not at all where the
proxy's parser checked the list as strictly (:func:`~tokenflex.formats.body.vouched`). A
message edited in place (the same dict given a new ``content``) is caught where the fit
reads it: :func:`fresh` compares the kept units with what was read before, and fit()
starts over when one changed. An edit inside a nested value (a block of a content list
changed in place) is not seen; give a new dict instead. A list a format's parse vouched
for is a request read once (the proxy's: no one else holds it): its items are not marked,
and when its fit is done its read is kept only as the last of its conversation
(:func:`read_through`): the proxy parses the next turn of a conversation with the objects
of the bytes it repeats (:class:`~tokenflex.server._validate.ParsedBodies`), so that turn's
list opens with the very objects of the last one's, and is read only where it is new
(:meth:`_Memo.continued`). Its running counts are taken along only by the one turn that
goes on from the read as it was counted; another turn from the same read counts afresh.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .counting.media import estimate_notes, estimated_at
from .counting.shape import check_one, shape_checker
from .engine.passes import TakenOut
from .engine.sections import ListIndex, MessageSection
from .errors import InvalidInputError
from .formats.body import vouched
from .formats.chat import REASONING_FIELD, is_plain_chat
from .formats.detect import detect_format, format_marks
from .formats.native import Converted, NativeMessage
from .formats.registry import get_format
from .formats.tools import tools_to_chat
from .message.checks import BadMessage
from .message.objects import json_ready, tools_json_ready
from .models import Model
from .plan import SENT_SHRUNK, DroppedItems, DropRun, ItemSource, Plan
from .tokenizers.base import native, plain_until

__all__ = [
    "Prepared",
    "Replay",
    "check_prepared",
    "finish",
    "forget",
    "fresh",
    "goes_on_later",
    "prepare",
    "read_through",
    "remember",
    "replay",
]

_MESSAGE_SECTIONS = ("system", "summary", "pinned", "history", "current")
_REPLAYED = ("system", "pinned", "history", "current")
"""The sections whose items are the request's own messages, read again by :func:`replay`
(a summary section's are the plan's)."""


@dataclass
class Prepared:
    """A request ready for the engine, and what is needed to give it back."""

    messages: Sequence[Any]
    """Internal messages (the caller's list itself on the fast path)."""
    tools: Sequence[Any] | None
    """Tools in the chat shape, for counting."""
    given_tools: Sequence[Any] | None
    """Tools as the caller gave them (sent by ``plan.request()``)."""
    converted: Converted | None
    """None on the fast path (plain chat dicts: nothing to give back)."""
    checked: dict[int, tuple[Any, int]] = field(default_factory=dict)
    """Per model, by its id: the :class:`Model` (held, so its id stays its own) and how
    many leading messages are checked for it (an equal model of another object checks
    again: a model is not hashed on every call)."""
    marks: dict[int, Any] = field(default_factory=dict)
    """A converted request read again: caller's index -> :func:`_mark` of the items of
    the unit that starts there, as they were converted (see :func:`fresh`)."""
    given: Sequence[Any] | None = None
    """The caller's list, when this request came from the memo (see :func:`fresh`)."""
    plain: bool = False
    """Every message holds string content only (no part can be an estimate)."""
    index: Any = None
    """Running counts of a remembered list's internal messages (made by ``prepare``'s
    ``new_index``: fit()'s :class:`~tokenflex.engine.ListIndex`), shared by every read
    of that list."""
    vouched: int = 0
    """How many leading messages need no check for any model: their items were checked
    by the format's parse (the proxy's route), at least as strictly (the units of
    ``system=`` among them are checked all the same: the parse vouches for the items)."""
    last: Any = None
    """What fit() kept of its last plan of this list (:func:`remember`), when the list
    is read again from the memo, unchanged in length or grown by appending (None:
    nothing kept); fit() checks whether it still holds."""

    def evolved(self, **changes: Any) -> Prepared:
        """A shallow copy with ``changes`` (``dataclasses.replace`` without its per-call
        field walk and ``__init__``: fit() makes one or two on every call)."""
        copy = object.__new__(Prepared)
        copy.__dict__.update(self.__dict__)
        copy.__dict__.update(changes)
        return copy


_MEMO_MIN = 32
"""Lists shorter than this are remembered from their second read: a chat loop's list comes
back every turn, a short request parsed once (the proxy's) is read afresh."""
_SEEN_SIZE = 8
"""Short lists noted on their first read (:meth:`_Memo.seen`)."""
_MEMO_SIZE = 4
"""Lists remembered (each with a copy of its items and its conversion)."""
_PARSED_ITEMS = 20_000
"""Items of the parses' lists kept after their fit (:meth:`_Memo.continued`), in all."""
_PARSED_READS = 64
"""Such reads kept (each turn looks at them all, newest first)."""
_SAME_RUN: Callable[[list[Any], int, list[Any], int], int] | None = native("same_run")


@dataclass
class _Read:
    """One list :func:`prepare` read: its items then, the options, what it made."""

    given: list[Any]
    """The caller's list (kept: its id stays unique while it is remembered)."""
    items: list[Any]
    """Its items when it was read: ``items[:n]``. The list is shared with the reads of
    the same list grown since, which append to it (never change what is there)."""
    n: int
    key: tuple[Any, ...]
    system: Any
    prepared: Prepared
    last: Any = None
    """What fit() kept of its plan of this read (:func:`remember`)."""
    going: bool = False
    """A parse's list whose conversation goes on (:func:`~tokenflex.formats.body.goes_on`):
    its read is kept past its fit for the next turn (:func:`read_through`)."""
    once: bool = False
    """The list came from a format's parse (:func:`~tokenflex.formats.body.vouched`): a
    request read once. Its items' fields were not marked (:func:`_mark`), so this read
    serves the fit that made it (its running counts) and never a later read of the
    list, which reads it afresh."""


class _Memo:
    """The last :data:`_MEMO_SIZE` lists read, by identity, and the last reads of a
    parse's lists once their fit is done (thread-safe)."""

    def __init__(self) -> None:
        self._reads: dict[int, _Read] = {}
        self._seen: dict[int, list[Any]] = {}
        self._parsed: list[_Read] = []
        """A parse's lists read (:attr:`_Read.once`), oldest first, whose fit is done:
        the next turn of their conversation goes on from them (:meth:`continued`)."""
        self._lock = threading.Lock()

    def continued(self, messages: list[Any], key: tuple[Any, ...]) -> tuple[_Read, int] | None:
        """The read of a parse's list that ``messages`` (another parse's list) goes on
        from, and how many of its items it repeats: the very objects that read saw. The
        proxy parses a conversation's next turn with the items it repeats reused
        (:class:`~tokenflex.server._validate.ParsedBodies`), so its list opens with the
        last turn's objects, which no one edits (all of them, or all but the last few: an
        agent moves its cache breakpoint to the newest message); compared by identity in
        C. The newest read repeated whole, else the one repeated furthest."""
        if _SAME_RUN is None or not messages:
            return None
        first = messages[0]
        best: tuple[_Read, int] | None = None
        for read in reversed(self._parsed[:]):
            if read.key != key or read.given[0] is not first:
                continue
            m = min(_SAME_RUN(messages, 0, read.given, 0), read.n)
            if m == read.n:
                return read, m
            if best is None or m > best[1]:
                best = read, m
        return best

    def done(self, read: _Read) -> None:
        """``read``'s fit is done: out of the reads by identity, kept as the last read of
        its conversation (the oldest out past :data:`_PARSED_ITEMS` items or
        :data:`_PARSED_READS` reads)."""
        with self._lock:
            self._reads.pop(id(read.given), None)
            parsed = [r for r in self._parsed if r is not read]
            parsed.append(read)
            total = sum(r.n for r in parsed)
            while parsed and (total > _PARSED_ITEMS or len(parsed) > _PARSED_READS):
                total -= parsed.pop(0).n
            self._parsed = parsed

    def seen(self, messages: list[Any]) -> bool:
        """Whether the short list ``messages`` (this very object) was read before; noted
        for the next read if not (the last :data:`_SEEN_SIZE`, held so their ids stay
        theirs). A list read once is not worth remembering; one read again is a loop's."""
        key = id(messages)
        if self._seen.get(key) is messages:
            return True
        with self._lock:
            self._seen.pop(key, None)
            while len(self._seen) >= _SEEN_SIZE:
                del self._seen[next(iter(self._seen))]
            self._seen[key] = messages
        return False

    def get(self, messages: list[Any]) -> _Read | None:
        read = self._reads.get(id(messages))
        return read if read is not None and read.given is messages else None

    def put(self, read: _Read) -> None:
        with self._lock:
            self._reads.pop(id(read.given), None)
            while len(self._reads) >= _MEMO_SIZE:
                del self._reads[next(iter(self._reads))]
            self._reads[id(read.given)] = read

    def forget(self, messages: Sequence[Any]) -> None:
        with self._lock:
            self._reads.pop(id(messages), None)
            self._seen.pop(id(messages), None)

    def clear(self) -> None:
        with self._lock:
            self._reads.clear()
            self._seen.clear()
            self._parsed = []


_MEMO = _Memo()


def forget(messages: Sequence[Any] | None = None) -> None:
    """Forget what :func:`prepare` remembers of ``messages`` (of every list: None)."""
    if messages is None:
        _MEMO.clear()
    else:
        _MEMO.forget(messages)


def read_through(messages: Sequence[Any]) -> None:
    """The fit of ``messages`` is done: when the memo's read of it was a request read
    once (a format's parse made the list: :attr:`_Read.once`), the memo keeps its places
    for lists read again, and the read only as the last of its conversation, for the
    next turn's list to go on from (:meth:`_Memo.continued`; bounded)."""
    read = _MEMO.get(messages) if type(messages) is list else None
    if read is not None and read.once:
        if read.going:
            _MEMO.done(read)
        else:  # (a request read once: kept, its objects would only burden the collector)
            _MEMO.forget(messages)


def goes_on_later(messages: Sequence[Any]) -> bool:
    """Whether ``messages`` is a request read once whose conversation goes on (a
    proxy's parse of a turn that went on from the last: its next turn is expected to
    repeat these very objects, which no one edits)."""
    read = _MEMO.get(messages) if type(messages) is list else None
    return read is not None and read.once and read.going


def remember(messages: Sequence[Any], last: Any) -> None:
    """Keep ``last`` (fit()'s own record of its plan) with the memo's read of
    ``messages``, as long as that read is the list's latest. :attr:`Prepared.last` gives
    it back when the list is read again unchanged, or grown by appending (once: the
    grown list's read keeps the record fit() makes of it)."""
    read = _MEMO.get(messages) if type(messages) is list else None
    if read is not None and read.n == len(messages):
        read.last = last


def _read_again(read: _Read, messages: list[Any]) -> list[Any] | None:
    """The record of ``messages`` for its next read (``items[:len(messages)]``) when it
    opens with the items ``read`` saw, None where it does not. One C-speed pass of
    ``==`` over the list, which is ``is`` for the same objects and never touches them
    (equality for equal copies: an equal copy converts to the same internal message, and
    :func:`finish` gives back the caller's objects from the list itself); the record
    is ``read``'s own list, its appended items added to it (O(the new items)), unless
    another read of it appended first (then a copy). The items of a list compared
    unequal stay past ``read.n``, where no read looks."""
    n, items = read.n, read.items
    if len(messages) < n:
        return None
    try:
        if len(messages) > n:
            with _APPEND_LOCK:
                if len(items) == n:
                    items.extend(messages[n:])  # the shared record's new items
                else:  # another read of this list appended: a record of its own
                    items = [*items[:n], *messages[n:]]
        elif len(items) != n:
            items = items[:n]
        return items if messages == items else None  # (the new items: themselves)
    except Exception:  # an item whose == raises: read it afresh
        return None


_APPEND_LOCK = threading.Lock()
"""Held to append to a shared record (:func:`_read_again`): of two reads that find it at
their length, one appends, the other copies."""


def prepare(
    messages: Sequence[Any],
    *,
    format: str | None,
    system: Any,
    tools: Sequence[Any] | None,
    keep_reasoning: bool = False,
    lazy_history: bool = False,
    reuse: bool = False,
    new_index: Callable[..., Any] | None = None,
) -> Prepared:
    """The caller's request as internal messages.

    With ``reuse`` (fit() and afit()), a list read before is read again only where it is
    new (appended items; the last unit of a converted request is converted again, as a
    Responses turn may go on); see the module doc. ``new_index`` makes the running
    counts a remembered list keeps (:attr:`Prepared.index`), given ``read_once=True`` for
    a list a parse vouched for (its fit alone reads it: no copies to check it by).

    Raises:
        InvalidInputError: an unknown ``format``, or ``system=`` / ``history=`` with a
            format that cannot take them.
        InvalidMessagesError: a message that is not of the format (names its index).
    """
    if format is not None:
        get_format(format)  # raises for an unknown name, listing the known ones
    counted = (
        tools_to_chat(tools)
        if tools
        and isinstance(tools, list | tuple)
        and not all(isinstance(t, Mapping) and "function" in t for t in tools)
        else tools
    )
    parse = vouched(messages) if type(messages) is list else None
    checked_as, going = parse if parse is not None else (None, False)
    if (
        not reuse
        or type(messages) is not list
        or lazy_history
        or (len(messages) < _MEMO_MIN and (checked_as is not None or not _MEMO.seen(messages)))
    ):
        # (a short list a parse vouched for is a request read once: not even noted)
        prepared = _prepare(messages, format, system, counted, tools, keep_reasoning, lazy_history)
        return _trusted(prepared, checked_as)
    key = (format, keep_reasoning)
    read = _MEMO.get(messages)
    if read is not None and read.once:
        read = None  # (a parse's list read again: no marks to trust it by)
    went_on = read is None and checked_as is not None
    if went_on:  # a parse's list: the next turn of one read before, by its objects?
        found = _MEMO.continued(messages, key)
        if found is not None:
            read, repeated = found
            if repeated < read.n:
                read = _truncated(read, repeated, new_index)
    items = (
        _read_again(read, messages)
        if read is not None and read.key == key and _same_system(read.system, system)
        else None
    )
    if read is not None and items is not None:
        # a conversation's turn that does not hold the record as its counts were made
        # (another turn went on from the same read first) counts afresh
        index = (
            (new_index(read_once=True) if new_index is not None else None)
            if went_on and items is not read.items
            else read.prepared.index
        )
        last = None if went_on else read.last
        if read.prepared.converted is not None:  # (read again: its estimated parts found once)
            _places(read.prepared.converted)
        if len(messages) == read.n:
            return _trusted(
                read.prepared.evolved(tools=counted, given_tools=tools, last=last, index=index),
                checked_as,
            )
        grown = _grown(read, messages, counted, tools)
        if grown is not None:
            grown = _trusted(grown, checked_as)
            grown.last = last  # (fit()'s record of the list as it was: it grew since)
            grown.index = index
            turn = _Read(messages, items, len(messages), key, system, grown, once=went_on)
            turn.going = going or went_on
            _MEMO.put(turn)
            return grown
    prepared = _trusted(
        _prepare(messages, format, system, counted, tools, keep_reasoning, False), checked_as
    )
    once = checked_as is not None  # a parse's list: no one else holds it to edit
    index = new_index(read_once=once) if new_index is not None else None
    prepared = prepared.evolved(given=messages, index=index)
    if prepared.converted is not None and not once:
        prepared.marks.update(_marks(prepared.converted, messages, 0))
    # (a grown list read afresh: the record it was compared with is its own)
    record = list(messages) if items is None else items
    read = _Read(messages, record, len(messages), key, system, prepared, once=once)
    read.going = going
    _MEMO.put(read)
    return prepared


def _truncated(read: _Read, m: int, new_index: Callable[..., Any] | None) -> _Read | None:
    """``read`` as if its list had held its first ``m`` items only (the list of the turn
    it is the read of went on from there another way): what it converted and checked of
    them, and running counts of its own (None: read the list afresh). A converted read
    keeps its units within those items (each unit's items are known: a
    :class:`~tokenflex.formats.native.NativeMessage`'s); the counts are the old read's
    for the groups within them (:meth:`~tokenflex.engine.ListIndex.truncated`: a copy,
    never the old read's own, which may hold the items after them)."""
    old = read.prepared
    conv = old.converted
    given = read.given[:m]
    if conv is None:
        messages: list[Any] = given
        converted = None
        keep = m
    else:
        units: list[Any] = []
        for u in conv.messages:
            if not isinstance(u, NativeMessage):
                return None  # (a chat unit of no item: not told apart)
            if u.start + len(u.native) > m:
                break
            units.append(u)
        keep = len(units)
        messages = units
        converted = Converted(
            conv.format,
            units,
            system=conv.system,
            count=m,
            reasoning=[(i, t) for i, t in conv.reasoning if i < m],
            estimated=_carried(_places(conv), keep),
        )
    checked = {k: (model, min(v, keep)) for k, (model, v) in old.checked.items()}
    index: Any = (
        old.index.truncated(keep)
        if isinstance(old.index, ListIndex)
        else (new_index(read_once=True) if new_index is not None else None)
    )
    prepared = Prepared(
        messages,
        old.tools,
        old.given_tools,
        converted,
        checked,
        given=given,
        plain=old.plain,
        index=index,
        vouched=min(old.vouched, keep),
    )
    return _Read(read.given, read.items[:m], m, read.key, read.system, prepared, once=True)


def _trusted(prepared: Prepared, checked_as: str | None) -> Prepared:
    """``prepared`` with all its messages vouched for, when the format's parse checked
    the caller's list (``checked_as``) in the format it was read in."""
    read_as = prepared.converted.format if prepared.converted is not None else "chat"
    if checked_as is None or checked_as != read_as:
        return prepared
    return prepared.evolved(vouched=len(prepared.messages))


def _same_system(a: Any, b: Any) -> bool:
    try:
        return a is b or (type(a) is type(b) and bool(a == b))
    except Exception:  # pragma: no cover - a system whose == raises
        return False


def _mark(items: Sequence[Any]) -> tuple[Any, ...]:
    """What an item was when it was read, cheaply: its top-level fields (a field given a
    new value is seen; an edit inside a nested value is not)."""
    return tuple(
        tuple(i.items()) if isinstance(i, dict) else tuple(getattr(i, "__dict__", {}).items())
        for i in items
    )


def _marks(conv: Converted, given: Sequence[Any], lo: int) -> dict[int, Any]:
    """:func:`_mark` of the caller's items of every unit of ``conv`` from index ``lo``
    (read newest first: the units are in the order of their items, so a grown
    conversation's are found in O(what it added))."""
    out: dict[int, Any] = {}
    for m in reversed(conv.messages):
        if not isinstance(m, NativeMessage):
            continue
        if m.start < lo:
            break
        out[m.start] = _mark(given[m.start : m.start + len(m.native)])
    return out


def _grown(
    read: _Read, messages: list[Any], counted: Sequence[Any] | None, tools: Sequence[Any] | None
) -> Prepared | None:
    """The request ``read`` made, grown by the items appended since (None: read it
    afresh). Only the appended items are converted and checked, and the last unit
    before them again (a Responses assistant turn goes on with the next item)."""
    old = read.prepared
    n = read.n
    conv = old.converted
    if conv is None:
        if not is_plain_chat(messages[n:]):
            return None
        return Prepared(
            messages,
            counted,
            tools,
            None,
            dict(old.checked),
            given=messages,
            plain=True,
            index=old.index,
            vouched=old.vouched,
        )
    units = conv.messages
    keep = len(units)
    restart = n
    if units and isinstance(units[-1], NativeMessage) and units[-1].start >= 0:
        keep, restart = len(units) - 1, units[-1].start
    elif not get_format(conv.format).internal:
        return None  # pragma: no cover - every converted unit is a NativeMessage
    if read.key[0] is None and set(format_marks(messages[restart:])) - {conv.format}:
        return None  # items of another format appended: detect (and name the mix) afresh
    try:
        tail = get_format(conv.format).to_internal(messages[restart:], keep_reasoning=read.key[1])
    except BadMessage as exc:
        raise _shifted_error(exc, restart) from None
    for m in tail.messages:
        if isinstance(m, NativeMessage):
            m.start += restart
    # the units from the restart on are read again (a unit starts at ``restart`` at most:
    # the last one); a read once is never looked over for edits (:func:`fresh`): no marks
    marks: dict[int, Any] = {}
    if not read.once:
        marks = old.marks.copy()
        marks.pop(restart, None)
    grown = Converted(
        conv.format,
        [*units[:keep], *tail.messages],
        system=conv.system,
        count=len(messages),
        reasoning=[
            *((i, t) for i, t in conv.reasoning if i < restart),
            *((i + restart, t) for i, t in tail.reasoning),
        ],
        estimated=_carried(_places(conv), keep, tail.messages),
    )
    checked = {k: (m, min(v, keep)) for k, (m, v) in old.checked.items()}
    prepared = Prepared(
        grown.messages,
        counted,
        tools,
        grown,
        checked,
        marks,
        messages,
        index=old.index,
        vouched=min(old.vouched, keep),
    )
    if not read.once:
        prepared.marks.update(_marks(grown, messages, restart))
    return prepared


def _shifted_error(exc: BadMessage, offset: int) -> BadMessage:
    """``exc`` of a converter that read ``items[offset:]``, naming the caller's index."""
    prefix = "messages["
    if exc.args and str(exc.args[0]).startswith(prefix):
        where = str(exc.args[0])[len(prefix) :].split("]", 1)[0]
        if where.isdigit():
            return exc.at(int(where) + offset)
    return exc


def fresh(plan: Plan, prepared: Prepared) -> bool:
    """Whether the units ``plan`` keeps are as they were read (always, for a request not
    read from the memo). False: one was edited in place since; forget the list and fit
    it again. O(kept units); nothing for a request read once (no one edits its items:
    :attr:`~tokenflex.engine.ListIndex.read_once`)."""
    given = prepared.given
    if given is None:
        return True
    if isinstance(prepared.index, ListIndex) and prepared.index.read_once:
        return True
    if prepared.converted is None:
        return is_plain_chat(plan.messages)
    marks = prepared.marks
    for m in plan.messages:
        if isinstance(m, NativeMessage) and m.start >= 0:
            mark = marks.get(m.start)
            if mark is not None and mark != _mark(given[m.start : m.start + len(m.native)]):
                return False
        elif (
            type(m) is dict
            and REASONING_FIELD in m
            and get_format(prepared.converted.format).internal
        ):
            return False  # pragma: no cover - reasoning put on a kept chat dict in place
    return True


def _prepare(
    messages: Sequence[Any],
    format: str | None,
    system: Any,
    counted: Sequence[Any] | None,
    tools: Sequence[Any] | None,
    keep_reasoning: bool,
    lazy_history: bool,
) -> Prepared:
    given = get_format(format) if format is not None else None
    if (given is None or given.internal) and system is None and is_plain_chat(messages):
        return Prepared(messages, counted, tools, None, plain=True)
    fmt = given or get_format(detect_format(messages, system=system))
    if lazy_history and not fmt.internal:
        raise InvalidInputError(
            f"history= reads chat messages; this request is {fmt.name}. Pass the whole "
            "conversation as messages."
        )
    conv = fmt.to_internal(messages, system, keep_reasoning=keep_reasoning)
    return Prepared(conv.messages, counted, tools, conv)


def check_prepared(prepared: Prepared, model: Model) -> None:
    """Check every internal message (kept or not) the way counting reads it, naming the
    caller's index: the first of the items a unit stands for, or ``system=``. Each
    message is checked once per model (a request read again checks what is new), and
    not at all where the format's parse vouched for it (:attr:`Prepared.vouched`).

    Raises:
        BadMessage: the first malformed message.
        InvalidInputError: a tool that cannot be sent as JSON.
    """
    _check_sent_as_given(prepared)
    key = id(model)
    done = prepared.checked.get(key)
    start = done[1] if done is not None and done[0] is model else 0
    messages = prepared.messages
    if start >= len(messages):
        return
    checker = shape_checker(model)
    vouched = prepared.vouched
    if vouched > start:
        # the parse checked the caller's items, not ``system=``: the units that stand
        # for it (they lead the list) are checked all the same
        system = start
        while system < vouched and _is_system_unit(messages[system]):
            system += 1
        _check_units(messages, checker, start, system)
        start = vouched
    _check_units(messages, checker, start, len(messages))
    if len(prepared.checked) >= 8:
        prepared.checked.clear()
    prepared.checked[key] = (model, len(messages))


def _is_system_unit(m: Any) -> bool:
    return isinstance(m, NativeMessage) and m.start < 0


def _check_units(messages: Sequence[Any], checker: Any, lo: int, hi: int) -> None:
    """Check ``messages[lo:hi]`` (see :func:`check_prepared`). A plain ``{"role",
    "content": str}`` message of a role the checker knows passes as it is (and is JSON
    as it is): runs of them are passed over in C."""
    roles = checker.plain_roles
    k = lo
    while k < hi:
        k = plain_until(messages, k, hi, roles)
        if k >= hi:
            return
        _check_unit(messages, checker, k)
        k += 1


def _check_unit(messages: Sequence[Any], checker: Any, k: int) -> None:
    """Check ``messages[k]`` (see :func:`check_prepared`)."""
    m = messages[k]
    try:
        check_one(checker, m)
        if isinstance(m, NativeMessage):
            for offset, item in enumerate(m.native):
                try:
                    json_ready(item)
                except BadMessage as exc:
                    raise exc.at(m.start + offset) from None
        elif not (type(m) is dict and len(m) == 2 and type(m.get("content")) is str):
            # a chat message is sent as given too: counting reads junk with str()
            # (a {"role", "content": str} dict the check read is JSON as it is)
            json_ready(m)
    except BadMessage as exc:
        if not isinstance(m, NativeMessage):
            raise exc.at(k) from None
        if m.start < 0:
            raise BadMessage(f"(system=) {exc.problem}", exc.fix) from None
        raise exc.at(m.start) from None


def _check_sent_as_given(prepared: Prepared) -> None:
    """The tools and the Anthropic ``system`` go out as the caller gave them: JSON, or an
    error naming them (counting reads an unknown value with ``str()``). O(their size)
    per call, as converting them already is; never the messages."""
    converted = prepared.converted
    if converted is not None and converted.system is not None:
        try:
            json_ready(converted.system)
        except BadMessage as exc:
            raise BadMessage(f"(system=) {exc.problem}", exc.fix) from None
    tools_json_ready(prepared.given_tools)


def _native_span(conv: Converted, k: int) -> tuple[int, int]:
    m = conv.messages[k]
    if isinstance(m, NativeMessage):
        return (max(m.start, 0), max(m.start, 0) + len(m.native) if m.start >= 0 else 0)
    return (k, k + 1)  # chat: one to one


def _places(conv: Converted) -> list[int]:
    """:attr:`Converted.estimated`, looked for now where it was not: a conversion read
    again (the same request, or its conversation's next turn) pays O(its messages) for
    them once, and its later turns carry them (:func:`_carried`)."""
    if conv.estimated is None:
        conv.estimated = estimated_at(conv.messages)  # (a race finds the same places)
    return conv.estimated


def _carried(estimated: list[int], keep: int, added: Sequence[Any] = ()) -> list[int]:
    """:attr:`Converted.estimated` of a conversion's first ``keep`` messages and the
    messages ``added`` after them."""
    return [*(i for i in estimated if i < keep), *(keep + j for j in estimated_at(added))]


def _notes(plan: Plan, prepared: Prepared) -> list[str]:
    """The warnings for ``plan``'s estimated parts. A plan keeps a request's messages, or
    copies with less in them: none has an estimated part where the request has none.
    So a conversion's places of them (:attr:`Converted.estimated`) are looked for once:
    on its first read where a plan keeps half its messages or more (then no dearer than
    reading the kept ones), else when it is read again (:func:`_places`); a
    conversation's next turn carries them on. A request seen once whose plan keeps
    little has its kept messages read."""
    conv = prepared.converted
    if prepared.plain:
        return []
    if conv is not None and conv.estimated is None and 2 * len(plan.messages) >= len(conv.messages):
        conv.estimated = estimated_at(conv.messages)
    if conv is not None and conv.estimated is not None and not conv.estimated:
        return []
    return estimate_notes(plan.messages)


def finish(plan: Plan, prepared: Prepared, notes: list[str] | None = None) -> Plan:
    """``plan`` in the caller's format (see the module doc); ``notes``: the warnings for
    its estimated parts when the caller knows them (a plain request has none), else they
    are read from the kept messages."""
    conv = prepared.converted
    if notes is None:
        notes = _notes(plan, prepared)
    tools = tuple(prepared.given_tools or ())
    if conv is None:
        if not notes and not tools:
            return plan
        return plan.evolved(warnings=tuple(dict.fromkeys([*plan.warnings, *notes])), tools=tools)
    fmt = get_format(conv.format)
    given = prepared.given
    if isinstance(prepared.index, ListIndex) and prepared.index.read_once:
        # a parse's list: its units were read from its very items (or from the next
        # turn's, the same objects: :meth:`_Memo.continued`), which no one replaces
        given = None
    messages, system = fmt.back(plan.messages, conv.system, given)
    old = plan.dropped
    runs: list[DropRun] = []
    sources: dict[str, ItemSource] = {}
    units = _Units(conv)
    for section, start, stop, reason in old.runs():
        if section not in sources:
            source = old.source(section)
            sources[section] = (
                _CallerItems(source, units) if section in _MESSAGE_SECTIONS else source
            )
        if section not in _MESSAGE_SECTIONS:
            runs.append(DropRun(section, start, stop, reason))
            continue
        a, _ = _native_span(conv, start)
        _, b = _native_span(conv, stop - 1)
        runs.append(DropRun(section, a, b, reason))
    summary = plan.summary
    if summary is not None and not fmt.internal:
        a, _ = _native_span(conv, summary.covers[0])
        _, b = _native_span(conv, max(summary.covers[1] - 1, summary.covers[0]))
        summary = replace(summary, covers=(a, b))
    return replace(
        plan,
        messages=messages,
        system=system,
        format=conv.format,
        tools=tools,
        summary=summary,
        dropped=DroppedItems(runs, sources, old.counter),
        warnings=tuple(dict.fromkeys([*plan.warnings, *notes])),
    )


class _Units:
    """The caller's items of a converted request by their index, and the internal
    message each unit's first item starts (built on the first dropped item read:
    O(units) once, then a dict or list look-up per item)."""

    def __init__(self, conv: Converted) -> None:
        self.conv = conv
        self.internal = get_format(conv.format).internal  # one to one: the caller's own
        self._given: list[Any] | None = None
        self._unit_at: dict[int, int] | None = None

    def given(self, i: int) -> Any:
        conv = self.conv
        if self.internal:  # one to one: the caller's own object
            m = conv.messages[i]
            return m.native[0] if isinstance(m, NativeMessage) else m
        if self._given is None:
            self._given = [
                m for c in conv.messages if isinstance(c, NativeMessage) for m in c.native
            ]
        return self._given[i]

    def unit_at(self, i: int) -> int | None:
        """The internal message whose first item is the caller's ``i`` (None: a later
        item of a unit)."""
        if self.internal:
            return i
        if self._unit_at is None:
            self._unit_at = {
                c.start: k
                for k, c in enumerate(self.conv.messages)
                if isinstance(c, NativeMessage) and c.start >= 0
            }
        return self._unit_at.get(i)


@dataclass(frozen=True)
class _CallerItems:
    """A message section's dropped items as the caller gave them: its items by the
    caller's index, each unit's tokens on its first item."""

    section: ItemSource
    units: _Units

    def item(self, index: int) -> Any:
        return self.units.given(index)

    def item_tokens(self, index: int, item: Any, counter: Any) -> int:
        k = self.units.unit_at(index)
        if k is None:
            return 0  # a later item of a unit: the unit's tokens are on its first item
        return self.section.item_tokens(k, self.section.item(k), counter)


@dataclass(frozen=True)
class Replay:
    """How to list and count a plan's dropped items again from its request alone, parsed
    again from its body (:func:`replay`): the runs, the counter, and how the request was
    converted. Holds nothing of the request."""

    runs: tuple[DropRun, ...]
    counter: Any
    format: str | None
    """The format its items were converted from; None: plain chat, used as given."""
    keep_reasoning: bool

    def dropped(self, messages: Sequence[Any], system: Any) -> DroppedItems:
        """The plan's dropped items, read from ``messages`` and ``system`` (the request
        parsed again): each the same item and count the plan's own gave."""
        conv = (
            None
            if self.format is None
            else get_format(self.format).to_internal(
                messages, system, keep_reasoning=self.keep_reasoning
            )
        )
        sources: dict[str, ItemSource] = {}
        for run in self.runs:
            if run.section in sources:
                continue
            if run.section == TakenOut.section:
                sources[run.section] = TakenOut(dict(conv.reasoning) if conv is not None else {})
            elif conv is None:
                sources[run.section] = _AsGiven(messages)
            else:
                sources[run.section] = _CallerItems(_AsGiven(conv.messages), _Units(conv))
        return DroppedItems(self.runs, sources, self.counter)


@dataclass(frozen=True)
class _AsGiven:
    """Messages whose dropped items are themselves, counted as they are."""

    messages: Sequence[Any]

    def item(self, index: int) -> Any:
        return self.messages[index]

    def item_tokens(self, index: int, item: Any, counter: Any) -> int:
        return int(counter.message(item))


def replay(plan: Plan) -> Replay | None:
    """How to read ``plan``'s dropped items again from its request, so that a kept plan
    need not hold the request's parsed objects (the proxy's plan store); None where
    that cannot be done: an item sent shrunk (what shrinking saved is known only from
    the plan's copy), a section that is not the request's messages (documents, a
    summary), or a conversion that cannot be told from the plan. O(runs)."""
    dropped = plan.dropped
    conv: Converted | None = None
    as_given = taken = False
    for section, _, _, reason in dropped.runs():
        source = dropped.source(section)
        if isinstance(source, TakenOut):
            taken = True
            continue
        if section not in _REPLAYED or reason in SENT_SHRUNK:
            return None
        if isinstance(source, _CallerItems) and type(source.section) is MessageSection:
            if conv is not None and source.units.conv is not conv:
                return None  # pragma: no cover - one request, one conversion
            conv = source.units.conv
        elif type(source) is MessageSection:
            as_given = True
        else:
            return None
    if conv is not None and as_given:
        return None  # pragma: no cover - a request is converted or not
    if conv is None:
        # reasoning taken out of plain chat messages: chat converted without it
        fmt, keep_reasoning = ("chat", False) if taken else (None, False)
    else:
        # a chat conversion that took nothing out kept reasoning, or had none to take
        fmt, keep_reasoning = conv.format, not conv.reasoning
    runs = tuple(DropRun(*r) for r in dropped.runs())
    return Replay(runs, dropped.counter, fmt, keep_reasoning)
