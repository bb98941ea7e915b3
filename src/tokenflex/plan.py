"""The solver's result: what goes in, what was left out and why, and what it costs."""

from __future__ import annotations

import json
import logging
import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple, Protocol, overload

from . import cost as costs
from ._types import JSON
from .models import Model

__all__ = [
    "SENT_SHRUNK",
    "DropRun",
    "DroppedItem",
    "DroppedItems",
    "ItemSource",
    "Plan",
    "SummaryInfo",
    "log_dropped",
]


@dataclass(frozen=True, slots=True)
class DroppedItem:
    """One message, chunk or memory that is not in the plan."""

    section: str
    """Section it belonged to (``history``, ``documents``, ...)."""
    index: int
    """Its index in the caller's input (messages list, chunks list, ...)."""
    tokens: int
    """What it would have cost, counted like the kept ones."""
    reason: str
    """``budget`` (the hard window), ``share`` (the section's soft target), ``cap``,
    ``max_items``, ``orphan`` (history may not start with an answer whose question was
    dropped), ``summarized`` (replaced by the summary), ``duplicate``; cache-stable cuts:
    ``low_water`` (cut below what fits, so the next turns keep the prefix) and ``held``
    (the previous plan's cut, held while it fits). Shrunk but still sent: ``cleared``
    (an old tool result replaced by a placeholder) and ``reasoning`` (old reasoning
    removed; also a chat message's ``reasoning_content``, which is never sent back:
    section ``reasoning``); their ``tokens`` are the tokens that saved."""
    item: Any = field(default=None, repr=False, compare=False)
    """The dropped message or chunk itself."""


SENT_SHRUNK = ("cleared", "truncated", "reasoning")
"""The reasons of items sent shrunk, not left out whole: a dropped item of one of them
costs what shrinking it saved, which only the plan's copy of it tells."""


class DropRun(NamedTuple):
    """Items ``[start, stop)`` of a section's input, left out for one reason (a named
    tuple: a fit makes a few, and a tuple is made faster than a frozen dataclass)."""

    section: str
    start: int
    stop: int
    reason: str


def log_dropped(runs: Sequence[DropRun], model: str) -> None:
    """Nothing is dropped silently: one INFO line per run."""
    log = logging.getLogger("tokenflex")
    for r in runs:
        log.info(
            "tokenflex: dropped %s[%d:%d] (%d items, reason=%s) for %s",
            r.section,
            r.start,
            r.stop,
            r.stop - r.start,
            r.reason,
            model,
        )


class ItemSource(Protocol):
    """Where the dropped items of one section are read: a section of the engine, the
    reasoning taken out before it, or a converted request's own items."""

    def item(self, index: int) -> Any:
        """The input item at ``index``."""
        ...

    def item_tokens(self, index: int, item: Any, counter: Any) -> int:
        """What the input item at ``index`` costs, counted like the kept ones."""
        ...


