"""Fitting a layout, written once: :func:`layout_flow` is a sans-I/O generator that
yields what it needs (CPU and tokenizer work, a summary) and receives the answers;
:func:`fit_layout` and :func:`afit_layout` drive it, sync and async (the async driver
runs the work in a worker thread, so a server-backed tokenizer never blocks the loop,
and awaits the summarizer).

The flow: the first pass (the primary model, else the cheapest fallback that fits: one
pass per model tried), then, when the pass cut a history a summarizer may shorten, a
stored summary, a background one, or one summarizer call, and one more pass.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import logging
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._types import Message, Tool
from ..budget import BudgetSpec
from ..cost import cache_kept, cached_tokens
from ..counting import MessageCounter, get_counter
from ..drivers import adrive, drive
from ..errors import ContextOverflowError
from ..fallback import Candidate, fallback_chain, no_model_fits, pick_model
from ..message.checks import BadMessage
from ..models import Model, get_model
from ..options import FitOptions
from ..plan import DroppedItems, DropRun, Plan, log_dropped
from ..session import HistoryCut, SessionMemory
from ..summarize import asummarize_span, summarize_span
from .ladder import ladder, low_water_mark, solve_history
from .layout import Layout, stable_target
from .passes import Pass, TakenOut, dropped_warning, output_request
from .sections import GroupIndex, MessageSection, opens_history
from .summary import SUMMARY_TTL_S, Outcome, SummaryRequest, summarizer_name

FAST_PATH = True
"""Let :func:`grown_plan` answer a fit whose plan is the previous one plus the messages
appended since (False: every fit takes the full path; the tests compare the two)."""

__all__ = [
    "FAST_PATH",
    "WHOLE_BLOCK",
    "Flow",
    "Summarize",
    "Work",
    "afit_layout",
    "fit_layout",
    "grown_plan",
    "layout_flow",
    "whole_plan",
]

log = logging.getLogger("tokenflex")


@dataclass(frozen=True)
class Work:
    """A step of the flow that needs the CPU or a tokenizer (which may call a server):
    the sync driver calls it, the async driver runs it in a worker thread."""

    run: Callable[[], Any]


@dataclass(frozen=True)
class Summarize:
    """A step of the flow that needs the summarizer: the driver answers with the
    summary's text, or with the exception the summarizer raised."""

    summarizer: Any
    request: SummaryRequest
    counter: MessageCounter
    check_facts: bool

    def kwargs(self) -> dict[str, Any]:
        r = self.request
        return {
            "previous_summary": r.previous,
            "max_tokens": r.max_tokens,
            "counter": self.counter,
            "check_facts": self.check_facts,
            "sent": r.sent,
        }


Flow = Generator["Work | Summarize", Any, Plan]
"""What :func:`layout_flow` is: it yields steps, receives their answers, returns the plan."""


def layout_flow(
    layout: Layout,
    opts: FitOptions,
    *,
    summarizer: Any = None,
    started: float | None = None,
    memory: SessionMemory | None = None,
    summaries: Any = None,
    background: Any = None,
    taken_out: TakenOut | None = None,
) -> Flow:
    """Fit a layout: the first pass (with fallback), then a summary if one is needed
    (see :func:`fit_layout` for the arguments). Sans I/O: a :class:`Work` step is
    answered with what its ``run`` returns, a :class:`Summarize` step with the text."""
    begun = time.perf_counter() if started is None else started
    outcome: Outcome = yield Work(functools.partial(_first, layout, opts, begun, memory))
    outcome.taken_out = taken_out
    plan: Plan
    r = outcome.summary_request(summarizer, summaries)
    if r is None:
        plan = yield Work(outcome.plan)
        return plan
    name = summarizer_name(summarizer)
    key = r.key
    stored = summaries.get(key) if summaries is not None else None
    if stored is not None:
        text = stored.decode()
        plan = yield Work(functools.partial(outcome.with_summary, text, name, reused=True))
        return plan
    counter = outcome.first.counter
    if background is not None:
        calls = yield Work(functools.partial(_calls, summarizer, r, counter))
        if calls > 1:
            job = _background_job(summarizer, r, counter, opts.summary_facts)
            started_now = _defer(background, summaries, key, job)
            plan = yield Work(functools.partial(outcome.deferred, calls, started_now, name))
            return plan
    text = yield Summarize(summarizer, r, counter, opts.summary_facts)
    if isinstance(text, BaseException):  # any failure: fall back to dropping, and say so
        plan = yield Work(functools.partial(outcome.failed, text))
        return plan
    if summaries is not None:
        summaries.set(key, text.encode(), ttl_s=SUMMARY_TTL_S)
    plan = yield Work(functools.partial(outcome.with_summary, text, name))
    return plan


