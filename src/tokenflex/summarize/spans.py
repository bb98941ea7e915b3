"""Spans too long for one summarizer call, summarized in rolling pieces.

:func:`summarize_span` / :func:`asummarize_span` summarize a span that does not fit the
summarizer's own window in pieces, rolling: the summary of piece *k* is the previous
summary of piece *k + 1*. The result is trimmed at a sentence boundary to ``max_tokens``
of the caller's tokenizer. Any :class:`Summarizer` does the summarizing. The steps are
written once, as a sans-I/O flow (one summarizer call per piece, then the trim), which
the two functions drive, calling ``summarize`` or awaiting ``asummarize``.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .._types import Message
from ..drivers import adrive, drive
from ..errors import SummarizerError
from ..redact import redact
from .extractive import ExtractiveSummarizer
from .facts import extract_facts, keep_facts
from .format import looks_like_error
from .sentences import Count, counter_fn, split_text, trim_to_tokens
from .transcript import message_line

__all__ = ["Summarizer", "asummarize_span", "summarize_span", "summary_calls"]

log = logging.getLogger("tokenflex")


@runtime_checkable
class Summarizer(Protocol):
    """Anything that turns messages (plus an earlier summary) into a short text."""

    def summarize(
        self, messages: Sequence[Message], *, previous_summary: str | None, max_tokens: int
    ) -> str:
        """A summary of ``previous_summary`` followed by ``messages``, about
        ``max_tokens`` long at most. Raises :class:`SummarizerError` on failure."""
        ...

    async def asummarize(
        self, messages: Sequence[Message], *, previous_summary: str | None, max_tokens: int
    ) -> str:
        """Async twin of :meth:`summarize`."""
        ...


# -- spans in pieces ------------------------------------------------------------------------

_MIN_PIECE_TOKENS = 32


def _pieces(span: Sequence[Message], budget: int, count: Count) -> list[list[Message]]:
    """The span in consecutive pieces whose transcripts fit ``budget`` tokens; a message
    larger than the budget is split into several messages of the same role.

    A piece's size is the sum of its lines' counts plus 2 per paragraph break: counting
    each line once (cached) keeps this linear in the span.
    """
    pieces: list[list[Message]] = []
    current: list[Message] = []
    size = 0
    for msg in span:
        line = message_line(msg)
        n = count(line) + 2
        if size + n <= budget:
            current.append(msg)
            size += n
            continue
        if current:
            pieces.append(current)
            current, size = [], 0
        if n <= budget:
            current, size = [msg], n
            continue
        role = str(msg.get("role", "user"))
        label, _, body = line.partition(": ")
        parts = split_text(body, max(1, budget - count(label) - 12), count)
        for i, part in enumerate(parts, 1):
            pieces.append([{"role": role, "content": f"(part {i}/{len(parts)}) {part}"}])
    if current:
        pieces.append(current)
    return pieces


@dataclass(frozen=True, slots=True)
class _Call:
    """One summarizer call of a span's flow: a piece, rolled on the summary so far."""

    piece: list[Message]
    previous: str | None
    max_tokens: int


class _SpanJob:
    """Shared by the sync and async span functions: pieces, budgets, the final trim."""

    def __init__(
        self,
        summarizer: Any,
        span: Sequence[Message],
        *,
        previous_summary: str | None,
        max_tokens: int,
        window_tokens: int | None,
        counter: Any,
        quiet: bool = False,
        check_facts: bool = False,
        sent: Sequence[Message] = (),
    ) -> None:
        if max_tokens <= 0:
            raise SummarizerError(f"max_tokens must be positive, got {max_tokens!r}.")
        self.count = counter_fn(counter)
        if isinstance(summarizer, ExtractiveSummarizer) and summarizer.tokenizer is None:
            summarizer = summarizer.with_counter(self.count)
        self.summarizer = summarizer
        self.max_tokens = max_tokens
        self.previous = previous_summary
        self.span = span
        self.check_facts = check_facts
        self.sent = sent
        own = getattr(summarizer, "tokenizer", None)
        if window_tokens is None and callable(getattr(summarizer, "window_tokens", None)):
            # Counted in the caller's tokenizer the summarizer's window needs headroom.
            sizer = counter_fn(own) if own is not None else self.count
            window_tokens = summarizer.window_tokens(max_tokens, sizer)
            if window_tokens is not None and own is None:
                window_tokens = int(window_tokens * 0.9)
        self.window = window_tokens
        self.piece_count = counter_fn(own) if own is not None else self.count
        if self.window is None:
            self.pieces = [list(span)] if span else []
        else:
            # each call also carries the rolling summary: reserve what it can grow to
            reserve = max(max_tokens, self.piece_count(previous_summary or ""))
            budget = self.window - reserve
            if budget < _MIN_PIECE_TOKENS:
                raise SummarizerError(
                    f"The summarizer's window leaves {budget} tokens for the conversation "
                    f"(window_tokens={self.window}, summary reserve={reserve}); use a model "
                    "with a larger window or a smaller summary budget."
                )
            self.pieces = _pieces(span, budget, self.piece_count)
        if len(self.pieces) > 1 and not quiet:
            log.info("tokenflex: summarizing %d messages in %d pieces", len(span), len(self.pieces))

    def flow(self) -> Generator[_Call, str | None, str]:
        """The summary, written once (sans I/O): each piece is a :class:`_Call` the
        driver answers with the summarizer's text; the rolled summary is trimmed."""
        summary = self.previous
        for piece in self.pieces:
            summary = yield _Call(piece, summary, self.max_tokens)
        if summary is None:
            raise SummarizerError(
                "Nothing to summarize: the span is empty and there is no summary."
            )
        return self.finish(summary)

    def finish(self, text: str) -> str:
        if looks_like_error(text):
            shown = redact(text[:200])
            raise SummarizerError(
                f"The summarizer returned what looks like an error message, not a summary: "
                f"{shown!r}; nothing was replaced."
            )
        out = trim_to_tokens(text, self.max_tokens, self.count)
        if not out.strip():
            raise SummarizerError("The summarizer returned nothing that fits the summary budget.")
        if self.check_facts:
            facts = extract_facts(self.span, self.previous, sent=self.sent)
            out = keep_facts(out, facts, self.max_tokens, self.count)
        return out


