"""fit(): OpenAI-style messages in, a Plan that fits the window out.

The conversation is split into sections and handed to the pure solver
(:mod:`tokenflex.budget`); counting, reading lazy history and calling a summarizer
happen here, around it.

- ``system``: the leading run of system/developer messages, pinned (required).
- ``summary``: a previous summary message right after them (pinned; rolled forward).
- ``documents``: retrieved chunks packed into ``min(documents_cap, what is left)``.
- ``history``: everything up to the last user message, newest first, in atomic groups
  (a tool call stays with its results); optional, contiguous, a soft share of the room.
- ``current``: the last user message and anything after it (required).
- tool schemas and reply priming: the fixed base cost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._summary_format import is_summary_message
from ._types import Message, Tool
from .budget import Allocation, BudgetSpec, Policy, SectionSpec, solve
from .counting import MessageCounter, get_counter
from .errors import ContextOverflowError, InvalidInputError, InvalidMessagesError
from .history import HistorySource, aread_newest_first, iter_groups, read_newest_first
from .models import Model, get_model
from .plan import DroppedItems, Plan, SummaryInfo, _DropRun

__all__ = ["FitOptions", "afit", "fit"]

log = logging.getLogger("tokenflex")

_PINNED = ("system", "developer")


@dataclass(frozen=True)
class FitOptions:
    """Every knob of :func:`fit`, with the defaults the seeds argue for."""

    max_tokens: int | None = None
    """Output request; None: the model's max output, else 4,000 (seed 002)."""
    policy: Policy = "reserve"
    """``reserve``: keep the requested output, trim input. ``flex``: keep input, let the
    output shrink to the floor (seed 000)."""
    min_output_tokens: int = 500
    safety_margin: int = 100
    history_share: float = 0.8
    """Soft target share of the room history may fill (seed 001); 1.0 fills it all."""
    min_messages: int = 0
    """Keep at least this many history groups if the window allows (a tool call with its
    results is one group)."""
    max_messages: int | None = None
    """Keep at most this many history groups."""
    max_input_tokens: int | None = None
    """Cap on input tokens (seed 002's MAX_INPUT_TOKENS); crossing it trims or summarizes."""
    keep_recent: int = 6
    """Messages kept verbatim when summarizing (seed 002's KEEP_RECENT_MESSAGES)."""
    summary_max_tokens: int = 512
    documents_cap: int | None = None
    documents_format: str = "markdown"
    documents_policy: str = "skip"
    documents_safety_buffer: int = 64
    fallback_models: tuple[str, ...] = ()
    fallback_input_share: float | None = None
    """Seed 003's FALLBACK rule: switch to a fallback model when the required input is above
    this share of the primary's window (0.90 in the seed), not only when it cannot fit."""
    strict: bool = False
    """Unknown model names raise instead of getting the conservative default."""
    page_size: int = 50
    """Page size when reading a lazy history source."""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        checks: list[tuple[str, Any, bool]] = [
            ("max_tokens", self.max_tokens, self.max_tokens is None or self.max_tokens > 0),
            ("min_output_tokens", self.min_output_tokens, self.min_output_tokens >= 0),
            ("safety_margin", self.safety_margin, self.safety_margin >= 0),
            ("history_share", self.history_share, 0 < self.history_share <= 1),
            ("min_messages", self.min_messages, self.min_messages >= 0),
            (
                "max_messages",
                self.max_messages,
                self.max_messages is None or self.max_messages >= 0,
            ),
            (
                "max_input_tokens",
                self.max_input_tokens,
                self.max_input_tokens is None or self.max_input_tokens > 0,
            ),
            ("keep_recent", self.keep_recent, self.keep_recent >= 0),
            ("summary_max_tokens", self.summary_max_tokens, self.summary_max_tokens > 0),
            ("policy", self.policy, self.policy in ("reserve", "flex")),
            ("page_size", self.page_size, self.page_size > 0),
            (
                "fallback_input_share",
                self.fallback_input_share,
                self.fallback_input_share is None or 0 < self.fallback_input_share <= 1,
            ),
        ]
        for name, value, ok in checks:
            if not ok or isinstance(value, bool):
                raise InvalidInputError(
                    f"{name}={value!r} is not valid: max_tokens, max_input_tokens and "
                    "summary_max_tokens must be positive integers, history_share in (0, 1], "
                    "counts non-negative, policy 'reserve' or 'flex'."
                )


