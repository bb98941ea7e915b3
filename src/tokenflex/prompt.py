"""Prompt: a builder for multi-section prompts, fitted by the same solver as fit().

:func:`tokenflex.fit` knows one layout (system, summary, documents, history, current
turn). ``Prompt`` lets you lay out your own: add sections in the order they should appear
in the request, each with a priority, an optional minimum and cap in tokens,
``required``, and a way to shrink, then call :meth:`Prompt.fit`.

>>> from tokenflex import Prompt
>>> p = (
...     Prompt("gpt-4o", max_tokens=500)
...     .add("system", "You are a concise assistant.", required=True)
...     .add("memories", ["Likes tea.", "Lives in Lyon."], scores=[0.2, 0.9])
...     .add("current", [{"role": "user", "content": "Where do I live?"}], required=True)
... )
>>> plan = p.fit()
>>> [m["role"] for m in plan.messages]
['system', 'system', 'user']

**Sections.** ``content`` is a list of OpenAI-style message dicts (sent as they are), a
list of strings (joined into one message with ``role`` and an optional ``header``), or
one string (one item, or segments of it with ``shrink="truncate"``). Items are atomic:
an assistant message with ``tool_calls`` stays with its results.

**Shrinking** (optional sections; required ones are never shrunk):

- ``drop_oldest``: keep the newest items that fit, without gaps (history). The kept
  messages never start with an answer whose question was dropped (reason ``orphan``).
- ``drop_lowest``: keep the highest-``scores`` items that fit, skipping any that do not
  (memories, retrieved passages); without scores the given order is the importance
  order, most important first. Kept items appear in their input order.
- ``truncate``: keep the longest prefix of a text that fits, cut at a ``boundary``
  (``paragraph``, ``line``, ``sentence`` or ``word``); ``marker`` is appended when text
  was cut so the model knows.

**The promise** is fit()'s: ``input_tokens + max_tokens + safety_margin <= window``,
``max_tokens >= min_output_tokens`` and nothing required dropped, else
:class:`~tokenflex.errors.ContextOverflowError`. ``plan.input_tokens`` is the count of
the messages returned (joined text is counted as joined, not as the sum of its parts).

**Reasoning.** A message's ``reasoning_content`` is handled as :func:`tokenflex.fit`
handles it: taken out (the APIs that produce it reject or ignore it on input) and listed
in ``plan.dropped`` (section and reason ``reasoning``, ``index`` counting the messages of
the prompt's message sections in the order they were added), unless
``Prompt(..., keep_reasoning=True)``.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from ._types import Message, Tool
from .budget import SectionSpec
from .counting import MessageCounter
from .counting.shape import check_shapes
from .engine import (
    Layout,
    MessageSection,
    Section,
    SummaryTarget,
    TakenOut,
    afit_layout,
    fit_layout,
    history_section,
    stable_target,
)
from .errors import InvalidInputError, InvalidMessagesError
from .formats.chat import REASONING_FIELD, chat_to_internal
from .formats.native import NativeMessage
from .message.checks import BadMessage
from .message.objects import plain_message
from .models import Model, get_model
from .options import CacheStable, Fallback, FitOptions, Summarize, gather
from .options import Shrink as ShrinkOptions  # Shrink here is a section's mode
from .plan import DropRun, Plan
from .summarize import Summarizer, is_summary_message

if TYPE_CHECKING:
    from .recall import RecallFit
    from .state import StateStore

__all__ = ["PROMPT_OPTIONS", "Boundary", "Prompt", "Shrink", "segments"]

Shrink = Literal["drop_oldest", "drop_lowest", "truncate", "summarize"]
Boundary = Literal["paragraph", "line", "sentence", "word"]

# A cut is made before the delimiter, so a segment starts with the whitespace that
# separates it from the previous one (as BPE pieces do: " word"), the sum of the
# segments' tokens is the text's, and "".join(segments) is the text again.
_CUTS: dict[str, re.Pattern[str]] = {
    "paragraph": re.compile(r"(\n[ \t]*\n\s*)"),
    "line": re.compile(r"(\n)"),
    "sentence": re.compile(r"((?<=[.!?。！？])\s+|(?<=[。！？]))"),
    "word": re.compile(r"(\s+)"),
}


def segments(text: str, boundary: Boundary) -> list[str]:
    """``text`` cut at each ``boundary``; the segments join back to ``text``.

    >>> segments("One. Two! Three", "sentence")
    ['One.', ' Two!', ' Three']
    """
    try:
        pattern = _CUTS[boundary]
    except KeyError:
        raise InvalidInputError(
            f"boundary={boundary!r} is not valid; use one of {sorted(_CUTS)}."
        ) from None
    parts = pattern.split(text)  # [text, delimiter, text, delimiter, ..., text]
    out = [parts[0]] + [parts[i] + parts[i + 1] for i in range(1, len(parts) - 1, 2)]
    return [s for s in out if s]


@dataclass
class _Section:
    name: str
    order: int
    messages: list[Message] | None  # message sections
    texts: list[str] | None  # text sections (items joined into one message)
    required: bool
    priority: int
    min_tokens: int
    cap: int | None
    share: float | None
    min_items: int
    max_items: int | None
    shrink: Shrink
    scores: list[float] | None
    role: str
    header: str
    separator: str
    marker: str

    def source(self) -> list[Any]:
        return self.messages if self.messages is not None else self.texts or []


class TextSection(Section):
    """Strings joined into one message (``role``, ``header``, items, ``marker``).

    The message's envelope is the first item in keep order: required with the section,
    and for an optional section kept only while it fits (else the engine leaves the whole
    section out). Joined text may cost other than the sum of its parts, so the engine
    recounts the rendered message (``exact_render = False``).
    """

    exact_render = False
    role = "text"

    def __init__(self, s: _Section) -> None:
        self.s = s
        self.name = s.name
        self.may_leave_out = not s.required
        self.tokens: dict[int, int] = {}  # input index -> tokens
        self.order: list[int] = []  # keep order of input indices

    def spec(self, counter: MessageCounter, room: int) -> SectionSpec:
        s = self.s
        texts = s.texts or []
        sep = "" if s.shrink == "truncate" else s.separator
        self.tokens = {i: counter.text(sep + t) for i, t in enumerate(texts)}
        if s.shrink == "truncate":
            self.order = list(range(len(texts)))
        elif s.scores is not None:
            scores = s.scores
            self.order = sorted(range(len(texts)), key=lambda i: -scores[i])
        else:
            self.order = list(range(len(texts)))
        if s.required:
            # Every item is sent: count the message exactly as it will be sent.
            self.exact_render = True
            (message,) = self.render(tuple(range(len(texts) + 1)))
            return SectionSpec(s.name, [counter.message(message)], required=-1, priority=s.priority)
        head = s.header + s.separator if s.header else ""
        envelope = counter.message({"role": s.role, "content": head + s.marker})
        return SectionSpec(
            s.name,
            [envelope, *(self.tokens[i] for i in self.order)],
            required=-1 if s.required else 1,
            priority=s.priority,
            min_tokens=s.min_tokens,
            cap=s.cap,
            share=s.share,
            min_items=s.min_items + 1 if s.min_items else 0,
            max_items=None if s.max_items is None else s.max_items + 1,
            contiguous=s.shrink == "truncate",
            offset=1,
        )

    def _kept(self, kept: tuple[int, ...]) -> list[int]:
        if self.s.required:
            return list(range(len(self.s.texts or [])))
        return sorted(self.order[p - 1] for p in kept if p >= 1)

    def render(self, kept: tuple[int, ...]) -> list[Message]:
        s = self.s
        indices = self._kept(kept)
        if not indices:
            return []
        texts = s.texts or []
        head = s.header + s.separator if s.header else ""
        if s.shrink == "truncate":
            body = "".join(texts[i] for i in indices)
            if len(indices) < len(texts):
                body += s.marker
        else:
            body = s.separator.join(texts[i] for i in indices)
        return [{"role": s.role, "content": head + body}]

    def runs(self, alloc: Any) -> list[DropRun]:
        n = len(self.s.texts or [])
        if alloc is None:
            return [DropRun(self.name, 0, n, "budget")] if n else []
        reason_at: dict[int, str] = {}
        for d in alloc.dropped:
            if d.section != self.name:
                continue
            stop = len(self.order) + 1 if d.count is None else d.start + d.count
            for p in range(max(1, d.start), stop):
                reason_at.setdefault(self.order[p - 1], d.reason)
        kept = set(self._kept(alloc.kept.get(self.name, ())))
        out: list[DropRun] = []
        for i in range(n):
            if i in kept:
                continue
            reason = reason_at.get(i, "budget")
            if out and out[-1].stop == i and out[-1].reason == reason:
                out[-1] = DropRun(self.name, out[-1].start, i + 1, reason)
            else:
                out.append(DropRun(self.name, i, i + 1, reason))
        return out

    def item(self, index: int) -> Any:
        return (self.s.texts or [])[index]

    def item_tokens(self, index: int, item: Any, counter: MessageCounter) -> int:
        return self.tokens.get(index, 0)


_MODES = {"drop_oldest": "newest", "summarize": "newest", "drop_lowest": "ranked"}


@dataclass
class _PromptLayout:
    """A prompt's sections for the engine; ``summary`` stands for the summarized
    section's messages before ``recent_start``."""

    model: Model
    tools: Sequence[Tool] | None
    parts: list[_Section]
    summary: Message | None = None
    recent_start: int = 0
    recall: Any = None
    """A :class:`~tokenflex.recall.Recaller` of the history section (``fit(recall=True)``)."""

    def sections(self, model: Model) -> list[Section]:
        out: list[Section] = []
        for s in self.parts:
            if not s.source():
                continue
            if s.messages is None:
                out.append(TextSection(s))
                continue
            lo = 0
            if s.shrink == "summarize":
                if self.summary is not None:
                    out.append(
                        MessageSection("summary", [self.summary], 0, 1, priority=80, role="summary")
                    )
                    lo = self.recent_start
                elif is_summary_message(s.messages[0]):
                    out.append(
                        MessageSection("summary", s.messages, 0, 1, priority=80, role="summary")
                    )
                    lo = 1
            out.append(
                MessageSection(
                    s.name,
                    s.messages,
                    lo,
                    len(s.messages),
                    mode="all" if s.required else _MODES[s.shrink],  # type: ignore[arg-type]
                    priority=s.priority,
                    min_tokens=s.min_tokens,
                    cap=s.cap,
                    share=s.share,
                    min_items=s.min_items,
                    max_items=s.max_items,
                    scores=s.scores,
                    label=f"Section {s.name!r}: ",
                )
            )
        if self.recall is not None:  # the cut note and placeholders name recall ids
            hist = history_section(self, out)
            if hist is not None:
                hist.recall = self.recall
        return out

    def summary_target(self) -> SummaryTarget | None:
        s = next((s for s in self.parts if s.shrink == "summarize" and s.messages), None)
        if s is None or s.messages is None:
            return None
        previous = 0 if is_summary_message(s.messages[0]) else None
        lo = 1 if previous is not None else 0
        return SummaryTarget(s.name, s.messages, lo, len(s.messages), previous=previous)

    def with_summary(self, summary: Message, recent_start: int) -> Layout:
        return replace(self, summary=summary, recent_start=recent_start)


