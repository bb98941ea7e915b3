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

import time
from collections.abc import Iterable, Sequence
from typing import Any

from ._types import Message, Tool
from .counting import get_counter
from .counting.checks import BadMessage
from .counting.shape import check_one, shape_checker
from .engine import GroupIndex, afit_layout, fit_layout
from .fit import PINNED_ROLES, FitLayout
from .models import Model, get_model
from .options import FitOptions
from .plan import Plan
from .session import ObjectMemory
from .state import MemoryStore
from .summarize import is_summary_message

__all__ = ["Conversation"]


class Conversation:
    """Messages plus the running counts that make re-fitting cheap.

    The caller's dicts are kept by reference, never modified. Options given here are
    defaults for every :meth:`fit`; keyword arguments to :meth:`fit` override them.

    Plans are cache-stable by default (``cache_stable=True``): when history must be cut,
    it is cut down to ``low_water`` of its room and that cut is held while it fits, so
    consecutive requests share a prefix a provider's prompt cache can reuse; each plan
    reports it in ``prefix_tokens``. Pass ``cache_stable=False`` to keep as much history
    as fits on every fit.
    """

    def __init__(
        self,
        messages: Iterable[Message] = (),
        *,
        model: str | Model,
        tools: Sequence[Tool] | None = None,
        **options: Any,
    ) -> None:
        options = {"cache_stable": True, **options}
        self._opts = FitOptions.from_kwargs(options, where="Conversation()")
        self._memory = ObjectMemory()  # the previous plan: cache-stable cuts, prefix_tokens
        self._summaries = MemoryStore(max_bytes=4 * 1024 * 1024)
        self._by_max_tokens: dict[int, FitOptions] = {}
        self.model = get_model(model, strict=self._opts.strict)
        self.tools = tools
        self.options = dict(options)
        self._counter = get_counter(self.model)
        self._checker = shape_checker(self.model)
        self._msgs: list[Message] = []
        self._tokens: list[int] = []  # per message
        self._sys_end = 0
        self._group_start: list[int] = []  # index of each group's first message
        self._cum: list[int] = [0]  # _cum[g] = tokens of groups [0, g)
        # the engine's view of the running counts (it holds the lists, which only grow)
        self._index = GroupIndex(self.model, self._group_start, self._cum, self._tokens)
        self.extend(messages)

    # -- growing ---------------------------------------------------------------------
    def append(self, message: Message) -> None:
        """Add one message: counted once, here."""
        try:
            check_one(self._checker, message)  # what counting would reject, and JSON errors
        except BadMessage as exc:
            raise exc.at(len(self._msgs)) from None
        tokens = self._counter.message(message)
        role = message.get("role")
        i = len(self._msgs)
        self._msgs.append(message)
        self._tokens.append(tokens)
        if not self._group_start and role in PINNED_ROLES and not is_summary_message(message):
            self._sys_end = i + 1
            return
        if role in ("tool", "function") and self._group_start:
            prev = self._msgs[i - 1]
            if prev.get("role") in ("tool", "function") or (
                prev.get("role") == "assistant"
                and (prev.get("tool_calls") or prev.get("function_call"))
            ):
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
        return list(self._msgs)

    def __len__(self) -> int:
        return len(self._msgs)

    def tokens(self) -> int:
        """Input tokens of the whole conversation, nothing dropped."""
        return self._counter.base(self.tools) + sum(self._tokens[: self._sys_end]) + self._cum[-1]

    # -- fitting ---------------------------------------------------------------------
    def _layout(
        self, max_tokens: int | None, documents: Sequence[Any] | None, overrides: dict[str, Any]
    ) -> tuple[FitLayout, FitOptions]:
        opts = self._opts
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
        layout = FitLayout(self._msgs, self.model, self.tools, opts, documents, index=self._index)
        return layout, opts

    def fit(
        self,
        *,
        max_tokens: int | None = None,
        summarizer: Any = None,
        documents: Sequence[Any] | None = None,
        **overrides: Any,
    ) -> Plan:
        """Fit the conversation: O(log n) plus the kept messages, whatever the length.

        Takes what :func:`tokenflex.fit` takes (``summarizer``, ``documents``, any
        :class:`~tokenflex.FitOptions` field); keyword options override the ones given
        at construction for this call.
        """
        started = time.perf_counter()
        layout, opts = self._layout(max_tokens, documents, overrides)
        return fit_layout(
            layout,
            opts,
            summarizer=summarizer,
            started=started,
            memory=self._memory,
            summaries=self._summaries,
        )

    async def afit(
        self,
        *,
        max_tokens: int | None = None,
        summarizer: Any = None,
        documents: Sequence[Any] | None = None,
        **overrides: Any,
    ) -> Plan:
        """Async twin of :meth:`fit`: counting and solving run in a worker thread, the
        summarizer is awaited."""
        started = time.perf_counter()
        layout, opts = self._layout(max_tokens, documents, overrides)
        return await afit_layout(
            layout,
            opts,
            summarizer=summarizer,
            started=started,
            memory=self._memory,
            summaries=self._summaries,
        )
