"""The fitting engine: a layout's sections, through the solver, into one Plan.

:func:`tokenflex.fit`, :class:`tokenflex.Prompt` and :class:`tokenflex.Conversation` are
*layouts*: each says which sections a request has, in which order, and how each may
shrink. Everything else happens here, once for all of them:

1. **A pass** (:func:`run_pass`) counts each section's items for one model (lazily,
   newest first, where a section is contiguous), hands them to the pure solver
   (:func:`tokenflex.budget.solve`), renders what was kept, and recounts only sections
   whose rendering is not the sum of their parts (joined text). The solver is the only
   place that computes ``max_tokens``, writes the output note and checks the promise.
2. **A plan** (:func:`build_plan`) is built from a pass: the messages in request order,
   per-section tokens, every dropped item as a run with its reason, the warnings.
3. **Around the pass**, what needs I/O or another model: fallback models (one pass per
   model tried: a chain of N models costs at most N passes) and a summary of the history
   the pass had to cut (one summarizer call, one more pass). :func:`fit_layout` and
   :func:`afit_layout` run it all, sync and async; the async twin runs the CPU and
   tokenizer work in a worker thread, so a server-backed tokenizer never blocks the loop.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from ._types import Message, Tool
from .budget import Allocation, BudgetSpec, SectionSpec, solve
from .cost import cache_kept, cached_tokens, stable_mark
from .counting import MessageCounter, get_counter
from .counting.checks import BadMessage
from .errors import ContextOverflowError, InvalidMessagesError
from .fallback import Candidate, fallback_chain, no_model_fits
from .history import (
    cleared_tool_result,
    iter_groups,
    shrink_candidates,
    tool_text,
    truncated_tool_result,
    without_reasoning,
)
from .models import Model, get_model, unknown_model_warning
from .options import AUTO_MARK_MAX, LOW_WATER, FitOptions
from .plan import DroppedItems, DropRun, Plan, SummaryInfo, log_dropped
from .session import HistoryCut, SessionMemory
from .summarize import summary_message
from .summarize.facts import fact_report

__all__ = [
    "ANSWER_ROLES",
    "GroupIndex",
    "Layout",
    "MessageSection",
    "Pass",
    "Section",
    "SummaryTarget",
    "afit_layout",
    "build_plan",
    "cut_note",
    "dropped_messages_warnings",
    "fit_layout",
    "history_section",
    "large_output",
    "opens_history",
    "output_request",
    "run_pass",
    "solve_history",
    "stable_target",
    "summary_key",
]

log = logging.getLogger("tokenflex")

ANSWER_ROLES = ("assistant", "tool", "function")
"""Roles that answer an earlier message: history may not start with one once cut."""

_ROUNDS = 8  # re-solves when joined text costs more than its parts


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
    if not isinstance(message, Mapping):
        return True
    role = message.get("role")
    if user_only:
        return role == "user"
    if role == "assistant" and (message.get("tool_calls") or message.get("function_call")):
        return True
    return role not in ANSWER_ROLES


def output_request(
    model: Model, max_tokens: int | None, counter: MessageCounter, warnings: list[str]
) -> int:
    """The output request clamped to the model's max output; appends the warnings a plan
    for ``model`` carries from the start.

    ``max_tokens=None`` (the caller named no output) gives the most the model may emit:
    its max output, else its window. The solver then keeps the input down to the floor
    and lets the output take what is left (``BudgetSpec.output_given=False``), so a
    request without ``max_tokens`` keeps its history instead of reserving the model's
    whole max output for a reply that may be short."""
    request = (
        max_tokens if max_tokens is not None else (model.max_output_tokens or model.context_window)
    )
    if model.max_output_tokens is not None and request > model.max_output_tokens:
        warnings.append(
            f"max_tokens={request:,} is above {model.name}'s max output "
            f"{model.max_output_tokens:,}; requested {model.max_output_tokens:,}."
        )
        request = model.max_output_tokens
    if not model.known:  # the log said it once; the plan says it to its reader
        warnings.append(unknown_model_warning(model.name))
    if not counter.exact:
        warnings.append(
            f"{model.name}: counts are conservative estimates (no exact tokenizer or chat "
            "format registered)."
        )
    return request


# -- sections -------------------------------------------------------------------------


class Section:
    """One part of a request: its items for the solver, and what it renders.

    Subclasses set the solver fields and implement :meth:`spec`, :meth:`render`,
    :meth:`runs` and :meth:`item`.
    """

    name: str
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
    :class:`~tokenflex.Conversation` so the solver can bisect instead of iterating."""

    model: Model
    """The model the counts are for."""
    starts: Sequence[int]
    """Index of each group's first message, ascending."""
    cum: Sequence[int]
    """``cum[g]``: tokens of groups ``[0, g)`` (``len`` = groups + 1)."""
    tokens: Sequence[int]
    """Tokens of each message by index (0 for messages outside the groups)."""

    def groups(self, lo: int, hi: int) -> tuple[int, int] | None:
        """Group numbers ``[g_lo, g_hi)`` that exactly tile messages ``[lo, hi)``."""
        g_lo = bisect.bisect_left(self.starts, lo)
        g_hi = bisect.bisect_left(self.starts, hi)
        n = len(self.starts)
        if lo < hi and (g_lo >= n or self.starts[g_lo] != lo):
            return None
        if (self.starts[g_hi] if g_hi < n else len(self.tokens)) != hi:
            return None  # hi cuts a group
        return g_lo, g_hi


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

    Modes: ``all`` (required, never shrunk); ``newest`` (keep the newest groups without
    gaps; once cut, never open with an answer whose question was dropped); ``ranked``
    (keep the best-scored groups, skipping any that do not fit; kept in input order).
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
    ) -> None:
        self.name = name
        self.label = label
        """Put before an invalid message's error (``"Section 'history': "``)."""
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
        if self.mode == "all":
            return list(src[self.lo : self.hi])
        if not kept:  # all of it cut: still told
            told = self.note and self.mode == "newest" and self.hi > self.lo
            return [self._note(self.hi)] if told else []
        if self.mode == "newest":
            first = self._start(len(kept) - 1)
            if self.note and first > self.lo:
                return [self._note(first), *src[first : self.hi]]
            return list(src[first : self.hi])
        groups = sorted(self._groups[p] for p in kept)
        return [src[i] for a, b, _ in groups for i in range(a, b)]

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

    def item_tokens(self, index: int, item: Any, counter: MessageCounter) -> int:
        if index in self.changed:
            full = counter.message(item)
            if self.mode == "all":  # sent shrunk: what shrinking saved
                return full - counter.message(self.source[index])
            first = self._first_kept
            if first is not None and index >= first:  # sent shrunk: what shrinking saved
                return full - counter.message(self.source[index])
            return full
        if self.index is not None and self.index.model is counter.model:
            return self.index.tokens[index]
        return counter.message(item)


