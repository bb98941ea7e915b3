"""What packing takes and gives back: a :class:`Chunk` in, a :class:`PackResult` out.

Kept apart from :mod:`tokenflex.documents.packing` so the renderer can name :class:`Chunk`
without importing the packer. Import these names from :mod:`tokenflex.documents` (or
:mod:`tokenflex`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import InvalidInputError

__all__ = ["Chunk", "DropReason", "DroppedChunk", "PackResult"]

DropReason = Literal["budget", "duplicate", "stopped"]


@dataclass(frozen=True, slots=True)
class Chunk:
    """One retrieved passage and its citation."""

    text: str
    """The passage, rendered verbatim and never cut."""
    source: str = ""
    """Human-readable source label (document title, provider)."""
    identifier: str = ""
    """Where it comes from, e.g. a URL or a document id."""
    extras: Mapping[str, Any] = field(default_factory=dict)
    """Metadata rendered as compact JSON (sorted keys) in the citation."""
    score: float | None = None
    """Rerank score; higher ranks first. ``None`` ranks after every scored chunk."""
    id: str | None = None
    """Caller's id, reported back for dropped chunks."""

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise InvalidInputError(f"Chunk text must be a str, got {type(self.text).__name__}.")
        for name in ("source", "identifier"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise InvalidInputError(
                    f"Chunk {name} must be a str, got {type(value).__name__} {value!r:.80}. "
                    f"Pass {name}=str(...)."
                )
        if self.id is not None and not isinstance(self.id, str):
            raise InvalidInputError(
                f"Chunk id must be a str or None, got {type(self.id).__name__} {self.id!r:.80}. "
                "Pass id=str(...)."
            )
        if self.score is not None:
            if isinstance(self.score, bool) or not isinstance(self.score, int | float):
                raise InvalidInputError(f"Chunk score must be a number, got {self.score!r}.")
            if (
                not math.isfinite(self.score)
                if isinstance(self.score, float)
                else (abs(self.score) > 2**1023)
            ):
                raise InvalidInputError(f"Chunk score must be finite, got {self.score!r}.")
        if not isinstance(self.extras, Mapping):
            raise InvalidInputError(
                f"Chunk extras must be a mapping, got {type(self.extras).__name__}."
            )
        bad = [k for k in self.extras if not isinstance(k, str)]
        if bad:
            raise InvalidInputError(
                f"Chunk extras keys must be str (they are rendered as JSON with sorted "
                f"keys), got {bad[0]!r:.80} ({type(bad[0]).__name__}). Convert the keys with "
                "str()."
            )
        try:  # the citation renders extras as sorted JSON: nested keys must sort too
            json.dumps(dict(self.extras), sort_keys=True, default=str)
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidInputError(
                f"Chunk extras cannot be rendered as JSON ({type(exc).__name__}: {exc}). "
                "Use str keys at every level and no circular references."
            ) from None

    def __hash__(self) -> int:
        # extras is a dict (unhashable); equal chunks still hash equal without it.
        return hash((self.text, self.source, self.identifier, self.score, self.id))


@dataclass(frozen=True, slots=True)
class DroppedChunk:
    """A chunk that is not in the rendered context, and why."""

    id: str | None
    """The chunk's id (``None`` if it had none)."""
    index: int
    """Position in the input sequence."""
    tokens: int | None
    """What it would have cost: text plus citation envelope. ``None`` for a chunk that
    policy ``stop`` never had to count (packing stopped before it)."""
    reason: DropReason
    """``budget`` (did not fit), ``stopped`` (after the first miss, policy ``stop``) or
    ``duplicate`` (same text and identifier as a higher-ranked chunk)."""
    score: float | None = None
    """Its score."""


@dataclass(frozen=True, slots=True, repr=False)
class PackResult:
    """What was packed, what was left out, and the context to send."""

    admitted: tuple[Chunk, ...]
    """Admitted chunks in render order (rank order)."""
    admitted_indices: tuple[int, ...]
    """Input positions of the admitted chunks, in render order."""
    admitted_costs: tuple[int, ...]
    """Tokens of each admitted chunk: text plus citation envelope."""
    dropped: tuple[DroppedChunk, ...]
    """Every chunk left out, in input order."""
    admitted_tokens: int
    """Sum of ``admitted_costs``."""
    dropped_count: int
    """Number of dropped chunks (duplicates included)."""
    dropped_tokens: int
    """Sum of the dropped chunks' costs (duplicates included)."""
    tokens: int
    """Tokens of ``rendered``, counted whole with the tokenizer."""
    budget: int
    """The budget asked for."""
    safety_buffer: int
    """Tokens kept free below the budget."""
    rendered: str
    """The context to inject, with the partial-context notice when chunks were omitted."""
    partial: bool
    """True when chunks were omitted for budget (the notice says so)."""
    policy: str
    format: str
    tokenizer: str
    """Tokenizer name."""
    exact: bool
    """True when counts come from the model's real tokenizer, False for the estimator."""
    knapsack: str = ""
    """``optimal`` only: ``exact``, or ``approximate (...)`` saying how the table was
    bounded (never over budget; possibly short of the best score). Empty for other
    policies and when everything fits."""

    @property
    def limit(self) -> int:
        """``budget - safety_buffer``: what ``tokens`` never exceeds."""
        return self.budget - self.safety_buffer

    @property
    def omitted_count(self) -> int:
        """Chunks left out for budget (what the notice reports; duplicates excluded)."""
        return sum(1 for d in self.dropped if d.reason != "duplicate")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (admitted chunks without their text; ``rendered`` has it)."""
        return {
            "budget": self.budget,
            "safety_buffer": self.safety_buffer,
            "limit": self.limit,
            "tokens": self.tokens,
            "policy": self.policy,
            "format": self.format,
            "tokenizer": self.tokenizer,
            "exact": self.exact,
            "knapsack": self.knapsack,
            "partial": self.partial,
            "admitted_count": len(self.admitted),
            "admitted_tokens": self.admitted_tokens,
            "dropped_count": self.dropped_count,
            "dropped_tokens": self.dropped_tokens,
            "admitted": [
                {
                    "id": c.id,
                    "index": i,
                    "tokens": t,
                    "score": c.score,
                    "source": c.source,
                    "identifier": c.identifier,
                }
                for c, i, t in zip(
                    self.admitted, self.admitted_indices, self.admitted_costs, strict=True
                )
            ],
            "dropped": [
                {
                    "id": d.id,
                    "index": d.index,
                    "tokens": d.tokens,
                    "reason": d.reason,
                    "score": d.score,
                }
                for d in self.dropped
            ],
            "rendered": self.rendered,
        }

    def __repr__(self) -> str:
        return (
            f"PackResult(admitted={len(self.admitted)}, dropped={self.dropped_count} "
            f"({self.dropped_tokens:,} tokens), tokens={self.tokens:,}/{self.limit:,}, "
            f"policy={self.policy!r}, format={self.format!r}, tokenizer={self.tokenizer!r})"
        )
