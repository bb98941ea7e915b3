"""The sections of a request: what each holds, how it is counted for the solver, what
it renders, and what it dropped.

Every section has a :attr:`Section.role` (:data:`ROLES`): the engine finds the history,
the pinned opening or the current turn by role, never by type. Kinds:
:class:`MessageSection` (messages kept whole, newest first or ranked) and
:class:`DocumentsSection` (retrieved chunks packed into one message); a Prompt's joined
text is :class:`tokenflex.prompt.TextSection`.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._types import Message
from ..budget import Allocation, SectionSpec
from ..counting import MessageCounter
from ..errors import InvalidMessagesError
from ..history import iter_groups
from ..message.checks import BadMessage
from ..message.groups import group_start
from ..models import Model
from ..options import FitOptions
from ..plan import DropRun

ROLES = ("system", "summary", "pinned", "history", "current", "documents", "ranked", "text")
"""What a section is to the engine (:attr:`Section.role`):

- ``system``, ``pinned``: sent whole, never shrunk (the system prompt, a pinned opening,
  a Prompt's required sections);
- ``summary``: a summary standing for older history;
- ``history``: messages kept newest first and cut once the room forces it; the shrink
  ladder shrinks it and a summary may stand for what it cut;
- ``current``: the newest turn, required; its tool results may be truncated when the
  request cannot be served otherwise;
- ``documents``: retrieved chunks packed into the room left;
- ``ranked``: items kept by score (memories, passages); ``text``: joined strings.
"""

_ROLE_OF_MODE = {"all": "pinned", "newest": "history", "ranked": "ranked"}

__all__ = [
    "ANSWER_ROLES",
    "ROLES",
    "DocumentsSection",
    "GroupIndex",
    "ListIndex",
    "MessageSection",
    "Section",
    "cut_note",
    "opens_history",
]


ANSWER_ROLES = ("assistant", "tool", "function")
"""Roles that answer an earlier message: history may not start with one once cut."""


def cut_note(omitted: int, recall_id: str | None = None) -> Message:
    """The note that tells the model ``omitted`` earlier messages are not in the request
    (and, with recall, the id that reads them back: see :mod:`tokenflex.recall`).

    >>> cut_note(12)["content"]
    '[12 earlier messages omitted to fit the context window]'
    >>> cut_note(1, "3f9a0c1be27d")["content"]
    '[1 earlier message omitted to fit the context window; recall id: 3f9a0c1be27d]'
    """
    what = "message" if omitted == 1 else "messages"
    named = f"; recall id: {recall_id}" if recall_id is not None else ""
    return {
        "role": "system",
        "content": f"[{omitted} earlier {what} omitted to fit the context window{named}]",
    }


def opens_history(message: Any, *, user_only: bool = False) -> bool:
    """Whether ``message`` may be the first kept message of a cut history: not an answer
    whose question was dropped (assistant text, a tool result without its call). A tool
    round may open it: an agent's call stands on its own (the task is pinned before it).
    ``user_only``: only a user message may (an API whose requests open with the user's
    turn, with nothing pinned before the history)."""
    if type(message) is not dict and not isinstance(message, Mapping):
        return True
    role = message.get("role")
    if user_only:
        return role == "user"
    if role == "assistant" and (message.get("tool_calls") or message.get("function_call")):
        return True
    return role not in ANSWER_ROLES


class Section:
    """One part of a request: its items for the solver, and what it renders.

    Subclasses set the solver fields and implement :meth:`spec`, :meth:`render`,
    :meth:`runs` and :meth:`item`.
    """

    name: str
    role: str = "pinned"
    """What the section is to the engine (one of :data:`ROLES`): the engine finds the
    history, the current turn or the documents by role, never by type."""
    label: str = ""
    """Put before an invalid message's error (``"Section 'history': "``)."""
    needs_room: bool = False
    """The spec depends on the room the required sections leave (documents)."""
    exact_render: bool = True
    """The rendered messages cost exactly the kept items' tokens (False for joined text:
    the engine recounts them)."""
    may_leave_out: bool = False
    """Optional, but with required items (a text section's envelope): when the required
    input does not fit, the engine leaves the whole section out and solves again."""

    def spec(self, counter: MessageCounter, room: int) -> SectionSpec:
        raise NotImplementedError

    def render(self, kept: tuple[int, ...]) -> list[Message]:
        """The kept items' messages, in request order."""
        raise NotImplementedError

    def render_added(self) -> list[Message] | None:
        """What the last :meth:`render` holds beyond the kept items the solve counted:
        ``[]`` when it is exactly them (their tokens are the section's), the messages it
        added to them (counted on their own: a counter's ``total`` is a sum over
        messages), or None when it cannot say (the whole rendering is counted). By
        :attr:`exact_render` unless a section knows better for the rendering it made."""
        return [] if self.exact_render else None

    def runs(self, alloc: Allocation | None) -> list[DropRun]:
        """The section's dropped input items as runs (``alloc`` None: all of them)."""
        raise NotImplementedError

    def item(self, index: int) -> Any:
        """The input item at ``index`` (for :attr:`Plan.dropped`)."""
        raise NotImplementedError

    def item_tokens(self, index: int, item: Any, counter: MessageCounter) -> int:
        """What the input item at ``index`` costs, counted like the kept ones."""
        return counter.message(item)

    def warnings(self) -> list[str]:
        return []

    def extras(self) -> dict[str, Any]:
        return {}


@dataclass(frozen=True, slots=True)
class GroupIndex:
    """Running counts over a conversation's atomic groups, kept by a
    :class:`~tokenflex.Conversation` (or, for a caller's list, by a :class:`ListIndex`)
    so the solver can bisect instead of iterating."""

    model: Model
    """The model the counts are for."""
    starts: Sequence[int]
    """Index of each group's first message, ascending."""
    cum: Sequence[int]
    """``cum[g]``: tokens of groups ``[0, g)`` (``len`` = groups + 1)."""
    tokens: Sequence[int]
    """Tokens of each message by index from :attr:`first` (0 for messages outside the
    groups)."""
    first: int = 0
    """The first message the index covers. A section that opens before it is seen from
    here only: the index holds more than any room of its model (see :class:`ListIndex`),
    so the solver never reaches the older groups."""
    owned: bool = True
    """The messages are the index owner's (a Conversation's): a dropped message's tokens
    are read back from :attr:`tokens` (False: a caller's list, counted afresh, except
    from :attr:`checked_from`)."""
    checked_from: int | None = None
    """A caller's list (:attr:`owned` False): the messages from this index on were
    counted, or compared with what was counted, by the :meth:`ListIndex.view` that gave
    this index, so their :attr:`tokens` hold for the fit that asked for it (None: none)."""

    def same_counts(self, other: GroupIndex | None) -> bool:
        """Whether ``other`` holds these running counts (the same index of a
        :class:`ListIndex`, grown by appending or not, whatever its views checked)."""
        return other is not None and other.cum is self.cum

    def groups(self, lo: int, hi: int) -> tuple[int, int] | None:
        """Group numbers ``[g_lo, g_hi)`` that exactly tile messages ``[lo, hi)`` (from
        :attr:`first` when ``lo`` is before it)."""
        n = len(self.starts)
        g_hi = bisect.bisect_left(self.starts, hi)
        if lo < self.first:
            g_lo = 0
        else:
            g_lo = bisect.bisect_left(self.starts, lo)
            if lo < hi and (g_lo >= n or self.starts[g_lo] != lo):
                return None
        if (self.starts[g_hi] if g_hi < n else self.first + len(self.tokens)) != hi:
            return None  # hi cuts a group
        return g_lo, g_hi


def _beyond(gi: GroupIndex, limits: tuple[int, int | None]) -> bool:
    """Whether ``gi`` holds more than a solve within ``limits`` can keep (so the
    solver never reaches the groups before it)."""
    bound, most = limits
    return gi.cum[-1] > bound or (most is not None and len(gi.starts) > most)


def _boundary(src: Sequence[Message], i: int) -> bool:
    """Whether a group starts at ``src[i]`` (``i`` > 0): not a tool result following a
    tool result or the call that made it (the rule :func:`~tokenflex.history.iter_groups`
    reads newest first; it depends on two messages only)."""
    m, prev = src[i], src[i - 1]
    if (type(m) is not dict and not isinstance(m, Mapping)) or m.get("role") not in (
        "tool",
        "function",
    ):
        return True
    if type(prev) is not dict and not isinstance(prev, Mapping):
        return True
    if prev.get("role") in ("tool", "function"):
        return False
    return not (
        prev.get("role") == "assistant" and (prev.get("tool_calls") or prev.get("function_call"))
    )


class ListIndex:
    """The running counts of a caller's list that :func:`tokenflex.fit` has seen: the
    history's newest groups, as far back as more than any room of the fit (a window's
    worth of tokens, or ``max_messages`` groups), and every group appended since, as a
    :class:`GroupIndex` the solver bisects. A fit of the same list grown by one message
    counts that message and bisects: O(new message), not O(kept).

    Never trusted blindly: each message it counted is kept with a copy of its top-level
    fields, and before every use the messages a solve could read (newest first, as far
    as those limits) are compared with them (one C-speed list comparison); a message edited
    in place, or replaced by one that is not equal, makes it count afresh. An edit inside a
    nested value is not seen (as :mod:`tokenflex.roundtrip` says). Bound to one model (any
    other asks the lazy path: None) and one history start (another, such as a short
    list's pinned turns growing, counts afresh from there). Thread-safe.

    ``read_once``: the list is a request read once (a format's parse vouched for it, see
    :func:`tokenflex.roundtrip.read_through`): no one edits its items, so no copies are
    kept and a view compares nothing. Past that fit the index serves only the next turn
    of its conversation that goes on from the same objects, as they were counted (a list
    that opens with them; :func:`tokenflex.roundtrip.prepare` gives any other a new index).
    """

    def __init__(self, *, read_once: bool = False) -> None:
        self._lock = threading.Lock()
        self._model: Model | None = None
        self._lo = -1
        self._index: GroupIndex | None = None
        self._copies: list[Any] = []
        self._once = read_once
        self._given: GroupIndex | None = None
        """The last view given: :attr:`_index` with its ``checked_from`` (made again only
        when either changes; views are told apart by :meth:`GroupIndex.same_counts`)."""

    def view(
        self,
        src: Sequence[Message],
        lo: int,
        hi: int,
        counter: MessageCounter,
        *,
        bound: int,
        most: int | None = None,
    ) -> GroupIndex | None:
        """The index for history ``src[lo:hi]`` counted by ``counter`` (None: use the
        lazy path; an invalid message is left to it to name). ``bound``: no room of this
        fit is larger (the window, or a smaller input cap); ``most``: no more groups
        are kept (``max_messages``). The index holds more than either, or all."""
        model = counter.model
        with self._lock:
            if self._model is None:
                self._model, self._lo = model, lo
            elif model is not self._model:
                return None
            elif lo != self._lo:  # the history starts elsewhere now (a turn got pinned)
                self._lo = lo
                self._reset()
            try:
                return self._view(src, lo, hi, counter, model, (bound, most))
            except BadMessage:
                self._reset()
                return None

    @property
    def read_once(self) -> bool:
        """Whether the list is a request read once (its views compare nothing, keep no
        copies): a short history's view costs about its one sum, and the next turn of
        the conversation reads it again for the new messages' counts alone."""
        return self._once

    def truncated(self, n: int) -> ListIndex:
        """A new index of a request read once that holds this one's running counts of
        the groups wholly before message ``n``: the next turn of a conversation that
        repeats this request's objects up to ``n`` and goes on another way (its last
        message edited, a retry said otherwise) counts only the messages from there
        (at C speed: three list slices), not its history again. Only a request read once
        (:attr:`read_once`: its objects are never edited) hands its counts on; any
        other gives an empty index."""
        out = ListIndex(read_once=True)
        with self._lock:
            gi = self._index
            if gi is None or not self._once:
                return out
            starts, first = gi.starts, gi.first
            end = first + len(gi.tokens)
            if end <= n:
                groups = len(starts)
            else:  # the groups that end at or before n (the one n falls in goes)
                groups = max(0, bisect.bisect_right(starts, n) - 1)
                end = starts[groups] if groups else first
            if not groups:
                return out
            out._model, out._lo = self._model, self._lo
            out._index = GroupIndex(
                gi.model,
                list(starts[:groups]),
                list(gi.cum[: groups + 1]),
                list(gi.tokens[: end - first]),
                first,
                owned=False,
            )
        return out

    @property
    def current(self) -> GroupIndex | None:
        """The index the last :meth:`view` gave (None: none, or it was reset), not checked
        again: what a later view of the same list gives while it is still valid."""
        return self._given if self._index is not None else None

    def _reset(self) -> None:
        self._index, self._copies, self._given = None, [], None

    def _view(
        self,
        src: Sequence[Message],
        lo: int,
        hi: int,
        counter: MessageCounter,
        model: Model,
        limits: tuple[int, int | None],
    ) -> GroupIndex:
        gi = self._index
        checked: int | None = None
        if gi is not None:
            end = gi.first + len(gi.tokens)
            checked = self._checked_from(src, gi, end, limits) if hi >= end else None
            if checked is None or (hi > end and gi.starts and not _boundary(src, end)):
                # (a message joining the newest group counted would change a sum a
                # solve in another thread may be reading: counted afresh instead)
                self._reset()
                gi, checked = None, None
            elif hi > end:
                self._append(src, gi, end, hi, counter.message)
        if gi is None:
            gi = self._index = GroupIndex(model, [], [0], [], hi, owned=False)
            checked = hi  # (what _older adds below is counted now)
        if gi.first > lo and not _beyond(gi, limits):
            fresh = checked == gi.first  # every message in it counted now
            gi = self._index = self._older(src, gi, lo, counter, limits)
            if fresh:
                checked = gi.first
        given = self._given
        if given is None or given.cum is not gi.cum or given.checked_from != checked:
            given = self._given = GroupIndex(  # (not dataclasses.replace: a fit's hot path)
                gi.model, gi.starts, gi.cum, gi.tokens, gi.first, gi.owned, checked
            )
        return given

    def _checked_from(
        self, src: Sequence[Message], gi: GroupIndex, end: int, limits: tuple[int, int | None]
    ) -> int | None:
        """Where the messages a solve could read begin (newest first, the fewest groups
        beyond ``limits``, and the message before them: it decides where their group
        starts), when they are as counted; None when one is not."""
        cum = gi.cum
        bound, most = limits
        g = max(0, bisect.bisect_left(cum, cum[-1] - bound) - 1)
        if most is not None:
            g = max(g, len(gi.starts) - most - 1)
        a = max(gi.first, gi.starts[g] - 1) if gi.starts else end
        first = gi.first
        if self._once:
            return first  # (counted in this fit, of a list no one edits: nothing to compare)
        return a if src[a:end] == self._copies[a - first : end - first] else None

    def _append(
        self,
        src: Sequence[Message],
        gi: GroupIndex,
        end: int,
        hi: int,
        count: Callable[[Message], int],
    ) -> None:
        """Count ``src[end:hi]`` into ``gi``: only new entries are written, and sums of
        groups started here (the lists only grow, so a view given out stays valid)."""
        starts, cum, tokens, copies = gi.starts, gi.cum, gi.tokens, self._copies
        assert isinstance(starts, list) and isinstance(cum, list) and isinstance(tokens, list)
        for i in range(end, hi):
            m = src[i]
            t = count(m)
            tokens.append(t)
            if not self._once:
                copies.append(dict(m) if type(m) is dict or isinstance(m, Mapping) else m)
            if not starts or _boundary(src, i):
                starts.append(i)
                cum.append(cum[-1] + t)
            else:
                cum[-1] += t

    def _older(
        self,
        src: Sequence[Message],
        gi: GroupIndex,
        lo: int,
        counter: MessageCounter,
        limits: tuple[int, int | None],
    ) -> GroupIndex:
        """``gi`` with older groups counted until it holds more than ``limits`` allow
        or reaches ``lo``: each message counted once, plain chat in runs of one native
        loop (:meth:`~tokenflex.counting.MessageCounter.plain_run`)."""
        bound, most = limits
        count = counter.message
        total, n = gi.cum[-1], len(gi.starts)
        # newest first: the groups' starts and sums, and every message's count
        starts: list[int] = []
        sums: list[int] = []
        tokens: list[int] = []
        i = gi.first
        while i > lo:
            limit = i - lo if most is None else most - n - len(starts) + 1
            run = counter.plain_run(src, i, lo, total, bound, limit)
            if run is not None and run[0]:  # each plain message its own group
                counts, total = run
                starts.extend(range(i - 1, i - 1 - len(counts), -1))
                sums.extend(counts)
                tokens.extend(counts)
                i -= len(counts)
                if i <= lo or total > bound or (most is not None and n + len(starts) > most):
                    break
            start = group_start(src, i - 1, lo)
            counts = [count(src[k]) for k in range(i - 1, start - 1, -1)]
            t = sum(counts)
            starts.append(start)
            sums.append(t)
            tokens.extend(counts)
            total += t
            i = start
            if total > bound or (most is not None and n + len(starts) > most):
                break
        starts.reverse()
        sums.reverse()
        tokens.reverse()
        first = starts[0] if starts else gi.first
        cum = [0]
        for t in sums:
            cum.append(cum[-1] + t)
        base = cum[-1]
        cum += [base + c for c in gi.cum[1:]]
        older = [src[k] for k in range(first, gi.first)]
        if not self._once:
            self._copies = [
                dict(m) if type(m) is dict or isinstance(m, Mapping) else m for m in older
            ] + self._copies
        return GroupIndex(
            gi.model, starts + list(gi.starts), cum, tokens + list(gi.tokens), first, owned=False
        )


class _NewestFirst(Sequence[int]):
    """``view[k]``: tokens of the ``k`` newest groups of ``[g_lo, g_hi)``."""

    __slots__ = ("_cum", "_hi", "_lo")

    def __init__(self, cum: Sequence[int], g_lo: int, g_hi: int) -> None:
        self._cum, self._lo, self._hi = cum, g_lo, g_hi

    def __len__(self) -> int:
        return self._hi - self._lo + 1

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):  # pragma: no cover - bisect only indexes
            return [self[i] for i in range(*k.indices(len(self)))]
        return self._cum[self._hi] - self._cum[self._hi - k]

    def __iter__(self) -> Iterator[int]:
        return (self[i] for i in range(len(self)))

    def within(self, room: int) -> int:
        """The most newest groups within ``room`` tokens (the largest ``k`` with
        ``self[k] <= room``): one C bisect over the running sums."""
        cum, hi = self._cum, self._hi
        if room < 0:
            return 0
        return hi - bisect.bisect_left(cum, cum[hi] - room, self._lo, hi + 1)


