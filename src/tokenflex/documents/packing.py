"""Citation-aware chunk packing: ranked passages into a token budget, never cut.

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

- ``skip`` (default): skip a chunk that does not fit and try the next.
- ``stop``: stop at the first chunk that does not fit; keeps rank order strictly.
- ``optimal``: 0/1 knapsack maximizing the total score under the budget (exact dynamic
  programming over token capacity). When ``chunks × budget`` exceeds a bounded table
  (2·10⁷ cells), it solves reduced problems instead, costs scaled down and rounded *up*,
  so it is never over budget but may fall slightly short of the best score
  (``PackResult.knapsack`` says which). Never worse than ``skip`` on the same scores.

Layout: the data types live in :mod:`tokenflex.documents.chunks`, rendering in
:mod:`tokenflex.documents.render`, the greedy and knapsack solvers in
:mod:`tokenflex.documents.selection`. This module validates, ranks, counts and runs the
final check.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from ..errors import InvalidInputError
from ..models import Model
from ..tokenizers import CountCache, Tokenizer, get_tokenizer
from .chunks import Chunk, DroppedChunk, DropReason, PackResult
from .render import chunk_parts, context_frame, omitted_notice, render_context
from .selection import select_greedy, select_optimal

__all__ = ["pack_chunks", "resolve_tokenizer"]

log = logging.getLogger("tokenflex")

Policy = Literal["skip", "stop", "optimal"]
Format = Literal["markdown", "xml"]
POLICIES = ("skip", "stop", "optimal")
FORMATS = ("markdown", "xml")

# The knapsack's knobs live here, not in selection.py: the solver takes them as
# arguments (no module state), numpy stays a lazy import, and tests patch them here.
_MAX_DP_CELLS = 20_000_000  # knapsack table bound with numpy (bool cells: ~20 MB)
_MAX_DP_CELLS_PURE = 2_000_000  # without numpy
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


def resolve_tokenizer(tokenizer: str | CountCache | Tokenizer | Model) -> CountCache:
    """The counter for ``tokenizer``: a name, a CountCache (as is), a Tokenizer (cached) or
    a Model (its tokenizer). InvalidInputError for anything else."""
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
        safety_buffer: Tokens kept free below ``budget`` (64 by default).
        format: ``"markdown"`` (numbered citations + ``Sources:``) or ``"xml"``.

    Returns:
        A :class:`PackResult`; ``result.tokens <= budget - safety_buffer`` always.

    Raises:
        InvalidInputError: bad budget, buffer, policy, format or chunk.

    >>> from tokenflex.documents import Chunk, pack_chunks
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
    if isinstance(chunks, str | bytes | Mapping) or not isinstance(chunks, Iterable):
        raise InvalidInputError(
            f"chunks must be a list of tokenflex Chunks, got {type(chunks).__name__} "
            f"{chunks!r:.80}."
        )
    items = list(chunks)
    for i, c in enumerate(items):
        if not isinstance(c, Chunk):
            raise InvalidInputError(
                f"chunks[{i}] is a {type(c).__name__}, not a tokenflex Chunk; build it with "
                "Chunk(text, source, identifier, extras, score, id)."
            )
    tok = resolve_tokenizer(tokenizer)
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

    def count(i: int) -> int:
        return sum(tok.count(p) for p in chunk_parts(format, wide, items[i]))

    frame = sum(tok.count(p) for p in context_frame(format))
    notice = tok.count(omitted_notice(format, total, total))
    reasons: dict[int, DropReason] = {i: "duplicate" for i in duplicates}
    knapsack = ""
    if policy == "stop":
        # Counted in rank order only as far as the answer needs: up to the first chunk
        # that does not fit, then on only while "everything fits" is still possible.
        cost = {i: count(i) for i in duplicates}  # same texts as ranked ones: cached
        admitted, used, miss = [], 0, None
        for p, i in enumerate(ranked):
            cost[i] = count(i)
            used += cost[i]
            if miss is None and frame + used + notice <= limit:
                admitted.append(i)
            elif miss is None:
                miss = p
            if frame + used > limit:
                break
        else:
            admitted, miss = list(ranked), None  # everything fits, without the notice
        if miss is not None:
            reasons[ranked[miss]] = "budget"
            reasons.update((i, "stopped") for i in ranked[miss + 1 :])
    else:
        cost = {i: count(i) for i in order}
        costs = [cost[i] for i in ranked]
        if frame + sum(costs) <= limit:
            admitted = list(ranked)
        else:
            room = limit - frame - notice
            if policy == "optimal":
                values = [items[i].score or 0.0 for i in ranked]
                np = _numpy()
                cells = _MAX_DP_CELLS if np is not None else _MAX_DP_CELLS_PURE
                taken, knapsack = select_optimal(costs, values, room, np=np, cells=cells)
            else:
                taken, _ = select_greedy(costs, room, stop=False)
            admitted = [ranked[p] for p in taken]
            for i in set(ranked) - set(admitted):
                reasons.setdefault(i, "budget")

    # The proof step: count the whole rendered context; drop the lowest-ranked admitted
    # chunk while it is over (BPE can merge across part boundaries; this is exact).
    while True:
        omitted = total - len(admitted)
        rendered = render_context(format, [items[i] for i in admitted], omitted, total)
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
        DroppedChunk(items[i].id, i, cost.get(i), r, items[i].score)
        for i, r in sorted(reasons.items())
    )
    result = PackResult(
        admitted=tuple(items[i] for i in admitted),
        admitted_indices=tuple(admitted),
        admitted_costs=tuple(cost[i] for i in admitted),
        dropped=dropped,
        admitted_tokens=sum(cost[i] for i in admitted),
        dropped_count=len(dropped),
        dropped_tokens=sum(d.tokens or 0 for d in dropped),
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
            f"{d.id if d.id is not None else '#' + str(d.index)} ({d.reason}, "
            f"{'not counted' if d.tokens is None else format(d.tokens, ',')})"
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