def _check_messages(messages: Any) -> Sequence[Message]:
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidMessagesError(
            f"messages must be a list of message dicts, got {type(messages).__name__}. "
            'Pass [{"role": "user", "content": "..."}].'
        )
    return messages


@dataclass
class _Layout:
    """Where each section sits in the message list."""

    messages: Sequence[Message]
    sys_end: int
    summary_idx: int | None
    hist_start: int
    cur_start: int


def _layout(messages: Sequence[Message], counter: MessageCounter) -> _Layout:
    n = len(messages)
    i = 0
    while i < n:
        m = messages[i]
        if not isinstance(m, Mapping):
            counter.message(m)  # raises InvalidMessagesError with the index rules
        if m.get("role") not in _PINNED or is_summary_message(m):
            break
        i += 1
    sys_end = i
    summary_idx = i if i < n and is_summary_message(messages[i]) else None
    hist_start = i + 1 if summary_idx is not None else i
    cur = n - 1
    while cur >= hist_start:
        m = messages[cur]
        if isinstance(m, Mapping) and m.get("role") == "user":
            break
        cur -= 1
    if cur < hist_start:
        # No user message after the system prompt: the current turn is the last group.
        cur = next(iter_groups(messages, hist_start, n, lambda _m: 0), (n, n, 0))[0]
    return _Layout(messages, sys_end, summary_idx, hist_start, cur)