def summary_calls(
    summarizer: Summarizer,
    span: Sequence[Message],
    *,
    previous_summary: str | None = None,
    max_tokens: int = 512,
    window_tokens: int | None = None,
    counter: Any = None,
) -> int:
    """How many summarizer calls :func:`summarize_span` makes for these arguments (the
    pieces the span is cut into; 0 for an empty span). The summarizer is not called.

    Raises:
        SummarizerError: the arguments cannot be summarized (as summarize_span raises).

    >>> summary_calls(ExtractiveSummarizer(), [{"role": "user", "content": "Hi."}])
    1
    """
    job = _SpanJob(
        summarizer,
        span,
        previous_summary=previous_summary,
        max_tokens=max_tokens,
        window_tokens=window_tokens,
        counter=counter,
        quiet=True,
    )
    return len(job.pieces)


def summarize_span(
    summarizer: Summarizer,
    span: Sequence[Message],
    *,
    previous_summary: str | None = None,
    max_tokens: int = 512,
    window_tokens: int | None = None,
    counter: Any = None,
    check_facts: bool = True,
    sent: Sequence[Message] = (),
) -> str:
    """Summarize ``span`` (rolled together with ``previous_summary``) into at most
    ``max_tokens`` tokens, in pieces when it does not fit the summarizer's window.

    Args:
        summarizer: Any :class:`Summarizer`.
        span: The messages to summarize, oldest first.
        previous_summary: The summary these messages continue (rolling summaries).
        max_tokens: Budget of the summary, in ``counter``'s tokens.
        window_tokens: Tokens one summarizer call can take for conversation text plus the
            rolling summary (its window minus its prompt and output); default what the
            summarizer says (``ChatSummarizer(context_window=...)``), else one call.
        counter: How to count: a MessageCounter, a tokenizer, a tokenizer name or a
            callable; None: the conservative estimator.
        check_facts: Look for the span's facts (numbers with units, dates, paths,
            identifiers, names, the user's instructions: :mod:`~tokenflex.summarize.facts`)
            in the summary and carry the missing ones forward on a ``Carried forward:``
            line within ``max_tokens``.
        sent: Messages sent beside the summary: the facts they state need no carrying.

    Raises:
        SummarizerError: the summarizer failed on any piece (nothing is half-done: the
            caller keeps its messages).

    >>> summarize_span(ExtractiveSummarizer(), [{"role": "user", "content": "Ship v2 on May 3."}])
    'User: Ship v2 on May 3.'
    """
    job = _SpanJob(
        summarizer,
        span,
        previous_summary=previous_summary,
        max_tokens=max_tokens,
        window_tokens=window_tokens,
        counter=counter,
        check_facts=check_facts,
        sent=sent,
    )
    return drive(
        job.flow(),
        lambda call: job.summarizer.summarize(
            call.piece, previous_summary=call.previous, max_tokens=call.max_tokens
        ),
    )


async def asummarize_span(
    summarizer: Summarizer,
    span: Sequence[Message],
    *,
    previous_summary: str | None = None,
    max_tokens: int = 512,
    window_tokens: int | None = None,
    counter: Any = None,
    check_facts: bool = True,
    sent: Sequence[Message] = (),
) -> str:
    """Async twin of :func:`summarize_span` (awaits ``asummarize``)."""
    job = _SpanJob(
        summarizer,
        span,
        previous_summary=previous_summary,
        max_tokens=max_tokens,
        window_tokens=window_tokens,
        counter=counter,
        check_facts=check_facts,
        sent=sent,
    )

    async def answer(call: _Call) -> str:
        text: str = await job.summarizer.asummarize(
            call.piece, previous_summary=call.previous, max_tokens=call.max_tokens
        )
        return text

    return await adrive(job.flow(), answer)
