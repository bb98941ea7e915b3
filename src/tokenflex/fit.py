"""fit(): OpenAI-style messages in, a Plan that fits the window out.

fit() is a layout over the engine (:mod:`tokenflex.engine`): it says where each section
of a chat request sits; the engine counts, solves, renders, falls back and summarizes.

- ``system``: the leading run of system/developer messages, pinned (required).
- ``documents``: retrieved chunks packed into ``min(documents_cap, what is left)`` and
  sent as a system message after the pinned ones.
- ``summary``: a previous summary message right after them (pinned; rolled forward).
- ``pinned``: the opening of the history up to its first ``pin`` user messages (the task
  of an agent loop); required, or, when it cannot fit with the newest round, history
  for that request (the oldest: the first dropped, and listed).
- ``history``: everything after it up to the current turn, newest first, in atomic groups
  (a tool call stays with its results); optional, contiguous, a soft share of the room
  once it must be cut (a history that fits is sent as it is).
- ``current``: the newest group: the last user message and anything after it, or, when
  tool rounds follow the last user message (an agent loop), the newest tool round: the
  last tool call with all its results (required; an over-long result is truncated
  rather than the request refused).
- tool schemas and reply priming: the fixed base cost.

Reading a lazy history source happens here, before the engine, and only as far as the
history could possibly fit.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import operator
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from ._types import Message, Tool
from .counting import MessageCounter, get_counter
from .counting.shape import check_one, check_shapes, shape_checker
from .counting.template import alternating_roles
from .engine import (
    DocumentsSection,
    GroupIndex,
    Layout,
    ListIndex,
    MessageSection,
    Section,
    SummaryTarget,
    TakenOut,
    Work,
    afit_layout,
    fit_layout,
    grown_plan,
    whole_plan,
)
from .engine import flow as engine_flow
from .engine.flow import WHOLE_BLOCK
from .errors import ContextOverflowError, InvalidInputError, InvalidMessagesError
from .formats.chat import is_plain_chat
from .formats.registry import default_format, get_format
from .history import (
    HistorySource,
    aread_newest_first,
    is_tool_round,
    iter_groups,
    read_newest_first,
)
from .message.checks import BadMessage
from .message.objects import plain_message
from .models import Model, get_model
from .options import (
    CacheStable,
    Documents,
    Fallback,
    FitOptions,
    Gathered,
    History,
    Shrink,
    Summarize,
    flat_options,
    gather,
    given_groups,
    plain_options,
)
from .plan import DropRun, Plan, log_dropped
from .roundtrip import (
    Prepared,
    check_prepared,
    finish,
    forget,
    fresh,
    goes_on_later,
    prepare,
    read_through,
    remember,
)
from .session import StoreMemory
from .state import check_state_store, default_store
from .state.tenant import tenant_view
from .summarize import is_summary_message
from .tracing import trace_fit

if TYPE_CHECKING:
    from .documents import Chunk
    from .recall import RecallFit
    from .state import StateStore
    from .summarize import Summarizer

__all__ = ["PINNED_ROLES", "FitLayout", "afit", "fit"]

log = logging.getLogger("tokenflex")

PINNED_ROLES = ("system", "developer")
"""Roles of the leading messages that are always kept."""


def check_messages(messages: Any) -> Sequence[Message]:
    """``messages`` if it is a list of messages, else :class:`InvalidMessagesError`."""
    if type(messages) is list:  # (the usual call: no ABC checks)
        return messages
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        raise InvalidMessagesError(
            f"messages must be a list of message dicts, got {type(messages).__name__}. "
            'Pass [{"role": "user", "content": "..."}].'
        )
    return messages


@dataclass
class FitLayout:
    """Where each of fit()'s sections sits in a message list (see the module doc)."""

    messages: Sequence[Message]
    model: Model
    tools: Sequence[Tool] | None
    opts: FitOptions
    documents: Sequence[Any] | None = None
    index: GroupIndex | ListIndex | None = None
    """Running counts a Conversation keeps, or fit() keeps of a list it has seen (the
    history section bisects them)."""
    summary: Message | None = None
    """A new summary standing for the history before ``hist_start``."""
    sys_end: int = -1
    summary_idx: int | None = None
    hist_start: int = -1
    pin_end: int = -1
    """The pinned opening is ``[hist_start, pin_end)``; history starts at ``pin_end``."""
    recent: int = -1
    """With a new summary: the history kept verbatim starts here (after the span the
    summary stands for)."""
    cur_start: int = -1
    user_first: bool = False
    """The API's requests open with the user's turn (Anthropic Messages): with nothing
    pinned, the current turn starts at the last user message and only a user message may
    open a cut history."""
    recall: Any = None
    """A :class:`~tokenflex.recall.Recaller`: the cut note, summary and cleared tool
    results name recall ids (``fit(..., recall=True)``)."""

    def __post_init__(self) -> None:
        if self.sys_end >= 0:
            return  # positions given (with_summary)
        msgs, n = self.messages, len(self.messages)
        i = 0
        while i < n:
            m = msgs[i]
            if type(m) is not dict and not isinstance(m, Mapping):
                get_counter(self.model).count(list(msgs[: i + 1]))  # names the bad index
            if m.get("role") not in PINNED_ROLES or is_summary_message(m):
                break
            i += 1
        self.sys_end = i
        self.summary_idx = i if i < n and is_summary_message(msgs[i]) else None
        self.hist_start = i + 1 if self.summary_idx is not None else i
        self.cur_start = _current(msgs, self.hist_start, n)
        self.pin_end = _pinned(msgs, self.hist_start, self.cur_start, self.opts.pin)
        if self.pin_end > self.hist_start and alternating_roles(self.model):
            # a history cut after the pinned question would put user after user, which
            # the template refuses: the plain answers that follow it are
            # pinned too. An agent loop's tool rounds are not: a cut opens on a call.
            self.pin_end = _answers_end(msgs, self.pin_end, self.cur_start)
        if self.user_first and self.pin_end == self.hist_start:
            self.cur_start = _last_user(msgs, self.hist_start, self.cur_start)

    def sections(self, model: Model) -> list[Section]:
        msgs, o = self.messages, self.opts
        out: list[Section] = [
            MessageSection("system", msgs, 0, self.sys_end, priority=100, role="system")
        ]
        if self.documents:
            out.append(DocumentsSection(self.documents, model, o))
        if self.summary is not None:
            out.append(MessageSection("summary", [self.summary], 0, 1, priority=80, role="summary"))
        elif self.summary_idx is not None:
            i = self.summary_idx
            out.append(MessageSection("summary", msgs, i, i + 1, priority=80, role="summary"))
        if self.pin_end > self.hist_start:
            out.append(MessageSection("pinned", msgs, self.hist_start, self.pin_end, priority=85))
        lo = max(self.pin_end, self.recent)
        index = self.index
        if isinstance(index, ListIndex):
            index = index.view(
                msgs,
                lo,
                self.cur_start,
                get_counter(model),
                bound=_index_bound(model, o),
                most=o.max_messages,
            )
        out.append(
            MessageSection(
                "history",
                msgs,
                lo,
                self.cur_start,
                mode="newest",
                priority=10,
                # The share is of the room the requested output leaves; without a request
                # history may take the room down to the output floor.
                share=o.history_share if o.max_tokens is not None else None,
                min_items=o.min_messages,
                max_items=o.max_messages,
                index=index,
            )
        )
        history = out[-1]
        assert isinstance(history, MessageSection)
        history.recall = self.recall
        history.user_opens = self.user_first and self.pin_end == self.hist_start
        current = MessageSection(
            "current", msgs, self.cur_start, len(msgs), priority=90, role="current"
        )
        current.truncatable = o.truncate_tool_results
        out.append(current)
        return out

    def unpinned(self) -> FitLayout | None:
        """This layout with nothing pinned (the engine's fallback when the pinned opening
        does not fit with the newest round), or None when nothing is pinned. Where the
        API's requests open with the user's turn, the current turn then starts at the last
        user message; when that is the pinned opening's own, unpinning gains nothing."""
        if self.pin_end <= self.hist_start:
            return None
        cur = self.cur_start
        if self.user_first:
            cur = _last_user(self.messages, self.hist_start, cur)
            if cur < self.pin_end:
                return None
        return replace(self, pin_end=self.hist_start, cur_start=cur)

    def summary_target(self) -> SummaryTarget | None:
        return SummaryTarget(
            "history",
            self.messages,
            self.pin_end,
            self.cur_start,
            tail=len(self.messages) - self.cur_start,
            previous=self.summary_idx,
        )

    def with_summary(self, summary: Message, recent_start: int) -> Layout:
        return replace(self, summary=summary, summary_idx=None, recent=recent_start)


