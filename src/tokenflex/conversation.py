"""A growing conversation that re-fits in O(new message).

:func:`tokenflex.fit` on a plain list walks the kept history newest → oldest, with every
count cached: O(kept messages) dictionary lookups. A chat loop that re-fits after every
turn can do better: :class:`Conversation` counts each message once, on ``append``, keeps
running sums per atomic group, and lets the solver bisect them. It is fit()'s layout
(:class:`~tokenflex.fit.FitLayout`) with those sums, so everything fit() does —
documents, summaries, fallback models — works here too.

>>> from tokenflex import Conversation
>>> conv = Conversation([{"role": "system", "content": "Be brief."}], model="gpt-4o")
>>> conv.append({"role": "user", "content": "Hi!"})
>>> plan = conv.fit(max_tokens=500)
>>> len(plan.messages), plan.max_tokens
(2, 500)
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from ._types import Message, Tool
from .counting import get_counter
from .counting.shape import check_one, shape_checker
from .counting.template import alternating_roles
from .engine import GroupIndex, TakenOut, afit_layout, fit_layout, grown_plan
from .errors import InvalidInputError
from .fit import PINNED_ROLES, FitLayout
from .formats.chat import chat_to_internal
from .formats.native import Converted, NativeMessage
from .history import has_reasoning
from .message.checks import BadMessage
from .message.groups import is_tool_result, joins_previous
from .message.objects import plain_message
from .models import Model, get_model
from .options import (
    CacheStable,
    Documents,
    Fallback,
    FitOptions,
    History,
    Shrink,
    Summarize,
    gather,
    given_groups,
)
from .plan import Plan
from .recall import Recaller, RecallFit, afit_recalling, fit_recalling
from .roundtrip import Prepared, finish
from .session import ObjectMemory
from .state import MemoryStore
from .summarize import Summarizer, is_summary_message

if TYPE_CHECKING:
    from .documents import Chunk
    from .state import StateStore

__all__ = ["Conversation"]


_TURN_ROLES = frozenset({"user", "assistant"})
"""The roles of a plain chat turn, appended without the general path's checks."""


