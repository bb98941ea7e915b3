"""The offline summarizer: key sentences of a span, in order, under the token budget.

No model and no I/O: it keeps the first sentence of each user turn and the sentences that
carry decisions, numbers and names, deterministically.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .._types import Message
from .format import SUMMARY_PREFIX, is_summary_message
from .sentences import counter_fn, split_sentences, trim_to_tokens
from .transcript import message_line

__all__ = ["ExtractiveSummarizer"]

_DECISION = re.compile(
    r"\b(decid\w*|agree\w*|chose|choose|chosen|will|must|should|need\w*|plan\w*|deadline|"
    r"todo|action|remember|prefer\w*|important|always|never|use|using|switch\w*|because|"
    r"budget|goal|require\w*|confirm\w*)\b",
    re.I,
)
_NUMBER = re.compile(r"\d")
_NAME = re.compile(r"(?<=[a-z,;:] )[A-Z][\w-]+|\b[A-Z]{2,}\b|`[^`]+`")


class ExtractiveSummarizer:
    """An offline summarizer: key sentences of the span, in order, under the budget.

    Priority: the previous summary's sentences, then the first sentence of each user
    turn, then sentences carrying decisions, numbers or names (user turns before
    assistant turns), then the first sentence of each assistant turn. Deterministic.

    >>> s = ExtractiveSummarizer()
    >>> s.summarize([{"role": "user", "content": "Use Postgres 16. It is fast."}],
    ...             previous_summary=None, max_tokens=50)
    'User: Use Postgres 16.'
    """

    def __init__(self, tokenizer: str | Any | None = None) -> None:
        """Args:
        tokenizer: What to count the budget with: a tokenizer name, a tokenizer or a
            callable; None uses the conservative estimator, unless
            :func:`~tokenflex.summarize.summarize_span` hands it the caller's tokenizer.
        """
        self.tokenizer = tokenizer
        self._count = counter_fn(tokenizer)

    def with_counter(self, counter: Any) -> ExtractiveSummarizer:
        """A copy that counts with ``counter`` (what
        :func:`~tokenflex.summarize.summarize_span` uses)."""
        return ExtractiveSummarizer(counter)

    def summarize(
        self,
        messages: Sequence[Message],
        *,
        previous_summary: str | None = None,
        max_tokens: int = 512,
    ) -> str:
        """Key sentences of ``previous_summary`` + ``messages`` within ``max_tokens``."""
        # (priority, position, line): lower priority value is kept first
        candidates: list[tuple[int, int, str]] = []
        pos = 0
        if previous_summary:
            for s in split_sentences(previous_summary):
                candidates.append((0, pos, s))
                pos += 1
        for msg in messages:
            role = str(msg.get("role", ""))
            if is_summary_message(msg):
                for s in split_sentences(str(msg["content"])[len(SUMMARY_PREFIX) :]):
                    candidates.append((0, pos, s))
                    pos += 1
                continue
            if role in ("system", "developer"):
                continue
            label, _, text = message_line(msg).partition(": ")
            for i, s in enumerate(split_sentences(text)):
                line = f"{label}: {s}"
                keyed = bool(_DECISION.search(s) or _NUMBER.search(s) or _NAME.search(s))
                if role == "user":
                    prio = 1 if i == 0 else (2 if keyed else 9)
                elif role == "assistant":
                    # an assistant's opener ("Sure!", "Lovely!") says nothing on its own
                    opener = i == 0 and len(s.split()) >= 4
                    prio = 3 if keyed else (4 if opener else 9)
                else:  # tool results: only what carries facts
                    prio = 5 if keyed else 9
                if prio < 9:
                    candidates.append((prio, pos, line))
                pos += 1
        chosen: list[tuple[int, str]] = []
        order = sorted(candidates, key=lambda c: (c[0], c[1]))
        for prio, p, line in order:
            trial = sorted([*chosen, (p, line)])
            if self._count("\n".join(t for _, t in trial)) <= max_tokens:
                chosen = trial
            elif prio == 0 and not chosen:
                # even the first sentence of the previous summary is too long: cut it
                cut = trim_to_tokens(line, max_tokens, self._count)
                if cut:
                    chosen = [(p, cut)]
        return "\n".join(t for _, t in chosen)

    async def asummarize(
        self,
        messages: Sequence[Message],
        *,
        previous_summary: str | None = None,
        max_tokens: int = 512,
    ) -> str:
        """Same as :meth:`summarize` (CPU only, no I/O)."""
        return self.summarize(messages, previous_summary=previous_summary, max_tokens=max_tokens)

    def __repr__(self) -> str:
        return f"ExtractiveSummarizer(tokenizer={self.tokenizer!r})"