def _current(msgs: Sequence[Message], lo: int, n: int) -> int:
    """Where the current turn of ``msgs[lo:n]`` starts: the newest tool round when tool
    rounds follow the last user message (an agent loop: one task, then calls and
    results), else the last user message; with neither, the last group. Read newest
    first only as far as that group (an agent's task may lie thousands of rounds back)."""
    if n > lo:
        m = msgs[n - 1]
        if type(m) is dict and m.get("role") == "user":
            return n - 1  # (the newest group: a user message stands alone)
    last = n
    for start, _stop, _ in iter_groups(msgs, lo, n, lambda _m: 0):
        m = msgs[start]
        if is_tool_round(msgs, start) or (isinstance(m, Mapping) and m.get("role") == "user"):
            return start
        if last == n:
            last = start  # the newest group, if no user message or tool round
    return last


def _last_user(msgs: Sequence[Message], lo: int, cur: int) -> int:
    """The last user message at or before ``cur`` in ``msgs[lo:]`` (``cur`` if none)."""
    i = cur
    while i >= lo:
        m = msgs[i] if i < len(msgs) else None
        # (a dict first: a converted agent's messages are dicts, and its only user
        # message may be the task, thousands back; the ABC's check costs ~4x)
        if isinstance(m, (dict, Mapping)) and m.get("role") == "user":
            return i
        i -= 1
    return cur