PROMPT_OPTIONS = (
    "policy",
    "min_output_tokens",
    "safety_margin",
    "max_input_tokens",
    "keep_recent",
    "summary_max_tokens",
    "summary_facts",
    "fallback_models",
    "fallback_input_share",
    "strict",
    "cache_stable",
    "low_water",
    "clear_tool_results",
    "keep_tool_results",
    "keep_tools",
    "drop_reasoning",
    "cut_note",
)
"""The :class:`~tokenflex.FitOptions` a :class:`Prompt` takes (the others describe
fit()'s own sections; a Prompt sets them per section)."""


class Prompt:
    """A multi-section prompt for one model; :meth:`fit` returns a :class:`~tokenflex.Plan`.

    Args:
        model: Model name or :class:`~tokenflex.Model`.
        max_tokens: Output request; None: the model's max output, else 4,000.
        tools: Tool schemas sent with the request (counted in the base cost).
        summarize: For a ``summarize`` section: a :class:`~tokenflex.Summarizer` or
            :class:`~tokenflex.Summarize` (``keep_recent``, ``max_tokens``, ``facts``);
            :meth:`fit`'s ``summarizer`` takes precedence.
        shrink: A :class:`~tokenflex.Shrink` (not ``truncate_tool_results``).
        cache: True or :class:`~tokenflex.CacheStable`: the history section's cut is
            held across fits (see :func:`tokenflex.fit`).
        fallback: Model names or :class:`~tokenflex.Fallback`.
        **options: The :class:`~tokenflex.FitOptions` that apply to a prompt
            (:data:`PROMPT_OPTIONS`) by their flat names: ``policy``,
            ``min_output_tokens``, ``safety_margin``, ``max_input_tokens``, ``strict``,
            and the groups' fields (``keep_recent``, ``fallback_models``, ...).
        keep_reasoning: Send messages' ``reasoning_content`` back (default: taken out
            and listed in ``plan.dropped``, section ``reasoning``, as fit() does).
    """

    def __init__(
        self,
        model: str | Model,
        *,
        max_tokens: int | None = None,
        tools: Sequence[Tool] | None = None,
        summarize: Summarizer | Summarize | None = None,
        shrink: ShrinkOptions | None = None,
        cache: bool | CacheStable | None = None,
        fallback: Sequence[str] | Fallback | None = None,
        keep_reasoning: bool = False,
        **options: Any,
    ) -> None:
        groups = {"summarize": summarize, "shrink": shrink, "cache": cache, "fallback": fallback}
        given = gather("Prompt()", options, groups, takes=("summarizer",), allowed=PROMPT_OPTIONS)
        self.options = FitOptions.from_kwargs(
            {"max_tokens": max_tokens, **given.options},
            where="Prompt()",
            allowed=("max_tokens", *PROMPT_OPTIONS),
        )
        self._summarizer = given.summarizer  # used when fit() is given none
        self.model = (
            model if isinstance(model, Model) else get_model(model, strict=self.options.strict)
        )
        self.tools = list(tools) if tools else None
        if not isinstance(keep_reasoning, bool):
            raise InvalidInputError(
                f"Prompt(): keep_reasoning={keep_reasoning!r} is not valid; use True or False."
            )
        self.keep_reasoning = keep_reasoning
        self._sections: list[_Section] = []
        self._reasoning: list[tuple[int, str]] = []  # (index, text) taken out (fit()'s rule)
        self._n_messages = 0  # messages in message sections so far: reasoning's index base

    @property
    def max_tokens(self) -> int | None:
        return self.options.max_tokens

    def add(
        self,
        name: str,
        content: str | Sequence[str] | Sequence[Message],
        *,
        required: bool = False,
        priority: int = 0,
        shrink: Shrink | None = None,
        min_tokens: int = 0,
        cap: int | None = None,
        share: float | None = None,
        min_items: int = 0,
        max_items: int | None = None,
        scores: Sequence[float] | None = None,
        role: str = "system",
        header: str = "",
        separator: str = "\n\n",
        boundary: Boundary = "sentence",
        marker: str = "\n[truncated]",
    ) -> Prompt:
        """Add a section; sections appear in the request in the order they are added.

        Args:
            name: Section name, unique (``system``, ``memories``, ``history``, ...).
            content: Message dicts, strings, or one string.
            required: Every item must fit, or fit() raises.
            priority: Higher priorities fill first (required items always come first).
            shrink: How an optional section gives way: ``drop_oldest`` (default for
                messages), ``summarize`` (messages: like ``drop_oldest``, but when
                :meth:`fit` is given a summarizer, the older messages are replaced by a
                summary; one section per prompt), ``drop_lowest`` (default for strings)
                or ``truncate`` (one string, cut at ``boundary``).
            min_tokens: Room reserved for this section against higher priorities.
            cap: Most tokens the section may take.
            share: Soft target share of the room left at its turn (yields to
                ``min_items`` and to the hard window).
            min_items: Keep at least this many items if the window allows.
            max_items: Keep at most this many items.
            scores: Per-item relevance for ``drop_lowest`` (higher is kept first).
            role: Role of the message that carries string items.
            header: Text put before string items in their message.
            separator: Between string items.
            boundary: Where ``truncate`` may cut.
            marker: Appended to a truncated text.

        Returns:
            The prompt, for chaining.
        """
        _check_section(
            self, name, required, shrink, priority, min_tokens, cap, share, min_items, max_items
        )
        msgs: list[Message] | None = None
        texts: list[str] | None = None
        reasoning: list[tuple[int, str]] = []
        if isinstance(content, str):
            if shrink == "truncate":
                texts = segments(content, boundary)
            else:
                texts = [content] if content else []
        elif isinstance(content, Sequence) and all(isinstance(x, str) for x in content):
            texts = [str(x) for x in content if x]
            if shrink == "truncate":
                raise InvalidInputError(
                    f"Section {name!r}: shrink='truncate' cuts one string; pass a str."
                )
        elif (
            isinstance(content, Sequence)
            and not isinstance(content, bytes)
            and not any(isinstance(x, str) for x in content)
        ):
            try:  # every message, kept or not, once here (counting is lazy)
                msgs = []  # SDK, pydantic and LangChain messages as the chat dicts they are
                for i, m in enumerate(content):
                    try:
                        msgs.append(plain_message(m))
                    except BadMessage as exc:
                        raise exc.at(i) from None
                check_shapes(msgs, self.model)
            except BadMessage as exc:
                raise InvalidMessagesError(f"Section {name!r}: {exc}") from None
            if shrink == "truncate":
                raise InvalidInputError(
                    f"Section {name!r}: shrink='truncate' cuts a string, not messages."
                )
            msgs, reasoning = self._without_reasoning(msgs)
        else:
            raise InvalidInputError(
                f"Section {name!r}: content must be a str, a list of str or a list of "
                "message dicts."
            )
        if shrink == "summarize" and msgs is None:
            raise InvalidInputError(
                f"Section {name!r}: shrink='summarize' summarizes messages; pass message dicts."
            )
        n = len(msgs) if msgs is not None else len(texts or [])
        if scores is not None:
            if isinstance(scores, str | bytes | Mapping) or not isinstance(scores, Sequence):
                raise InvalidInputError(
                    f"Section {name!r}: scores must be a list of {n} numbers, one per item; "
                    f"got {type(scores).__name__}."
                )
            bad = [x for x in scores if not _finite(x)]
            if len(scores) != n or bad:
                raise InvalidInputError(
                    f"Section {name!r}: scores must be {n} finite numbers, one per item; got "
                    f"{len(scores)}" + (f" with {bad[0]!r:.40}" if bad else "") + "."
                )
        default: Shrink = "drop_oldest" if msgs is not None else "drop_lowest"
        if msgs is not None:  # the section is added: its reasoning is taken out
            self._reasoning += [(self._n_messages + i, text) for i, text in reasoning]
            self._n_messages += len(msgs)
        self._sections.append(
            _Section(
                name=name,
                order=len(self._sections),
                messages=msgs,
                texts=texts,
                required=required,
                priority=priority,
                min_tokens=min_tokens,
                cap=cap,
                share=share,
                min_items=min_items,
                max_items=max_items,
                shrink=shrink or default,
                scores=[float(x) for x in scores] if scores is not None else None,
                role=role,
                header=header,
                separator=separator,
                marker=marker if shrink == "truncate" else "",
            )
        )
        return self

    def _without_reasoning(
        self, msgs: list[Message]
    ) -> tuple[list[Message], list[tuple[int, str]]]:
        """``msgs`` with ``reasoning_content`` taken out as fit() takes it out
        (:func:`~tokenflex.formats.chat.chat_to_internal`), and ``(index, text)`` of each
        one taken out; unchanged with ``keep_reasoning=True``."""
        if self.keep_reasoning or not any(
            isinstance(m, Mapping) and REASONING_FIELD in m for m in msgs
        ):
            return msgs, []
        conv = chat_to_internal(msgs, keep_reasoning=False)
        out: list[Message] = [
            m.native[0] if isinstance(m, NativeMessage) else m for m in conv.messages
        ]
        return out, conv.reasoning

    def _finish(self, plan: Plan, tools: Sequence[Tool] | None = None) -> Plan:
        """``plan`` with recall's tools to send (the prompt's, then ``tokenflex_recall``)."""
        return plan if tools is None else replace(plan, tools=tuple(tools))

    # -- fitting -----------------------------------------------------------------------
    def _layout(self) -> _PromptLayout:
        return _PromptLayout(self.model, self.tools, list(self._sections))

    def _taken_out(self) -> TakenOut | None:
        """The reasoning taken out of the message sections, for the plan to list."""
        return TakenOut(dict(self._reasoning)) if self._reasoning else None

    def _session(self, state: Any) -> dict[str, Any]:
        """Where a cache-stable prompt keeps its cut and summaries (nothing: off)."""
        if not self.options.cache_stable:
            return {}
        from .session import StoreMemory
        from .state import default_store
        from .state.tenant import tenant_view

        layout = self._layout()
        target = stable_target(layout, self.model)
        store = tenant_view(state if state is not None else default_store())
        if target is None:
            return {"summaries": store}
        return {"memory": StoreMemory(store, self.model.name, target.source), "summaries": store}

    def _recall_fit(
        self, layout: _PromptLayout, state: Any, session: dict[str, Any], summ: Any
    ) -> RecallFit | None:
        """The steps of a fit with recall for the prompt's history section (the
        ``summarize`` one, else the first ``drop_oldest`` message section); None when
        there is none."""
        from .recall import Recaller, RecallFit
        from .state import default_store

        target = stable_target(layout, self.model)
        if target is None:
            return None
        store = state if state is not None else default_store()
        recaller = Recaller(store, target.source, "chat", sections=(target.section,))
        return RecallFit(layout, recaller, session.get("memory"), summ, self.tools)

    def fit(
        self,
        *,
        summarizer: Summarizer | None = None,
        state: StateStore | None = None,
        recall: bool = False,
    ) -> Plan:
        """Fit the sections into the model's window.

        Args:
            summarizer: For a ``summarize`` section that does not fit whole: its older
                messages are summarized (the last ``keep_recent`` stay verbatim).
            state: With ``cache_stable=True``: the state store that remembers where the
                history section was last cut (default: the process's in-memory store);
                a :class:`~tokenflex.state.TenantStore` keeps one user's apart. With
                ``recall=True``: where what the plan left out is kept.
            recall: As :func:`tokenflex.fit`'s: the history section's messages the plan
                drops, summarizes or clears are kept in ``state`` under ids that the cut
                note, summary and placeholders name, and the plan gains the counted
                ``tokenflex_recall`` tool (in ``plan.tools``, after the prompt's own)
                when something is left out. Other sections' items are not kept.

        Raises:
            ContextOverflowError: the required sections plus the output floor do not fit
                (and no fallback model can take them).
        """
        from .recall import fit_recalling

        started = time.perf_counter()
        summarizer = summarizer if summarizer is not None else self._summarizer
        layout = self._layout()
        session = self._session(state)
        rf = self._recall_fit(layout, state, session, summarizer) if _flag(recall) else None
        if rf is None:
            plan = fit_layout(
                layout,
                self.options,
                summarizer=summarizer,
                started=started,
                taken_out=self._taken_out(),
                **session,
            )
            return self._finish(plan)
        plan = fit_recalling(
            rf,
            lambda lay, mem, summ: fit_layout(
                lay,
                self.options,
                summarizer=summ,
                started=started,
                memory=mem,
                summaries=session.get("summaries"),
                taken_out=self._taken_out(),
            ),
        )
        return self._finish(plan, rf.tools)

    async def afit(
        self,
        *,
        summarizer: Summarizer | None = None,
        state: StateStore | None = None,
        recall: bool = False,
    ) -> Plan:
        """Async twin of :meth:`fit`: counting and solving run in a worker thread, the
        summarizer is awaited."""
        import asyncio

        from .recall import afit_recalling

        started = time.perf_counter()
        summarizer = summarizer if summarizer is not None else self._summarizer
        layout = self._layout()
        session = self._session(state)
        rf = None
        if _flag(recall):  # the counter may call a tokenizer server: never on the event loop
            rf = await asyncio.to_thread(self._recall_fit, layout, state, session, summarizer)
        if rf is None:
            plan = await afit_layout(
                layout,
                self.options,
                summarizer=summarizer,
                started=started,
                taken_out=self._taken_out(),
                **session,
            )
            return self._finish(plan)
        plan = await afit_recalling(
            rf,
            lambda lay, mem, summ: afit_layout(
                lay,
                self.options,
                summarizer=summ,
                started=started,
                memory=mem,
                summaries=session.get("summaries"),
                taken_out=self._taken_out(),
            ),
        )
        return self._finish(plan, rf.tools)

    @property
    def sections(self) -> list[str]:
        """Section names in request order."""
        return [s.name for s in self._sections]

    def __repr__(self) -> str:
        return f"Prompt({self.model.name!r}, sections={self.sections})"