class Conversation:
    """Messages plus the running counts that make re-fitting cheap.

    The caller's dicts are kept by reference, never modified. Options given here are
    defaults for every :meth:`fit`; keyword arguments to :meth:`fit` override them.

    Plans are cache-stable by default (``cache=True``): when history must be cut,
    it is cut down to ``low_water`` of its room (by default chosen by expected cost where
    the model's cache prices are known: :func:`tokenflex.cost.stable_mark`) and that cut
    is held while it fits and the provider still caches it, so consecutive requests share
    a prefix a provider's prompt cache can reuse; each plan reports it in
    ``prefix_tokens``. Pass ``cache=False`` to keep as much history
    as fits on every fit.

    Chat messages' ``reasoning_content`` is handled as :func:`tokenflex.fit` handles it:
    taken out (listed in ``plan.dropped``, section ``reasoning``) unless
    ``keep_reasoning=True``.

    With ``recall=True`` every fit keeps what it leaves out in ``state`` (default: the
    process's in-memory store) as ``fit(..., recall=True, state=...)`` does: the cut
    note, summary and cleared placeholders name recall ids, the plan gains the counted
    ``tokenflex_recall`` tool when something is left out, and :func:`tokenflex.recall`
    reads an id back. A held cut keeps its id; a cut that moves stores only the messages
    it newly left out.
    """

    def __init__(
        self,
        messages: Iterable[Message] = (),
        *,
        model: str | Model,
        tools: Sequence[Tool] | None = None,
        history: History | None = None,
        summarize: Summarizer | Summarize | None = None,
        shrink: Shrink | None = None,
        cache: bool | CacheStable | None = None,
        fallback: Sequence[str] | Fallback | None = None,
        keep_reasoning: bool = False,
        recall: bool = False,
        state: StateStore | None = None,
        **options: Any,
    ) -> None:
        groups = {
            "history": history,
            "summarize": summarize,
            "shrink": shrink,
            "cache": cache,
            "fallback": fallback,
        }
        given = gather("Conversation()", options, groups, takes=("summarizer",))
        options = {"cache_stable": True, **given.options}
        self._summarizer = given.summarizer  # used when fit() is given none
        self.keep_reasoning = keep_reasoning
        self.recall, self.state = _recall_options(recall, state)
        self._reasoning: dict[int, str] = {}  # taken out of messages (fit()'s rule)
        self._converted = False  # a message was converted: plans go back through finish()
        self._given: dict[int, Message] = {}  # the caller's message where it was converted
        self._opts = FitOptions.from_kwargs(options, where="Conversation()")
        self._summaries = MemoryStore(max_bytes=4 * 1024 * 1024)
        self._by_max_tokens: dict[int, FitOptions] = {}
        self.model = get_model(model, strict=self._opts.strict)
        self.tools = tools
        self.options = dict(options)
        self._counter = get_counter(self.model)
        self._counted: dict[int, int] = {}  # id(message) -> tokens (the messages are kept)
        # the previous plan: cache-stable cuts, prefix_tokens (summed from the counts kept)
        self._memory = ObjectMemory((self._counter, self._counted))
        self._checker = shape_checker(self.model)
        self._parts = False  # a message has content parts (files, audio: estimates)
        self._shrinkable = False  # a message the shrink ladder may shrink
        self._msgs: list[Message] = []
        self._tokens: list[int] = []  # per message
        self._sys_end = 0
        self._group_start: list[int] = []  # index of each group's first message
        self._users: list[int] = []  # index of each user message
        self._cum: list[int] = [0]  # _cum[g] = tokens of groups [0, g)
        # the engine's view of the running counts (it holds the lists, which only grow)
        # the counter's own model: the engine uses the index only for what it counted
        self._index = GroupIndex(self._counter.model, self._group_start, self._cum, self._tokens)
        # the last plan and what it was fitted with (the "nothing changed" fast path)
        self._last: tuple[Plan, FitOptions, Sequence[Tool] | None, int] | None = None
        self.extend(messages)

    # -- growing ---------------------------------------------------------------------
    def append(self, message: Message) -> None:
        """Add one message: counted once, here. SDK, pydantic and LangChain message
        objects are kept as the chat dicts they stand for."""
        if type(message) is dict and len(message) == 2:
            role, content = message.get("role"), message.get("content")
            if type(content) is str and type(role) is str and role in _TURN_ROLES:
                # a chat loop's turn, {"role": "user" | "assistant", "content": str}:
                # nothing to check, convert or shrink, a group of its own
                i = len(self._msgs)
                tokens = self._counter.message(message)
                self._msgs.append(message)
                self._tokens.append(tokens)
                self._counted[id(message)] = tokens
                if role == "user":
                    self._users.append(i)
                self._group_start.append(i)
                self._cum.append(self._cum[-1] + tokens)
                return
        try:
            message = plain_message(message)
            check_one(self._checker, message)  # what counting would reject, and JSON errors
        except BadMessage as exc:
            raise exc.at(len(self._msgs)) from None
        i = len(self._msgs)
        if isinstance(message, dict) and "reasoning_content" in message:
            conv = chat_to_internal([message], keep_reasoning=self.keep_reasoning)
            self._given[i] = message
            message = conv.messages[0]
            if isinstance(message, NativeMessage):
                message.start = i  # converted alone: its place in the whole conversation
            self._reasoning.update((i, text) for _, text in conv.reasoning)
            self._converted = True
        tokens = self._counter.message(message)
        role = message.get("role")
        self._parts = self._parts or isinstance(message.get("content"), list)
        # a tool result or reasoning: what the shrink ladder shrinks (the fast path holds
        # a cut only where it has nothing to shrink)
        self._shrinkable = self._shrinkable or is_tool_result(message) or has_reasoning(message)
        self._msgs.append(message)
        self._tokens.append(tokens)
        self._counted[id(message)] = tokens
        if role == "user":
            self._users.append(i)
        if not self._group_start and role in PINNED_ROLES and not is_summary_message(message):
            self._sys_end = i + 1
            return
        if self._group_start and joins_previous(self._msgs[i - 1], message):
            self._cum[-1] += tokens  # joins the group of its call
            return
        self._group_start.append(i)
        self._cum.append(self._cum[-1] + tokens)

    def extend(self, messages: Iterable[Message]) -> None:
        for m in messages:
            self.append(m)

    @property
    def messages(self) -> list[Message]:
        """Every message so far (a copy of the list; the dicts are shared)."""
        return [self._given.get(i, m) for i, m in enumerate(self._msgs)]

    def __len__(self) -> int:
        return len(self._msgs)

    def tokens(self) -> int:
        """Input tokens of the whole conversation, nothing dropped."""
        return self._counter.base(self.tools) + sum(self._tokens[: self._sys_end]) + self._cum[-1]

    # -- fitting ---------------------------------------------------------------------
    def _options(
        self, max_tokens: int | None, groups: dict[str, Any], overrides: dict[str, Any]
    ) -> tuple[FitOptions, Sequence[Chunk] | None, Summarizer | None]:
        opts, documents, summarizer = self._opts, None, self._summarizer
        if overrides or groups:  # (given_groups: a dict only where one was given)
            given = gather(
                "Conversation.fit()", overrides, groups, takes=("documents", "summarizer")
            )
            overrides, documents = given.options, given.chunks
            summarizer = given.summarizer or summarizer
        if overrides:
            options = {**self.options, **overrides}
            if max_tokens is not None:
                options["max_tokens"] = max_tokens
            opts = FitOptions.from_kwargs(options, where="Conversation.fit()")
        elif max_tokens is not None and type(max_tokens) is not int:
            opts = FitOptions.from_kwargs(
                {**self.options, "max_tokens": max_tokens}, where="Conversation.fit()"
            )
        elif type(max_tokens) is int:  # the chat loop's call: checked once per value
            opts = self._by_max_tokens.get(max_tokens) or self._by_max_tokens.setdefault(
                max_tokens,
                FitOptions.from_kwargs(
                    {**self.options, "max_tokens": max_tokens}, where="Conversation.fit()"
                ),
            )
        return opts, documents, summarizer

    def _full_layout(self, opts: FitOptions, documents: Sequence[Chunk] | None) -> FitLayout:
        return FitLayout(self._msgs, self.model, self.tools, opts, documents, index=self._index)

    def _bounds(self, opts: FitOptions) -> tuple[int, int, int, int] | None:
        """The layout's ``(sys_end, hist_start, pin_end, cur_start)`` from the counts kept,
        in O(1) where the conversation ends with a user message (the current turn) and
        no summary follows the system prompt: :class:`~tokenflex.fit.FitLayout`'s rules
        read from the indices kept at append (None: build the layout)."""
        msgs, n = self._msgs, len(self._msgs)
        sys_end = self._sys_end
        if not n or msgs[-1].get("role") != "user" or sys_end >= n - 1:
            return None
        first = msgs[sys_end]
        if first.get("role") == "system" and is_summary_message(first):
            return None
        cur = n - 1  # a user message is the newest group and opens the current turn
        pin_end = sys_end
        if opts.pin:
            users = self._users
            k = bisect.bisect_left(users, cur) - 1  # the users before the current turn
            if k >= 0:
                pin_end = users[min(opts.pin, k + 1) - 1] + 1
            if pin_end > sys_end and alternating_roles(self.model):
                return None  # the answers after the pinned question: the layout's rule
        return sys_end, sys_end, pin_end, cur

    def fit(
        self,
        *,
        max_tokens: int | None = None,
        documents: Sequence[Chunk] | Documents | None = None,
        summarize: Summarizer | Summarize | None = None,
        history: History | None = None,
        shrink: Shrink | None = None,
        cache: bool | CacheStable | None = None,
        fallback: Sequence[str] | Fallback | None = None,
        **overrides: Any,
    ) -> Plan:
        """Fit the conversation: O(log n) plus the kept messages, whatever the length.

        Takes what :func:`tokenflex.fit` takes (``documents``, ``summarize`` or
        ``summarizer``, the option groups, any :class:`~tokenflex.FitOptions` field by
        its flat name); keyword options override the ones given at construction for
        this call (a group sets the fields it was given).
        """
        started = time.perf_counter()
        # (a chat loop's call gives no group: no dict to build)
        groups = given_groups(history, documents, summarize, shrink, cache, fallback)
        opts = None
        if groups is None and not overrides and type(max_tokens) is int:
            # the chat loop's call: its options as read for that max_tokens before
            opts = self._by_max_tokens.get(max_tokens)
        chunks: Sequence[Chunk] | None = None
        if opts is not None:
            summarizer = self._summarizer
        else:
            opts, chunks, summarizer = self._options(max_tokens, groups or {}, overrides)
        if not chunks:
            grown = self._grown(opts, summarizer, started)
            if grown is not None:
                return grown
        layout = self._full_layout(opts, chunks)
        self._last = None  # set again below by a plan the fast path may extend
        if self.recall:
            rf = self._recall_fit(layout, summarizer)
            plan = fit_recalling(
                rf,
                lambda lay, mem, summ: fit_layout(
                    lay,
                    opts,
                    summarizer=summ,
                    started=started,
                    memory=mem,
                    summaries=self._summaries,
                    taken_out=TakenOut(self._reasoning) if self._reasoning else None,
                ),
            )
            return self._finish(plan, rf.tools)
        plan = fit_layout(
            layout,
            opts,
            summarizer=summarizer,
            started=started,
            memory=self._memory,
            summaries=self._summaries,
            taken_out=TakenOut(self._reasoning) if self._reasoning else None,
        )
        return self._remember(self._finish(plan), opts)

    def _grown(
        self, opts: FitOptions, summarizer: Summarizer | None, started: float
    ) -> Plan | None:
        """The previous plan plus the messages appended since, when nothing else changed
        (:func:`~tokenflex.engine.grown_plan`; O(the new messages)), else None."""
        last = self._last
        if (
            last is None
            or last[1] is not opts
            or last[2] is not self.tools
            or last[0].model is not self.model
            or summarizer is not None
            or self._reasoning
            or self._converted
            or self._parts
            or self.recall
        ):
            return None
        bounds = self._bounds(opts)
        if bounds is None:
            layout = self._full_layout(opts, None)
            if layout.summary_idx is not None:
                return None
            bounds = (layout.sys_end, layout.hist_start, layout.pin_end, layout.cur_start)
        tokens = self._tokens
        plan = grown_plan(
            last[0],
            last[3],
            self._msgs,
            lambda a, b: sum(tokens[a:b]),
            bounds,
            opts,
            self._memory,
            started,
            tools=self.tools,
            index=self._index,
            shrinkable=self._shrinkable,
            user_opens=False,  # (its layout never opens the history on the user's turn)
        )
        if plan is None:
            return None
        return self._remember(self._finish(plan), opts)

    def _remember(self, plan: Plan, opts: FitOptions) -> Plan:
        """Keep ``plan`` for the next fit's fast path."""
        self._last = (plan, opts, self.tools, len(self._msgs))
        return plan

    def _recall_fit(self, layout: FitLayout, summarizer: Summarizer | None) -> RecallFit:
        """A fit's steps with recall: O(1) to set up (the recaller reads only what a cut
        newly leaves out)."""
        from .state import default_store

        store = self.state if self.state is not None else default_store()
        given = self._given if self._converted else None
        recaller = Recaller(store, self._msgs, "chat", given)
        return RecallFit(layout, recaller, self._memory, summarizer, self.tools)

    def _finish(self, plan: Plan, tools: Sequence[Tool] | None = None) -> Plan:
        """The plan as fit() gives it back (the caller's own messages, tools attached)."""
        given_tools = tools if tools is not None else self.tools
        if not (self._converted or self._parts or given_tools):
            return plan  # plain chat dicts, no tools: as the engine made it
        conv = (
            Converted(
                "chat",
                cast("list[dict[str, Any]]", self._msgs),
                count=len(self._msgs),
            )
            if self._converted
            else None
        )
        notes: list[str] | None = None if self._parts else []  # string content: no estimate
        return finish(plan, Prepared(self._msgs, self.tools, given_tools, conv), notes)

    async def afit(
        self,
        *,
        max_tokens: int | None = None,
        documents: Sequence[Chunk] | Documents | None = None,
        summarize: Summarizer | Summarize | None = None,
        history: History | None = None,
        shrink: Shrink | None = None,
        cache: bool | CacheStable | None = None,
        fallback: Sequence[str] | Fallback | None = None,
        **overrides: Any,
    ) -> Plan:
        """Async twin of :meth:`fit`: counting and solving run in a worker thread, the
        summarizer is awaited."""
        started = time.perf_counter()
        groups = given_groups(history, documents, summarize, shrink, cache, fallback) or {}
        opts, documents, summarizer = self._options(max_tokens, groups, overrides)
        layout = self._full_layout(opts, documents)
        self._last = None  # the async path keeps no plan for the fast path
        if self.recall:
            # the counter may call a tokenizer server: never on the event loop
            rf = await asyncio.to_thread(self._recall_fit, layout, summarizer)
            plan = await afit_recalling(
                rf,
                lambda lay, mem, summ: afit_layout(
                    lay,
                    opts,
                    summarizer=summ,
                    started=started,
                    memory=mem,
                    summaries=self._summaries,
                    taken_out=TakenOut(self._reasoning) if self._reasoning else None,
                ),
            )
            return self._finish(plan, rf.tools)
        plan = await afit_layout(
            layout,
            opts,
            summarizer=summarizer,
            started=started,
            memory=self._memory,
            summaries=self._summaries,
            taken_out=TakenOut(self._reasoning) if self._reasoning else None,
        )
        return self._finish(plan)


def _recall_options(recall: Any, state: Any) -> tuple[bool, Any]:
    """``recall`` and ``state`` checked (each error names its argument)."""
    from .state import check_state_store

    if not isinstance(recall, bool):
        raise InvalidInputError(
            f"Conversation(): recall={recall!r} is not valid; use True or False."
        )
    check_state_store(state, "Conversation(): ")
    return recall, state