class _Replayed(Iterable[int]):
    """Lazy groups' tokens, newest first, read as far as a solve needs; a second solve
    (the engine re-solves when a rendering costs more than its parts) replays the groups
    already read and goes on from there."""

    __slots__ = ("_groups", "_source")

    def __init__(
        self, source: Iterator[tuple[int, int, int]], groups: list[tuple[int, int, int]]
    ) -> None:
        self._source, self._groups = source, groups

    def __iter__(self) -> Iterator[int]:
        groups = self._groups
        i = 0
        while True:
            if i < len(groups):
                yield groups[i][2]
            else:
                group = next(self._source, None)
                if group is None:
                    return
                groups.append(group)
                yield group[2]
            i += 1


Mode = Literal["all", "newest", "ranked"]


class MessageSection(Section):
    """Messages ``source[lo:hi]`` kept as they are, in atomic groups (a tool call with
    its results is one item).

    Modes (each gives the section its default :attr:`~Section.role`): ``all``
    (required, never shrunk: ``pinned``); ``newest`` (``history``: keep the newest
    groups without gaps; once cut, never open with an answer whose question was
    dropped); ``ranked`` (keep the best-scored groups, skipping any that do not fit;
    kept in input order).
    Indices in runs and :meth:`item` are the caller's indices into ``source``.
    """

    def __init__(
        self,
        name: str,
        source: Sequence[Message],
        lo: int,
        hi: int,
        *,
        mode: Mode = "all",
        priority: int = 0,
        min_tokens: int = 0,
        cap: int | None = None,
        share: float | None = None,
        min_items: int = 0,
        max_items: int | None = None,
        scores: Sequence[float] | None = None,
        index: GroupIndex | None = None,
        label: str = "",
        role: str | None = None,
    ) -> None:
        self.name = name
        self.label = label
        self.role = role or _ROLE_OF_MODE[mode]
        self.source, self.lo, self.hi = source, lo, hi
        self.mode: Mode = mode
        self.priority, self.min_tokens, self.cap, self.share = priority, min_tokens, cap, share
        self.min_items, self.max_items = min_items, max_items
        self.scores = scores
        self.index = index
        self.low_water: float | Callable[[int], int] | None = None
        """Cache-stable cutting (see :attr:`SectionSpec.low_water`)."""
        self.hold_from: int | None = None
        """The previous plan's first kept message index, held while it fits."""
        self.note = False
        """Render a counted note where the history was cut (see :func:`cut_note`)."""
        self._noted: Message | None = None  # the cut note the last render added
        self.recall: Any = None
        """A :class:`~tokenflex.recall.Recaller`: the cut note and cleared tool results
        name the recall ids of what they stand for."""
        self.changed: dict[int, tuple[Message, str]] = {}
        """Messages of ``source`` that are shrunk copies: index -> (original, reason)."""
        self.truncatable = False
        """Required tool results here may be truncated when the required input does not
        fit (the newest tool round of an agent loop)."""
        self.user_opens = False
        """Only a user message may open this history once cut (see :func:`opens_history`)."""
        self._first_kept: int | None = None
        self._span: tuple[int, int] | None = None  # the index's groups [g_lo, g_hi)
        self._groups: list[tuple[int, int, int]] = []  # (start, stop, tokens) in keep order

    def _cost(self, counter: MessageCounter) -> Callable[[Message], int]:
        """``counter.message`` that names an invalid message's index in ``source``."""
        src, lo, hi, count = self.source, self.lo, self.hi, counter.message

        def cost(m: Message) -> int:
            try:
                return count(m)
            except BadMessage as exc:
                i = next(k for k in range(lo, hi) if src[k] is m)
                if self.label:
                    raise InvalidMessagesError(f"{self.label}{exc.at(i)}") from None
                raise exc.at(i) from None

        return cost

    def spec(self, counter: MessageCounter, room: int) -> SectionSpec:
        src, lo, hi = self.source, self.lo, self.hi
        cost = self._cost(counter)
        if self.mode == "all":
            return SectionSpec(
                self.name,
                [cost(src[i]) for i in range(lo, hi)],
                required=-1,
                priority=self.priority,
            )
        common: dict[str, Any] = {
            "priority": self.priority,
            "min_tokens": self.min_tokens,
            "cap": self.cap,
            "share": self.share,
            "min_items": self.min_items,
            "max_items": self.max_items,
        }
        if self.mode == "ranked":
            chrono = list(iter_groups(src, lo, hi, cost))[::-1]
            order = list(range(len(chrono)))
            if self.scores is not None:  # a group scores as its best message
                best = [max(self.scores[i - lo] for i in range(a, b)) for a, b, _ in chrono]
                order.sort(key=lambda g: -best[g])
            self._groups = [chrono[g] for g in order]
            return SectionSpec(self.name, [t for _, _, t in self._groups], **common)
        if self.low_water is not None:
            common["low_water"] = self.low_water
        user = self.user_opens
        index = self.index
        if index is not None and index.model is counter.model:
            self._span = index.groups(lo, hi)
        if self._span is not None and index is not None:
            g_lo, g_hi = self._span
            starts = index.starts
            return SectionSpec(
                self.name,
                (),
                contiguous=True,
                cumulative=_NewestFirst(index.cum, g_lo, g_hi),
                opens=lambda p: opens_history(src[starts[g_hi - 1 - p]], user_only=user),
                hold=self._hold(),
                **common,
            )
        groups = self._groups
        common["hold"] = self._hold()

        return SectionSpec(
            self.name,
            _Replayed(iter_groups(src, lo, hi, cost), groups),
            contiguous=True,
            opens=lambda p: opens_history(src[groups[p][0]], user_only=user),
            **common,
        )

    def _hold(self) -> int | None:
        """The previous cut as a count of the newest groups (None: no valid cut)."""
        cut, lo, hi = self.hold_from, self.lo, self.hi
        if self.low_water is None or cut is None or cut <= lo or cut > hi:
            return None
        if cut == hi:
            return 0
        if not opens_history(self.source[cut], user_only=self.user_opens):
            return None
        if self._span is not None and self.index is not None:
            starts = self.index.starts
            g = bisect.bisect_left(starts, cut)
            if g >= len(starts) or starts[g] != cut:
                return None
            return self._span[1] - g
        for n, (start, _, _) in enumerate(iter_groups(self.source, lo, hi, lambda _m: 0), 1):
            if start <= cut:
                return n if start == cut else None
        return None  # pragma: no cover - cut > lo is always reached

    def first_kept(self, kept: tuple[int, ...]) -> int:
        """Index of the first message kept (``hi`` when none is), newest mode."""
        return self._start(len(kept) - 1) if kept else self.hi

    # keep-order position -> message range (newest mode)
    def _start(self, p: int) -> int:
        if self._span is not None and self.index is not None:
            return self.index.starts[self._span[1] - 1 - p]
        return self._groups[p][0]

    def _stop(self, p: int) -> int:
        return self.hi if p == 0 else self._start(p - 1)

    def render(self, kept: tuple[int, ...]) -> list[Message]:
        src = self.source
        self._noted = None
        if self.mode == "all":
            return list(src[self.lo : self.hi])
        if not kept:  # all of it cut: still told
            if self.note and self.mode == "newest" and self.hi > self.lo:
                self._noted = self._note(self.hi)
                return [self._noted]
            return []
        if self.mode == "newest":
            first = self._start(len(kept) - 1)
            if self.note and first > self.lo:
                self._noted = self._note(first)
                return [self._noted, *src[first : self.hi]]
            return list(src[first : self.hi])
        groups = sorted(self._groups[p] for p in kept)
        return [src[i] for a, b, _ in groups for i in range(a, b)]

    def render_added(self) -> list[Message] | None:
        # A cut note is the one message the solve did not count (``exact_render`` is
        # False for it); a rendering without one is the kept groups' messages, whose
        # tokens the section's are, so the engine need not count them again. With one,
        # and nothing shrunk, the rest is the kept groups all the same: the note alone is
        # counted. (Shrunk items are counted with the whole rendering, as before.)
        if self.exact_render or self._noted is None:
            return []
        return [self._noted] if not self.changed else None

    def _note(self, first: int) -> Message:
        """The cut note for messages ``[lo, first)`` left out."""
        rid = self.recall.span_id(self.lo, first) if self.recall is not None else None
        return cut_note(first - self.lo, rid)

    def runs(self, alloc: Allocation | None) -> list[DropRun]:
        name = self.name
        if self.mode == "all" and alloc is not None:  # sent whole; shrunk copies listed
            return [DropRun(name, i, i + 1, self.changed[i][1]) for i in sorted(self.changed)]
        if self.mode == "all" or self.lo >= self.hi:
            return (
                [DropRun(name, self.lo, self.hi, "budget")]
                if alloc is None and self.lo < self.hi
                else []
            )
        if alloc is None:
            return [DropRun(name, self.lo, self.hi, "budget")]
        records = [d for d in alloc.dropped if d.section == name]
        out: list[DropRun] = []
        if self.mode == "newest":
            for d in records:
                if d.count is None:  # this position and every older one
                    out.append(DropRun(name, self.lo, self._stop(d.start), d.reason))
                else:
                    last = d.start + d.count - 1
                    out.append(DropRun(name, self._start(last), self._stop(d.start), d.reason))
            if self.changed:  # shrunk copies that were sent: each with its reason
                self._first_kept = first = self.first_kept(alloc.kept.get(name, ()))
                for i in sorted(self.changed):
                    if i < first:
                        continue
                    reason = self.changed[i][1]
                    if out and out[-1].stop == i and out[-1].reason == reason:
                        out[-1] = DropRun(name, out[-1].start, i + 1, reason)
                    else:
                        out.append(DropRun(name, i, i + 1, reason))
            return sorted(out, key=lambda r: r.start)
        reason_at: dict[int, str] = {}
        for d in records:
            stop = len(self._groups) if d.count is None else d.start + d.count
            for p in range(d.start, stop):
                reason_at[self._groups[p][0]] = d.reason
        kept = set(alloc.kept.get(name, ()))
        for p in sorted(range(len(self._groups)), key=lambda p: self._groups[p][0]):
            if p in kept:
                continue
            a, b, _ = self._groups[p]
            reason = reason_at.get(a, "budget")
            if out and out[-1].stop == a and out[-1].reason == reason:
                out[-1] = DropRun(name, out[-1].start, b, reason)
            else:
                out.append(DropRun(name, a, b, reason))
        return out

    def item(self, index: int) -> Any:
        changed = self.changed.get(index)
        return changed[0] if changed is not None else self.source[index]

    def tokens_until(
        self, lo: int, hi: int, total: int, bound: int, counter: MessageCounter
    ) -> int:
        """``total`` plus what items ``[lo, hi)`` cost (:meth:`item_tokens`), newest first,
        as far as it takes to pass ``bound``: where nothing was shrunk, the items the
        running counts hold read from them (their running sums, newest first, and a
        bisect: at C speed) and runs of plain chat in one native loop
        (:meth:`~tokenflex.counting.MessageCounter.plain_run`)."""
        i = hi
        held = self._held(counter) if not self.changed else None
        while i > lo and total <= bound:
            if held is not None and held[0] < i <= held[1]:
                gi, k = self.index, max(lo, held[0])
                assert gi is not None
                newest = reversed(gi.tokens[k - gi.first : i - gi.first])
                sums = list(itertools.accumulate(newest, initial=total))
                j = bisect.bisect_right(sums, bound)  # (the first sum past it, if any)
                if j < len(sums):
                    return sums[j]
                total, i = sums[-1], k
                continue
            if not self.changed:
                run = counter.plain_run(self.source, i, lo, total, bound, i - lo)
                if run is not None:
                    i -= len(run[0])
                    total = run[1]
                    if i <= lo or total > bound:
                        break
            i -= 1
            total += self.item_tokens(i, self.item(i), counter)
        return total

    def _held(self, counter: MessageCounter) -> tuple[int, int] | None:
        """The items ``[start, end)`` whose tokens the running counts hold for this fit
        (as :meth:`item_tokens` reads them), for ``counter``'s model; None: none."""
        gi = self.index
        if gi is None or gi.model is not counter.model:
            return None
        end = gi.first + len(gi.tokens)
        if gi.owned:
            return gi.first, end
        checked = gi.checked_from
        return None if checked is None else (max(checked, gi.first), end)

    def item_tokens(self, index: int, item: Any, counter: MessageCounter) -> int:
        if index in self.changed:
            full = counter.message(item)
            if self.mode == "all":  # sent shrunk: what shrinking saved
                return full - counter.message(self.source[index])
            first = self._first_kept
            if first is not None and index >= first:  # sent shrunk: what shrinking saved
                return full - counter.message(self.source[index])
            return full
        gi = self.index
        if gi is not None and gi.model is counter.model:
            if gi.owned:
                return gi.tokens[index - gi.first]
            checked = gi.checked_from
            if checked is not None and checked <= index < gi.first + len(gi.tokens):
                return gi.tokens[index - gi.first]  # counted, or compared, by this fit's view
        return counter.message(item)


