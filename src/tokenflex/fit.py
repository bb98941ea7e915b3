"""fit(): OpenAI-style messages in, a Plan that fits the window out.

The conversation is split into sections (``_job``) and handed to the pure solver
(:mod:`tokenflex.budget`); reading lazy history, choosing a fallback model and calling a
summarizer happen here, around it. The options are :class:`~tokenflex.options.FitOptions`.

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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._job import _PINNED, _check_messages, _Job
from ._types import Message, Tool
from .budget import Allocation
from .counting import get_counter
from .errors import ContextOverflowError
from .history import HistorySource, aread_newest_first, read_newest_first
from .models import Model, get_model
from .options import FitOptions, _options
from .plan import Plan

__all__ = ["FitOptions", "afit", "fit"]

log = logging.getLogger("tokenflex")


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
