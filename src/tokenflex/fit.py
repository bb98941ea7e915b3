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

import contextlib
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ParamSpec, TypeVar, cast

from ._types import Message, Tool
from .budget import SectionSpec
from .counting import MessageCounter, get_counter
from .counting.checks import BadMessage
from .counting.shape import check_one, check_shapes, shape_checker
from .engine import (
    GroupIndex,
    Layout,
    MessageSection,
    Section,
    SummaryTarget,
    afit_layout,
    fit_layout,
)
from .errors import ContextOverflowError, InvalidInputError, InvalidMessagesError
from .formats.fitting import Prepared, check_prepared, finish, forget, fresh, prepare
from .formats.objects import plain_message
from .formats.registry import default_format, get_format
from .history import (
    HistorySource,
    aread_newest_first,
    is_tool_round,
    iter_groups,
    read_newest_first,
)
from .models import Model, get_model
from .options import FitOptions
from .plan import DropRun, Plan
from .summarize import is_summary_message
from .tracing import trace_fit

__all__ = ["PINNED_ROLES", "FitLayout", "afit", "fit"]

PINNED_ROLES = ("system", "developer")
"""Roles of the leading messages that are always kept."""


def check_messages(messages: Any) -> Sequence[Message]:
    """``messages`` if it is a list of messages, else :class:`InvalidMessagesError`."""
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        raise InvalidMessagesError(
            f"messages must be a list of message dicts, got {type(messages).__name__}. "
            'Pass [{"role": "user", "content": "..."}].'
        )
    return messages


class DocumentsSection(Section):
    """Retrieved chunks packed with their citations into the room the required input
    leaves, as one system message; dropped chunks are this section's dropped items."""

    name = "documents"
    needs_room = True

    def __init__(self, documents: Sequence[Any], model: Model, opts: FitOptions) -> None:
        self.documents = documents
        self.model = model
        self.opts = opts
        self.packed: Any = None
        self.message: dict[str, Any] | None = None
        self._dropped: dict[int, int | None] | None = None

    def spec(self, counter: MessageCounter, room: int) -> SectionSpec:
        from .documents import pack_chunks

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
            from .documents.render import chunk_parts

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