@dataclass
class _Job:
    """One fit of one model: counts, sections, solve, plan."""

    messages: Sequence[Message]
    model: Model
    tools: Sequence[Tool] | None
    opts: FitOptions
    started: float
    documents: Sequence[Any] | None = None
    layout: _Layout = None  # type: ignore[assignment]
    """Precomputed by callers that track it (Conversation); else found here."""
    counter: MessageCounter = field(init=False)
    request: int = field(init=False)
    warnings: list[str] = field(default_factory=list)
    packed: Any = field(default=None, init=False)
    """The last PackResult for ``documents`` (None without documents)."""
    doc_message: dict[str, Any] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.counter = get_counter(self.model)
        if self.layout is None:
            self.layout = _layout(self.messages, self.counter)
        m, o = self.model, self.opts
        request = o.max_tokens if o.max_tokens is not None else (m.max_output_tokens or 4000)
        if m.max_output_tokens is not None and request > m.max_output_tokens:
            self.warnings.append(
                f"max_tokens={request:,} is above {m.name}'s max output "
                f"{m.max_output_tokens:,}; requested {m.max_output_tokens:,}."
            )
            request = m.max_output_tokens
        self.request = request
        if not self.counter.exact:
            self.warnings.append(
                f"{self.model.name}: counts are conservative estimates (no exact tokenizer "
                "or chat format registered)."
            )

    # -- budget ----------------------------------------------------------------------
    def spec(self, base: int) -> BudgetSpec:
        m, o = self.model, self.opts
        return BudgetSpec(
            context_window=m.context_window,
            requested_output=self.request,
            min_output_tokens=o.min_output_tokens,
            safety_margin=o.safety_margin,
            base_tokens=base,
            policy=o.policy,
            input_cap=o.max_input_tokens,
        )

    def required_tokens(self, msgs: Sequence[Message], lay: _Layout) -> int:
        """Base, pinned system, summary and current turn: what must fit with the floor."""
        cost = self.counter.message
        fixed = [*msgs[: lay.sys_end], *msgs[lay.cur_start :]]
        if lay.summary_idx is not None:
            fixed.append(msgs[lay.summary_idx])
        return self.counter.base(self.tools) + sum(cost(m) for m in fixed)

    def pack_documents(self, msgs: Sequence[Message], lay: _Layout) -> int:
        """Pack the documents into ``min(documents_cap, what is left)`` (seed 003) and
        return the tokens of the message that carries them (0 when none fit)."""
        from .packing import pack_chunks

        self.packed, self.doc_message = None, None
        if not self.documents:
            return 0
        o, spec = self.opts, self.spec(0)
        left = (
            spec.context_window
            - spec.safety_margin
            - (self.request if o.policy == "reserve" else spec.floor)
        )
        if o.max_input_tokens is not None:
            left = min(left, o.max_input_tokens)
        left -= self.required_tokens(msgs, lay)
        # Without a cap, documents take half of what is left so history keeps the rest.
        budget = min(o.documents_cap, left) if o.documents_cap is not None else left // 2
        envelope = self.counter.message({"role": "system", "content": ""})
        budget -= envelope
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
            return 0
        self.doc_message = {"role": "system", "content": self.packed.rendered}
        return self.counter.message(self.doc_message)

    def sections(
        self, msgs: Sequence[Message], lay: _Layout, bounds: list[tuple[int, int]]
    ) -> list[SectionSpec]:
        cost = self.counter.message
        doc_tokens = self.pack_documents(msgs, lay)
        secs = [
            SectionSpec(
                "system", [cost(m) for m in msgs[: lay.sys_end]], required=-1, priority=100
            ),
            SectionSpec(
                "current",
                [sum(cost(m) for m in msgs[lay.cur_start :])] if lay.cur_start < len(msgs) else [],
                required=-1,
                priority=90,
            ),
        ]
        if lay.summary_idx is not None:
            secs.append(
                SectionSpec("summary", [cost(msgs[lay.summary_idx])], required=-1, priority=80)
            )
        if doc_tokens:
            secs.append(SectionSpec("documents", [doc_tokens], required=-1, priority=70))

        def history_items() -> Any:
            for start, stop, tokens in iter_groups(msgs, lay.hist_start, lay.cur_start, cost):
                bounds.append((start, stop))
                yield tokens

        secs.append(
            SectionSpec(
                "history",
                history_items(),
                priority=10,
                share=self.opts.history_share,
                min_items=self.opts.min_messages,
                max_items=self.opts.max_messages,
                contiguous=True,
            )
        )
        return secs

    def solve(self, msgs: Sequence[Message], lay: _Layout) -> tuple[Allocation, int, str | None]:
        """Solve; returns the allocation, the first kept history index and the reason
        the history before it was dropped (None when nothing was)."""
        bounds: list[tuple[int, int]] = []
        base = self.counter.base(self.tools)
        alloc = solve(self.sections(msgs, lay, bounds), self.spec(base), model=self.model.name)
        k = len(alloc.kept["history"])
        kept_start = bounds[k - 1][0] if k else lay.cur_start
        reason = next((d.reason for d in alloc.dropped if d.section == "history"), None)
        if reason is None and kept_start > lay.hist_start:  # pragma: no cover - defensive
            reason = "budget"
        return alloc, kept_start, reason

    # -- plan ------------------------------------------------------------------------
    def plan(
        self,
        msgs: Sequence[Message],
        lay: _Layout,
        alloc: Allocation,
        kept_start: int,
        reason: str | None,
        *,
        runs: list[_DropRun] | None = None,
        summary: SummaryInfo | None = None,
        offset: int = 0,
        source: Sequence[Message] | None = None,
    ) -> Plan:
        """Build the plan. ``offset`` maps history indices of ``msgs`` to the caller's
        ``source`` list (summaries shorten the list)."""
        cost = self.counter.message
        runs = list(runs or [])
        input_tokens = alloc.input_tokens
        sections = dict(alloc.section_tokens)
        # History never starts with an answer whose question was dropped.
        orphan_start = kept_start
        while (
            kept_start > lay.hist_start
            and orphan_start < lay.cur_start
            and msgs[orphan_start].get("role") in ("assistant", "tool", "function")
        ):
            # the oldest kept group starts at orphan_start; its tool results go with it
            end = orphan_start + 1
            while end < lay.cur_start and msgs[end].get("role") in ("tool", "function"):
                end += 1
            t = sum(cost(msgs[j]) for j in range(orphan_start, end))
            input_tokens -= t
            sections["history"] -= t
            runs.append(_DropRun("history", orphan_start + offset, end + offset, "orphan"))
            orphan_start = end
        if reason is not None and kept_start > lay.hist_start:
            runs.append(_DropRun("history", lay.hist_start + offset, kept_start + offset, reason))
        runs.sort(key=lambda r: r.start)
        kept_from = orphan_start

        # The caller's dicts go in as they are (never modified); only the list is new.
        out: list[Any] = list(msgs[: lay.sys_end])
        if self.doc_message is not None:
            out.append(self.doc_message)
        if lay.summary_idx is not None:
            out.append(msgs[lay.summary_idx])
        out.extend(msgs[kept_from:])

        spec_window = self.model.context_window
        max_tokens = min(self.request, spec_window - self.opts.safety_margin - input_tokens)
        warnings = [*self.warnings, *alloc.notes]
        doc_tokens: dict[int, int] = {}
        extras: dict[str, Any] = {}
        if self.packed is not None:
            for d in self.packed.dropped:
                runs.append(_DropRun("documents", d.index, d.index + 1, d.reason))
                doc_tokens[d.index] = d.tokens
            extras["documents"] = {
                "admitted": len(self.packed.admitted),
                "dropped": self.packed.dropped_count,
                "tokens": self.packed.tokens,
                "budget": self.packed.budget,
                "policy": self.packed.policy,
            }
            if self.packed.partial:
                warnings.append(
                    f"documents: {self.packed.dropped_count} of {len(self.documents or ())} "
                    "chunks omitted to fit the budget (the context tells the model)."
                )
        docs = self.documents or ()

        def item(section: str, i: int) -> Any:
            return docs[i] if section == "documents" else src[i]

        def item_cost(section: str, i: int, it: Any) -> int:
            return doc_tokens[i] if section == "documents" else cost(it)

        for r in runs:
            log.info(
                "tokenflex: dropped %s[%d:%d] (%d items, reason=%s) for %s",
                r.section,
                r.start,
                r.stop,
                r.stop - r.start,
                r.reason,
                self.model.name,
            )
        src = msgs if source is None else source
        plan = Plan(
            messages=out,
            max_tokens=max_tokens,
            input_tokens=input_tokens,
            context_window=spec_window,
            safety_margin=self.opts.safety_margin,
            requested_max_tokens=self.request,
            min_output_tokens=min(self.opts.min_output_tokens, self.request),
            model=self.model,
            sections={k: v for k, v in sections.items() if v}
            | {"tools_and_priming": self.counter.base(self.tools)},
            dropped=DroppedItems(runs, item, item_cost),
            summary=summary,
            warnings=tuple(dict.fromkeys(warnings)),
            exact=self.counter.exact,
            policy=self.opts.policy,
            elapsed_ms=(time.perf_counter() - self.started) * 1000,
            extras=extras,
        )
        log.debug("tokenflex: %r", plan)
        return plan