# -- one pass -------------------------------------------------------------------------


@dataclass(slots=True)
class Pass:
    """One model's solve of one layout: the allocation and what it renders to."""

    model: Model
    counter: MessageCounter
    sections: list[Section]
    """Every section of the layout, in request order."""
    left_out: list[Section]
    """Optional sections left out whole (their envelope did not fit)."""
    alloc: Allocation
    rendered: dict[str, list[Message]]
    section_tokens: dict[str, int]
    base: int
    """Reply priming and tool schemas."""
    required: int
    """Base plus every required item: what must fit with the output floor."""
    warnings: list[str]
    tools: Sequence[Tool] | None = None
    """The request's tool schemas (counted in ``base``)."""

    def dropped_from(self, section: str) -> str | None:
        """Why ``section`` was cut (its first non-orphan drop reason), or None."""
        return next(
            (d.reason for d in self.alloc.dropped if d.section == section and d.reason != "orphan"),
            None,
        )


def run_pass(
    model: Model,
    sections: list[Section],
    *,
    tools: Sequence[Tool] | None,
    opts: FitOptions,
    warnings: Sequence[str] = (),
) -> Pass:
    """Count, solve and render ``sections`` for ``model`` (see the module docstring).

    Raises:
        ContextOverflowError: the required sections plus the output floor do not fit.
    """
    counter = get_counter(model)
    notes = list(warnings)
    request = output_request(model, opts.max_tokens, counter, notes)
    base = counter.base(tools)
    budget = BudgetSpec(
        context_window=model.context_window,
        requested_output=request,
        min_output_tokens=opts.min_output_tokens,
        safety_margin=opts.safety_margin,
        base_tokens=base,
        policy=opts.policy,
        input_cap=opts.max_input_tokens,
        max_input_tokens=model.max_input_tokens,
        output_given=opts.max_tokens is not None,
    )
    specs: dict[str, SectionSpec] = {}
    for s in sections:
        if not s.needs_room:
            specs[s.name] = s.spec(counter, 0)
    required = base + sum(_required(sp) for sp in specs.values())
    sensible = large_output(model, budget, required)
    if sensible is not None:
        budget = replace(budget, history_output=sensible)
        notes.append(
            f"max_tokens={request:,} is more than {model.name}'s {model.context_window:,}-token "
            "window can give after the required input and the margin: the history was fitted "
            "as if the smaller of the model's max output and a quarter of the window were "
            "asked, and the output takes what is left."
        )
    if any(s.needs_room for s in sections):
        room = model.context_window - opts.safety_margin
        room -= budget.reserved_output
        for cap in (opts.max_input_tokens, model.max_input_tokens):
            if cap is not None:
                room = min(room, cap)
        room -= required
        for s in sections:
            if s.needs_room:
                specs[s.name] = sp = s.spec(counter, room)
                required += _required(sp)
    left_out: list[Section] = []
    reserve = 0
    for _ in range(_ROUNDS + len(sections)):
        active = [s for s in sections if s not in left_out]
        try:
            alloc = solve(
                [specs[s.name] for s in active],
                replace(budget, base_tokens=base + reserve) if reserve else budget,
                model=model.name,
            )
        except ContextOverflowError:
            optional = [s for s in active if s.may_leave_out]
            if not optional:
                raise
            out = min(optional, key=lambda s: (_priority(specs[s.name]), -sections.index(s)))
            left_out.append(out)
            continue
        rendered = {s.name: s.render(alloc.kept[s.name]) for s in active}
        tokens = dict(alloc.section_tokens)
        inexact = [s for s in active if not s.exact_render]
        if not inexact:
            break
        for s in inexact:
            tokens[s.name] = sum(counter.message(m) for m in rendered[s.name])
        real = base + sum(tokens[s.name] for s in active)
        if real <= alloc.input_tokens:
            alloc = alloc.settle(real)
            break
        reserve += real - alloc.input_tokens
    else:  # pragma: no cover - needs a tokenizer where joining always costs more
        raise ContextOverflowError(
            f"{model.name}: the joined sections cost more than their parts and no re-solve "
            f"made them fit {model.context_window:,} tokens. Use message items instead of "
            "joined strings.",
            model=model.name,
            context_window=model.context_window,
            required_tokens=required,
            max_tokens=budget.floor,
            safety_margin=opts.safety_margin,
        )
    return Pass(
        model, counter, sections, left_out, alloc, rendered, tokens, base, required, notes, tools
    )


LARGE_OUTPUT_PARTS = 4
"""A too-large output request is fitted for this part (a quarter) of the window when the
model's max output is not known or larger (see :func:`large_output`)."""


def large_output(model: Model, budget: BudgetSpec, required: int) -> int | None:
    """The output the history is fitted for when the output request is larger than the
    window can give even with no history (``window - required - margin``), else None.

    Clients send output requests sized for the largest models (Claude Code 32,000,
    LangChain's ChatAnthropic 4,096); on a smaller window, reserving them would cost the
    whole history for room the model cannot use. Such a request is treated as ``flex``:
    the history keeps what it would keep at a sensible output, the smaller of the
    model's max output and a quarter of the window (:data:`LARGE_OUTPUT_PARTS`), and the output
    takes the rest (down to the floor). A request the window can give is reserved as
    asked.

    >>> from tokenflex.models import get_model
    >>> b = BudgetSpec(context_window=2048, requested_output=32_000)
    >>> large_output(get_model("gpt-4"), replace(b, context_window=8192), 100)
    2048
    """
    if not budget.output_given or budget.policy != "reserve":
        return None
    room = budget.context_window - budget.safety_margin - required
    if budget.requested_output <= room:
        return None
    share = model.context_window // LARGE_OUTPUT_PARTS
    sensible = min(model.max_output_tokens or share, share, budget.requested_output)
    return max(sensible, budget.floor)


def _required(spec: SectionSpec) -> int:
    if spec.required == -1:
        return sum(spec.items)  # required sections carry lists
    if spec.required > 0:
        return sum(list(spec.items)[: spec.required])
    return 0


def _priority(spec: SectionSpec) -> int:
    return spec.priority


# -- cache-stable cuts and the shrink ladder -------------------------------------------

_FORCED = frozenset({"budget", "share", "cap", "low_water"})
"""Drop reasons that mean the room forced a cut (``held`` and ``orphan`` alone do not)."""