def fit_layout(
    layout: Layout,
    opts: FitOptions,
    *,
    summarizer: Any = None,
    started: float | None = None,
    memory: SessionMemory | None = None,
    summaries: Any = None,
    background: Any = None,
    taken_out: TakenOut | None = None,
) -> Plan:
    """Fit a layout: the first pass (with fallback), then a summary if one is needed.

    Args:
        memory: The conversation's previous plan (cache-stable cuts, ``prefix_tokens``).
        summaries: A :class:`~tokenflex.state.StateStore` of summaries by what they
            cover: a span summarized before is not summarized again.
        background: A :class:`~tokenflex.summarize.background.BackgroundSummaries`: a
            summary that needs more than one summarizer call is made there (stored in
            ``summaries``) and this fit does not wait for it (:meth:`Outcome.deferred`).
        taken_out: The reasoning taken out of the caller's messages (see
            :class:`~tokenflex.engine.passes.TakenOut`), listed in the plan's ``dropped``.
    """
    flow = layout_flow(
        layout,
        opts,
        summarizer=summarizer,
        started=started,
        memory=memory,
        summaries=summaries,
        background=background,
        taken_out=taken_out,
    )

    def answer(step: Work | Summarize) -> Any:
        if isinstance(step, Work):
            return step.run()
        try:
            return summarize_span(step.summarizer, step.request.span, **step.kwargs())
        except Exception as exc:  # the flow falls back to dropping, and says so
            return exc

    return drive(flow, answer)


async def afit_layout(
    layout: Layout,
    opts: FitOptions,
    *,
    summarizer: Any = None,
    started: float | None = None,
    memory: SessionMemory | None = None,
    summaries: Any = None,
    background: Any = None,
    taken_out: TakenOut | None = None,
) -> Plan:
    """Async driver of :func:`layout_flow`: counting and solving run in a worker thread
    (a tokenizer may call a server), the summarizer is awaited (a background summary is
    made with the summarizer's sync method, in the runner's thread)."""
    flow = layout_flow(
        layout,
        opts,
        summarizer=summarizer,
        started=started,
        memory=memory,
        summaries=summaries,
        background=background,
        taken_out=taken_out,
    )

    async def answer(step: Work | Summarize) -> Any:
        if isinstance(step, Work):
            return await asyncio.to_thread(step.run)
        try:
            return await asummarize_span(step.summarizer, step.request.span, **step.kwargs())
        except Exception as exc:  # the flow falls back to dropping, and says so
            return exc

    return await adrive(flow, answer)


def _first(
    layout: Layout, opts: FitOptions, started: float, memory: SessionMemory | None = None
) -> Outcome:
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
        return Outcome(layout, p, opts, started, cut=cut, memory=memory, previous=previous)
    models = [
        primary,
        *fallback_chain(primary, [get_model(n, strict=opts.strict) for n in opts.fallback_models]),
    ]
    solved: dict[str, tuple[Pass, HistoryCut | None]] = {}

    def check(model: Model) -> Candidate:
        try:
            p, cut = solve_history(layout, model, opts, previous)
        except ContextOverflowError as exc:
            return _candidate(model, exc.required_tokens or 0, fits=False)
        solved[model.name] = (p, cut)
        return _candidate(model, p.required, fits=True)

    floor = min(opts.min_output_tokens, opts.max_tokens or opts.min_output_tokens)
    pick = pick_model(
        models,
        check,
        floor=floor,
        margin=opts.safety_margin,
        share=opts.fallback_input_share,
        share_option="fallback_input_share",
    )
    if pick.index is None:
        raise no_model_fits(pick.considered, floor, opts.safety_margin, primary=primary.name)
    p, cut = solved[models[pick.index].name]
    if pick.index == 0:
        if pick.over_share:
            p.warnings.append(pick.reason)
        return Outcome(layout, p, opts, started, cut=cut, memory=memory, previous=previous)
    p.warnings.insert(0, pick.reason)
    log.warning("tokenflex: falling back from %s to %s", primary.name, p.model.name)
    return Outcome(
        layout,
        p,
        opts,
        started,
        fallback_from=primary.name,
        cut=cut,
        memory=memory,
        previous=previous,
    )