def _options(options: Mapping[str, Any]) -> FitOptions:
    try:
        opts = dict(options)
        if "fallback_models" in opts:
            opts["fallback_models"] = tuple(opts["fallback_models"])
        return FitOptions(**opts)
    except TypeError as exc:
        import dataclasses
        import difflib

        names = [f.name for f in dataclasses.fields(FitOptions)]
        bad = [k for k in options if k not in names]
        close = {k: difflib.get_close_matches(k, names, n=1) for k in bad}
        hint = ", ".join(
            f"{k!r}" + (f" (did you mean {c[0]!r}?)" if c else "") for k, c in close.items()
        )
        raise InvalidInputError(f"Unknown fit() option {hint}. Options: {names}.") from exc


def _with_history(
    messages: Sequence[Message], read_newest_first_msgs: list[Message]
) -> list[Message]:
    lay_sys = 0
    while lay_sys < len(messages) and messages[lay_sys].get("role") in _PINNED:
        lay_sys += 1
    return [*messages[:lay_sys], *reversed(read_newest_first_msgs), *messages[lay_sys:]]


def _history_bound(messages: Sequence[Message], model: Model, opts: FitOptions) -> Any:
    """A stop rule for lazy history: read until the messages read exceed any room they
    could possibly get, or max_messages (+ a group's worth) is reached."""
    counter = get_counter(model)
    fixed = counter.base(None) + sum(counter.message(m) for m in messages)
    room = (
        model.context_window
        - opts.safety_margin
        - min(opts.min_output_tokens, opts.max_tokens or opts.min_output_tokens)
        - fixed
    )
    if opts.max_input_tokens is not None:
        room = min(room, opts.max_input_tokens - fixed)
    state = {"tokens": 0, "n": 0}
    limit = None if opts.max_messages is None else opts.max_messages * 2 + 2

    def enough(m: Message) -> bool:
        state["tokens"] += counter.message(m)
        state["n"] += 1
        return state["tokens"] > room or (limit is not None and state["n"] >= limit)

    return enough


