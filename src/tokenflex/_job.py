"""One fitting job: the message list laid out in sections, solved, turned into a Plan.

:func:`tokenflex.fit` and :class:`tokenflex.Conversation` both build a ``_Job``: it
knows where each section sits (``_Layout``), counts what is required, packs documents,
hands the sections to the pure solver (:mod:`tokenflex.budget`) and builds the frozen
:class:`~tokenflex.plan.Plan` from the allocation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._types import Message, Tool
from .budget import Allocation, BudgetSpec, SectionSpec, solve
from .counting import MessageCounter, get_counter
from .errors import InvalidMessagesError
from .history import iter_groups
from .models import Model
from .options import FitOptions
from .plan import DroppedItems, Plan, SummaryInfo, _DropRun, _log_dropped
from .summarize import is_summary_message

log = logging.getLogger("tokenflex")

_PINNED = ("system", "developer")


def _check_messages(messages: Any) -> Sequence[Message]:
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidMessagesError(
            f"messages must be a list of message dicts, got {type(messages).__name__}. "
            'Pass [{"role": "user", "content": "..."}].'
        )
    return messages


def output_request(
    model: Model, max_tokens: int | None, counter: MessageCounter, warnings: list[str]
) -> int:
    """The output request clamped to the model's max output (None: that max, else
    4,000); appends the warnings a plan for ``model`` carries from the start."""
    request = max_tokens if max_tokens is not None else (model.max_output_tokens or 4000)
    if model.max_output_tokens is not None and request > model.max_output_tokens:
        warnings.append(
            f"max_tokens={request:,} is above {model.name}'s max output "
            f"{model.max_output_tokens:,}; requested {model.max_output_tokens:,}."
        )
        request = model.max_output_tokens
    if not counter.exact:
        warnings.append(
            f"{model.name}: counts are conservative estimates (no exact tokenizer or chat "
            "format registered)."
        )
    return request


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
        self.request = output_request(self.model, self.opts.max_tokens, self.counter, self.warnings)

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
        from .documents import pack_chunks

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

        _log_dropped(runs, self.model.name)
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
