"""Which chunks to take: pure solvers over plain integer costs (no tokenizer, no I/O).

Positions index the ranked list (best first) and ``room`` is the token capacity left for
chunks. :func:`select_greedy` serves the ``skip`` and ``stop`` policies,
:func:`select_optimal` the ``optimal`` one (0/1 knapsack, see
:mod:`tokenflex.documents.packing`). The numpy module and the table bound are arguments:
:mod:`tokenflex.documents.packing` owns those knobs, so numpy is only imported when
``optimal`` runs and tests can shrink the table in one place.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import Any

__all__ = ["select_greedy", "select_optimal"]


def select_greedy(
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


def _knapsack(
    weights: Sequence[int], values: Sequence[float], capacity: int, *, np: ModuleType | None
) -> list[int]:
    """Exact 0/1 knapsack over integer weights (values > 0); returns chosen positions.

    ``dp[c]`` is the best total value with weight at most ``c``; ``keep[i][c]`` records
    that item ``i`` improved capacity ``c``, which is all the backtrack needs. With ``np``
    (the numpy module) the table is vectorized; without it, pure Python.
    """
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
    costs: Sequence[int],
    values: Sequence[float],
    items: Sequence[int],
    room: int,
    cells: int,
    *,
    np: ModuleType | None,
) -> tuple[list[int], int]:
    """Knapsack over ``items`` with weights divided by the smallest scale that keeps the
    table within ``cells``; rounding every weight *up* keeps any accepted set in ``room``."""
    scale = 1
    while len(items) * (room // scale + 1) > cells:
        scale += max(1, scale // 4)
    capacity = room // scale
    fit = [(p, w) for p in items if (w := max(1, -(-costs[p] // scale))) <= capacity]
    chosen = _knapsack([w for _, w in fit], [values[p] for p, _ in fit], capacity, np=np)
    return [fit[i][0] for i in chosen], scale


def select_optimal(
    costs: Sequence[int],
    values: Sequence[float],
    room: int,
    *,
    np: ModuleType | None,
    cells: int,
) -> tuple[list[int], str]:
    """Max total value under ``room``; never worse than greedy skip.

    Returns the positions taken and how: ``exact``, or ``approximate (...)`` when the
    table would exceed its bound. Then two reductions run and the better one wins: the
    whole problem with scaled weights, and the classic *core*: items sorted by value per
    token, those well above the LP break item fixed in, those well below fixed out, and
    an (if possible unscaled) table over the items around the break.

    ``np`` is the numpy module (``None``: pure Python) and ``cells`` the table bound.
    """
    top = max((abs(v) for v in values), default=0.0)
    if top * len(values) > 1e300:  # sums of scores near 1e308 overflow: rescale (same order)
        values = [v / top for v in values]
    greedy_pos = [p for p in range(len(costs)) if values[p] >= 0]
    greedy, _ = select_greedy(costs, room, stop=False, allowed=greedy_pos)
    items = [p for p in range(len(costs)) if values[p] > 0 and costs[p] <= room]
    how = "exact"
    options: list[list[int]] = []
    if items and len(items) * (room + 1) <= cells:
        options.append(
            _knapsack([costs[p] for p in items], [values[p] for p in items], room, np=np)
        )
        options[0] = [items[i] for i in options[0]]
    elif items:
        scaled, scale = _scaled_dp(costs, values, items, room, cells, np=np)
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
        core_taken, core_scale = _scaled_dp(costs, values, core, left, cells, np=np)
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