def _first_fit(
    messages: Sequence[Message],
    model: str | Model,
    tools: Sequence[Tool] | None,
    opts: FitOptions,
    started: float,
    documents: Sequence[Any] | None,
) -> tuple[_Job, Allocation, int, str | None, str | None]:
    primary = get_model(model, strict=opts.strict)
    job = _Job(messages, primary, tools, opts, started, documents)
    share = opts.fallback_input_share
    over_share = (
        share is not None
        and bool(opts.fallback_models)
        and job.required_tokens(messages, job.layout) > share * primary.context_window
    )
    if not over_share:
        try:
            return (job, *job.solve(messages, job.layout), None)
        except ContextOverflowError:
            if not opts.fallback_models:
                raise
    from .fallback import choose_model

    def required(m: Model) -> int:
        j = _Job(messages, m, tools, opts, started)
        return j.required_tokens(messages, j.layout)

    # Cheapest model in the chain whose window fits the required input plus the floor,
    # for this one request; raises with every model's shortfall when none does.
    choice = choose_model(
        primary,
        [get_model(name, strict=opts.strict) for name in opts.fallback_models],
        required_input_tokens_by_model=required,
        min_output_tokens=min(opts.min_output_tokens, job.request),
        safety_margin=opts.safety_margin,
        max_input_share=share,
    )
    if not choice.switched:  # over the share, but no fallback stays under it: keep the primary
        job.warnings.append(
            f"Required input is above fallback_input_share={share} of {primary.name}'s window "
            f"but no fallback model stays under it; kept {primary.name}."
        )
        return (job, *job.solve(messages, job.layout), None)
    job = _Job(messages, choice.model, tools, opts, started, documents)
    job.warnings.append(
        f"{primary.name} cannot fit this request; using fallback model {choice.model.name} "
        f"({choice.model.context_window:,}-token window) for this request: {choice.reason}"
    )
    log.warning("tokenflex: falling back from %s to %s", primary.name, choice.model.name)
    return (job, *job.solve(messages, job.layout), primary.name)


