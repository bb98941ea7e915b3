"""Summarization as a shrink strategy of the history section (seed 002, never destructive).

When history does not fit (or crosses ``max_input_tokens``), fit() keeps the pinned system
messages and the last ``keep_recent`` messages (tool pairs whole), and asks the summarizer
for a summary of the span in between — rolled together with a previous summary when the
conversation already has one, so each message is summarized once. The summary goes in as
a system message with the known prefix. Nothing is removed before the summary exists: if
the summarizer fails, the plan falls back to dropping and says so in its warnings.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._types import Message
from .budget import Allocation
from .errors import ContextOverflowError
from .history import iter_groups
from .plan import Plan, SummaryInfo, _DropRun
from .summarize import SUMMARY_PREFIX, summary_message

if TYPE_CHECKING:
    from ._job import _Job

__all__ = ["SummaryStep"]

log = logging.getLogger("tokenflex")


@dataclass
class _Request:
    span: list[Message]
    span_start: int
    """First caller index the summary covers (the previous summary's index, if any)."""
    recent_start: int
    previous_summary: str | None
    max_tokens: int


class SummaryStep:
    """Plans one summarization for a fit that had to drop history."""

    def __init__(self, job: _Job, alloc: Allocation, kept_start: int, reason: str) -> None:
        self.job = job
        self.alloc = alloc
        self.kept_start = kept_start
        self.reason = reason
        self.request = self._request()

    def _request(self) -> _Request | None:
        job, lay = self.job, self.job.layout
        msgs = lay.messages
        # The last keep_recent messages stay verbatim, counting the current turn, and the
        # boundary moves back to a whole group so tool results keep their call.
        want = max(0, job.opts.keep_recent - (len(msgs) - lay.cur_start))
        recent_start = lay.cur_start
        taken = 0
        for start, stop, _ in iter_groups(msgs, lay.hist_start, lay.cur_start, lambda _m: 0):
            if taken >= want:
                break
            taken += stop - start
            recent_start = start
        if recent_start <= lay.hist_start:
            job.warnings.append(
                f"History does not fit but keep_recent={job.opts.keep_recent} leaves nothing "
                "to summarize; dropped the oldest messages instead."
            )
            return None
        previous = None
        span_start = lay.hist_start
        if lay.summary_idx is not None:
            previous = str(msgs[lay.summary_idx]["content"])[len(SUMMARY_PREFIX) :]
            span_start = lay.summary_idx
        window = job.model.context_window
        budget = min(job.opts.summary_max_tokens, max(1, window // 4))
        return _Request(
            span=list(msgs[lay.hist_start : recent_start]),
            span_start=span_start,
            recent_start=recent_start,
            previous_summary=previous,
            max_tokens=budget,
        )

    def _span_window(self) -> int:
        return self.job.model.context_window

    def call_sync(self, summarizer: Any) -> str:
        from .summarize import summarize_span

        r = self.request
        assert r is not None
        text: str = summarize_span(
            summarizer,
            r.span,
            previous_summary=r.previous_summary,
            max_tokens=r.max_tokens,
            counter=self.job.counter,
        )
        return text

    async def call_async(self, summarizer: Any) -> str:
        from .summarize import asummarize_span

        r = self.request
        assert r is not None
        text: str = await asummarize_span(
            summarizer,
            r.span,
            previous_summary=r.previous_summary,
            max_tokens=r.max_tokens,
            counter=self.job.counter,
        )
        return text

    def failed(self, exc: BaseException) -> None:
        msg = (
            f"Summarizer failed ({type(exc).__name__}: {exc}); fell back to dropping the "
            "oldest history messages."
        )
        log.warning("tokenflex: %s", msg)
        self.job.warnings.append(msg)

    def finish(self, text: str, summarizer_name: str = "") -> Plan | None:
        """The plan with the summary in place of the span, or None (fell back)."""
        from ._job import _Layout

        job, r = self.job, self.request
        assert r is not None
        lay = job.layout
        msgs = lay.messages
        summary_msg = summary_message(text)
        # The request with the summary: system, summary, recent history, current turn.
        new_msgs: Sequence[Message] = [
            *msgs[: lay.sys_end],
            summary_msg,
            *msgs[r.recent_start :],
        ]
        offset = r.recent_start - (lay.sys_end + 1)  # new index + offset = caller index
        new_lay = _Layout(
            new_msgs,
            sys_end=lay.sys_end,
            summary_idx=lay.sys_end,
            hist_start=lay.sys_end + 1,
            cur_start=lay.cur_start - offset,
        )
        try:
            alloc, kept_start, reason = job.solve(new_msgs, new_lay)
        except ContextOverflowError as exc:
            self.failed(exc)
            return None
        cost = job.counter.message
        span_tokens = sum(cost(m) for m in r.span)
        if lay.summary_idx is not None:
            span_tokens += cost(msgs[lay.summary_idx])
        summary_tokens = cost(summary_msg)

        plan = job.plan(
            new_msgs,
            new_lay,
            alloc,
            kept_start,
            reason,
            runs=[_DropRun("history", r.span_start, r.recent_start, "summarized")],
            offset=offset,
            source=msgs,
            summary=SummaryInfo(
                text=text.strip(),
                covers=(r.span_start, r.recent_start),
                tokens=summary_tokens,
                saved_tokens=span_tokens - summary_tokens,
                summarizer=summarizer_name,
            ),
        )
        log.info(
            "tokenflex: summarized messages [%d:%d] into %d tokens (saved %d)",
            r.span_start,
            r.recent_start,
            summary_tokens,
            span_tokens - summary_tokens,
        )
        return plan