def grown_plan(
    previous: Plan,
    sent: int,
    source: Sequence[Message],
    span: Callable[[int, int], int],
    bounds: tuple[int, int, int, int],
    opts: FitOptions,
    memory: SessionMemory | None,
    started: float,
    *,
    tools: Sequence[Tool] | None = None,
    index: GroupIndex | None = None,
    shrinkable: bool = True,
    user_opens: bool | None = None,
) -> Plan | None:
    """The plan of ``source`` when it is ``previous`` (made for ``source[:sent]``) plus
    the messages appended since: O(the new messages), else None (the full path
    decides). A :class:`~tokenflex.Conversation`'s fit, and fit()'s of a list it has
    seen grow.

    It answers only where the full path cannot do anything else: the output is
    requested (``policy="reserve"``) and was reserved whole, nothing caps the messages,
    no fallback, no summary, no cut note; and either

    - the previous plan dropped nothing and warned of nothing, and the grown input fits
      under the window, the margin, the output and every input cap (no cut, shrink step
      or summary is due); or
    - the history must be cut, no shrink step has anything to shrink (``shrinkable``:
      the history has tool results or reasoning) and ``min_messages`` is not set: the
      cut the solver makes is found by bisecting the history's running counts
      (``index``): a cache-stable fit holds the previous cut while it fits, else moves
      it (:func:`_held`); any other keeps the newest groups that fit (:func:`_slid`).
      The dropped runs and their warning are made from the counts: O(log n).

    ``span(a, b)`` gives the tokens of ``source[a:b]``, ``tools`` are the tools as
    counted (for the plan's ``exact``) and ``bounds`` the layout's
    ``(sys_end, hist_start, pin_end, cur_start)``; ``user_opens``: only a user message
    may open a cut history (None: not known, a cut that opens on another is left to the
    full path). The promise is checked here too. ``memory`` (None: a fit that keeps
    none) records the plan as the full path would.
    """
    n = len(source)
    if (
        not FAST_PATH
        or n <= sent
        or previous.summary is not None
        or previous.fallback_from is not None
        or previous.max_tokens != previous.requested_max_tokens
        or opts.max_tokens is None
        or opts.policy != "reserve"
        or opts.fallback_models
        or opts.max_messages is not None
        or opts.cut_note
    ):
        return None
    model = previous.model
    counter = get_counter(model)
    sys_end, hist_start, pin_end, cur_start = bounds
    base = previous.sections.get("tools_and_priming", 0)
    system = span(0, sys_end)
    pinned = span(hist_start, pin_end)
    current = span(cur_start, n)
    used = base + system + pinned + current  # the required input
    room = previous.context_window - previous.safety_margin - previous.max_tokens
    if opts.max_input_tokens is not None:
        room = min(room, opts.max_input_tokens)
    if model.max_input_tokens is not None:
        room = min(room, model.max_input_tokens)
    if index is not None and index.model is not counter.model:
        index = None  # counts of another model's
    groups = index.groups(pin_end, cur_start) if index is not None else None
    before = memory.previous_cut(source) if memory is not None and opts.cache_stable else None
    # the cut the full path holds, and its growth counted from the counts kept: the
    # ``(end, growth, grown)`` the record of this plan keeps (no cut made for them)
    growth: tuple[int, float, int]
    if before is None:
        growth = (cur_start, 0.0, 0)
    elif not before.end:
        growth = (cur_start, before.growth, before.grown)
    else:
        growth = before.grown_by(cur_start, span(before.end, cur_start))
    dropped = previous.dropped
    warnings: tuple[str, ...] = ()
    fits = False
    if not len(dropped) and not previous.warnings and len(previous.messages) == sent:
        # every history message was kept: kept now while the grown input fits
        if index is not None and groups is not None and index.first <= pin_end:
            history = index.cum[groups[1]] - index.cum[groups[0]]  # as counted now
            input_tokens = used + history
        else:
            input_tokens = previous.input_tokens + span(sent, n)
            history = input_tokens - used
        fits = input_tokens <= room
    elif not _only_dropped_warning(previous):
        return None
    if fits:
        start = pin_end if pin_end < cur_start else cur_start
        messages: list[Any] = list(source)
        # exact: the previous plan's messages and tools were, and the new ones are
        exact = previous.exact and all(map(counter.message_exact, source[sent:n]))
    else:
        if index is None or groups is None:
            return None
        h = _History(index, pin_end, cur_start, *groups, room - used)
        if opts.cache_stable:
            held = _held(before, growth, source, h, opts, model, shrinkable, user_opens)
        else:
            held = _slid(source, h, opts, shrinkable, user_opens)
        if held is None:
            return None
        start, history, section, runs = held
        input_tokens = used + history
        reasons: dict[str, int] = {}
        for r in runs:
            reasons[r.reason] = reasons.get(r.reason, 0) + r.stop - r.start
        kept = cur_start - start
        window = previous.context_window
        warnings = (dropped_warning(section, reasons, kept, window, history, opts.max_tokens),)
        dropped = DroppedItems(runs, {section.name: section}, counter)
        if log.isEnabledFor(logging.INFO):
            log_dropped(runs, model.name)
        messages = [*source[:pin_end], *source[start:n]]
        # exact: read where the previous plan's messages (and tools) were not all exact,
        # or the new plan keeps one it dropped (where it started: its kept messages)
        if previous.exact and start >= sent - (len(previous.messages) - pin_end):
            exact = all(map(counter.message_exact, source[sent:n]))
        else:
            exact = counter.exact_for(messages, tools)
    if input_tokens + previous.max_tokens + previous.safety_margin > previous.context_window:
        return None  # the promise (implied by the room; checked all the same)
    if previous.max_tokens > previous.context_window - previous.safety_margin - used:
        return None  # an output the window cannot give with the required input: flex
    # the full path's order: the solver's, by priority (system, current, pinned, history)
    sections = {}
    for name, tokens in (
        ("system", system),
        ("current", current),
        ("pinned", pinned),
        ("history", history),
    ):
        if tokens:
            sections[name] = tokens
    sections["tools_and_priming"] = base
    shared = None
    if memory is not None:
        end, per_request, requests = growth
        cut = HistoryCut(
            start,
            end=max(end, cur_start),
            growth=per_request,
            grown=requests,
            at=time.time(),
            input_tokens=input_tokens,
        )
        shared = memory.remember(source, cut, messages, counter)
    plan = previous.evolved(  # the fields not given are the previous plan's (checked above)
        messages=messages,
        input_tokens=input_tokens,
        sections=sections,
        dropped=dropped,
        warnings=warnings,
        exact=exact,
        elapsed_ms=(time.perf_counter() - started) * 1000,
        prefix_tokens=shared,
        cached_tokens=cached_tokens(model, shared) if shared is not None else None,
    )
    log.debug("tokenflex: %r", plan)
    return plan


