"""The shrink ladder and the cache-stable cut: one pass of a layout with its history
shrunk only as far as the room forces.

A :class:`ShrinkStep` says which history messages it may shrink and how it shrinks
one; :data:`LADDER` is their order. :func:`solve_history` runs the ladder (each step
only as far as needed), holds the previous plan's cut for a cache-stable fit, and
truncates the newest tool round when the required input cannot fit otherwise.

To add a step: subclass :class:`ShrinkStep` (``name``, ``reason``, ``mark``, ``on``,
``candidates``, ``shrink``), add an entry to :data:`LADDER` and a ``mark`` field to
:class:`~tokenflex.session.HistoryCut`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from .._types import Message
from ..cost import cache_kept, stable_mark
from ..counting import MessageCounter, get_counter
from ..errors import ContextOverflowError
from ..history import (
    cleared_tool_result,
    shrink_candidates,
    tool_text,
    truncated_tool_result,
    without_reasoning,
)
from ..models import Model
from ..options import AUTO_MARK_MAX, LOW_WATER, FitOptions
from ..session import HistoryCut
from .layout import Layout, history_section
from .passes import Pass, run_pass
from .sections import MessageSection, Section

__all__ = [
    "LADDER",
    "TOOL_RESULT_PARTS",
    "ClearToolResults",
    "DropReasoning",
    "ShrinkStep",
    "TruncateToolResults",
    "ladder",
    "solve_history",
    "tool_result_cap",
]

log = logging.getLogger("tokenflex")


_FORCED = frozenset({"budget", "share", "cap", "low_water"})
"""Drop reasons that mean the room forced a cut (``held`` and ``orphan`` alone do not)."""


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
        cleared = set(_candidates(hist, opts)[0])  # the clearing step's (none if off)
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
(a summary, then dropping, follow it). ``shrink_steps`` (``Shrink(steps=...)``) picks
and orders them by name for one fit."""


def ladder(opts: FitOptions) -> list[ShrinkStep]:
    """The steps one fit takes, in order: ``opts.shrink_steps`` by name (each named step
    on), else :data:`LADDER`'s steps that their options turn on."""
    names = opts.shrink_steps
    if names is None:
        return [step for step in LADDER if step.on(opts)]
    by_name = {step.name: step for step in LADDER}  # names checked by FitOptions
    return [by_name[n] for n in names]


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
        if not (s.role == "current" and isinstance(s, MessageSection) and s.truncatable):
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
    steps = ladder(opts)
    cold = previous is not None and not _cache_kept(model, previous)
    hold = None if cold else previous
    mark = 1.0 if cold else low_water_mark(model, opts, previous)
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
                if s.role == "current" and isinstance(s, MessageSection) and s.truncatable
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
        try:
            return attempt(n)
        except ContextOverflowError:
            # (made only now: an agent's unpinned layout looks back for a user message,
            # which may be its task, thousands of rounds back)
            unpinned = getattr(layout, "unpinned", lambda: None)()
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
        s.role == "current"
        and isinstance(s, MessageSection)
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


def low_water_mark(
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
    return (clear if _taken(opts, "clear") else []), (think if _taken(opts, "reasoning") else [])


def _taken(opts: FitOptions, name: str) -> bool:
    """Whether the step ``name`` is on the ladder of a fit with ``opts``."""
    return any(step.name == name for step in ladder(opts))
