"""The summary step: after the first pass, what to summarize, and the plan with the
summary standing for the history the pass cut (:class:`Outcome`), with the summary's
key in a state store (:func:`summary_key`).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .._types import Message
from ..cost import cached_tokens
from ..errors import ContextOverflowError
from ..history import iter_groups
from ..options import FitOptions
from ..plan import DropRun, Plan, SummaryInfo
from ..session import HistoryCut, SessionMemory
from ..summarize import summary_message
from ..summarize.facts import fact_report
from .ladder import solve_history
from .layout import Layout, history_section, stable_target
from .passes import Pass, TakenOut, build_plan

__all__ = ["SUMMARY_TTL_S", "Outcome", "SummaryRequest", "summarizer_name", "summary_key"]

log = logging.getLogger("tokenflex")


@dataclass
class SummaryRequest:
    span: list[Message]
    """What the summarizer reads (after ``previous``)."""
    span_start: int
    recent_start: int
    previous: str | None
    max_tokens: int
    key: str = ""
    """The summary's key in the state store: what it covers and how it is made."""
    sent: list[Message] = field(default_factory=list)
    """Messages sent beside the summary (the opening and the recent ones): a fact they
    state needs no carrying in the summary."""
    rolled_before: int | None = None
    """Where the stored summary this one rolls forward ends (``previous`` is its text)."""