def _pinned(msgs: Sequence[Message], lo: int, hi: int, pin: int) -> int:
    """The end of the pinned opening of ``msgs[lo:hi]``: after its ``pin``-th user
    message (``lo``: nothing pinned)."""
    end, seen = lo, 0
    for i in range(lo, hi):
        if seen >= pin:
            break
        m = msgs[i]
        if (type(m) is dict or isinstance(m, Mapping)) and m.get("role") == "user":
            seen += 1
            end = i + 1
    return end


def _answers_end(msgs: Sequence[Message], start: int, stop: int) -> int:
    """The end of the run of plain assistant answers (no tool calls) that opens
    ``msgs[start:stop]`` (``start`` if none)."""
    i = start
    while i < stop:
        m = msgs[i]
        if (
            not isinstance(m, Mapping)
            or m.get("role") != "assistant"
            or m.get("tool_calls")
            or m.get("function_call")
        ):
            break
        i += 1
    return i


def _with_history(
    messages: Sequence[Message], views: Sequence[Message], newest_first: list[Message]
) -> list[Message]:
    """The caller's messages with the history read put in after the pinned ones
    (``views``: the same messages as chat dicts, see :func:`chat_views`)."""
    pinned = 0
    while pinned < len(views) and views[pinned].get("role") in PINNED_ROLES:
        pinned += 1
    return [*messages[:pinned], *reversed(newest_first), *messages[pinned:]]


def chat_views(messages: Sequence[Any], model: Model) -> list[Message]:
    """The caller's chat messages as plain dicts (SDK, pydantic and LangChain objects
    read as the formats package reads them), every one checked (``history=`` takes chat
    requests only).

    Raises:
        BadMessage: the first malformed message, named by its index.
    """
    views: list[Message] = []
    for i, m in enumerate(messages):
        try:
            views.append(plain_message(m))
        except BadMessage as exc:
            raise exc.at(i) from None
    check_shapes(views, model)
    return views


def _history_message(source: Any, k: int) -> str:
    """How the caller knows the ``k``-th history message read (newest first)."""
    if isinstance(source, Sequence) and not isinstance(source, str | bytes):
        return f"history[{len(source) - 1 - k}]"
    return f"history message {k + 1} (counting from the newest)"


def _history_bound(
    messages: Sequence[Message], model: Model, opts: FitOptions, source: Any = None
) -> Callable[[Message], bool]:
    """A stop rule for lazy history: read until the messages read exceed any room they
    could possibly get, or max_messages (+ a group's worth) is reached. Each message is
    checked as it arrives (an error names it as the caller knows it, see
    :func:`_history_message`)."""
    counter = get_counter(model)
    checker = shape_checker(model)
    fixed = counter.base(None) + sum(counter.message(m) for m in messages)
    floor = min(opts.min_output_tokens, opts.max_tokens or opts.min_output_tokens)
    room = model.context_window - opts.safety_margin - floor - fixed
    if opts.max_input_tokens is not None:
        room = min(room, opts.max_input_tokens - fixed)
    state = {"tokens": 0, "n": 0}
    limit = None if opts.max_messages is None else opts.max_messages * 2 + 2

    def enough(m: Message) -> bool:
        try:
            view = plain_message(m)  # SDK, pydantic and LangChain messages too
            check_one(checker, view)
        except BadMessage as exc:
            where = _history_message(source, state["n"])
            raise InvalidMessagesError(f"{where} {exc.problem}. {exc.fix}") from None
        state["tokens"] += counter.message(view)
        state["n"] += 1
        return state["tokens"] > room or (limit is not None and state["n"] >= limit)

    return enough


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _too_deep() -> InvalidInputError:
    return InvalidInputError(
        "The messages, tools or documents nest lists and dicts too deeply to be read "
        "(Python's recursion limit). Send content a few levels deep, as the chat, "
        "Anthropic and Responses formats have it."
    )


