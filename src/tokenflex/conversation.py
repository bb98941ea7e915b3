"""A growing conversation that re-fits in O(new message).

:func:`tokenflex.fit` on a plain list walks the kept history newest → oldest, with every
count cached: O(kept messages) dictionary lookups. A chat loop that re-fits after every
turn can do better: :class:`Conversation` counts each message once, on ``append``, keeps
running sums per atomic group, and lets the solver bisect them.

>>> from tokenflex import Conversation
>>> conv = Conversation([{"role": "system", "content": "Be brief."}], model="gpt-4o")
>>> conv.append({"role": "user", "content": "Hi!"})
>>> plan = conv.fit(max_tokens=500)
>>> len(plan.messages), plan.max_tokens
(2, 500)
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ._job import _PINNED, _Job, _Layout
from ._types import Message, Tool
from .budget import SectionSpec, solve
from .counting import get_counter
from .errors import InvalidMessagesError
from .fit import fit
from .models import Model, get_model
from .options import FitOptions, _options
from .plan import Plan
from .summarize import is_summary_message

__all__ = ["Conversation"]


class _NewestFirst(Sequence[int]):
    """``view[k]`` = tokens of the ``k`` newest groups before ``hi``."""

    __slots__ = ("_cum", "_hi")

    def __init__(self, cum: list[int], hi: int) -> None:
        self._cum, self._hi = cum, hi

    def __len__(self) -> int:
        return self._hi + 1

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):  # pragma: no cover - bisect only indexes
            return [self[i] for i in range(*k.indices(len(self)))]
        return self._cum[self._hi] - self._cum[self._hi - k]

    def __iter__(self) -> Iterator[int]:
        return (self[i] for i in range(len(self)))


class Conversation:
    """Messages plus the running counts that make re-fitting cheap.

    The caller's dicts are kept by reference, never modified. Options given here are
    defaults for every :meth:`fit`; keyword arguments to :meth:`fit` override them.
    """

    def __init__(
        self,
        messages: Iterable[Message] = (),
        *,
        model: str | Model,
        tools: Sequence[Tool] | None = None,
        **options: Any,
    ) -> None:
        self.model = get_model(model, strict=bool(options.get("strict", False)))
        self.tools = tools
        self.options = dict(options)
        self._opts = _options(self.options)  # validated once, reused by fit()
        self._counter = get_counter(self.model)
        self._msgs: list[Message] = []
        self._sys_end = 0
        self._group_start: list[int] = []  # index of each group's first message
        self._cum: list[int] = [0]  # _cum[g] = tokens of groups [0, g)
        self._last_user_group = -1
        self.extend(messages)

    # -- growing ---------------------------------------------------------------------
    def append(self, message: Message) -> None:
        """Add one message: counted once, here."""
        if not isinstance(message, Mapping):
            raise InvalidMessagesError(
                f"Conversation.append() takes a message dict, got {type(message).__name__}."
            )
        tokens = self._counter.message(message)
        role = message.get("role")
        i = len(self._msgs)
        self._msgs.append(message)
        if not self._group_start and role in _PINNED and not is_summary_message(message):
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
        if role == "user":
            self._last_user_group = len(self._group_start) - 1

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
        return (
            self._counter.base(self.tools)
            + sum(self._counter.message(m) for m in self._msgs[: self._sys_end])
            + self._cum[-1]
        )

    # -- fitting ---------------------------------------------------------------------
    def fit(
        self, *, max_tokens: int | None = None, summarizer: Any = None, **overrides: Any
    ) -> Plan:
        """Fit the conversation; O(log n) plus the new messages when nothing forces the
        general path (a summarizer, fallback models, or a summary message in the list)."""
        options = {**self.options, **overrides}
        if max_tokens is not None:
            options["max_tokens"] = max_tokens
        # options given at construction were validated once there
        opts = self._opts if not overrides and max_tokens is None else _options(options)
        has_summary = self._sys_end < len(self._msgs) and is_summary_message(
            self._msgs[self._sys_end]
        )
        if summarizer is not None or opts.fallback_models or has_summary or not self._group_start:
            return fit(
                self._msgs, model=self.model, tools=self.tools, summarizer=summarizer, **options
            )
        return self._fast_fit(opts)

    def _fast_fit(self, opts: FitOptions) -> Plan:
        started = time.perf_counter()
        cg = self._last_user_group if self._last_user_group >= 0 else len(self._group_start) - 1
        lay = _Layout(self._msgs, self._sys_end, None, self._sys_end, self._group_start[cg])
        job = _Job(self._msgs, self.model, self.tools, opts, started, layout=lay)
        cost = self._counter.message
        system = [cost(m) for m in self._msgs[: self._sys_end]]
        current = self._cum[-1] - self._cum[cg]
        sections = [
            SectionSpec("system", system, required=-1, priority=100),
            SectionSpec("current", [current], required=-1, priority=90),
            SectionSpec(
                "history",
                (),
                priority=10,
                share=opts.history_share,
                min_items=opts.min_messages,
                max_items=opts.max_messages,
                contiguous=True,
                cumulative=_NewestFirst(self._cum, cg),
            ),
        ]
        alloc = solve(sections, job.spec(self._counter.base(self.tools)), model=self.model.name)
        k = len(alloc.kept["history"])
        kept_start = self._group_start[cg - k] if k else lay.cur_start
        reason = next((d.reason for d in alloc.dropped if d.section == "history"), None)
        return job.plan(self._msgs, lay, alloc, kept_start, reason)