def fit(
    messages: Sequence[Message],
    *,
    model: str | Model,
    max_tokens: int | None = None,
    tools: Sequence[Tool] | None = None,
    history: HistorySource | None = None,
    summarizer: Any = None,
    documents: Sequence[Any] | None = None,
    **options: Any,
) -> Plan:
    """Fit a chat request into the model's window.

    Args:
        messages: OpenAI-style messages, oldest first. With ``history=``, only the system
            messages and the current turn; older history comes from the source.
        model: A registry name (``gpt-4o``, ``llama3.2:3b``) or a :class:`Model`.
        max_tokens: The output you want; negotiated down (never below
            ``min_output_tokens``) when the input needs the room.
        tools: Tool schemas sent with the request (counted).
        history: A lazy source of older messages, newest first (see
            :mod:`tokenflex.history`); read only as far as the budget needs.
        summarizer: A :class:`tokenflex.summarize.Summarizer`; when history does not
            fit, older messages are summarized instead of dropped.
        documents: Retrieved :class:`tokenflex.Chunk` s, packed with their citations into
            ``min(documents_cap, what is left)`` (default: half of what is left) and sent
            as a system message after the pinned ones; dropped chunks are in ``dropped``.
        **options: Any :class:`FitOptions` field (``policy``, ``min_output_tokens``,
            ``safety_margin``, ``history_share``, ``min_messages``, ``max_messages``,
            ``max_input_tokens``, ``keep_recent``, ``fallback_models``, ``strict``, ...).

    Returns:
        A :class:`Plan` with ``input_tokens + max_tokens + safety_margin <= window``.

    Raises:
        ContextOverflowError: the required messages plus the output floor cannot fit
            (and no fallback model can take them).
        InvalidMessagesError: messages are not OpenAI-style chat messages.

    >>> import tokenflex
    >>> plan = tokenflex.fit([{"role": "user", "content": "Hello!"}],
    ...                      model="gpt-4o", max_tokens=1000)
    >>> plan.input_tokens, plan.max_tokens
    (9, 1000)
    """
    started = time.perf_counter()
    opts = _options({"max_tokens": max_tokens, **options})
    messages = _check_messages(messages)
    if history is not None:
        primary = get_model(model, strict=opts.strict)
        read, _exhausted = read_newest_first(
            history, enough=_history_bound(messages, primary, opts), page_size=opts.page_size
        )
        messages = _with_history(messages, read)
    first = _First(*_first_fit(messages, model, tools, opts, started, documents))
    step = first.summary_step(summarizer)
    if step is not None:
        try:
            text = step.call_sync(summarizer)
        except Exception as exc:  # any failure: fall back to dropping, say so
            step.failed(exc)
        else:
            return first.with_summary(step, text, summarizer)
    return first.plan()


@dataclass
class _First:
    """The first solve, shared by fit() and afit(); what follows is the summary or not."""

    job: _Job
    alloc: Allocation
    kept_start: int
    reason: str | None
    fallback_from: str | None

    def summary_step(self, summarizer: Any) -> Any:
        if summarizer is None or self.reason is None:
            return None
        from .summarize_plan import SummaryStep

        step = SummaryStep(self.job, self.alloc, self.kept_start, self.reason)
        return step if step.request is not None else None

    def with_summary(self, step: Any, text: str, summarizer: Any) -> Plan:
        plan = step.finish(text, type(summarizer).__name__)
        return self.plan() if plan is None else _finish(plan, self.fallback_from)

    def plan(self) -> Plan:
        job = self.job
        plan = job.plan(job.messages, job.layout, self.alloc, self.kept_start, self.reason)
        return _finish(plan, self.fallback_from)


def _finish(plan: Plan, fallback_from: str | None) -> Plan:
    if fallback_from is None:
        return plan
    import dataclasses

    return dataclasses.replace(plan, fallback_from=fallback_from)


async def afit(
    messages: Sequence[Message],
    *,
    model: str | Model,
    max_tokens: int | None = None,
    tools: Sequence[Tool] | None = None,
    history: Any = None,
    summarizer: Any = None,
    documents: Sequence[Any] | None = None,
    **options: Any,
) -> Plan:
    """Async twin of :func:`fit`: also reads async history sources and awaits async
    summarizers. Counting and solving are CPU work and run inline (microseconds to
    milliseconds)."""
    started = time.perf_counter()
    opts = _options({"max_tokens": max_tokens, **options})
    messages = _check_messages(messages)
    if history is not None:
        primary = get_model(model, strict=opts.strict)
        read, _exhausted = await aread_newest_first(
            history, enough=_history_bound(messages, primary, opts), page_size=opts.page_size
        )
        messages = _with_history(messages, read)
    first = _First(*_first_fit(messages, model, tools, opts, started, documents))
    step = first.summary_step(summarizer)
    if step is not None:
        try:
            text = await step.call_async(summarizer)
        except Exception as exc:  # any failure: fall back to dropping, say so
            step.failed(exc)
        else:
            return first.with_summary(step, text, summarizer)
    return first.plan()