def _refuse_deep(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """``fn`` with a RecursionError (input nested thousands deep, read by the recursive
    converters and ``json.dumps``) raised as :class:`InvalidInputError`: the caller's
    input is at fault, not tokenflex. A pass measuring every input's depth first would
    cost every call for an input that is never sent."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def guarded_async(*args: _P.args, **kwargs: _P.kwargs) -> Any:
            try:
                return await fn(*args, **kwargs)
            except RecursionError:
                raise _too_deep() from None

        return cast(Callable[_P, _R], guarded_async)

    @functools.wraps(fn)
    def guarded(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return fn(*args, **kwargs)
        except RecursionError:
            raise _too_deep() from None

    return guarded


@_refuse_deep
def fit(
    messages: Sequence[Message],
    *,
    model: str | Model,
    max_tokens: int | None = None,
    tools: Sequence[Tool] | None = None,
    format: str | None = None,
    system: Any = None,
    history: HistorySource | History | None = None,
    documents: Sequence[Chunk] | Documents | None = None,
    summarize: Summarizer | Summarize | None = None,
    shrink: Shrink | None = None,
    cache: bool | CacheStable | None = None,
    fallback: Sequence[str] | Fallback | None = None,
    state: StateStore | None = None,
    keep_reasoning: bool = False,
    recall: bool = False,
    **options: Any,
) -> Plan:
    """Fit a request into the model's window; the plan is in the format it was given.

    Args:
        messages: Messages oldest first: OpenAI chat messages, Anthropic Messages
            ``messages``, or OpenAI Responses ``input`` items (see :mod:`tokenflex.formats`);
            dicts or SDK / pydantic / LangChain message objects. With ``history=``, only
            the system messages and the current turn; older history comes from the source.
        model: A registry name (``gpt-4o``, ``llama3.2:3b``) or a :class:`Model`.
        max_tokens: The output you want; negotiated down (never below
            ``min_output_tokens``) when the input needs the room.
        tools: Tool schemas sent with the request (counted).
        format: ``chat``, ``anthropic``, ``responses`` or ``gemini`` (any registered
            format, :mod:`tokenflex.formats.registry`); detected from the messages when
            not given (plain text messages read as chat, or Anthropic with ``system=``).
        system: Anthropic's top-level ``system`` (string or blocks), the Responses
            ``instructions`` or Gemini's ``systemInstruction``; always kept.
        history: A :class:`History` (how much history is kept: ``share``,
            ``min_messages``, ``max_messages``, ``pin``, ``page_size``, ``cut_note``), or
            just a lazy source of older messages, newest first (see
            :mod:`tokenflex.history`; also ``History(source, ...)``): read only as far as
            the budget needs.
        documents: Retrieved :class:`tokenflex.Chunk` s, or :class:`Documents`
            ``(chunks, cap=, policy=, format=, safety_buffer=)``: packed with their
            citations into ``min(cap, what is left)`` (default: half of what is left) and
            sent as a system message after the pinned ones; dropped chunks are in
            ``dropped``.
        summarize: A :class:`tokenflex.Summarizer`, or :class:`Summarize`
            ``(summarizer, keep_recent=, max_tokens=, facts=, background=)``: when
            history does not fit, older messages are summarized instead of dropped.
            With ``background=`` (a
            :class:`~tokenflex.summarize.background.BackgroundSummaries`, the proxy's)
            and a ``state`` store, a summary that needs more than one summarizer call is
            made there and stored, and this fit waits for none of them (its plan keeps
            the previous stored summary, if any, and drops the oldest messages that do
            not fit; a warning says so). ``summarizer=`` and ``background_summaries=``
            are accepted as plain keywords.
        shrink: A :class:`Shrink`: what is shrunk in old history before whole turns
            are dropped (``clear_tool_results``, ``keep_tool_results``, ``keep_tools``,
            ``drop_reasoning``, ``truncate_tool_results``).
        cache: True or :class:`CacheStable` ``(low_water=)``: keep the prefix sent
            stable across a conversation's turns so prompt caches hit (see ``state``);
            False: off (the default here).
        fallback: Model names tried, cheapest first, when the request does not fit, or
            :class:`Fallback` ``(models, input_share=)``.
        state: With ``cache``: the :class:`~tokenflex.state.StateStore` that
            remembers where this conversation's last cut fell, keyed by its tenant and
            leading messages, and its summaries (default: the process's in-memory
            store). Pass a :class:`~tokenflex.state.TenantStore` to keep each user's
            conversations apart; a plain store is one tenant. A cut is held only for a
            request that extends the previous one of its conversation. With
            ``recall=True``: where what the plan left out is kept.
        keep_reasoning: Send chat messages' ``reasoning_content`` back (default: taken
            out and listed in ``dropped``; most APIs reject or ignore it on input).
        recall: Keep what the plan leaves out (dropped, summarized, cleared) in
            ``state`` under short stable ids that the cut note, summary and placeholders
            name, and add the ``tokenflex_recall`` tool to the request (counted); only
            when something is left out. :func:`tokenflex.recall` reads an id back (see
            :mod:`tokenflex.recall`); ``plan.extras["recall"]["ids"]`` lists them.
        **options: The remaining :class:`FitOptions` fields (``policy``,
            ``min_output_tokens``, ``safety_margin``, ``max_input_tokens``, ``strict``),
            and any group's field by its flat name (``clear_tool_results=True``,
            ``history_share=0.5``); an unknown name, an invalid value, or a flat name
            given beside its group for the same field raises :class:`InvalidInputError`.

    Returns:
        A :class:`Plan` with ``input_tokens + max_tokens + safety_margin <= window``;
        ``plan.messages`` (and ``plan.system``) in the format given, kept message objects
        as the caller's own objects; ``plan.request(api=...)`` builds a request body.

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
    flow = _fit_flow(
        messages,
        model=model,
        max_tokens=max_tokens,
        tools=tools,
        state=state,
        format=format,
        system=system,
        keep_reasoning=keep_reasoning,
        recall=recall,
        options=options,
        groups=given_groups(history, documents, summarize, shrink, cache, fallback),
    )
    answer: Any = None
    error: Exception | None = None
    while True:
        try:
            step = flow.send(answer) if error is None else flow.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        answer, error = None, None
        try:
            if isinstance(step, Work):
                answer = step.run()
            elif isinstance(step, _FitStep):
                answer = fit_layout(step.layout, step.opts, **step.kwargs)
            else:
                answer = read_newest_first(step.source, enough=step.enough, page_size=step.page)
        except Exception as exc:  # the flow's own to handle (or raise)
            error = exc