@dataclass
class FitLayout:
    """Where each of fit()'s sections sits in a message list (see the module doc)."""

    messages: Sequence[Message]
    model: Model
    tools: Sequence[Tool] | None
    opts: FitOptions
    documents: Sequence[Any] | None = None
    index: GroupIndex | None = None
    """Running counts a Conversation keeps (the history section bisects them)."""
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
    open a cut history; the pinned opening is never sent as history."""
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
            if not isinstance(m, Mapping):
                get_counter(self.model).count(list(msgs[: i + 1]))  # names the bad index
            if m.get("role") not in PINNED_ROLES or is_summary_message(m):
                break
            i += 1
        self.sys_end = i
        self.summary_idx = i if i < n and is_summary_message(msgs[i]) else None
        self.hist_start = i + 1 if self.summary_idx is not None else i
        self.cur_start = _current(msgs, self.hist_start, n)
        self.pin_end = _pinned(msgs, self.hist_start, self.cur_start, self.opts.pin)
        if self.user_first and self.pin_end == self.hist_start:
            self.cur_start = _last_user(msgs, self.hist_start, self.cur_start)

    def sections(self, model: Model) -> list[Section]:
        msgs, o = self.messages, self.opts
        out: list[Section] = [MessageSection("system", msgs, 0, self.sys_end, priority=100)]
        if self.documents:
            out.append(DocumentsSection(self.documents, model, o))
        if self.summary is not None:
            out.append(MessageSection("summary", [self.summary], 0, 1, priority=80))
        elif self.summary_idx is not None:
            i = self.summary_idx
            out.append(MessageSection("summary", msgs, i, i + 1, priority=80))
        if self.pin_end > self.hist_start:
            out.append(MessageSection("pinned", msgs, self.hist_start, self.pin_end, priority=85))
        out.append(
            MessageSection(
                "history",
                msgs,
                max(self.pin_end, self.recent),
                self.cur_start,
                mode="newest",
                priority=10,
                # The share is of the room the requested output leaves; without a request
                # history may take the room down to the output floor.
                share=o.history_share if o.max_tokens is not None else None,
                min_items=o.min_messages,
                max_items=o.max_messages,
                index=self.index,
            )
        )
        history = out[-1]
        assert isinstance(history, MessageSection)
        history.recall = self.recall
        history.user_opens = self.user_first and self.pin_end == self.hist_start
        current = MessageSection("current", msgs, self.cur_start, len(msgs), priority=90)
        current.truncatable = o.truncate_tool_results
        out.append(current)
        return out

    def unpinned(self) -> FitLayout | None:
        """This layout with nothing pinned (the engine's fallback when the pinned opening
        does not fit with the newest round), or None when nothing is pinned."""
        if self.pin_end <= self.hist_start or self.user_first:
            return None
        return replace(self, pin_end=self.hist_start)

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
        if isinstance(m, Mapping) and m.get("role") == "user":
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
        if isinstance(m, Mapping) and m.get("role") == "user":
            seen += 1
            end = i + 1
    return end


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
    history: HistorySource | None = None,
    summarizer: Any = None,
    documents: Sequence[Any] | None = None,
    state: Any = None,
    format: str | None = None,
    system: Any = None,
    keep_reasoning: bool = False,
    background_summaries: Any = None,
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
        history: A lazy source of older messages, newest first (see
            :mod:`tokenflex.history`); read only as far as the budget needs.
        summarizer: A :class:`tokenflex.summarize.Summarizer`; when history does not
            fit, older messages are summarized instead of dropped.
        documents: Retrieved :class:`tokenflex.Chunk` s, packed with their citations into
            ``min(documents_cap, what is left)`` (default: half of what is left) and sent
            as a system message after the pinned ones; dropped chunks are in ``dropped``.
        format: ``chat``, ``anthropic``, ``responses`` or ``gemini`` (any registered
            format, :mod:`tokenflex.formats.registry`); detected from the messages when
            not given (plain text messages read as chat, or Anthropic with ``system=``).
        system: Anthropic's top-level ``system`` (string or blocks), the Responses
            ``instructions`` or Gemini's ``systemInstruction``; always kept.
        keep_reasoning: Send chat messages' ``reasoning_content`` back (default: taken
            out and listed in ``dropped``; most APIs reject or ignore it on input).
        background_summaries: A
            :class:`~tokenflex.summarize.background.BackgroundSummaries` (the proxy's):
            with a ``state`` store, a summary that needs more than one summarizer call
            is made there and stored, and this fit waits for none of them (its plan keeps
            the previous stored summary, if any, and drops the oldest messages that do
            not fit; a warning says so). Without it a fit waits for every call.
        state: With ``cache_stable=True``: the :class:`~tokenflex.state.StateStore` that
            remembers where this conversation's last cut fell, keyed by its tenant and
            leading messages, and its summaries (default: the process's in-memory
            store). Pass a :class:`~tokenflex.state.TenantStore` to keep each user's
            conversations apart; a plain store is one tenant. A cut is held only for a
            request that extends the previous one of its conversation. With
            ``recall=True``: where what the plan left out is kept.
        recall: Keep what the plan leaves out (dropped, summarized, cleared) in
            ``state`` under short stable ids that the cut note, summary and placeholders
            name, and add the ``tokenflex_recall`` tool to the request (counted); only
            when something is left out. :func:`tokenflex.recall` reads an id back (see
            :mod:`tokenflex.recall`); ``plan.extras["recall"]["ids"]`` lists them.
        **options: Any :class:`FitOptions` field (``policy``, ``min_output_tokens``,
            ``safety_margin``, ``history_share``, ``min_messages``, ``max_messages``,
            ``max_input_tokens``, ``keep_recent``, ``fallback_models``, ``strict``, ...);
            an unknown name or an invalid value raises :class:`InvalidInputError`.

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
    import time

    started = time.perf_counter()
    opts = FitOptions.from_kwargs({"max_tokens": max_tokens, **options})
    messages = check_messages(messages)
    primary = get_model(model, strict=opts.strict)
    if history is not None:
        views = chat_views(messages, primary)
        read, _ = read_newest_first(
            history,
            enough=_history_bound(views, primary, opts, history),
            page_size=opts.page_size,
        )
        messages = _with_history(messages, views, read)
    req = prepare(
        messages,
        format=format,
        system=system,
        tools=tools,
        keep_reasoning=keep_reasoning,
        lazy_history=history is not None,
        reuse=True,
    )
    if history is None:
        check_prepared(req, primary)
    layout = FitLayout(
        req.messages, primary, req.tools, opts, documents, user_first=_user_first(req)
    )
    memory, summaries = _session(state, opts, primary, req.messages)
    if recall:
        rf = _RecallFit(layout, req, messages, state, memory, summarizer)
        lay, mem, summ = rf.first()
        tried: Plan | None = None
        with contextlib.suppress(ContextOverflowError):  # the tool's tokens: fit without
            tried = fit_layout(
                lay,
                opts,
                summarizer=summ,
                started=started,
                memory=mem,
                summaries=summaries,
                background=background_summaries,
            )
        again = rf.second(tried)
        alt = None
        if again is not None:
            lay, mem, summ = again
            alt = fit_layout(
                lay,
                opts,
                summarizer=summ,
                started=started,
                memory=mem,
                summaries=summaries,
                background=background_summaries,
            )
        plan, req = rf.chosen(tried, alt)
    else:
        plan = fit_layout(
            layout,
            opts,
            summarizer=summarizer,
            started=started,
            memory=memory,
            summaries=summaries,
            background=background_summaries,
        )
    if not fresh(plan, req):  # a kept message was edited in place: read the list afresh
        forget(messages)
        return fit(
            messages,
            model=model,
            max_tokens=max_tokens,
            tools=tools,
            summarizer=summarizer,
            documents=documents,
            state=state,
            format=format,
            system=system,
            keep_reasoning=keep_reasoning,
            background_summaries=background_summaries,
            recall=recall,
            **options,
        )
    return trace_fit(finish(plan, req))


def _user_first(req: Prepared) -> bool:
    """Whether the request's API wants the user's turn first (Anthropic Messages)."""
    return req.converted is not None and get_format(req.converted.format).user_first


def _session(state: Any, opts: FitOptions, model: Model, messages: Sequence[Message]) -> Any:
    """Where a stateless cache-stable fit keeps its cut and summaries (None, None: off)."""
    from .state import StateStore, default_store

    if state is not None and not isinstance(state, StateStore):
        raise InvalidInputError(
            f"state must be a tokenflex StateStore (get, set, delete), got "
            f"{type(state).__name__} {state!r:.80}. Pass tokenflex.state.open_store(url) "
            "or leave it out for the in-memory store."
        )
    if not opts.cache_stable:
        return None, None
    from .session import StoreMemory
    from .state.tenant import tenant_view

    store = tenant_view(state if state is not None else default_store())
    return StoreMemory(store, model.name, messages), store


@_refuse_deep
async def afit(
    messages: Sequence[Message],
    *,
    model: str | Model,
    max_tokens: int | None = None,
    tools: Sequence[Tool] | None = None,
    history: Any = None,
    summarizer: Any = None,
    documents: Sequence[Any] | None = None,
    state: Any = None,
    format: str | None = None,
    system: Any = None,
    keep_reasoning: bool = False,
    background_summaries: Any = None,
    recall: bool = False,
    **options: Any,
) -> Plan:
    """Async twin of :func:`fit`: also reads async history sources and awaits async
    summarizers; counting and solving run in a worker thread, so a tokenizer that asks
    a server never blocks the event loop."""
    import asyncio
    import time

    started = time.perf_counter()
    opts = FitOptions.from_kwargs({"max_tokens": max_tokens, **options})
    messages = check_messages(messages)
    primary = get_model(model, strict=opts.strict)
    if history is not None:
        views = await asyncio.to_thread(chat_views, messages, primary)
        bound = await asyncio.to_thread(_history_bound, views, primary, opts, history)
        read, _ = await aread_newest_first(history, enough=bound, page_size=opts.page_size)
        messages = _with_history(messages, views, read)
    req = prepare(
        messages,
        format=format,
        system=system,
        tools=tools,
        keep_reasoning=keep_reasoning,
        lazy_history=history is not None,
        reuse=True,
    )
    if history is None:
        await asyncio.to_thread(check_prepared, req, primary)
    layout = await asyncio.to_thread(
        functools.partial(FitLayout, user_first=_user_first(req)),
        req.messages,
        primary,
        req.tools,
        opts,
        documents,
    )
    memory, summaries = _session(state, opts, primary, req.messages)
    if recall:
        # the counter may call a tokenizer server: never on the event loop
        rf = await asyncio.to_thread(_RecallFit, layout, req, messages, state, memory, summarizer)
        lay, mem, summ = rf.first()
        tried: Plan | None = None
        with contextlib.suppress(ContextOverflowError):  # the tool's tokens: fit without
            tried = await afit_layout(
                lay,
                opts,
                summarizer=summ,
                started=started,
                memory=mem,
                summaries=summaries,
                background=background_summaries,
            )
        again = rf.second(tried)
        alt = None
        if again is not None:
            lay, mem, summ = again
            alt = await afit_layout(
                lay,
                opts,
                summarizer=summ,
                started=started,
                memory=mem,
                summaries=summaries,
                background=background_summaries,
            )
        plan, req = await asyncio.to_thread(rf.chosen, tried, alt)
    else:
        plan = await afit_layout(
            layout,
            opts,
            summarizer=summarizer,
            started=started,
            memory=memory,
            summaries=summaries,
            background=background_summaries,
        )
    if not fresh(plan, req):  # a kept message was edited in place: read the list afresh
        forget(messages)
        return await afit(
            messages,
            model=model,
            max_tokens=max_tokens,
            tools=tools,
            summarizer=summarizer,
            documents=documents,
            state=state,
            format=format,
            system=system,
            keep_reasoning=keep_reasoning,
            background_summaries=background_summaries,
            recall=recall,
            **options,
        )
    return trace_fit(finish(plan, req))


class _Deferred:
    """A session memory whose ``remember`` waits until the plan sent is chosen (a fit
    with recall may make two, see :class:`_RecallFit`)."""

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
        return replace(plan, prefix_tokens=prefix, cached_tokens=cached_tokens(plan.model, prefix))


class _RecallFit:
    """The steps of ``fit(..., recall=True)``, driven by fit() and afit().

    1. Fit with the ``tokenflex_recall`` tool counted and the ids named.
    2. When that plan leaves nothing out, or leaves out little more than the tool costs,
       or cannot be made (the required input does not fit with the tool), fit as without
       recall: a request that fits goes out unchanged, and the tool is never what makes
       a request drop a message or be refused.
    3. The plan chosen: with the tool, its left-out messages are stored and the tool
       added in the caller's format; its conversation's memory records it.
    """

    def __init__(
        self,
        layout: FitLayout,
        req: Prepared,
        given: Sequence[Any],
        state: Any,
        memory: Any,
        summ: Any,
    ) -> None:
        from .recall import Recaller, recall_tool
        from .state import default_store

        self.layout, self.req, self.memory, self.summarizer = layout, req, memory, summ
        internal = default_format()  # what the engine counts
        self.format = req.converted.format if req.converted is not None else internal.name
        store = state if state is not None else default_store()
        chat = get_format(self.format).internal and req.converted is not None
        self.recaller = Recaller(store, req.messages, self.format, given if chat else None)
        counted = recall_tool(internal.name)
        counter = get_counter(layout.model)
        self.tool_tokens = counter.base([counted]) - counter.base(None)
        self.with_tool = replace(
            layout, tools=[*(layout.tools or ()), counted], recall=self.recaller
        )
        self.mem1 = _Deferred(memory) if memory is not None else None
        self.mem2 = _Deferred(memory) if memory is not None else None

    def first(self) -> tuple[FitLayout, Any, Any]:
        return self.with_tool, self.mem1, self.summarizer

    def second(self, plan: Plan | None) -> tuple[FitLayout, Any, Any] | None:
        from .recall import left_out

        if plan is None:  # the required input does not fit with the tool: no recall
            return self.layout, self.mem2, self.summarizer
        if not left_out(plan.dropped.runs()):
            return self.layout, self.mem2, self.summarizer
        total = 0
        for d in plan.dropped:  # counted lazily: stops as soon as it is over
            total += d.tokens
            if total > 2 * self.tool_tokens:
                return None
        return self.layout, self.mem2, None  # nothing summarized for a plan maybe not sent

    def chosen(self, plan: Plan | None, alt: Plan | None) -> tuple[Plan, Prepared]:
        from .recall import RECALL_TOOL, left_out, recall_tool

        if alt is not None and (
            plan is None or not left_out(plan.dropped.runs()) or not left_out(alt.dropped.runs())
        ):
            return (alt if self.mem2 is None else self.mem2.settle(alt)), self.req
        assert plan is not None
        ids = self.recaller.commit(plan.dropped.runs())
        extras = {**plan.extras, "recall": {"ids": ids, "tool": RECALL_TOOL}}
        plan = replace(plan, extras=extras)
        if self.mem1 is not None:
            plan = self.mem1.settle(plan)
        tools = [*(self.req.given_tools or ()), recall_tool(self.format)]
        return plan, replace(self.req, given_tools=tools)