@dataclass
class Outcome:
    """The first pass (after any fallback), and the summary step that may follow it."""

    layout: Layout
    first: Pass
    opts: FitOptions
    started: float
    fallback_from: str | None = None
    cut: HistoryCut | None = None
    """Where the first pass cut the history (cache-stable or shrinking fits)."""
    memory: SessionMemory | None = None
    previous: HistoryCut | None = None
    """Where the conversation's previous plan cut it."""
    taken_out: TakenOut | None = None
    """The reasoning taken out before the engine (listed in every plan made here)."""
    request: SummaryRequest | None = field(default=None, init=False)

    def plan(self) -> Plan:
        return build_plan(
            self.first,
            opts=self.opts,
            started=self.started,
            fallback_from=self.fallback_from,
            taken_out=self.taken_out,
            prefix=functools.partial(self._remember, cut=self.cut),
        )

    def remembered(self, plan: Plan, cut: HistoryCut | None) -> Plan:
        """``plan`` with the prefix it shares with the conversation's previous plan, and
        this plan recorded as the previous one."""
        prefix = self._remember(plan.messages, plan.input_tokens, cut=cut)
        if prefix is None:
            return plan
        return replace(plan, prefix_tokens=prefix, cached_tokens=cached_tokens(plan.model, prefix))

    def _remember(
        self, messages: Sequence[Message], input_tokens: int, *, cut: HistoryCut | None
    ) -> int | None:
        """Record a plan of ``messages`` as the conversation's previous one; the tokens of
        the prefix it shares with the plan before (None: no memory, or no plan before)."""
        if self.memory is None:
            return None
        target = stable_target(self.layout, self.first.model)
        if target is None:
            return None
        if cut is None:
            hist = history_section(self.layout, self.first.sections)
            kept = () if hist is None else self.first.alloc.kept.get(hist.name, ())
            before = self.previous if self.previous is not None else HistoryCut(0)
            cut = HistoryCut(
                target.hi if hist is None else hist.first_kept(kept),
                end=max(before.end, target.hi),
                growth=before.growth,
                grown=before.grown,
            )
        cut = cut._replace(at=time.time(), input_tokens=input_tokens)
        return self.memory.remember(target.source, cut, messages, self.first.counter)

    def summary_request(self, summarizer: Any, summaries: Any = None) -> SummaryRequest | None:
        """What to summarize, or None. With a store of ``summaries``, a span summarized
        before is found by its key; a cache-stable fit rolls the previous summary
        forward over what the cut newly left out."""
        target = self.layout.summary_target()
        if summarizer is None or target is None or self.first.dropped_from(target.section) is None:
            return None
        from ..summarize import SUMMARY_PREFIX

        src = target.source
        # The last keep_recent messages stay verbatim, counting the current turn, and the
        # boundary moves back to a whole group so tool results keep their call.
        want = max(0, self.opts.keep_recent - target.tail)
        recent_start, taken = target.hi, 0
        for start, stop, _ in iter_groups(src, target.lo, target.hi, lambda _m: 0):
            if taken >= want:
                break
            taken += stop - start
            recent_start = start
        if self.opts.cache_stable and self.cut is not None:
            # The summary covers what the stable cut left out, so it stays the same
            # (byte for byte, from the store) until the cut moves; never more than
            # keep_recent allows.
            recent_start = min(recent_start, self.cut.start)
        if recent_start <= target.lo:
            self.first.warnings.append(
                f"History does not fit but keep_recent={self.opts.keep_recent} leaves nothing "
                "to summarize; dropped the oldest messages instead."
            )
            return None
        previous = None
        span_start = target.lo
        if target.previous is not None:
            previous = str(src[target.previous]["content"])[len(SUMMARY_PREFIX) :]
            span_start = target.previous
        window = self.first.model.context_window
        max_tokens = min(self.opts.summary_max_tokens, max(1, window // 4))
        covers = functools.partial(
            summary_key,
            summarizer,
            max_tokens,
            previous,
            src,
            target.lo,
            facts=self.opts.summary_facts,
        )
        r = self.request = SummaryRequest(
            span=list(src[target.lo : recent_start]),
            sent=[*src[: target.lo], *src[recent_start:]],
            span_start=span_start,
            recent_start=recent_start,
            previous=previous,
            max_tokens=max_tokens,
            key=covers(recent_start) if summaries is not None else "",
        )
        before = self.previous.summarized_before if self.previous is not None else 0
        if summaries is not None and self.opts.cache_stable and target.lo < before < recent_start:
            rolled = summaries.get(covers(before))
            if rolled is not None and summaries.get(r.key) is None:
                r.previous, r.span = rolled.decode(), list(src[before:recent_start])
                r.rolled_before = before
        return r

    def deferred(self, calls: int, started: bool, summarizer_name: str) -> Plan:
        """The plan served while the summary (``calls`` summarizer calls) is made in the
        background: the previous stored summary, if this one rolls it forward, and the
        newest messages that fit; else the first pass (the oldest dropped)."""
        r = self.request
        assert r is not None
        msg = (
            f"The summary of history messages [{r.span_start}:{r.recent_start}] needs "
            f"{calls} summarizer calls; "
            + (
                "it is being made in the background"
                if started
                else "it was not started now (one for this span is already being made, "
                "the background runner is full, or there is no state store to keep it)"
            )
            + " and a later request of this conversation uses it. This plan "
            + ("keeps the previous summary" if r.rolled_before is not None else "has no summary")
            + " and drops the oldest messages that do not fit."
        )
        log.info("tokenflex: %s", msg)
        self.first.warnings.append(msg)
        if r.rolled_before is None or r.previous is None:
            return self.plan()
        self.request = replace(r, recent_start=r.rolled_before)
        return self.with_summary(r.previous, summarizer_name, reused=True)

    def failed(self, exc: BaseException) -> Plan:
        msg = (
            f"Summarizer failed ({type(exc).__name__}: {exc}); fell back to dropping the "
            "oldest history messages."
        )
        log.warning("tokenflex: %s", msg)
        self.first.warnings.append(msg)
        return self.plan()

    def with_summary(self, text: str, summarizer_name: str, *, reused: bool = False) -> Plan:
        r, target = self.request, self.layout.summary_target()
        assert r is not None and target is not None
        recaller = getattr(self.layout, "recall", None)
        if recaller is not None:  # the summary names what it stands for
            rid = recaller.span_id(r.span_start, r.recent_start)
            message = summary_message(f"{text.strip()}\n[recall id: {rid}]")
        else:
            message = summary_message(text)
        layout = self.layout.with_summary(message, r.recent_start)
        model = self.first.model
        before = self.cut
        try:
            second, cut = solve_history(
                layout,
                model,
                self.opts,
                None if before is None else before._replace(start=r.recent_start),
                warnings=[w for w in self.first.warnings],
            )
        except ContextOverflowError as exc:
            return self.failed(exc)
        cost = self.first.counter.message
        src = target.source
        span_tokens = sum(cost(src[i]) for i in range(r.span_start, r.recent_start))
        summary_tokens = cost(message)
        kept, missing = fact_report(r.span, r.previous, text, sent=r.sent)
        log.info(
            "tokenflex: summarized messages [%d:%d] into %d tokens (saved %d)",
            r.span_start,
            r.recent_start,
            summary_tokens,
            span_tokens - summary_tokens,
        )
        plan = build_plan(
            second,
            opts=self.opts,
            started=self.started,
            runs=[DropRun(target.section, r.span_start, r.recent_start, "summarized")],
            fallback_from=self.fallback_from,
            taken_out=self.taken_out,
            summary=SummaryInfo(
                text=text.strip(),
                covers=(r.span_start, r.recent_start),
                tokens=summary_tokens,
                saved_tokens=span_tokens - summary_tokens,
                summarizer=summarizer_name,
                reused=reused,
                facts_kept=kept,
                facts_missing=missing,
            ),
        )
        if cut is not None:
            cut = cut._replace(summarized_before=r.recent_start)
        return self.remembered(plan, cut)


SUMMARY_TTL_S = 24 * 3600.0
"""How long a stored summary lives without being used again."""


def summarizer_name(summarizer: Any) -> str:
    return type(summarizer).__name__


def summary_key(
    summarizer: Any,
    max_tokens: int,
    previous: str | None,
    source: Sequence[Message],
    lo: int,
    hi: int,
    *,
    facts: bool = True,
) -> str:
    """A summary's key in a state store: what it covers (``source[lo:hi]`` after the
    ``previous`` summary the caller sent, if any) and how it is made (the summarizer, its
    plain settings, the length asked, whether its facts were checked)."""
    import hashlib
    import json

    from ..session import fingerprint

    fields = vars(summarizer) if hasattr(summarizer, "__dict__") else {}
    settings = {
        k: v
        for k, v in sorted(fields.items())
        if isinstance(v, str | int | float | bool)
        and "key" not in k.lower()  # never an API key in a store key
        and not k.startswith("_")  # state, not settings
    }
    what = [summarizer_name(summarizer), settings, max_tokens, previous]
    if not facts:
        what.append("unchecked")
    what.append([fingerprint(m) for m in source[lo:hi]])
    digest = hashlib.blake2b(json.dumps(what, default=str).encode(), digest_size=16)
    return "summary:" + digest.hexdigest()