def _taken_out(req: Prepared) -> TakenOut | None:
    """The reasoning :func:`~tokenflex.roundtrip.prepare` took out of the chat
    messages, for the engine's plan to list."""
    conv = req.converted
    return TakenOut(dict(conv.reasoning)) if conv is not None and conv.reasoning else None


def _user_first(req: Prepared) -> bool:
    """Whether the request's API wants the user's turn first (Anthropic Messages)."""
    return req.converted is not None and get_format(req.converted.format).user_first


def _session(state: Any, opts: FitOptions, model: Model, messages: Sequence[Message]) -> Any:
    """Where a stateless cache-stable fit keeps its cut and summaries (None, None: off)."""
    if not opts.cache_stable:
        return None, None
    store = tenant_view(state if state is not None else default_store())
    return StoreMemory(store, model.name, messages), store


@_refuse_deep
async def afit(
    messages: Sequence[Message],
    *,
    model: str | Model,
    max_tokens: int | None = None,
    tools: Sequence[Tool] | None = None,
    format: str | None = None,
    system: Any = None,
    history: HistorySource | History | None = None,
    documents: Sequence[Chunk] | Documents | None = None,
    summarize: Summarizer | Summarize | None = None,
    shrink: Shrink | None = None,
    cache: bool | CacheStable | None = None,
    fallback: Sequence[str] | Fallback | None = None,
    state: StateStore | None = None,
    keep_reasoning: bool = False,
    recall: bool = False,
    **options: Any,
) -> Plan:
    """Async twin of :func:`fit`: also reads async history sources and awaits async
    summarizers; counting and solving run in a worker thread, so a tokenizer that asks
    a server never blocks the event loop."""
    flow = _fit_flow(
        messages,
        model=model,
        max_tokens=max_tokens,
        tools=tools,
        state=state,
        format=format,
        system=system,
        keep_reasoning=keep_reasoning,
        recall=recall,
        options=options,
        groups=given_groups(history, documents, summarize, shrink, cache, fallback),
    )
    answer: Any = None
    error: Exception | None = None
    while True:
        try:
            step = flow.send(answer) if error is None else flow.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        answer, error = None, None
        try:
            if isinstance(step, Work):
                answer = await asyncio.to_thread(step.run)
            elif isinstance(step, _FitStep):
                answer = await afit_layout(step.layout, step.opts, **step.kwargs)
            else:
                answer = await aread_newest_first(
                    step.source, enough=step.enough, page_size=step.page
                )
        except Exception as exc:  # the flow's own to handle (or raise)
            error = exc


_NOTHING = Gathered({})
"""A call's options gathered when it gives no group and no object."""


@dataclass(frozen=True)
class _FitStep:
    """The flow needs a layout fitted (:func:`~tokenflex.engine.fit_layout`, or awaited
    :func:`~tokenflex.engine.afit_layout`)."""

    layout: FitLayout
    opts: FitOptions
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class _ReadHistory:
    """The flow needs a lazy history source read, newest first, until ``enough``."""

    source: Any
    enough: Callable[[Message], bool]
    page: int