def stable_target(layout: Layout, model: Model) -> SummaryTarget | None:
    """The history a cache-stable fit holds the cut of: the one a summary may shorten,
    else the layout's first newest-first message section (a Prompt's ``drop_oldest``)."""
    target = layout.summary_target()
    if target is not None:
        return target
    for s in layout.sections(model):
        if isinstance(s, MessageSection) and s.mode == "newest":
            return SummaryTarget(s.name, s.source, s.lo, s.hi)
    return None


def history_section(layout: Layout, sections: Sequence[Section]) -> MessageSection | None:
    """The layout's history among ``sections`` (see :func:`stable_target`)."""
    target = layout.summary_target()
    for s in sections:
        if (
            isinstance(s, MessageSection)
            and s.mode == "newest"
            and (target is None or s.name == target.section)
        ):
            return s
    return None


def _forced(p: Pass, name: str) -> bool:
    return any(d.section == name and d.reason in _FORCED for d in p.alloc.dropped)


class ShrinkStep:
    """One rung of the shrink ladder: which history messages it may shrink (oldest
    first) and how it shrinks one. A cache-stable fit keeps what a step shrank shrunk
    on later turns: :class:`~tokenflex.session.HistoryCut` keeps one mark per step (the
    field named :attr:`mark`)."""

    name: str
    reason: str
    """The reason a shrunk message is listed with in ``plan.dropped``."""
    mark: str
    """The :class:`~tokenflex.session.HistoryCut` field: shrunk before this index."""
    names_recall = False
    """With recall, the shrunk copy names its original's recall id (a tool result's
    placeholder can; an assistant message whose reasoning went cannot, unaltered)."""

    def on(self, opts: FitOptions) -> bool:
        raise NotImplementedError

    def candidates(
        self, hist: MessageSection, opts: FitOptions, counter: MessageCounter, cap: int
    ) -> list[int]:
        """Indices in the history, oldest first, this step may shrink."""
        raise NotImplementedError

    def shrink(self, message: Message, counter: MessageCounter, cap: int) -> Message:
        """A shrunk copy (the caller's message is never modified)."""
        raise NotImplementedError


class ClearToolResults(ShrinkStep):
    """Old tool results replaced by a placeholder (the call and its id stay); the
    newest ``keep_tool_results`` and those of ``keep_tools`` are kept."""

    name, reason, mark = "clear", "cleared", "cleared_before"
    names_recall = True

    def on(self, opts: FitOptions) -> bool:
        return opts.clear_tool_results

    def candidates(
        self, hist: MessageSection, opts: FitOptions, counter: MessageCounter, cap: int
    ) -> list[int]:
        return _candidates(hist, opts)[0]

    def shrink(self, message: Message, counter: MessageCounter, cap: int) -> Message:
        return cleared_tool_result(message)


class TruncateToolResults(ShrinkStep):
    """Tool results longer than their share of the room (:data:`TOOL_RESULT_PARTS`)
    that the clearing step keeps: head and tail kept, with a counted marker."""

    name, reason, mark = "truncate", "truncated", "truncated_before"
    names_recall = True

    def on(self, opts: FitOptions) -> bool:
        return opts.truncate_tool_results and (opts.clear_tool_results or opts.drop_reasoning)

    def candidates(
        self, hist: MessageSection, opts: FitOptions, counter: MessageCounter, cap: int
    ) -> list[int]:
        src = hist.source
        cleared = set(_candidates(hist, opts)[0]) if opts.clear_tool_results else set()
        return [
            i
            for i in range(hist.lo, hist.hi)
            if i not in cleared
            and isinstance(src[i], Mapping)
            and src[i].get("role") in ("tool", "function")
            and counter.text(tool_text(src[i])) > cap
        ]

    def shrink(self, message: Message, counter: MessageCounter, cap: int) -> Message:
        return truncated_tool_result(message, counter.text, cap)


class DropReasoning(ShrinkStep):
    """Old reasoning (``reasoning_content``, thinking parts) dropped."""

    name, reason, mark = "reasoning", "reasoning", "reasoning_before"

    def on(self, opts: FitOptions) -> bool:
        return opts.drop_reasoning

    def candidates(
        self, hist: MessageSection, opts: FitOptions, counter: MessageCounter, cap: int
    ) -> list[int]:
        return _candidates(hist, opts)[1]

    def shrink(self, message: Message, counter: MessageCounter, cap: int) -> Message:
        return without_reasoning(message)


LADDER: tuple[ShrinkStep, ...] = (ClearToolResults(), TruncateToolResults(), DropReasoning())
"""The shrink ladder, in the order its steps are taken before whole turns are dropped
(a summary, then dropping, follow it)."""

TOOL_RESULT_PARTS = 4
"""A tool result longer than this part (a quarter) of the input room (the window less the margin
and the output reserved) is over-long: truncated in history, and in the newest tool
round when the request cannot be served otherwise."""