class DroppedItems(Sequence[DroppedItem]):
    """Every dropped item, materialized on access.

    A 10,000-message conversation that keeps 200 drops 9,800 messages; building 9,800
    records (and counting their tokens) on every fit would make fitting O(history). The
    plan stores contiguous runs and looks up a dropped item's tokens only when you look at
    it: the count the fit already made, or (for history it never had to read) a count made
    once and kept. Each item is read from its section's :class:`ItemSource` (a dict by
    section name): reading ``k`` items costs O(k).
    """

    __slots__ = ("_costs", "_counter", "_len", "_runs", "_sources", "_starts")

    def __init__(
        self, runs: Sequence[DropRun], sources: Mapping[str, ItemSource], counter: Any
    ) -> None:
        self._sources = sources
        self._counter = counter
        self._costs: dict[tuple[str, int], int] = {}
        kept: list[DropRun] = []
        starts = []
        total = 0
        for r in runs:
            if r.stop > r.start:
                kept.append(r)
                starts.append(total)
                total += r.stop - r.start
        self._runs = tuple(kept)
        self._starts = starts
        self._len = total

    def __len__(self) -> int:
        return self._len

    def again(self) -> DroppedItems:
        """The same runs with nothing counted yet (a plan given again reads its dropped
        items as they are now)."""
        return DroppedItems(self._runs, self._sources, self._counter)

    @overload
    def __getitem__(self, i: int) -> DroppedItem: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[DroppedItem]: ...
    def __getitem__(self, i: int | slice) -> DroppedItem | Sequence[DroppedItem]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._len))]
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(i)
        import bisect

        r_idx = bisect.bisect_right(self._starts, i) - 1
        run = self._runs[r_idx]
        index = run.start + (i - self._starts[r_idx])
        item = self._sources[run.section].item(index)
        tokens = self._cost(run.section, index, item)
        return DroppedItem(run.section, index, tokens, run.reason, item)

    def _cost(self, section: str, index: int, item: Any) -> int:
        key = (section, index)
        tokens = self._costs.get(key)
        if tokens is None:
            source = self._sources[section]
            tokens = self._costs[key] = source.item_tokens(index, item, self._counter)
        return tokens

    def __iter__(self) -> Iterator[DroppedItem]:
        for j in range(self._len):
            yield self[j]

    def runs(self) -> list[tuple[str, int, int, str]]:
        """Contiguous runs as ``(section, start, stop, reason)``, cheap at any size."""
        return [(r.section, r.start, r.stop, r.reason) for r in self._runs]

    def source(self, section: str) -> ItemSource:
        """Where the items of ``section`` are read (a section of this plan's runs)."""
        return self._sources[section]

    @property
    def counter(self) -> Any:
        """The counter the items' tokens are counted with (the plan's model's)."""
        return self._counter

    def cost_of(self, section: str, index: int) -> int:
        """Tokens of item ``index`` of ``section`` (counted once, on first access), for
        an item of this plan's runs."""
        return self._cost(section, index, self._sources[section].item(index))

    def by_reason(self) -> dict[str, int]:
        """How many items were dropped for each reason."""
        out: dict[str, int] = {}
        for r in self._runs:
            out[r.reason] = out.get(r.reason, 0) + r.stop - r.start
        return out

    def __repr__(self) -> str:
        return f"DroppedItems({len(self)} items: {self.by_reason()})"


@dataclass(frozen=True, slots=True)
class SummaryInfo:
    """The summary that replaced part of the history."""

    text: str
    """The summary itself (without the prefix)."""
    covers: tuple[int, int]
    """Indices ``[start, stop)`` of the caller's messages the summary stands for."""
    tokens: int
    """Tokens of the summary message in the plan."""
    saved_tokens: int
    """Tokens of the covered messages minus the summary's."""
    summarizer: str
    """Which summarizer made it."""
    reused: bool = False
    """True when an earlier summary was reused (nothing newly aged out)."""
    facts_kept: tuple[str, ...] = ()
    """The covered span's facts the summary states (see
    :mod:`tokenflex.summarize.facts`)."""
    facts_missing: tuple[str, ...] = ()
    """The covered span's facts the summary does not state (with ``summary_facts=True``
    only those that did not fit the summary's budget)."""


_COMPUTED = ("cache_cost", "cost", "full_input_tokens", "savings")
"""What a :class:`Plan` computes on first access and keeps (its cached properties)."""