def _fit_flow(
    messages: Sequence[Message],
    *,
    model: str | Model,
    max_tokens: int | None,
    tools: Sequence[Tool] | None,
    state: StateStore | None,
    format: str | None,
    system: Any,
    keep_reasoning: bool,
    recall: bool,
    options: dict[str, Any],
    groups: dict[str, Any] | None,
) -> Generator[Work | _FitStep | _ReadHistory, Any, Plan]:
    """fit() and afit(), written once (sans I/O, as :func:`tokenflex.engine.layout_flow`):
    it yields the work that may call a tokenizer server (:class:`Work`), the history
    reads and the layout fits, and receives their answers (an exception is thrown in)."""
    started = time.perf_counter()
    if state is not None:  # checked on every call, used or not (a warm call uses none)
        check_state_store(state)
    # a chat loop's call (the same flat options every turn, or none but max_tokens):
    # its options are checked once per set of values, not on every turn
    grouped = groups is not None  # (a group given)
    opts = None if grouped else flat_options(max_tokens, options)
    given = _NOTHING
    if opts is None:
        given = gather("fit()", options, groups or {}) if options or grouped else _NOTHING
        opts = None if given.options else plain_options(max_tokens)
        if opts is None:
            opts = FitOptions.from_kwargs({"max_tokens": max_tokens, **given.options})
    history, documents = given.history, given.chunks
    summarizer, background_summaries = given.summarizer, given.background
    while True:
        messages = check_messages(messages)
        primary = get_model(model, strict=opts.strict)
        if history is not None:
            views = yield Work(functools.partial(chat_views, messages, primary))
            bound = yield Work(functools.partial(_history_bound, views, primary, opts, history))
            read, _ = yield _ReadHistory(history, bound, opts.page_size)
            messages = _with_history(messages, views, read)
        req = prepare(
            messages,
            format=format,
            system=system,
            tools=tools,
            keep_reasoning=keep_reasoning,
            lazy_history=history is not None,
            reuse=True,
            new_index=ListIndex,
        )
        plain_call = (
            history is None
            and not recall
            and not documents
            and summarizer is None
            and background_summaries is None
            and not opts.cache_stable
            and not opts.fallback_models
            and req.converted is None
            and engine_flow.FAST_PATH
        )
        last = req.last if plain_call else None
        call = _Call(messages, req, primary, opts, tools, started)
        if last is not None and last.n == len(messages):
            again = _warm(last, call)
            if again is not None:
                return trace_fit(again)
        if history is None:
            yield Work(functools.partial(check_prepared, req, primary))
        if last is not None and last.n < len(messages):
            # (counts the new messages: a tokenizer server is never asked on the loop)
            grown: Plan | None = yield Work(functools.partial(_grown, last, call))
            if grown is not None:
                return trace_fit(grown)
        layout = yield Work(
            functools.partial(
                FitLayout,
                req.messages,
                primary,
                req.tools,
                opts,
                documents,
                index=req.index,
                user_first=_user_first(req),
            )
        )
        memory, summaries = _session(state, opts, primary, req.messages)
        common = {
            "started": started,
            "summaries": summaries,
            "background": background_summaries,
            "taken_out": _taken_out(req),
        }
        plan: Plan
        whole: Plan | None = None
        remembered = plain_call and req.given is messages  # kept for the list's next call
        if history is None and not documents:
            # when all of it fits: one count of each message, no solve
            taken = common["taken_out"]
            whole = yield Work(
                functools.partial(_whole, layout, opts, memory, started, taken, remembered)
            )
        if whole is not None:
            plan = whole
        elif recall:
            # the counter may call a tokenizer server: never on the event loop
            rf = yield Work(
                functools.partial(_recall_fit, layout, req, messages, state, memory, summarizer)
            )
            from .recall import recall_flow

            steps = recall_flow(rf)  # its plans made here, as fit_recalling makes them
            lay, mem, summ = next(steps)
            while True:
                thrown: ContextOverflowError | None = None
                made: Plan | None = None
                try:
                    made = yield _FitStep(lay, opts, {**common, "summarizer": summ, "memory": mem})
                except ContextOverflowError as exc:
                    thrown = exc
                try:
                    lay, mem, summ = steps.throw(thrown) if thrown else steps.send(made)
                except StopIteration as done:
                    tried, alt = done.value
                    break
            plan = yield Work(functools.partial(rf.chosen, tried, alt))
            if rf.tools is not None:
                req = replace(req, given_tools=rf.tools)
        else:
            plan = yield _FitStep(
                layout, opts, {**common, "summarizer": summarizer, "memory": memory}
            )
        if fresh(plan, req):
            final = finish(plan, req)
            if remembered:
                _remember(final, messages, layout, req, primary, opts, tools)
            read_through(messages)
            return trace_fit(final)
        # a kept message was edited in place since the list was read: read it afresh (the
        # drops of the plan made from the old read were logged as it was made: say so)
        log.info(
            "tokenflex: discarding the plan just made for %s (the drops logged for it did "
            "not happen): a message it keeps was edited in place since fit() read the list; "
            "fitting the list afresh",
            primary.name,
        )
        forget(messages)
        history = None  # (what it gave is in messages now)
        started = time.perf_counter()