WHOLE_BLOCK = 256
"""Messages :func:`whole_plan` counts at a time (newest first) before it checks the room."""


def whole_plan(
    source: Sequence[Message],
    model: Model,
    tools: Sequence[Tool] | None,
    bounds: tuple[int, int, int, int],
    opts: FitOptions,
    memory: SessionMemory | None,
    started: float,
    taken_out: TakenOut | None = None,
    index: GroupIndex | None = None,
) -> Plan | None:
    """The plan of ``source`` when all of it fits with the output asked for: every
    message sent as it is, in one count of each (cached) and no solve. The full path's
    plan for such a request (the solver keeps a section that fits whole: no soft share,
    low-water mark or held cut applies), made without its layout's sections, passes and
    recall attempts: a request that fits costs about what counting it costs.

    It answers only where the full path cannot do anything else: no fallback, no cap on
    the messages, no summary among them, the output asked for given whole (not one the
    ``flex`` policy reduces; a request larger than the window can give leaves no room);
    with ``memory`` (cache-stable), the previous plan shrank nothing
    that this one would keep shrunk. None: the full path decides (its errors included:
    a message counting refuses). ``bounds`` are the layout's ``(sys_end, hist_start,
    pin_end, cur_start)``; ``memory`` records the plan as the full path would (its cut
    at the history's start, its growth counted), and gives ``prefix_tokens``;
    ``taken_out``: the reasoning taken out of the caller's messages before (listed in
    ``dropped``, as the full path lists it). ``index``: the running counts of the history
    the full path's layout reads (:class:`~tokenflex.engine.ListIndex`'s view, counted
    newest first up to the window): the history's tokens are read from it, and a history
    it did not count to its start is over the window; without one the history is counted
    here, newest first, a block at a time.
    """
    sys_end, hist_start, pin_end, cur_start = bounds
    if not FAST_PATH or opts.fallback_models or opts.max_messages is not None:
        return None
    if hist_start != sys_end:
        return None  # a summary message opens the history
    counter = get_counter(model)
    notes: list[str] = []
    request = output_request(model, opts.max_tokens, counter, notes)
    total = counter.total
    try:
        base = counter.base(tools)
        # in the full path's order of sections (by priority: system, current, pinned,
        # history; each the sum of its messages' counts)
        spans = {
            "system": total(source[:sys_end]),
            "current": total(source[cur_start:]),
            "pinned": total(source[hist_start:pin_end]),
        }
    except BadMessage:
        return None  # the full path names the message
    required = base + sum(spans.values())
    window, margin = model.context_window, opts.safety_margin
    budget = BudgetSpec(
        context_window=window,
        requested_output=request,
        min_output_tokens=opts.min_output_tokens,
        safety_margin=margin,
        base_tokens=base,
        policy=opts.policy,
        input_cap=opts.max_input_tokens,
        max_input_tokens=model.max_input_tokens,
        output_given=opts.max_tokens is not None,
    )
    # (an output larger than the window can give, whose history the full path fits for
    # a sensible output, :func:`large_output`, leaves no room here: never answered)
    room = window - margin - budget.reserved_output
    for cap in (opts.max_input_tokens, model.max_input_tokens):
        if cap is not None:
            room = min(room, cap)
    left = room - required
    if index is not None and index.model is counter.model:
        # the counts the full path reads too (kept in the view: never counted twice)
        groups = index.groups(pin_end, cur_start) if index.first <= pin_end else None
        if groups is None:
            return None  # over the window (or a group the view does not tile)
        history = index.cum[groups[1]] - index.cum[groups[0]]
    else:
        # newest first, a block at a time: a request that does not fit is given up
        # after about what fits, not counted whole
        history, hi = 0, cur_start
        try:
            while hi > pin_end and history <= left:
                lo = max(pin_end, hi - WHOLE_BLOCK)
                history += total(source[lo:hi])
                hi = lo
        except BadMessage:
            return None
    if history > left:
        return None
    spans["history"] = history
    input_tokens = required + history
    max_tokens = min(request, window - margin - input_tokens)
    if max_tokens < budget.floor or (max_tokens < request and budget.output_given):
        return None  # (flex: the output reduced, with its note)
    messages: list[Any] = list(source)
    shared = None
    if memory is not None and opts.cache_stable:
        previous = memory.previous_cut(source)
        if previous is not None:
            previous = _grown(previous, source, cur_start, model)
            if any(getattr(previous, step.mark) for step in ladder(opts)):
                return None  # a held cut keeps what it shrank shrunk: the full path
        cut = HistoryCut(
            pin_end,
            end=max(previous.end if previous is not None else 0, cur_start),
            growth=previous.growth if previous is not None else 0.0,
            grown=previous.grown if previous is not None else 0,
            at=time.time(),
            input_tokens=input_tokens,
        )
        shared = memory.remember(source, cut, messages, counter)
    notes += counter.notes()
    runs: list[DropRun] = []
    sources: dict[str, Any] = {}
    if taken_out is not None and taken_out.texts:
        runs = taken_out.runs()
        log_dropped(runs, model.name)  # the solver never saw them
        sources[taken_out.section] = taken_out
    plan = Plan(
        messages=messages,
        max_tokens=max_tokens,
        input_tokens=input_tokens,
        context_window=window,
        safety_margin=margin,
        requested_max_tokens=request,
        min_output_tokens=budget.floor,
        model=model,
        sections={k: v for k, v in spans.items() if v} | {"tools_and_priming": base},
        dropped=DroppedItems(runs, sources, counter),
        warnings=tuple(dict.fromkeys(notes)),
        exact=counter.exact_for(messages, tools),
        policy=opts.policy,
        elapsed_ms=(time.perf_counter() - started) * 1000,
        prefix_tokens=shared,
        cached_tokens=cached_tokens(model, shared) if shared is not None else None,
    )
    log.debug("tokenflex: %r", plan)
    return plan


