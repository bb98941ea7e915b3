"""Citation-aware chunk packing (ADR-0006 done exactly): ranked passages into a token budget.

Every admitted chunk costs what we actually render for it: its text *and* its citation
envelope (source label, identifier, metadata extras), counted by rendering the chunk in
the chosen format (numbered markdown or XML-tagged documents) with the tokenizer. The
fixed parts (``Sources:``, ``<documents>``, the partial-context notice) are counted with
their worst-case digits. Chunks and citations are never cut.

**The promise.** ``tokenizer.count(result.rendered) <= budget - safety_buffer`` for every
result. Selection works on per-chunk costs; a BPE tokenizer may merge tokens across the
boundary of two rendered parts, so the sum of the parts is not a proof. The final step
therefore counts the whole rendered context and, while it is over, drops the
lowest-ranked admitted chunk (reason ``budget``). That rule is sound for any tokenizer.

Policies (highest rank first: score descending, ties by input order):

- ``skip`` (ADR default): skip a chunk that does not fit and try the next.
- ``stop``: stop at the first chunk that does not fit; keeps rank order strictly.
- ``optimal``: 0/1 knapsack maximizing the total score under the budget (exact dynamic
  programming over token capacity). When ``chunks × budget`` exceeds a bounded table
  (2·10⁷ cells), it solves reduced problems instead, costs scaled down and rounded *up*,
  so it is never over budget but may fall slightly short of the best score
  (``PackResult.knapsack`` says which). Never worse than ``skip`` on the same scores.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import InvalidInputError
from .models import Model
from .tokenizers import CountCache, Tokenizer, get_tokenizer

__all__ = ["Chunk", "DroppedChunk", "PackResult", "pack_chunks"]

log = logging.getLogger("tokenflex")

Policy = Literal["skip", "stop", "optimal"]
Format = Literal["markdown", "xml"]
DropReason = Literal["budget", "duplicate", "stopped"]
POLICIES = ("skip", "stop", "optimal")
FORMATS = ("markdown", "xml")

_MAX_DP_CELLS = 20_000_000  # knapsack table bound with numpy (bool cells: ~20 MB)
_MAX_DP_CELLS_PURE = 2_000_000  # without numpy


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
        if self.score is not None:
            if isinstance(self.score, bool) or not isinstance(self.score, int | float):
                raise InvalidInputError(f"Chunk score must be a number, got {self.score!r}.")
            if not math.isfinite(self.score):
                raise InvalidInputError(f"Chunk score must be finite, got {self.score!r}.")
        if not isinstance(self.extras, Mapping):
            raise InvalidInputError(
                f"Chunk extras must be a mapping, got {type(self.extras).__name__}."
            )

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
    tokens: int
    """What it would have cost: text plus citation envelope."""
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


# --- rendering ---------------------------------------------------------------------------


def _citation(chunk: Chunk) -> str:
    parts = [chunk.source, chunk.identifier]
    if chunk.extras:
        parts.append(_extras_json(chunk.extras))
    return " — ".join(p for p in parts if p) or "unknown source"


def _extras_json(extras: Mapping[str, Any]) -> str:
    return json.dumps(
        dict(extras), sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str
    )


def _notice(fmt: str, omitted: int, total: int) -> str:
    text = f"{omitted} of {total} retrieved passages omitted to fit the budget."
    return f"<notice>{text}</notice>\n" if fmt == "xml" else f"Note: {text}\n\n"


def _parts(fmt: str, n: str, chunk: Chunk) -> tuple[str, ...]:
    """The rendered pieces of one chunk: ``n`` is its citation number as text."""
    if fmt == "xml":
        lines = [f'<document index="{n}">\n']
        if chunk.source:
            lines.append(f"<source>{chunk.source}</source>\n")
        if chunk.identifier:
            lines.append(f"<identifier>{chunk.identifier}</identifier>\n")
        if chunk.extras:
            lines.append(f"<metadata>{_extras_json(chunk.extras)}</metadata>\n")
        lines.append(f"<document_content>\n{chunk.text}\n</document_content>\n</document>\n")
        return ("".join(lines),)
    return f"[{n}] {chunk.text}\n\n", f"[{n}] {_citation(chunk)}\n"


def _frame(fmt: str) -> tuple[str, str]:
    """Text before and after the chunks (only when at least one is admitted)."""
    return ("<documents>\n", "</documents>\n") if fmt == "xml" else ("", "Sources:\n")


def _render(fmt: str, chunks: Sequence[Chunk], omitted: int, total: int) -> str:
    notice = _notice(fmt, omitted, total) if omitted else ""
    if not chunks:
        return notice
    head, tail = _frame(fmt)
    pieces = [_parts(fmt, str(i), c) for i, c in enumerate(chunks, 1)]
    if fmt == "xml":
        return notice + head + "".join(p[0] for p in pieces) + tail
    return notice + "".join(p[0] for p in pieces) + tail + "".join(p[1] for p in pieces)


# --- selection ---------------------------------------------------------------------------


def _resolve_tokenizer(tokenizer: str | CountCache | Tokenizer | Model) -> CountCache:
    if isinstance(tokenizer, CountCache):
        return tokenizer
    if isinstance(tokenizer, Model):
        return get_tokenizer(tokenizer.tokenizer)
    if isinstance(tokenizer, str):
        return get_tokenizer(tokenizer)
    if isinstance(tokenizer, Tokenizer):
        return CountCache(tokenizer)
    raise InvalidInputError(
        f"tokenizer must be a name, a CountCache, a Tokenizer or a Model, got {tokenizer!r}."
    )


def _greedy(
    costs: Sequence[int], room: int, *, stop: bool, allowed: Iterable[int] | None = None
) -> tuple[list[int], int | None]:
    """Positions taken in order, and the position of the first miss (for ``stop``)."""
    taken: list[int] = []
    left = room
    for pos in range(len(costs)) if allowed is None else allowed:
        if costs[pos] <= left:
            taken.append(pos)
            left -= costs[pos]
        elif stop:
            return taken, pos
    return taken, None


_FORCE_PURE = False  # tests flip this to exercise the pure-Python table


def _numpy() -> Any:
    """numpy if installed (and not disabled by tests), else None."""
    if _FORCE_PURE:
        return None
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy is present wherever the tests run
        return None
    return numpy


def _knapsack(weights: Sequence[int], values: Sequence[float], capacity: int) -> list[int]:
    """Exact 0/1 knapsack over integer weights (values > 0); returns chosen positions.

    ``dp[c]`` is the best total value with weight at most ``c``; ``keep[i][c]`` records
    that item ``i`` improved capacity ``c``, which is all the backtrack needs.
    """
    np = _numpy()
    keep: list[Any] = []
    if np is not None:
        dp = np.zeros(capacity + 1, dtype=np.float64)
        table = np.zeros((len(weights), capacity + 1), dtype=bool)
        for i, (w, v) in enumerate(zip(weights, values, strict=True)):
            cand = dp[: capacity + 1 - w] + v
            better = cand > dp[w:]
            table[i, w:] = better
            dp[w:] = np.where(better, cand, dp[w:])
        keep = list(table)
    else:
        dpl = [0.0] * (capacity + 1)
        for w, v in zip(weights, values, strict=True):
            cand = [x + v for x in dpl[: capacity + 1 - w]]
            old = dpl[w:]
            keep.append(b"\0" * w + bytes(a > b for a, b in zip(cand, old, strict=True)))
            dpl = dpl[:w] + [a if a > b else b for a, b in zip(cand, old, strict=True)]
    chosen: list[int] = []
    c = capacity
    for i in range(len(weights) - 1, -1, -1):
        if keep[i][c]:
            chosen.append(i)
            c -= weights[i]
    return chosen[::-1]


def _scaled_dp(
    costs: Sequence[int], values: Sequence[float], items: Sequence[int], room: int, cells: int
) -> tuple[list[int], int]:
    """Knapsack over ``items`` with weights divided by the smallest scale that keeps the
    table within ``cells``; rounding every weight *up* keeps any accepted set in ``room``."""
    scale = 1
    while len(items) * (room // scale + 1) > cells:
        scale += max(1, scale // 4)
    capacity = room // scale
    fit = [(p, w) for p in items if (w := max(1, -(-costs[p] // scale))) <= capacity]
    chosen = _knapsack([w for _, w in fit], [values[p] for p, _ in fit], capacity)
    return [fit[i][0] for i in chosen], scale


def _optimal(costs: Sequence[int], values: Sequence[float], room: int) -> tuple[list[int], str]:
    """Max total value under ``room``; never worse than greedy skip.

    Returns the positions taken and how: ``exact``, or ``approximate (...)`` when the
    table would exceed its bound. Then two reductions run and the better one wins: the
    whole problem with scaled weights, and the classic *core*: items sorted by value per
    token, those well above the LP break item fixed in, those well below fixed out, and
    an (if possible unscaled) table over the items around the break.
    """
    greedy_pos = [p for p in range(len(costs)) if values[p] >= 0]
    greedy, _ = _greedy(costs, room, stop=False, allowed=greedy_pos)
    items = [p for p in range(len(costs)) if values[p] > 0 and costs[p] <= room]
    cells = _MAX_DP_CELLS if _numpy() is not None else _MAX_DP_CELLS_PURE
    how = "exact"
    options: list[list[int]] = []
    if items and len(items) * (room + 1) <= cells:
        options.append(_knapsack([costs[p] for p in items], [values[p] for p in items], room))
        options[0] = [items[i] for i in options[0]]
    elif items:
        scaled, scale = _scaled_dp(costs, values, items, room, cells)
        options.append(scaled)
        by_density = sorted(items, key=lambda p: -values[p] / costs[p])
        used, brk = 0, len(by_density)
        for k, p in enumerate(by_density):
            if used + costs[p] > room:
                brk = k
                break
            used += costs[p]
        size = max(64, cells // (room + 1))
        lo = max(0, brk - size // 2)
        core = by_density[lo : lo + size]
        fixed = by_density[:lo]
        left = room - sum(costs[p] for p in fixed)
        core_taken, core_scale = _scaled_dp(costs, values, core, left, cells)
        options.append(fixed + core_taken)
        how = (
            f"approximate (best of: all {len(items):,} items with costs scaled by 1/{scale} "
            f"rounded up; core of {len(core):,} items around the value-per-token break"
            + (f", scaled by 1/{core_scale}" if core_scale > 1 else "")
            + ")"
        )
    best = list(greedy)
    best_value = math.fsum(values[p] for p in greedy)
    for option in options:
        # Fill what rounding left free with the best-ranked chunks that still fit.
        taken = sorted(option)
        left = room - sum(costs[p] for p in taken)
        chosen = set(taken)
        for p in greedy_pos:
            if p not in chosen and costs[p] <= left:
                taken.append(p)
                left -= costs[p]
        value = math.fsum(values[p] for p in taken)
        if value > best_value:
            best, best_value = sorted(taken), value
    return best, how


def pack_chunks(
    chunks: Iterable[Chunk],
    *,
    budget: int,
    tokenizer: str | CountCache | Tokenizer | Model = "estimate",
    policy: Policy = "skip",
    safety_buffer: int = 64,
    format: Format = "markdown",
) -> PackResult:
    """Pack ranked chunks and their citations into ``budget - safety_buffer`` tokens.

    Args:
        chunks: Retrieved passages, in any order (they are ranked by score).
        budget: Token budget for the whole documents context.
        tokenizer: Tokenizer name (``"estimate"``, ``"o200k_base"``, ...), a
            :class:`~tokenflex.tokenizers.CountCache`, a tokenizer object, or a
            :class:`~tokenflex.models.Model` whose tokenizer is used.
        policy: ``"skip"`` (default), ``"stop"`` or ``"optimal"`` (see module docs).
        safety_buffer: Tokens kept free below ``budget`` (ADR-0006: 64).
        format: ``"markdown"`` (numbered citations + ``Sources:``) or ``"xml"``.

    Returns:
        A :class:`PackResult`; ``result.tokens <= budget - safety_buffer`` always.

    Raises:
        InvalidInputError: bad budget, buffer, policy, format or chunk.

    >>> from tokenflex.packing import Chunk, pack_chunks
    >>> r = pack_chunks([Chunk("Paris is the capital of France.", "Atlas", "https://x.org",
    ...                        score=0.9), Chunk("x" * 4000, "Noise", score=0.1)],
    ...                 budget=200, safety_buffer=16)
    >>> len(r.admitted), r.dropped[0].reason, r.tokens <= 184
    (1, 'budget', True)
    """
    if policy not in POLICIES:
        raise InvalidInputError(f"policy must be one of {POLICIES}, got {policy!r}.")
    if format not in FORMATS:
        raise InvalidInputError(f"format must be one of {FORMATS}, got {format!r}.")
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise InvalidInputError(f"budget must be a non-negative int, got {budget!r}.")
    if isinstance(safety_buffer, bool) or not isinstance(safety_buffer, int) or safety_buffer < 0:
        raise InvalidInputError(f"safety_buffer must be a non-negative int, got {safety_buffer!r}.")
    if budget < safety_buffer:
        raise InvalidInputError(
            f"budget={budget:,} is smaller than the {safety_buffer:,}-token safety buffer. "
            "Raise budget or lower safety_buffer."
        )
    items = list(chunks)
    for i, c in enumerate(items):
        if not isinstance(c, Chunk):
            raise InvalidInputError(
                f"chunks[{i}] is a {type(c).__name__}, not a tokenflex Chunk; build it with "
                "Chunk(text, source, identifier, extras, score, id)."
            )
    tok = _resolve_tokenizer(tokenizer)
    limit = budget - safety_buffer

    order = sorted(
        range(len(items)),
        key=lambda i: (items[i].score is None, -(items[i].score or 0.0), i),
    )
    seen: set[tuple[str, str]] = set()
    ranked: list[int] = []  # unique chunks, rank order
    duplicates: list[int] = []
    for i in order:
        key = (items[i].text, items[i].identifier)
        if key in seen:
            duplicates.append(i)
        else:
            seen.add(key)
            ranked.append(i)

    # Worst-case citation numbers: every number has as many digits as the largest one.
    total = len(ranked)
    wide = "9" * len(str(max(total, 1)))
    cost: dict[int, int] = {
        i: sum(tok.count(p) for p in _parts(format, wide, items[i])) for i in order
    }
    frame = sum(tok.count(p) for p in _frame(format))
    notice = tok.count(_notice(format, total, total))

    costs = [cost[i] for i in ranked]
    reasons: dict[int, DropReason] = {i: "duplicate" for i in duplicates}
    knapsack = ""
    if frame + sum(costs) <= limit:
        admitted = list(ranked)
    else:
        room = limit - frame - notice
        if policy == "optimal":
            values = [items[i].score or 0.0 for i in ranked]
            taken, knapsack = _optimal(costs, values, room)
            miss = None
        else:
            taken, miss = _greedy(costs, room, stop=policy == "stop")
        admitted = [ranked[p] for p in taken]
        for p in range(len(ranked)):
            if miss is not None and p > miss:
                reasons[ranked[p]] = "stopped"
        for i in set(ranked) - set(admitted):
            reasons.setdefault(i, "budget")

    # The proof step: count the whole rendered context; drop the lowest-ranked admitted
    # chunk while it is over (BPE can merge across part boundaries; this is exact).
    while True:
        omitted = total - len(admitted)
        rendered = _render(format, [items[i] for i in admitted], omitted, total)
        # Whole contexts bypass the cache: they are large and rarely repeat.
        # An empty context is nothing to send: 0 tokens (the estimator would say 1).
        tokens = tok.tokenizer.count(rendered) if rendered else 0
        if tokens <= limit:
            break
        if not admitted:
            rendered, tokens = "", 0  # not even the notice fits; the result still reports
            break
        reasons[admitted.pop()] = "budget"

    dropped = tuple(
        DroppedChunk(items[i].id, i, cost[i], r, items[i].score) for i, r in sorted(reasons.items())
    )
    result = PackResult(
        admitted=tuple(items[i] for i in admitted),
        admitted_indices=tuple(admitted),
        admitted_costs=tuple(cost[i] for i in admitted),
        dropped=dropped,
        admitted_tokens=sum(cost[i] for i in admitted),
        dropped_count=len(dropped),
        dropped_tokens=sum(d.tokens for d in dropped),
        tokens=tokens,
        budget=budget,
        safety_buffer=safety_buffer,
        rendered=rendered,
        partial=len(admitted) < total,
        policy=policy,
        format=format,
        tokenizer=tok.name,
        exact=tok.exact,
        knapsack=knapsack,
    )
    if dropped:
        _log_dropped(result)
    return result


def _log_dropped(result: PackResult) -> None:
    if log.isEnabledFor(logging.INFO):
        shown = ", ".join(
            f"{d.id if d.id is not None else '#' + str(d.index)} ({d.reason}, {d.tokens:,})"
            for d in result.dropped[:20]
        )
        more = f" and {result.dropped_count - 20} more" if result.dropped_count > 20 else ""
        log.info(
            "pack_chunks: dropped %d chunks (%s tokens) to fit %s tokens (budget %s - "
            "buffer %s), policy %s: %s%s",
            result.dropped_count,
            f"{result.dropped_tokens:,}",
            f"{result.limit:,}",
            f"{result.budget:,}",
            f"{result.safety_buffer:,}",
            result.policy,
            shown,
            more,
        )