@dataclass(slots=True)
class _Warm:
    """fit()'s record of its plan of a remembered list (kept with the memo's read of
    it, :func:`tokenflex.roundtrip.remember`): what must be as it was for the plan to
    be the answer again (:func:`_warm`)."""

    plan: Plan
    n: int
    """The length of the list it was made for."""
    model: Model
    opts: FitOptions
    tools: Sequence[Tool] | None
    fixed: tuple[int, int]
    """The messages the layout reads outside the history: ``[0, fixed[0])`` and
    ``[fixed[1], n)`` (system, pinned and the message after them; the message before the
    current turn and the current turn)."""
    copies: list[Any]
    """Their top-level fields when the plan was made."""
    kept: tuple[int, int]
    """The plan keeps ``messages[:kept[0]] + messages[kept[1]:]``, by identity."""
    history: tuple[int, int, int, int | None]
    """The history view ``(lo, hi, bound, most)`` the index was read with."""
    index: GroupIndex
    counter: MessageCounter
    """The counter the plan was counted with (another one: a provider's counts active,
    the registry changed)."""


def _index_bound(model: Model, opts: FitOptions) -> int:
    """The largest room of a fit (the window, or a smaller input cap): the bound a
    :class:`~tokenflex.engine.ListIndex` view is read with, by the layout and by the warm
    path's record alike."""
    bound = model.context_window
    for cap in (model.max_input_tokens, opts.max_input_tokens):
        if cap is not None and cap < bound:
            bound = cap
    return bound


def _copies(messages: Sequence[Any], fixed: tuple[int, int]) -> list[Any]:
    return [dict(m) for m in (*messages[: fixed[0]], *messages[fixed[1] :])]


def _remember(
    plan: Plan,
    messages: Sequence[Any],
    layout: FitLayout,
    req: Prepared,
    model: Model,
    opts: FitOptions,
    tools: Sequence[Tool] | None,
) -> None:
    """Keep what :func:`_warm` needs to give ``plan`` again for ``messages`` unchanged
    (nothing where the plan is not a plain cut of the list). O(the few messages the
    layout reads outside the history): a list that grows every turn never asks for it,
    and :func:`_warm` checks the kept messages when it is asked."""
    index = req.index
    if (
        not isinstance(index, ListIndex)
        or plan.summary is not None
        or layout.summary_idx is not None
        or layout.recent > layout.pin_end
    ):
        return
    n, kept = len(messages), plan.messages
    a = min(layout.pin_end, len(kept))
    b = n - (len(kept) - a)
    if b < a:
        return
    bound = _index_bound(model, opts)
    lo, hi = layout.pin_end, layout.cur_start
    view = index.current  # (the fit's own view; _warm's view must give this one again)
    if view is None:
        return
    fixed = (min(layout.pin_end + 1, n), max(0, min(layout.cur_start - 1, n)))
    fixed = (fixed[0], max(fixed))
    remember(
        messages,
        _Warm(
            plan,
            n,
            model,
            opts,
            tools,
            fixed,
            _copies(messages, fixed),
            (a, b),
            (lo, hi, bound, opts.max_messages),
            view,
            get_counter(model),
        ),
    )


def _warm(last: _Warm, call: _Call) -> Plan | None:
    """The previous plan of ``messages``, fitted again unchanged (same length, the memo
    saw the same items), when nothing else changed: the model, the options, the tools,
    the messages the layout reads (by value, their top-level fields: an edit in place is
    seen), the history the solver could read (the index's own check), the kept messages
    (by identity). A new :class:`Plan` (its ``messages`` a new list), else None."""
    plan, messages, req, model, tools = last.plan, call.messages, call.req, call.model, call.tools
    if not _same_call(last, call):
        return None
    if _copies(messages, last.fixed) != last.copies:
        return None
    a, b = last.kept
    kept = [*messages[:a], *messages[b:]]
    if not all(map(operator.is_, kept, plan.messages)):
        return None
    lo, hi, bound, most = last.history
    counter = get_counter(model)
    if counter is not last.counter:
        return None  # counted another way now (a provider's counts, say)
    view = req.index.view(messages, lo, hi, counter, bound=bound, most=most)
    if view is None or not view.same_counts(last.index):
        return None
    if len(plan.dropped):  # nothing dropped silently: logged as the full path logs it
        log_dropped([DropRun(*r) for r in plan.dropped.runs()], model.name)
    return plan.evolved(
        messages=kept,
        dropped=plan.dropped.again(),
        elapsed_ms=(time.perf_counter() - call.started) * 1000,
        # equal tools given anew: the plan sends the caller's objects of this call
        tools=tuple(tools) if tools and tools is not last.tools else plan.tools,
    )


@dataclass(slots=True)
class _Call:
    """A fit() call of a remembered list, as the warm and grown paths read it."""

    messages: Sequence[Any]
    req: Prepared
    model: Model
    opts: FitOptions
    tools: Sequence[Tool] | None
    started: float