def _only_dropped_warning(plan: Plan) -> bool:
    """Whether the one warning of ``plan`` is its history's "dropped N of M" (every other
    warning a fit may give is then not due either: the fast path writes only that one)."""
    return len(plan.warnings) == 1 and plan.warnings[0].startswith("history: dropped ")


@dataclass(slots=True)
class _History:
    """The history ``source[lo:hi]`` a fast-path fit must cut: its running counts (the
    groups ``[g_lo, g_hi)`` of ``index``) and its room, ``hard`` tokens."""

    index: GroupIndex
    lo: int
    hi: int
    g_lo: int
    g_hi: int
    hard: int

    def within(self, room: int) -> int:
        """The most newest groups within ``room`` tokens (bisected)."""
        if room < 0:
            return 0
        cum, g_hi = self.index.cum, self.g_hi
        return g_hi - bisect.bisect_left(cum, cum[g_hi] - room, self.g_lo, g_hi + 1)

    def tokens(self, g: int) -> int:
        """The tokens of the groups from ``g`` on."""
        cum = self.index.cum
        return cum[self.g_hi] - cum[g]

    def section(self, source: Sequence[Message]) -> MessageSection:
        """The section its dropped items are read from."""
        return MessageSection(
            "history", source, self.lo, self.hi, mode="newest", priority=10, index=self.index
        )