@dataclass(frozen=True)
class Plan:
    """A request that fits: messages to send, the output budget, and the accounting.

    Promise: ``input_tokens + max_tokens + safety_margin <= context_window`` and
    ``max_tokens >= min_output_tokens`` (or the request, if smaller).
    """

    messages: list[dict[str, Any]]
    """Messages ready to send, oldest first."""
    max_tokens: int
    """The output budget to send as ``max_tokens`` / ``max_completion_tokens``."""
    input_tokens: int
    """Tokens of the request's input, counted with the model's rules."""
    context_window: int
    """The model's window used for this plan."""
    safety_margin: int
    """Tokens kept free for counting error and formatting."""
    requested_max_tokens: int
    """The output request after clamping to the model's max output."""
    min_output_tokens: int
    """The output floor applied."""
    model: Model
    """The model planned for (a fallback model when the primary did not fit)."""
    sections: dict[str, int]
    """Tokens per section (``system``, ``history``, ``current``, ``tools``, ...)."""
    dropped: DroppedItems
    """Every item left out, with section, index, tokens and reason."""
    summary: SummaryInfo | None = None
    """The history summary, when one was used."""
    warnings: tuple[str, ...] = ()
    """Anything a person should know: output reduced, soft targets yielded, summarizer
    failed and the plan fell back to dropping, fallback model used, estimated counts."""
    exact: bool = True
    """True when counts come from the model's own tokenizer and chat format."""
    policy: str = "reserve"
    elapsed_ms: float = 0.0
    """Time fit() took."""
    fallback_from: str | None = None
    """The primary model's name when a fallback model was chosen."""
    extras: dict[str, Any] = field(default_factory=dict)
    """Extra per-plan data (document packing results, ...)."""
    format: str = "chat"
    """The format of ``messages``, the one fit() was given: ``chat``, ``anthropic``
    (Messages API) or ``responses`` (Responses API ``input`` items)."""
    system: Any = None
    """Anthropic's top-level ``system`` or the Responses ``instructions`` (with any
    summary or packed documents appended); None for chat, whose system is a message."""
    tools: tuple[Any, ...] = ()
    """The tool definitions counted (``request()`` sends them)."""
    prefix_tokens: int | None = None
    """Tokens of the leading messages this plan shares with the previous plan of the same
    conversation (None: no previous plan known; a cache-stable fit remembers one)."""
    cached_tokens: int | None = None
    """Of ``prefix_tokens``, those a provider is predicted to read from its prompt cache
    (none below the model's ``cache_min_tokens``)."""

    def evolved(self, **changes: Any) -> Plan:
        """A copy with ``changes``: ``dataclasses.replace`` without its per-field
        ``__init__`` (a fit's fast paths make one on every call). The changed values are
        not checked: they must be of the fields' types; what a plan computes on first
        access is computed again for the copy."""
        copy = object.__new__(Plan)
        fields = copy.__dict__
        fields.update(self.__dict__)
        for name in _COMPUTED:
            fields.pop(name, None)
        fields.update(changes)
        return copy

    @cached_property
    def cache_cost(self) -> Any:
        """Predicted input cost with the cached prefix (``tokenflex.cost.CacheCost``), or
        None without a previous plan."""
        if self.cached_tokens is None:
            return None
        return costs.cache_cost(self.model, self.input_tokens, self.cached_tokens)

    @property
    def utilization(self) -> float:
        """Share of the window the request may use: (input + max_tokens) / window."""
        return (self.input_tokens + self.max_tokens) / self.context_window

    @property
    def free_tokens(self) -> int:
        """Window left unused after input, output and margin."""
        return self.context_window - self.input_tokens - self.max_tokens - self.safety_margin

    @cached_property
    def cost(self) -> Any:
        """Estimated cost in USD of input plus the reserved output (``tokenflex.cost``)."""
        return costs.estimate_cost(self.model, self.input_tokens, self.max_tokens)

    @cached_property
    def full_input_tokens(self) -> int:
        """Input tokens had nothing been dropped or summarized (counted on first access:
        for a lazy history source, of the rows that were read)."""
        summary = self.summary.tokens if self.summary is not None else 0
        return self.input_tokens - summary + sum(d.tokens for d in self.dropped)

    @cached_property
    def savings(self) -> Any:
        """What trimming saved against sending everything (``tokenflex.cost.Savings``)."""
        return costs.savings(self.model, self.input_tokens, self.full_input_tokens)

    def sends_as_given(self, messages: Sequence[Any], system: Any, limits: Iterable[Any]) -> bool:
        """Whether this plan sends ``messages`` (the caller's own objects, in order) and
        ``system`` as they were given: nothing dropped or shrunk, no fallback model, and
        every output limit the caller set (``limits``, None where it set none) equal to
        the plan's ``max_tokens``. Such a request can go out byte for byte."""
        if self.fallback_from is not None or len(self.dropped):
            return False
        if self.system is not system and self.system != system:
            return False
        sent = self.messages
        if len(sent) != len(messages) or not all(map(operator.is_, sent, messages)):
            return False
        return all(limit in (None, self.max_tokens) for limit in limits)

    def request(self, *, api: str | None = None, **extra: Any) -> dict[str, Any]:
        """The request body for ``api`` (default: the plan's own format), plus ``extra``.

        ``chat``: ``messages`` and ``max_completion_tokens`` for o-series and gpt-5 models
        (``max_tokens`` otherwise); ``responses``: ``instructions``, ``input`` and
        ``max_output_tokens``; ``anthropic``: ``system``, ``messages`` and ``max_tokens``.
        The counted tools are included in the API's shape. Request fields you pass
        (``previous_response_id``, ``temperature``, ``stream``...) go in untouched.

        >>> import tokenflex
        >>> plan = tokenflex.fit([{"role": "user", "content": "Hi"}], model="gpt-4o",
        ...                      max_tokens=100)
        >>> plan.request(api="anthropic")
        {'model': 'gpt-4o', 'messages': [{'role': 'user', 'content': [{'type': 'text', \
'text': 'Hi'}]}], 'max_tokens': 100}
        """
        from .formats.request import request_body

        body = request_body(
            api or self.format,
            fmt=self.format,
            model=self.model.name,
            messages=self.messages,
            system=self.system,
            max_tokens=self.max_tokens,
            tools=self.tools,
        )
        return {**body, **extra}

    def to_dict(self, *, include_messages: bool = True, dropped_limit: int | None = 1000) -> JSON:
        """A JSON-ready dict. ``dropped_limit`` bounds the per-item list (runs are always
        complete)."""
        dropped = self.dropped if dropped_limit is None else self.dropped[:dropped_limit]
        cost = self.cost
        out: JSON = {
            "model": self.model.name,
            "context_window": self.context_window,
            "input_tokens": self.input_tokens,
            "max_tokens": self.max_tokens,
            "requested_max_tokens": self.requested_max_tokens,
            "min_output_tokens": self.min_output_tokens,
            "safety_margin": self.safety_margin,
            "free_tokens": self.free_tokens,
            "utilization": round(self.utilization, 4),
            "policy": self.policy,
            "exact": self.exact,
            "sections": dict(self.sections),
            "dropped_count": len(self.dropped),
            "dropped_by_reason": self.dropped.by_reason(),
            "dropped_runs": [
                {"section": s, "start": a, "stop": b, "reason": r}
                for s, a, b, r in self.dropped.runs()
            ],
            "dropped": [
                {"section": d.section, "index": d.index, "tokens": d.tokens, "reason": d.reason}
                for d in dropped
            ],
            "summary": None
            if self.summary is None
            else {
                "text": self.summary.text,
                "covers": list(self.summary.covers),
                "tokens": self.summary.tokens,
                "saved_tokens": self.summary.saved_tokens,
                "summarizer": self.summary.summarizer,
                "reused": self.summary.reused,
                "facts_kept": list(self.summary.facts_kept),
                "facts_missing": list(self.summary.facts_missing),
            },
            "warnings": list(self.warnings),
            "fallback_from": self.fallback_from,
            "full_input_tokens": self.full_input_tokens,
            "savings": self.savings.to_dict(),
            "cost_usd": None if cost is None else cost.to_dict(),
            "elapsed_ms": round(self.elapsed_ms, 3),
            "prefix_tokens": self.prefix_tokens,
            "cached_tokens": self.cached_tokens,
            "cache_cost_usd": None if self.cache_cost is None else self.cache_cost.to_dict(),
            "message_count": len(self.messages),
            "format": self.format,
        }
        if self.extras:
            out["extras"] = self.extras
        if include_messages:
            from .message.objects import plain

            out["messages"] = plain(self.messages)
            if self.system is not None:
                out["system"] = plain(self.system)
        return out

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(**kwargs), ensure_ascii=False, default=str)

    def __repr__(self) -> str:
        return (
            f"Plan(model={self.model.name!r}, input_tokens={self.input_tokens:,}, "
            f"max_tokens={self.max_tokens:,}, window={self.context_window:,}, "
            f"messages={len(self.messages)}, dropped={len(self.dropped)}, "
            f"summary={'yes' if self.summary else 'no'}, warnings={len(self.warnings)})"
        )