def _same_call(last: _Warm, call: _Call) -> bool:
    """Whether ``call`` asks what the fit that made ``last`` did: the same model object,
    equal options and tools, the list read from the memo."""
    messages, req, model, opts, tools = call.messages, call.req, call.model, call.opts, call.tools
    try:
        return (
            model is last.model
            and (opts is last.opts or opts == last.opts)
            and (tools is last.tools or tools == last.tools)
            and req.given is messages
            and req.index is not None
        )
    except Exception:  # a tool whose == raises: fit afresh
        return False


def _grown(last: _Warm, call: _Call) -> Plan | None:
    """The plan of a remembered list grown by appending since its last plan (``last``),
    made from that plan and the list's running counts where nothing else can be due
    (:func:`~tokenflex.engine.grown_plan`: everything kept while it fits, else the
    newest groups that fit, by bisection): O(the new messages and the few the layout
    reads), else None (the full path). The new messages were checked; the history a
    solve could read is checked by the index's view, and the messages outside it are
    counted afresh (by text, from the count cache)."""
    if not _same_call(last, call):
        return None
    messages, req, model, opts = call.messages, call.req, call.model, call.opts
    counter = get_counter(model)
    index = req.index
    if counter is not last.counter or not isinstance(index, ListIndex):
        return None
    user_first = _user_first(req)
    layout = FitLayout(req.messages, model, req.tools, opts, index=index, user_first=user_first)
    lo, hi = layout.pin_end, layout.cur_start
    if layout.summary_idx is not None:
        return None
    view = index.view(
        messages, lo, hi, counter, bound=_index_bound(model, opts), most=opts.max_messages
    )
    if view is None or not view.same_counts(last.index):
        return None  # a message the last plan counted changed: the full path reads it
    # edited in place since it was read (the history the last plan counted: the view checks)
    if not (is_plain_chat(messages[:lo]) and is_plain_chat(messages[min(last.history[1], hi) :])):
        return None
    count = counter.message
    plan = grown_plan(
        last.plan,
        last.n,
        messages,
        lambda a, b: sum(map(count, messages[a:b])),
        (layout.sys_end, layout.hist_start, lo, hi),
        opts,
        None,
        call.started,
        tools=req.tools,
        index=view,
        user_opens=user_first and lo == layout.hist_start,
    )
    if plan is None:
        return None
    final = finish(plan, req)
    _remember(final, messages, layout, req, model, opts, call.tools)
    return final


def _whole(
    layout: FitLayout,
    opts: FitOptions,
    memory: Any,
    started: float,
    taken_out: TakenOut | None,
    remembered: bool = False,
) -> Plan | None:
    """:func:`~tokenflex.engine.whole_plan` of a layout (None: the full path decides).
    ``remembered``: the plan is kept for the list's next call (:func:`_remember`), which
    reads the history's view: made here whatever the history's length."""
    if layout.summary_idx is not None or layout.summary is not None:
        return None
    bounds = (layout.sys_end, layout.hist_start, layout.pin_end, layout.cur_start)
    view = None
    model, index = layout.model, layout.index
    if (
        isinstance(index, ListIndex)
        and opts.max_messages is None
        and (remembered or index.read_once or layout.cur_start - layout.pin_end > WHOLE_BLOCK)
    ):
        # a long history, or one kept for a next call (a remembered list; a request's
        # read, which the next turn of its conversation goes on from): the view the
        # layout's history section reads (the same arguments: kept by the index, so the
        # full path does not count it again when this gives up, and the next call
        # counts only what is new); a short list of the caller's that is not kept is
        # summed in one go (a view would copy each message)
        bound = _index_bound(model, opts)
        lo, hi = layout.pin_end, layout.cur_start
        view = index.view(layout.messages, lo, hi, get_counter(model), bound=bound)
    return whole_plan(
        layout.messages, model, layout.tools, bounds, opts, memory, started, taken_out, view
    )


def _recall_fit(
    layout: FitLayout, req: Prepared, given: Sequence[Any], state: Any, memory: Any, summ: Any
) -> RecallFit:
    """fit()'s steps with recall (see :class:`~tokenflex.recall.RecallFit`): what is left
    out goes to ``state`` in the caller's format."""
    from .recall import Recaller, RecallFit

    fmt = req.converted.format if req.converted is not None else default_format().name
    store = state if state is not None else default_store()
    chat = get_format(fmt).internal and req.converted is not None
    # (a proxy's parse of a conversation that goes on: objects no one edits, which its
    # next turn repeats; a request read once and done is not held for a turn to come)
    stable = goes_on_later(given)
    recaller = Recaller(store, req.messages, fmt, given if chat else None, stable=stable)
    return RecallFit(layout, recaller, memory, summ, req.given_tools)