def _cut_due(h: _History, opts: FitOptions, shrinkable: bool) -> bool:
    """Whether the solver cuts ``h`` as the fast path does: the whole history does not
    fit, no shrink step has anything to shrink and no ``min_messages`` may act."""
    return not opts.min_messages and not (shrinkable and ladder(opts)) and h.tokens(h.g_lo) > h.hard


def _soft(h: _History, opts: FitOptions) -> tuple[int, int, str]:
    """The history's soft room (its share of the room), the newest groups within it, and
    why the next older one is dropped (``share``: it would fit the room; ``budget``)."""
    soft = min(int(opts.history_share * max(0, h.hard)), h.hard)
    fit_k = h.within(soft)
    reason = "share" if h.tokens(h.g_hi - fit_k - 1) <= h.hard else "budget"
    return soft, fit_k, reason


def _held(
    hold: HistoryCut | None,
    growth: tuple[int, float, int],
    source: Sequence[Message],
    h: _History,
    opts: FitOptions,
    model: Model,
    shrinkable: bool,
    user_opens: bool | None,
) -> tuple[int, int, MessageSection, list[DropRun]] | None:
    """Where the solver holds the previous cut ``hold`` of the history ``h``, by the
    rules of :func:`tokenflex.budget.solve` for a cache-stable history section (the held
    cut while it fits the room; ``held`` for the messages the room would keep beyond it,
    ``budget`` or ``share`` for the older ones; a cut that no longer fits moved as the
    solver moves it, :func:`_moved`): the first message kept, the kept history's tokens,
    the section and its dropped runs. None where anything else is due: nothing must be
    cut, a shrink step or ``min_messages`` may act, the provider's cache expired.
    ``growth``: the cut's ``(end, growth, grown)`` with this request counted
    (:meth:`~tokenflex.session.HistoryCut.grown_by`), which a moved cut's low-water mark
    reads."""
    lo, hi = h.lo, h.hi
    if (
        hold is None
        or not opts.cache_stable
        or hold.cleared_before
        or hold.reasoning_before
        or hold.truncated_before
        or hold.summarized_before
        or not lo < hold.start < hi
        or not opens_history(source[hold.start], user_only=bool(user_opens))
        or not _cut_due(h, opts, shrinkable)
    ):
        return None
    if hold.at and not cache_kept(model, hold.input_tokens, time.time() - hold.at):
        return None  # the cut is not held for a cache that expired
    starts = h.index.starts
    g = bisect.bisect_left(starts, hold.start, h.g_lo, h.g_hi)
    if g >= h.g_hi or starts[g] != hold.start:
        return None
    soft, fit_k, reason = _soft(h, opts)
    hard_k, keep = h.within(h.hard), h.g_hi - g
    runs: list[DropRun]
    if fit_k < keep <= hard_k:  # beyond the soft share: held whole
        runs = [DropRun("history", lo, hold.start, "held")]
    elif keep == fit_k:
        runs = [DropRun("history", lo, hold.start, reason)]
    elif keep < fit_k:
        b = starts[h.g_hi - fit_k]
        runs = [DropRun("history", lo, b, reason), DropRun("history", b, hold.start, "held")]
    else:  # the held cut does not fit any more: it moves down to the low-water mark
        end, per_request, requests = growth  # the held cut with this request's growth
        grown = hold._replace(end=end, growth=per_request, grown=requests)
        moved = _moved(grown, source, h, (soft, fit_k, reason), model, opts, user_opens)
        if moved is None:
            return None
        g, runs = moved
    return starts[g], h.tokens(g), h.section(source), runs