class DocumentsSection(Section):
    """Retrieved chunks packed with their citations into the room the required input
    leaves, as one system message; dropped chunks are this section's dropped items."""

    name = "documents"
    role = "documents"
    needs_room = True

    def __init__(self, documents: Sequence[Any], model: Model, opts: FitOptions) -> None:
        self.documents = documents
        self.model = model
        self.opts = opts
        self.packed: Any = None
        self.message: dict[str, Any] | None = None
        self._dropped: dict[int, int | None] | None = None

    def spec(self, counter: MessageCounter, room: int) -> SectionSpec:
        from ..documents import pack_chunks

        o = self.opts
        # Without a cap, documents take half of what is left so history keeps the rest.
        budget = min(o.documents_cap, room) if o.documents_cap is not None else room // 2
        budget -= counter.message({"role": "system", "content": ""})
        if budget <= o.documents_safety_buffer:
            budget = o.documents_safety_buffer + 1  # admits nothing; every chunk is listed
        self.packed = pack_chunks(
            self.documents,
            budget=budget,
            tokenizer=self.model,
            policy=o.documents_policy,  # type: ignore[arg-type]
            safety_buffer=o.documents_safety_buffer,
            format=o.documents_format,  # type: ignore[arg-type]
        )
        if not self.packed.rendered:
            self.message = None
            return SectionSpec(self.name, [], required=-1, priority=70)
        self.message = {"role": "system", "content": self.packed.rendered}
        return SectionSpec(self.name, [counter.message(self.message)], required=-1, priority=70)

    def render(self, kept: tuple[int, ...]) -> list[Message]:
        return [self.message] if self.message is not None else []

    def runs(self, alloc: Any) -> list[DropRun]:
        return [DropRun(self.name, d.index, d.index + 1, d.reason) for d in self.packed.dropped]

    def item(self, index: int) -> Any:
        return self.documents[index]

    def item_tokens(self, index: int, item: Any, counter: MessageCounter) -> int:
        if self._dropped is None:
            self._dropped = {d.index: d.tokens for d in self.packed.dropped}
        tokens = self._dropped[index]
        if tokens is None:  # policy "stop" never had to count it: count it now, once
            from ..documents.render import chunk_parts

            wide = "9" * len(str(max(len(self.documents), 1)))
            parts = chunk_parts(self.opts.documents_format, wide, item)
            tokens = sum(counter.text(p) for p in parts)
        return tokens

    def warnings(self) -> list[str]:
        if not self.packed.partial:
            return []
        return [
            f"documents: {self.packed.dropped_count} of {len(self.documents)} chunks omitted "
            "to fit the budget (the context tells the model)."
        ]

    def extras(self) -> dict[str, Any]:
        p = self.packed
        return {
            "documents": {
                "admitted": len(p.admitted),
                "dropped": p.dropped_count,
                "tokens": p.tokens,
                "budget": p.budget,
                "policy": p.policy,
            }
        }