_SHRINKS = ("drop_oldest", "drop_lowest", "truncate", "summarize")


def _flag(recall: Any) -> bool:
    if not isinstance(recall, bool):
        raise InvalidInputError(f"Prompt.fit(): recall={recall!r} is not valid; use True or False.")
    return recall


def _finite(x: Any) -> bool:
    """A real number that converts to a finite float (not a bool, NaN, inf or 10**400)."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return False
    try:
        return math.isfinite(float(x))
    except OverflowError:
        return False


def _check_section(
    prompt: Prompt,
    name: str,
    required: bool,
    shrink: Any,
    priority: Any,
    min_tokens: Any,
    cap: Any,
    share: Any,
    min_items: Any,
    max_items: Any,
) -> None:
    """Every argument of :meth:`Prompt.add` checked, each error naming its argument."""

    def bad(arg: str, value: Any, valid: str) -> InvalidInputError:
        return InvalidInputError(f"Section {name!r}: {arg}={value!r} is not valid; {valid}.")

    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"Section name must be a non-empty str, got {name!r}.")
    if any(s.name == name for s in prompt._sections):
        raise InvalidInputError(f"Section {name!r} was added twice; names are unique.")
    if required and shrink is not None:
        raise InvalidInputError(
            f"Section {name!r}: a required section is never shrunk; drop shrink= or required=True."
        )
    if shrink is not None and shrink not in _SHRINKS:
        raise bad("shrink", shrink, "use one of " + ", ".join(repr(x) for x in _SHRINKS))
    if shrink == "summarize" and any(s.shrink == "summarize" for s in prompt._sections):
        raise bad("shrink", shrink, "only one section per prompt may be summarized")
    if not is_int(priority):
        raise bad("priority", priority, "use an int")
    for arg, value in (("min_tokens", min_tokens), ("min_items", min_items)):
        if not is_int(value) or value < 0:
            raise bad(arg, value, "use an int >= 0")
    for arg, value in (("cap", cap), ("max_items", max_items)):
        if value is not None and (not is_int(value) or value < 0):
            raise bad(arg, value, "use an int >= 0 or None")
    if share is not None and (
        isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1
    ):
        raise bad("share", share, "use a number in (0, 1] or None")