def _moved(
    hold: HistoryCut,
    source: Sequence[Message],
    h: _History,
    fits: tuple[int, int, str],
    model: Model,
    opts: FitOptions,
    user_opens: bool | None,
) -> tuple[int, list[DropRun]] | None:
    """Where the solver moves a held cut that no longer fits (the rules of
    :func:`tokenflex.budget.solve` for a cache-stable section, by bisection): the newest
    groups within the low-water mark of the soft room (``"auto"``: the mark by the
    growth ``hold`` counts, O(1)), at most the ``fit_k`` that fit; older answers whose
    question is cut dropped too (``orphan``). The first group kept and the dropped runs;
    ``fits``: the soft room, the groups within it and why the older ones do not fit.
    None where the full path decides (see :func:`_opened`)."""
    soft, fit_k, reason = fits
    mark = low_water_mark(model, opts, hold)
    room = max(0, soft)
    low = h.within(mark(room) if callable(mark) else int(mark * room))
    return _opened(source, h, min(low, fit_k), fit_k, reason, user_opens)


def _slid(
    source: Sequence[Message],
    h: _History,
    opts: FitOptions,
    shrinkable: bool,
    user_opens: bool | None,
) -> tuple[int, int, MessageSection, list[DropRun]] | None:
    """Where the solver cuts the history ``h`` of a fit that is not cache-stable, by the
    rules of :func:`tokenflex.budget.solve`: the newest groups within its soft room,
    ``share`` or ``budget`` for the older ones, older answers whose question is cut
    dropped too (``orphan``). As :func:`_held` answers; None where the full path
    decides (see :func:`_opened`)."""
    if opts.cache_stable or not _cut_due(h, opts, shrinkable):
        return None
    _, fit_k, reason = _soft(h, opts)
    opened = _opened(source, h, fit_k, fit_k, reason, user_opens)
    if opened is None:
        return None
    g, runs = opened
    return h.index.starts[g], h.tokens(g), h.section(source), runs


def _opened(
    source: Sequence[Message],
    h: _History,
    cut: int,
    fit_k: int,
    reason: str,
    user_opens: bool | None,
) -> tuple[int, list[DropRun]] | None:
    """The newest ``cut`` groups of ``h`` (of the ``fit_k`` that fit), less the older
    answers whose question is cut (``orphan``): the first group kept and the dropped
    runs (``reason`` for those that do not fit, ``low_water`` for those a cache-stable
    cut leaves out). None where the full path decides: nothing kept, or a first kept
    message that is not a user's where the rule is not known (``user_opens`` None)."""
    starts, g_hi = h.index.starts, h.g_hi
    k = cut
    user_only = bool(user_opens)
    while k > 0 and not opens_history(source[starts[g_hi - k]], user_only=user_only):
        k -= 1  # an answer whose question is cut: dropped too (orphan)
    if not k:
        return None
    first = source[starts[g_hi - k]]
    if user_opens is None and (not isinstance(first, Mapping) or first.get("role") != "user"):
        return None
    g, b = g_hi - k, starts[g_hi - fit_k]  # 0 < k <= fit_k < the groups: it was cut
    runs = [DropRun("history", h.lo, b, reason)]
    if cut < fit_k:
        runs.append(DropRun("history", b, starts[g_hi - cut], "low_water"))
    if k < cut:
        runs.append(DropRun("history", starts[g_hi - cut], starts[g], "orphan"))
    return g, runs


def _grown(previous: HistoryCut, source: Sequence[Message], hi: int, model: Model) -> HistoryCut:
    """``previous`` with the history appended since counted in its growth per request
    (O(the new messages); an invalid one is left to the pass to report)."""
    if not previous.end:
        return previous._replace(end=hi)  # a state without an end: start counting
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


def _calls(summarizer: Any, r: SummaryRequest, counter: Any) -> int:
    """Summarizer calls the summary of ``r`` needs (1 when that cannot be known: the
    call itself then fails and says why)."""
    from ..errors import SummarizerError
    from ..summarize.spans import summary_calls

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
    summarizer: Any, r: SummaryRequest, counter: Any, check_facts: bool
) -> Callable[[], str]:
    """The summary ``r`` asks for, made later by a background runner (sync calls)."""
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