def tool_result_cap(model: Model, opts: FitOptions) -> int:
    """Tokens a single tool result may keep when it is truncated."""
    reserve = opts.max_tokens if opts.max_tokens is not None else opts.min_output_tokens
    reserve = min(reserve, model.context_window // 4)
    room = model.context_window - opts.safety_margin - reserve
    return max(64, room // TOOL_RESULT_PARTS)  # ints: any window, no float overflow


def _shrink(
    hist: MessageSection,
    steps: Sequence[tuple[ShrinkStep, Sequence[int]]],
    made: dict[tuple[str, int], Message],
    counter: MessageCounter,
    cap: int,
) -> None:
    """Send shrunk copies of the history's messages: each step's indices shrunk by it
    (the caller's messages are never modified)."""
    src = list(hist.source)
    for step, indices in steps:
        for i in indices:
            original = hist.source[i]
            copy = made.get((step.name, i))
            if copy is None:
                copy = step.shrink(src[i], counter, cap)
                if hist.recall is not None and step.names_recall:
                    copy = hist.recall.named(original, copy)
                made[step.name, i] = copy
            src[i] = copy
            hist.changed[i] = (original, step.reason)
    hist.source = src
    hist.index = None  # the running counts are the originals'


def _truncate_newest(
    sections: Sequence[Section], counter: MessageCounter, cap: int, made: dict[int, Message]
) -> None:
    """Truncate the tool results of the required newest round to ``cap`` tokens each."""
    for s in sections:
        if not (isinstance(s, MessageSection) and s.truncatable):
            continue
        src = list(s.source)
        for i in range(s.lo, s.hi):
            m = src[i]
            if not (isinstance(m, Mapping) and m.get("role") in ("tool", "function")):
                continue
            copy = made.get(i)
            if copy is None:
                copy = made[i] = truncated_tool_result(m, counter.text, cap)
            if copy is not m:
                src[i] = copy
                s.changed[i] = (m, "truncated")
        s.source = src


def solve_history(
    layout: Layout,
    model: Model,
    opts: FitOptions,
    previous: HistoryCut | None,
    warnings: Sequence[str] = (),
) -> tuple[Pass, HistoryCut | None]:
    """One pass of ``layout`` for ``model``, with the history's cache-stable cut and the
    shrink ladder applied; and where this pass cut the history (None: a cut that must
    not be held, see below).

    The ladder (:data:`LADDER`) runs only when the room forces a cut, each step only as
    far as needed: clear old tool results (the fewest oldest ones that let the history
    fit), truncate over-long ones, then drop old reasoning; what is still over is cut
    (the summary step and dropping follow). A cache-stable fit keeps what the previous
    plan shrank shrunk, and when the room forces more, takes each step whole, so the
    next turns append to an unchanged prefix. When the required input (the newest tool
    round) cannot fit, its over-long tool results are truncated rather than the request
    refused. Every pass is solved by :func:`tokenflex.budget.solve`: the solver sees the
    shrunk costs, and the promise is checked on every plan.

    A cut is not held (None is returned for it) when it was forced by an output request
    larger than the window can give, or when no history message fits at all (one
    oversized message): the next request of the conversation starts afresh.
    """
    stable = opts.cache_stable
    steps = [step for step in LADDER if step.on(opts)]
    cold = previous is not None and not _cache_kept(model, previous)
    hold = None if cold else previous
    mark = 1.0 if cold else _low_water(model, opts, previous)
    counter = get_counter(model)
    cap = tool_result_cap(model, opts)
    made: dict[tuple[str, int], Message] = {}
    newest: dict[int, Message] = {}
    newest_cap: list[int] = []  # set when the required newest round must be truncated
    found: list[list[int]] = [[] for _ in steps]

    def attempt(n: Sequence[int]) -> tuple[Pass, MessageSection | None]:
        sections = layout.sections(model)
        hist = history_section(layout, sections)
        if newest_cap:
            _truncate_newest(sections, counter, newest_cap[-1], newest)
        if hist is not None:
            if opts.cut_note or hist.recall is not None:
                hist.note = True
                hist.exact_render = False  # the note is counted on the rendered messages
            if stable:  # with recall, the mark pays for the tool and the note (Recaller)
                hist.low_water = mark if hist.recall is None else hist.recall.low_water(mark, hist)
                hist.hold_from = hold.start if hold is not None else None
            if any(n):
                shrunk = [(st, found[k][: n[k]]) for k, st in enumerate(steps) if n[k]]
                _shrink(hist, shrunk, made, counter, cap)
        p = run_pass(model, sections, tools=layout.tools, opts=opts, warnings=warnings)
        return p, hist

    def truncated(n: Sequence[int]) -> tuple[Pass, MessageSection | None]:
        """The newest tool round alone does not fit: its results truncated, the cap
        halved until it fits (a round of many results), else the error stands."""
        limit = cap
        while True:
            newest_cap.append(limit)
            newest.clear()
            try:
                p, hist = attempt(n)
            except ContextOverflowError:
                if limit <= 64:
                    newest_cap.clear()
                    raise
                limit = max(64, limit // 2)
                continue
            cut = sum(
                len(s.changed)
                for s in p.sections
                if isinstance(s, MessageSection) and s.truncatable
            )
            p.warnings.append(
                f"The newest tool round does not fit whole: {cut} of its results truncated to "
                f"about {limit:,} tokens each (head and tail kept). plan.dropped lists them."
            )
            return p, hist

    def first_attempt(n: Sequence[int]) -> tuple[Pass, MessageSection | None]:
        """The first pass; when the required input does not fit: the newest round's tool
        results truncated, then the pinned opening sent as history (dropped first)."""
        nonlocal layout
        unpinned = getattr(layout, "unpinned", lambda: None)()
        try:
            return attempt(n)
        except ContextOverflowError:
            if unpinned is None and not (
                opts.truncate_tool_results and _has_truncatable(layout, model)
            ):
                raise
        if opts.truncate_tool_results and _has_truncatable(layout, model):
            try:
                return truncated(n)
            except ContextOverflowError:
                if unpinned is None:
                    raise
        assert unpinned is not None
        layout = unpinned
        try:
            p, hist = attempt(n)
        except ContextOverflowError:
            if not (opts.truncate_tool_results and _has_truncatable(layout, model)):
                raise
            p, hist = truncated(n)
        p.warnings.append(
            "The pinned opening (pin=) does not fit with the newest round: sent as history "
            "for this request, oldest first to go."
        )
        return p, hist

    zero = [0] * len(steps)
    if not stable and not steps:
        return first_attempt(zero)[0], None  # (the note needs no memory)
    n_now = list(zero)
    if steps and stable and hold is not None:
        hist0 = history_section(layout, layout.sections(model))
        if hist0 is not None:
            for k, step in enumerate(steps):
                before = getattr(hold, step.mark)
                if before:
                    found[k] = step.candidates(hist0, opts, counter, cap)
                    n_now[k] = sum(1 for i in found[k] if i < before)
    p, hist = first_attempt(n_now)
    if hist is None:
        return p, None
    if steps and _forced(p, hist.name):
        if not any(found):
            found = [step.candidates(hist, opts, counter, cap) for step in steps]
        for k in range(len(steps)):
            n_max = len(found[k])
            if n_max <= n_now[k]:
                continue

            def at(n: int, k: int = k) -> tuple[Pass, MessageSection | None]:
                return attempt([n if j == k else n_now[j] for j in range(len(steps))])

            best = at(n_max)
            n_best = n_max
            if not stable and not _forced(best[0], hist.name):
                lo_n, hi_n = n_now[k], n_max  # forced at lo_n, fits at hi_n: bisect
                while hi_n - lo_n > 1:
                    mid = (lo_n + hi_n) // 2
                    trial = at(mid)
                    if _forced(trial[0], hist.name):
                        lo_n = mid
                    else:
                        hi_n, best = mid, trial
                n_best = hi_n
            n_now[k] = n_best
            p, h = best
            assert h is not None
            hist = h
            if not _forced(p, hist.name):
                break
    kept = p.alloc.kept.get(hist.name, ())
    before_cut = hold if hold is not None else HistoryCut(0)
    marks = {
        step.mark: max(
            getattr(before_cut, step.mark), found[k][n_now[k] - 1] + 1 if n_now[k] else 0
        )
        for k, step in enumerate(steps)
    }
    cut = HistoryCut(
        hist.first_kept(kept) if hist not in p.left_out else hist.hi,
        end=max(previous.end if previous is not None else 0, hist.hi),
        growth=previous.growth if previous is not None else 0.0,
        grown=previous.grown if previous is not None else 0,
        **marks,
    )
    if not _holdable(p, hist, kept):
        return p, None
    return p, cut


def _has_truncatable(layout: Layout, model: Model) -> bool:
    return any(
        isinstance(s, MessageSection)
        and s.truncatable
        and any(
            isinstance(m, Mapping) and m.get("role") in ("tool", "function")
            for m in s.source[s.lo : s.hi]
        )
        for s in layout.sections(model)
    )


def _holdable(p: Pass, hist: MessageSection, kept: tuple[int, ...]) -> bool:
    """Whether the history cut of ``p`` may be held by the next requests: not when the
    output request was larger than the window can give (the cut was made for a
    sensible output, not for the history), nor when no history fits at all while there
    was some (one oversized message forced it)."""
    spec = p.alloc.spec
    if spec is not None and spec.history_output is not None and _forced(p, hist.name):
        return False
    return not (not kept and hist.hi > hist.lo and _forced(p, hist.name))


def _cache_kept(model: Model, previous: HistoryCut) -> bool:
    """Whether the provider still caches the previous plan's prefix (see
    :func:`tokenflex.cost.cache_kept`). A cut is held only for a cache: with none left,
    the fit keeps all the history that fits, as drop-to-fit does, and the next requests
    hold that cut."""
    if not previous.at:
        return True  # not known (the plan being made now, or an older state)
    age = time.time() - previous.at
    if cache_kept(model, previous.input_tokens, age):
        return True
    log.info(
        "tokenflex: %s's prompt cache no longer holds the previous request (%d tokens, "
        "%.0f s ago; cache_min_tokens %s, cache_ttl_s %s): all the history that fits is kept",
        model.name,
        previous.input_tokens,
        age,
        model.cache_min_tokens,
        model.cache_ttl_s,
    )
    return False


def _low_water(
    model: Model, opts: FitOptions, previous: HistoryCut | None
) -> float | Callable[[int], int]:
    """The low-water mark of a cache-stable cut: the option's share, or with ``"auto"``
    the mark by expected cost (:func:`tokenflex.cost.stable_mark`, at most
    :data:`~tokenflex.options.AUTO_MARK_MAX` of the room: never dearer than a fixed mark)
    once the prices and the conversation's growth per request are known (``AUTO_MARK_MAX``
    while only the prices are), else :data:`LOW_WATER`."""
    if opts.low_water != "auto":
        return float(opts.low_water)
    if stable_mark(model, 1_000, 1.0) is None:
        return LOW_WATER  # no cache prices: nothing to weigh
    growth = previous.growth if previous is not None and previous.grown else 0.0
    if not growth:
        return AUTO_MARK_MAX

    def mark(room: int) -> int:
        tokens = stable_mark(model, room, growth)
        most = int(AUTO_MARK_MAX * room)
        return most if tokens is None else min(tokens, most)

    return mark


def _candidates(hist: MessageSection, opts: FitOptions) -> tuple[list[int], list[int]]:
    clear, think = shrink_candidates(
        hist.source,
        hist.lo,
        hist.hi,
        keep_results=opts.keep_tool_results,
        keep_tools=opts.keep_tools,
    )
    return (clear if opts.clear_tool_results else []), (think if opts.drop_reasoning else [])


_TO_KEEP_MORE = {
    "share": "raise history_share",
    "max_items": "raise max_messages",
    "cap": "raise max_input_tokens",
}


def dropped_messages_warnings(p: Pass, runs: Sequence[DropRun], opts: FitOptions) -> list[str]:
    """One warning per message section that dropped messages: how many, why, what was
    kept, and how to keep more. Nothing is dropped silently, and "max_tokens reduced"
    alone does not say that history went.

    The dropped messages' own tokens are not summed here: fit() counts history newest
    first only as far as the budget needs, and counting the rest for one number would
    make every fit O(history). ``plan.dropped`` counts each one when it is read.
    """
    out: list[str] = []
    for s in p.sections:
        if not isinstance(s, MessageSection) or s.mode == "all" or s in p.left_out:
            continue
        reasons: dict[str, int] = {}
        for r in runs:
            if r.section == s.name and r.reason != "summarized":
                reasons[r.reason] = reasons.get(r.reason, 0) + r.stop - r.start
        dropped = sum(reasons.values())
        if not dropped:
            continue
        kept = len(p.rendered.get(s.name, ()))
        why = ", ".join(f"{reason}: {n:,}" for reason, n in reasons.items())
        which = "the newest " if s.mode == "newest" else ""
        text = (
            f"{s.name}: dropped {dropped:,} of {dropped + kept:,} messages ({why}); kept "
            f"{which}{kept:,} in the {p.model.context_window:,}-token window "
            f"({p.section_tokens.get(s.name, 0):,} tokens). plan.dropped lists each one."
        )
        if not s.label:  # fit()'s own history: name the options that keep more
            main = max(reasons, key=lambda k: (k != "orphan", reasons[k]))
            fix = _TO_KEEP_MORE.get(main) or (
                "lower max_tokens" if opts.max_tokens is not None else "lower min_output_tokens"
            )
            text += f" To keep more: {fix}, add fallback_models=[...], or pass summarizer=."
        out.append(text)
    return out


def build_plan(
    p: Pass,
    *,
    opts: FitOptions,
    started: float,
    runs: Sequence[DropRun] = (),
    summary: SummaryInfo | None = None,
    fallback_from: str | None = None,
) -> Plan:
    """The :class:`~tokenflex.Plan` of a pass; ``runs`` adds items dropped before it
    (a summarized span)."""
    order = {s.name: i for i, s in enumerate(p.sections)}
    by_name = {s.name: s for s in p.sections}
    all_runs = list(runs)
    messages: list[Any] = []
    warnings = list(p.warnings)
    extras: dict[str, Any] = {}
    for s in p.sections:
        if s in p.left_out:
            all_runs += s.runs(None)
            warnings.append(
                f"{s.name}: left out whole: it does not fit with the required input, the "
                "output floor and the margin. plan.dropped lists what it held."
            )
            continue
        messages += p.rendered[s.name]
        all_runs += s.runs(p.alloc)
        warnings += s.warnings()
        extras |= s.extras()
    all_runs.sort(key=lambda r: (order[r.section], r.start))
    warnings += p.alloc.notes
    warnings += dropped_messages_warnings(p, all_runs, opts)
    counter = p.counter
    warnings += counter.notes()  # what the model's chat template will not show it

    def item(section: str, i: int) -> Any:
        return by_name[section].item(i)

    def item_cost(section: str, i: int, it: Any) -> int:
        return by_name[section].item_tokens(i, it, counter)

    log_dropped(all_runs, p.model.name)
    alloc = p.alloc
    spec = alloc.spec
    assert spec is not None
    plan = Plan(
        messages=messages,
        max_tokens=alloc.max_tokens,
        input_tokens=alloc.input_tokens,
        context_window=p.model.context_window,
        safety_margin=spec.safety_margin,
        requested_max_tokens=spec.requested_output,
        min_output_tokens=spec.floor,
        model=p.model,
        sections={k: v for k, v in p.section_tokens.items() if v} | {"tools_and_priming": p.base},
        dropped=DroppedItems(all_runs, item, item_cost),
        summary=summary,
        warnings=tuple(dict.fromkeys(warnings)),
        exact=counter.exact_for(messages, p.tools),
        policy=opts.policy,
        elapsed_ms=(time.perf_counter() - started) * 1000,
        fallback_from=fallback_from,
        extras=extras,
    )
    log.debug("tokenflex: %r", plan)
    return plan


# -- layouts, fallback and summaries around the pass ----------------------------------


@dataclass(frozen=True)
class SummaryTarget:
    """The history a summary may stand for: ``source[lo:hi]`` of section ``section``."""

    section: str
    source: Sequence[Message]
    lo: int
    hi: int
    tail: int = 0
    """Messages after ``hi`` that count toward ``keep_recent`` (the current turn)."""
    previous: int | None = None
    """Index in ``source`` of the summary message the new one rolls forward."""


class Layout(Protocol):
    """What fit(), Prompt and Conversation tell the engine."""

    model: Model
    tools: Sequence[Tool] | None

    def sections(self, model: Model) -> list[Section]:
        """The request's sections, in request order, counted for ``model``."""
        ...

    def summary_target(self) -> SummaryTarget | None:
        """The history a summarizer may shorten, if any."""
        ...

    def with_summary(self, summary: Message, recent_start: int) -> Layout:
        """The layout with ``summary`` standing for its history before ``recent_start``."""
        ...


@dataclass
class _SummaryRequest:
    span: list[Message]
    """What the summarizer reads (after ``previous``)."""
    span_start: int
    recent_start: int
    previous: str | None
    max_tokens: int
    key: str = ""
    """The summary's key in the state store: what it covers and how it is made."""
    sent: list[Message] = field(default_factory=list)
    """Messages sent beside the summary (the opening and the recent ones): a fact they
    state needs no carrying in the summary."""
    rolled_before: int | None = None
    """Where the stored summary this one rolls forward ends (``previous`` is its text)."""


@dataclass
class _Outcome:
    """The first pass (after any fallback), and the summary step that may follow it."""

    layout: Layout
    first: Pass
    opts: FitOptions
    started: float
    fallback_from: str | None = None
    cut: HistoryCut | None = None
    """Where the first pass cut the history (cache-stable or shrinking fits)."""
    memory: SessionMemory | None = None
    previous: HistoryCut | None = None
    """Where the conversation's previous plan cut it."""
    request: _SummaryRequest | None = field(default=None, init=False)

    def plan(self) -> Plan:
        return self.remembered(
            build_plan(
                self.first, opts=self.opts, started=self.started, fallback_from=self.fallback_from
            ),
            self.cut,
        )

    def remembered(self, plan: Plan, cut: HistoryCut | None) -> Plan:
        """``plan`` with the prefix it shares with the conversation's previous plan, and
        this plan recorded as the previous one."""
        if self.memory is None:
            return plan
        target = stable_target(self.layout, self.first.model)
        if target is None:
            return plan
        if cut is None:
            hist = history_section(self.layout, self.first.sections)
            kept = () if hist is None else self.first.alloc.kept.get(hist.name, ())
            before = self.previous if self.previous is not None else HistoryCut(0)
            cut = HistoryCut(
                target.hi if hist is None else hist.first_kept(kept),
                end=max(before.end, target.hi),
                growth=before.growth,
                grown=before.grown,
            )
        cut = replace(cut, at=time.time(), input_tokens=plan.input_tokens)
        prefix = self.memory.remember(target.source, cut, plan.messages, self.first.counter)
        if prefix is None:
            return plan
        return replace(plan, prefix_tokens=prefix, cached_tokens=cached_tokens(plan.model, prefix))

    def summary_request(self, summarizer: Any, summaries: Any = None) -> _SummaryRequest | None:
        """What to summarize, or None. With a store of ``summaries``, a span summarized
        before is found by its key; a cache-stable fit rolls the previous summary
        forward over what the cut newly left out."""
        target = self.layout.summary_target()
        if summarizer is None or target is None or self.first.dropped_from(target.section) is None:
            return None
        from .summarize import SUMMARY_PREFIX

        src = target.source
        # The last keep_recent messages stay verbatim, counting the current turn, and the
        # boundary moves back to a whole group so tool results keep their call.
        want = max(0, self.opts.keep_recent - target.tail)
        recent_start, taken = target.hi, 0
        for start, stop, _ in iter_groups(src, target.lo, target.hi, lambda _m: 0):
            if taken >= want:
                break
            taken += stop - start
            recent_start = start
        if self.opts.cache_stable and self.cut is not None:
            # The summary covers what the stable cut left out, so it stays the same
            # (byte for byte, from the store) until the cut moves; never more than
            # keep_recent allows.
            recent_start = min(recent_start, self.cut.start)
        if recent_start <= target.lo:
            self.first.warnings.append(
                f"History does not fit but keep_recent={self.opts.keep_recent} leaves nothing "
                "to summarize; dropped the oldest messages instead."
            )
            return None
        previous = None
        span_start = target.lo
        if target.previous is not None:
            previous = str(src[target.previous]["content"])[len(SUMMARY_PREFIX) :]
            span_start = target.previous
        window = self.first.model.context_window
        max_tokens = min(self.opts.summary_max_tokens, max(1, window // 4))
        covers = functools.partial(
            summary_key,
            summarizer,
            max_tokens,
            previous,
            src,
            target.lo,
            facts=self.opts.summary_facts,
        )
        r = self.request = _SummaryRequest(
            span=list(src[target.lo : recent_start]),
            sent=[*src[: target.lo], *src[recent_start:]],
            span_start=span_start,
            recent_start=recent_start,
            previous=previous,
            max_tokens=max_tokens,
            key=covers(recent_start) if summaries is not None else "",
        )
        before = self.previous.summarized_before if self.previous is not None else 0
        if summaries is not None and self.opts.cache_stable and target.lo < before < recent_start:
            rolled = summaries.get(covers(before))
            if rolled is not None and summaries.get(r.key) is None:
                r.previous, r.span = rolled.decode(), list(src[before:recent_start])
                r.rolled_before = before
        return r

    def deferred(self, calls: int, started: bool, summarizer_name: str) -> Plan:
        """The plan served while the summary (``calls`` summarizer calls) is made in the
        background: the previous stored summary, if this one rolls it forward, and the
        newest messages that fit; else the first pass (the oldest dropped)."""
        r = self.request
        assert r is not None
        msg = (
            f"The summary of history messages [{r.span_start}:{r.recent_start}] needs "
            f"{calls} summarizer calls; "
            + (
                "it is being made in the background"
                if started
                else "it was not started now (one for this span is already being made, "
                "the background runner is full, or there is no state store to keep it)"
            )
            + " and a later request of this conversation uses it. This plan "
            + ("keeps the previous summary" if r.rolled_before is not None else "has no summary")
            + " and drops the oldest messages that do not fit."
        )
        log.info("tokenflex: %s", msg)
        self.first.warnings.append(msg)
        if r.rolled_before is None or r.previous is None:
            return self.plan()
        self.request = replace(r, recent_start=r.rolled_before)
        return self.with_summary(r.previous, summarizer_name, reused=True)

    def failed(self, exc: BaseException) -> Plan:
        msg = (
            f"Summarizer failed ({type(exc).__name__}: {exc}); fell back to dropping the "
            "oldest history messages."
        )
        log.warning("tokenflex: %s", msg)
        self.first.warnings.append(msg)
        return self.plan()

    def with_summary(self, text: str, summarizer_name: str, *, reused: bool = False) -> Plan:
        r, target = self.request, self.layout.summary_target()
        assert r is not None and target is not None
        recaller = getattr(self.layout, "recall", None)
        if recaller is not None:  # the summary names what it stands for
            rid = recaller.span_id(r.span_start, r.recent_start)
            message = summary_message(f"{text.strip()}\n[recall id: {rid}]")
        else:
            message = summary_message(text)
        layout = self.layout.with_summary(message, r.recent_start)
        model = self.first.model
        before = self.cut
        try:
            second, cut = solve_history(
                layout,
                model,
                self.opts,
                None if before is None else replace(before, start=r.recent_start),
                warnings=[w for w in self.first.warnings],
            )
        except ContextOverflowError as exc:
            return self.failed(exc)
        cost = self.first.counter.message
        src = target.source
        span_tokens = sum(cost(src[i]) for i in range(r.span_start, r.recent_start))
        summary_tokens = cost(message)
        kept, missing = fact_report(r.span, r.previous, text, sent=r.sent)
        log.info(
            "tokenflex: summarized messages [%d:%d] into %d tokens (saved %d)",
            r.span_start,
            r.recent_start,
            summary_tokens,
            span_tokens - summary_tokens,
        )
        plan = build_plan(
            second,
            opts=self.opts,
            started=self.started,
            runs=[DropRun(target.section, r.span_start, r.recent_start, "summarized")],
            fallback_from=self.fallback_from,
            summary=SummaryInfo(
                text=text.strip(),
                covers=(r.span_start, r.recent_start),
                tokens=summary_tokens,
                saved_tokens=span_tokens - summary_tokens,
                summarizer=summarizer_name,
                reused=reused,
                facts_kept=kept,
                facts_missing=missing,
            ),
        )
        if cut is not None:
            cut = replace(cut, summarized_before=r.recent_start)
        return self.remembered(plan, cut)


def _first(
    layout: Layout, opts: FitOptions, started: float, memory: SessionMemory | None = None
) -> _Outcome:
    """The first pass: the primary model, else the cheapest fallback that fits (one pass
    per model tried)."""
    primary = layout.model
    previous = None
    if memory is not None and opts.cache_stable:
        target = stable_target(layout, primary)
        if target is not None:
            previous = memory.previous_cut(target.source)
            if previous is not None:
                previous = _grown(previous, target.source, target.hi, primary)
    if not opts.fallback_models:
        p, cut = solve_history(layout, primary, opts, previous)
        return _Outcome(layout, p, opts, started, cut=cut, memory=memory, previous=previous)
    chain = fallback_chain(
        primary, [get_model(n, strict=opts.strict) for n in opts.fallback_models]
    )
    share = opts.fallback_input_share
    tried: list[Candidate] = []
    backup: Pass | None = None
    backup_cut: HistoryCut | None = None
    for model in [primary, *chain]:
        try:
            p, cut = solve_history(layout, model, opts, previous)
        except ContextOverflowError as exc:
            tried.append(_candidate(model, exc.required_tokens or 0, fits=False))
            continue
        tried.append(_candidate(model, p.required, fits=True))
        if share is not None and p.required > share * model.context_window:
            if backup is None:  # over the share: a model under it is preferred
                backup, backup_cut = p, cut
            continue
        return replace(
            _switched(layout, p, opts, started, tried), cut=cut, memory=memory, previous=previous
        )
    if backup is not None:
        if backup.model is primary:
            backup.warnings.append(
                f"Required input is above fallback_input_share={share} of {primary.name}'s "
                "window but no fallback model stays under it; kept "
                f"{primary.name}."
            )
        return replace(
            _switched(layout, backup, opts, started, tried),
            cut=backup_cut,
            memory=memory,
            previous=previous,
        )
    floor = min(opts.min_output_tokens, opts.max_tokens or opts.min_output_tokens)
    raise no_model_fits(tried, floor, opts.safety_margin, primary=primary.name)


def _grown(previous: HistoryCut, source: Sequence[Message], hi: int, model: Model) -> HistoryCut:
    """``previous`` with the history appended since counted in its growth per request
    (O(the new messages); an invalid one is left to the pass to report)."""
    if not previous.end:
        return replace(previous, end=hi)  # a state without an end: start counting
    count = get_counter(model).message
    try:
        tokens = sum(count(source[i]) for i in range(previous.end, hi))
    except BadMessage:
        return previous
    return previous.appended(hi, tokens)


def _candidate(model: Model, required: int, *, fits: bool) -> Candidate:
    return Candidate(
        model.name, model.context_window, required, fits, model.input_price, model.max_output_tokens
    )


def _switched(
    layout: Layout, p: Pass, opts: FitOptions, started: float, tried: list[Candidate]
) -> _Outcome:
    primary = layout.model
    if p.model is primary:
        return _Outcome(layout, p, opts, started)
    first = tried[0]
    why = (
        f"its required input is {first.required_input_tokens:,} tokens, "
        f"{first.required_input_tokens / first.context_window:.0%} of its window, above "
        f"fallback_input_share={opts.fallback_input_share}"
        if first.fits
        else f"{first.required_input_tokens:,} required input tokens do not fit its "
        f"{first.context_window:,}-token window with the output floor and margin"
    )
    p.warnings.insert(
        0,
        f"{primary.name} cannot fit this request ({why}); using fallback model "
        f"{p.model.name} ({p.model.context_window:,}-token window) for this request.",
    )
    log.warning("tokenflex: falling back from %s to %s", primary.name, p.model.name)
    return _Outcome(layout, p, opts, started, fallback_from=primary.name)


def fit_layout(
    layout: Layout,
    opts: FitOptions,
    *,
    summarizer: Any = None,
    started: float | None = None,
    memory: SessionMemory | None = None,
    summaries: Any = None,
    background: Any = None,
) -> Plan:
    """Fit a layout: the first pass (with fallback), then a summary if one is needed.

    Args:
        memory: The conversation's previous plan (cache-stable cuts, ``prefix_tokens``).
        summaries: A :class:`~tokenflex.state.StateStore` of summaries by what they
            cover: a span summarized before is not summarized again.
        background: A :class:`~tokenflex.summarize.background.BackgroundSummaries`: a
            summary that needs more than one summarizer call is made there (stored in
            ``summaries``) and this fit does not wait for it (:meth:`_Outcome.deferred`).
    """
    from .summarize import summarize_span

    begun = time.perf_counter() if started is None else started
    outcome = _first(layout, opts, begun, memory)
    r = outcome.summary_request(summarizer, summaries)
    if r is None:
        return outcome.plan()
    key = r.key
    stored = summaries.get(key) if summaries is not None else None
    if stored is not None:
        return outcome.with_summary(stored.decode(), _name(summarizer), reused=True)
    if background is not None:
        calls = _calls(summarizer, r, outcome.first.counter)
        if calls > 1:
            job = _background_job(summarizer, r, outcome.first.counter, opts.summary_facts)
            started = _defer(background, summaries, key, job)
            return outcome.deferred(calls, started, _name(summarizer))
    try:
        text = summarize_span(
            summarizer,
            r.span,
            previous_summary=r.previous,
            max_tokens=r.max_tokens,
            counter=outcome.first.counter,
            check_facts=opts.summary_facts,
            sent=r.sent,
        )
    except Exception as exc:  # any failure: fall back to dropping, and say so
        return outcome.failed(exc)
    if summaries is not None:
        summaries.set(key, text.encode(), ttl_s=SUMMARY_TTL_S)
    return outcome.with_summary(text, _name(summarizer))


async def afit_layout(
    layout: Layout,
    opts: FitOptions,
    *,
    summarizer: Any = None,
    started: float | None = None,
    memory: SessionMemory | None = None,
    summaries: Any = None,
    background: Any = None,
) -> Plan:
    """Async twin of :func:`fit_layout`: counting and solving run in a worker thread (a
    tokenizer may call a server), the summarizer is awaited (a background summary is
    made with the summarizer's sync method, in the runner's thread)."""
    from .summarize import asummarize_span

    begun = time.perf_counter() if started is None else started
    outcome = await asyncio.to_thread(_first, layout, opts, begun, memory)
    r = outcome.summary_request(summarizer, summaries)
    if r is None:
        return await asyncio.to_thread(outcome.plan)
    key = r.key
    stored = summaries.get(key) if summaries is not None else None
    if stored is not None:
        return await asyncio.to_thread(
            functools.partial(outcome.with_summary, stored.decode(), _name(summarizer), reused=True)
        )
    if background is not None:
        calls = await asyncio.to_thread(_calls, summarizer, r, outcome.first.counter)
        if calls > 1:
            job = _background_job(summarizer, r, outcome.first.counter, opts.summary_facts)
            started = _defer(background, summaries, key, job)
            return await asyncio.to_thread(outcome.deferred, calls, started, _name(summarizer))
    try:
        text = await asummarize_span(
            summarizer,
            r.span,
            previous_summary=r.previous,
            max_tokens=r.max_tokens,
            counter=outcome.first.counter,
            check_facts=opts.summary_facts,
            sent=r.sent,
        )
    except Exception as exc:  # any failure: fall back to dropping, and say so
        return await asyncio.to_thread(outcome.failed, exc)
    if summaries is not None:
        summaries.set(key, text.encode(), ttl_s=SUMMARY_TTL_S)
    return await asyncio.to_thread(outcome.with_summary, text, _name(summarizer))


SUMMARY_TTL_S = 24 * 3600.0
"""How long a stored summary lives without being used again."""


def _calls(summarizer: Any, r: _SummaryRequest, counter: Any) -> int:
    """Summarizer calls the summary of ``r`` needs (1 when that cannot be known: the
    call itself then fails and says why)."""
    from .errors import SummarizerError
    from .summarize.spans import summary_calls

    try:
        return summary_calls(
            summarizer,
            r.span,
            previous_summary=r.previous,
            max_tokens=r.max_tokens,
            counter=counter,
        )
    except SummarizerError:
        return 1


def _background_job(
    summarizer: Any, r: _SummaryRequest, counter: Any, check_facts: bool
) -> Callable[[], str]:
    """The summary ``r`` asks for, made later by a background runner (sync calls)."""
    from .summarize import summarize_span

    return functools.partial(
        summarize_span,
        summarizer,
        r.span,
        previous_summary=r.previous,
        max_tokens=r.max_tokens,
        counter=counter,
        check_facts=check_facts,
        sent=r.sent,
    )


def _defer(background: Any, summaries: Any, key: str, job: Any) -> bool:
    """Hand ``job`` to the background runner (nothing to keep it in without a store of
    ``summaries``: not started)."""
    if summaries is None:
        return False
    return bool(background.submit(key, job, summaries, ttl_s=SUMMARY_TTL_S))


def _name(summarizer: Any) -> str:
    return type(summarizer).__name__


def summary_key(
    summarizer: Any,
    max_tokens: int,
    previous: str | None,
    source: Sequence[Message],
    lo: int,
    hi: int,
    *,
    facts: bool = True,
) -> str:
    """A summary's key in a state store: what it covers (``source[lo:hi]`` after the
    ``previous`` summary the caller sent, if any) and how it is made (the summarizer, its
    plain settings, the length asked, whether its facts were checked)."""
    import hashlib
    import json

    from .session import fingerprint

    fields = vars(summarizer) if hasattr(summarizer, "__dict__") else {}
    settings = {
        k: v
        for k, v in sorted(fields.items())
        if isinstance(v, str | int | float | bool)
        and "key" not in k.lower()  # never an API key in a store key
        and not k.startswith("_")  # state, not settings
    }
    what = [_name(summarizer), settings, max_tokens, previous]
    if not facts:
        what.append("unchecked")
    what.append([fingerprint(m) for m in source[lo:hi]])
    digest = hashlib.blake2b(json.dumps(what, default=str).encode(), digest_size=16)
    return "summary:" + digest.hexdigest()
