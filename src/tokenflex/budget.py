"""The budget solver: share one context window between prompt sections and the output.

A pure function over plain data (token counts in, an allocation out): no tokenizer, no
I/O, no logging. :func:`tokenflex.fit` counts, fetches and summarizes around it.

**The promise.** For every allocation returned,
``input_tokens + max_tokens + safety_margin <= context_window``,
``max_tokens >= min_output_tokens`` (the floor, never above the request), and no required
item was dropped. Otherwise :func:`solve` raises :class:`ContextOverflowError` with the
numbers and the fix.

How it negotiates (like CSS flexbox, with the floor made room for, never overflowed):

1. The output request is clamped to the model's max output; the floor is
   ``min(min_output_tokens, request)``.
2. Required items (pinned system prompt, current message, tool schemas) and the fixed
   base cost must fit with the floor, or it raises.
3. Optional items fill the room left for input: ``window - margin - request`` with the
   ``reserve`` policy (trim input, keep the requested output), or
   ``window - margin - floor`` with the ``flex`` policy (keep input, let output shrink
   to the floor). Without a request (``output_given=False``: the caller named no
   ``max_tokens``), the input fills the room as under ``flex`` and the output takes
   what is left, up to ``requested_output`` (the model's max output). Sections fill in
   priority order; inside a section, items
   come in the section's keep order (newest first for history, best rank first for
   documents). A section's soft ``share`` (history: 0.8 of the room) yields to
   ``min_items``, and both yield to the hard window.
4. ``max_tokens = min(request, window - margin - input)``, which is at least the floor.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from .errors import ContextOverflowError

__all__ = [
    "MAX_TOKEN_COUNT",
    "MIN_OUTPUT_TOKENS",
    "SAFETY_MARGIN",
    "Allocation",
    "BudgetSpec",
    "DropRecord",
    "Policy",
    "SectionSpec",
    "solve",
]

Policy = Literal["reserve", "flex"]

MIN_OUTPUT_TOKENS = 500
"""The default output floor: ``max_tokens`` never goes below it."""
SAFETY_MARGIN = 100
"""The default tokens kept free in the window for counting error and formatting."""
MAX_TOKEN_COUNT = 2**53
"""The largest token count accepted as input anywhere (a float holds every int up to it)."""


@dataclass(frozen=True, slots=True)
class SectionSpec:
    """One part of the prompt, as token counts of atomic items in keep order."""

    name: str
    """Section name (``system``, ``history``, ``documents``, ...)."""
    items: Iterable[int]
    """Token cost of each atomic item, in keep order (the first is kept first). May be a
    lazy iterable for contiguous sections; it is consumed only as far as needed."""
    required: int = 0
    """How many leading items (in keep order) are required. ``-1``: all of them."""
    priority: int = 0
    """Higher priorities fill first; equal priorities keep their given order."""
    min_tokens: int = 0
    """Room reserved for this section against higher-priority sections."""
    cap: int | None = None
    """Most tokens this section may take (required items included)."""
    share: float | None = None
    """Soft target: this share of the room left at its turn. Yields to ``min_items`` and
    to the hard window."""
    min_items: int = 0
    """Keep at least this many items if the hard window allows (beyond the soft share)."""
    max_items: int | None = None
    """Keep at most this many items."""
    contiguous: bool = False
    """Stop at the first item that does not fit (history: no gaps), instead of skipping it
    and trying the next (documents, memories)."""
    cumulative: Sequence[int] | None = None
    """For contiguous sections without required items: ``cumulative[k]`` is the tokens of
    the first ``k`` items (``len`` = items + 1); it may have a ``within(room)`` method that
    gives the largest ``k`` with ``cumulative[k] <= room``. The solver then bisects instead of
    iterating, so a growing conversation re-fits in O(log n)."""
    offset: int = 0
    """Leading items that are not the caller's items (a text section's message envelope):
    the notes count ``min_items`` and kept items after them."""
    opens: Callable[[int], bool] | None = None
    """For contiguous sections: whether the item at a keep-order position may be the
    oldest one kept. When the section is cut and its oldest kept item may not open it
    (history may not start with an answer whose question was dropped), that item is
    dropped too, with the reason ``orphan``, and the next one is tried."""
    low_water: float | Callable[[int], int] | None = None
    """Cache-stable cutting (contiguous sections without required items): when the
    section must be cut, keep only the newest items within this share of its room (or
    within the tokens this function gives for the room), so the next turns append to an
    unchanged prefix until the room is full again. Items kept out below the mark have
    the reason ``low_water``."""
    hold: int | None = None
    """With ``low_water``: the previous plan's cut, as the number of newest items it kept.
    While those items fit, exactly they are kept (older ones stay out, reason ``held``),
    so the prefix sent does not change."""


@dataclass(frozen=True, slots=True)
class BudgetSpec:
    """The window and the output request."""

    context_window: int
    requested_output: int
    """max_tokens the caller asked for (already clamped to the model's max output)."""
    min_output_tokens: int = MIN_OUTPUT_TOKENS
    safety_margin: int = SAFETY_MARGIN
    base_tokens: int = 0
    """Fixed input cost outside any section (reply priming, tool schemas)."""
    policy: Policy = "reserve"
    input_cap: int | None = None
    """Most input tokens for optional items to reach (``max_input_tokens``); required
    items may exceed it (the window stays the hard limit)."""
    max_input_tokens: int | None = None
    """The model's own input cap (:attr:`Model.max_input_tokens`, gpt-5: 272,000 of a
    400,000 window): a hard limit like the window; required input above it raises."""
    output_given: bool = True
    """False when the caller named no output (no ``max_tokens``): ``requested_output``
    is then only the most the model may emit, the input is kept down to the floor
    whatever the policy, the output takes what is left, and no "reduced" note is
    written (nothing the caller asked for was reduced)."""

    history_output: int | None = None
    """Set when the output request is larger than the window can give even with no
    optional input (window - required input - margin): optional input is then cut as if
    this much output had been asked for, and the output takes what is left, up to
    ``requested_output`` (see :func:`sensible_output`)."""

    @property
    def floor(self) -> int:
        """The output floor: the minimum, never above the request."""
        return max(0, min(self.min_output_tokens, self.requested_output))

    @property
    def reserved_output(self) -> int:
        """The output optional input must leave room for: the request under ``reserve``
        with a request the caller gave, else the floor."""
        if self.history_output is not None:
            return max(self.floor, self.history_output)
        if self.policy == "reserve" and self.output_given:
            return max(0, self.requested_output)
        return self.floor


@dataclass(frozen=True, slots=True)
class DropRecord:
    """Items a section did not keep: ``count`` items from keep-order position ``start``."""

    section: str
    start: int
    """Position in the section's keep order of the first dropped item."""
    count: int | None
    """How many items; ``None`` for "this one and every later item" (contiguous sections
    whose lazy items were not consumed further)."""
    reason: str
    """``budget`` (hard window), ``share`` (soft target), ``cap``, ``max_items``,
    ``orphan`` (see :attr:`SectionSpec.opens`), ``low_water`` and ``held`` (see
    :attr:`SectionSpec.low_water`)."""


@dataclass(frozen=True, slots=True)
class Allocation:
    """What the solver kept, and the negotiated output."""

    max_tokens: int
    """The output budget to send: at least the floor, at most the request."""
    input_tokens: int
    """Base plus every kept item."""
    kept: dict[str, tuple[int, ...]]
    """Per section, keep-order positions of the kept items."""
    section_tokens: dict[str, int]
    """Per section, tokens of the kept items."""
    dropped: tuple[DropRecord, ...]
    notes: tuple[str, ...] = field(default=())
    """Human-readable notes (soft targets that yielded, output reduced, ...)."""
    spec: BudgetSpec | None = field(default=None, repr=False)
    """The spec this allocation answers (for :meth:`settle`)."""

    def settle(self, input_tokens: int) -> Allocation:
        """This allocation for an input that, rendered, costs ``input_tokens`` (joined
        text may cost less than its parts): the output is negotiated again, its note
        rewritten, and the promise checked, here in the solver as for every allocation.

        Raises:
            ValueError: ``input_tokens`` is above what was allocated (solve again with
                the difference reserved instead).
        """
        if input_tokens == self.input_tokens:
            return self
        if self.spec is None or input_tokens > self.input_tokens:
            raise ValueError(
                f"settle({input_tokens}) needs a solved allocation of at least that much "
                f"input (this one has {self.input_tokens}); reserve the difference and "
                "solve again."
            )
        notes = [n for n in self.notes if not n.startswith(_OUTPUT_NOTE)]
        max_tokens, note = _output(self.spec, input_tokens)
        return replace(
            self,
            max_tokens=max_tokens,
            input_tokens=input_tokens,
            notes=tuple(notes + ([note] if note else [])),
        )


_OUTPUT_NOTE = "max_tokens reduced from "


def _output(spec: BudgetSpec, input_tokens: int) -> tuple[int, str | None]:
    """The output for ``input_tokens`` of input, and its note; the promise checked.

    The one place that computes ``max_tokens``: ``min(request, window - margin - input)``.
    """
    window, margin = spec.context_window, spec.safety_margin
    request = max(0, spec.requested_output)
    max_tokens = min(request, window - margin - input_tokens)
    cap = spec.max_input_tokens
    # The promise, checked on every return; a violation is a bug, never a plan.
    if not (
        input_tokens + max_tokens + margin <= window
        and max_tokens >= spec.floor
        and (cap is None or input_tokens <= cap)
    ):
        raise AssertionError(
            f"tokenflex solver bug: input={input_tokens} max_tokens={max_tokens} "
            f"margin={margin} window={window} floor={spec.floor} input cap={cap}"
        )
    note = None
    if max_tokens < request and spec.output_given:
        note = (
            f"{_OUTPUT_NOTE}{request:,} to {max_tokens:,} to fit {input_tokens:,} input "
            f"tokens in the {window:,}-token window."
        )
    return max_tokens, note


def _overflow(spec: BudgetSpec, required: int, model: str) -> ContextOverflowError:
    room = spec.context_window - spec.safety_margin - spec.floor
    over = required - room
    name = f"{model} " if model else "the model "
    return ContextOverflowError(
        f"Required input needs {required:,} tokens but {name}({spec.context_window:,}) "
        f"leaves {room:,} after the {spec.floor:,}-token output floor and a "
        f"{spec.safety_margin:,}-token margin ({over:,} over). Shorten the required "
        "messages, lower min_output_tokens, mark a section optional, or pass "
        "fallback_models=[...] with a larger window.",
        model=model,
        context_window=spec.context_window,
        required_tokens=required,
        max_tokens=spec.floor,
        safety_margin=spec.safety_margin,
    )


def _over_input_cap(spec: BudgetSpec, required: int, cap: int, model: str) -> ContextOverflowError:
    name = f"{model} " if model else "the model "
    return ContextOverflowError(
        f"Required input needs {required:,} tokens but {name}accepts at most {cap:,} input "
        f"tokens (max_input_tokens, an API limit below its {spec.context_window:,}-token "
        f"window; {required - cap:,} over). Shorten the required messages, mark a section "
        "optional, or pass fallback_models=[...] with a larger input limit.",
        model=model,
        context_window=spec.context_window,
        required_tokens=required,
        max_tokens=spec.floor,
        safety_margin=spec.safety_margin,
    )


def _bisect_section(
    cum: Sequence[int],
    soft_room: int,
    hard_room: int,
    window_room: int,
    min_items: int,
    max_items: int | None,
) -> tuple[int, str | None]:
    """Largest contiguous prefix within the rooms, by bisection; and why it stopped."""
    n = len(cum) - 1
    k = _soft_prefix(cum, soft_room)
    if k < min_items:
        k = max(k, min(min_items, _soft_prefix(cum, hard_room)))
    if max_items is not None and k > max_items:
        return max_items, "max_items"
    if k >= n:
        return n, None
    nxt = cum[k + 1]
    if max_items is not None and k == max_items:
        return k, "max_items"
    if nxt <= hard_room:
        return k, "share"
    return k, "cap" if nxt <= window_room else "budget"


def _soft_prefix(cum: Sequence[int], room: int) -> int:
    """The most leading items within ``room``: the largest ``k`` with ``cum[k] <= room``
    (0 when none is), by the sums' own ``within`` where they have one (a view over
    running sums bisects them in C)."""
    within = getattr(cum, "within", None)
    if within is not None:
        return int(within(room))
    return max(0, bisect.bisect_right(cum, room) - 1)


def _stable_count(
    s: SectionSpec, cum: Sequence[int], k: int, soft_room: int, min_items: int
) -> int:
    """How many of the ``k`` newest items that fit a cache-stable section keeps, once it
    must be cut: the previous cut while it fits, else the newest items within the
    low-water mark; never fewer than ``min_items`` allows."""
    if s.hold is not None and s.hold <= k:
        return s.hold
    if s.low_water is None:
        return k
    room = max(0, soft_room)
    mark = s.low_water(room) if callable(s.low_water) else int(s.low_water * room)
    low = _soft_prefix(cum, mark)
    return max(min(low, k), min(min_items, k))


def _contiguous(
    s: SectionSpec,
    n_req: int,
    items: Iterable[int],
    soft_room: int,
    hard_room: int,
    window_room: int,
) -> tuple[int, int, list[DropRecord], bool]:
    """A contiguous section (history, a truncated text), solved over the prefix sums of
    its optional items (given as :attr:`SectionSpec.cumulative`, else summed from the
    items read lazily as far as the hard room): how many optional items it keeps after
    its ``n_req`` required ones, their tokens, its drop records, and whether it kept
    items beyond its soft share. The one place of the low-water mark, the held cut and
    the orphan rule."""
    name = s.name
    min_items = max(0, s.min_items - n_req)
    max_items = None if s.max_items is None else max(0, s.max_items - n_req)
    cum = s.cumulative if s.cumulative is not None and not n_req else None
    if cum is None:
        cum = _prefix_sums(_within(items, hard_room, max_items))
    n = len(cum) - 1
    records: list[DropRecord] = []
    if not n_req and cum[n] <= hard_room and (max_items is None or n <= max_items):
        # Do no harm: the whole section fits, so it is kept as it is: a soft share, a
        # low-water mark or a held cut apply only when it must be cut. (A section with a
        # required head, a text's envelope, is joined text: its share holds whole too.)
        return n, cum[n], records, False
    k, reason = _bisect_section(cum, soft_room, hard_room, window_room, min_items, max_items)
    yielded_soft = k > _soft_prefix(cum, soft_room)
    if s.low_water is not None and reason is not None:
        fit_k = k
        hard_k = _soft_prefix(cum, hard_room)
        if max_items is not None:
            hard_k = min(hard_k, max_items)
        if s.hold is not None and fit_k < s.hold <= hard_k:
            # The held cut still fits the window: kept, beyond the soft share, so the
            # prefix sent does not change.
            k, reason = s.hold, "held"
        else:
            k = _stable_count(s, cum, k, soft_room, min_items)
        if k < fit_k:
            stable = "held" if k == s.hold else "low_water"
            records.append(DropRecord(name, n_req + k, fit_k - k, stable))
            records.append(DropRecord(name, n_req + fit_k, None, reason))
            reason = "moved"
        yielded_soft = k > _soft_prefix(cum, soft_room) and reason != "held"
    if reason is not None:
        cut = k
        while k > 0 and s.opens is not None and not s.opens(n_req + k - 1):
            k -= 1
        if k < cut:
            records.append(DropRecord(name, n_req + k, cut - k, "orphan"))
        if reason != "moved":
            records.append(DropRecord(name, n_req + cut, None, reason))
    return k, cum[k], records, yielded_soft


def _skipping(
    s: SectionSpec,
    n_req: int,
    items: Iterable[int],
    soft_room: int,
    hard_room: int,
    window_room: int,
) -> tuple[tuple[int, ...], int, list[DropRecord], bool]:
    """A section that skips an item that does not fit and tries the next (documents,
    memories, ranked messages): the kept positions (its ``n_req`` required ones first),
    the optional tokens kept, its drop records, and whether it kept items beyond its
    soft share."""
    positions = list(range(n_req))
    records: list[DropRecord] = []
    taken = 0
    pos = n_req
    yielded_soft = False
    for tokens in items:
        n_kept = len(positions)
        if s.max_items is not None and n_kept >= s.max_items:
            records.append(DropRecord(s.name, pos, 1, "max_items"))
            pos += 1
            continue
        fits_hard = taken + tokens <= hard_room
        fits_soft = taken + tokens <= soft_room
        if fits_soft or (fits_hard and n_kept < s.min_items):
            yielded_soft = yielded_soft or not fits_soft
            positions.append(pos)
            taken += tokens
        else:
            reason = "share" if fits_hard else "cap" if taken + tokens <= window_room else "budget"
            records.append(DropRecord(s.name, pos, 1, reason))
        pos += 1
    return tuple(positions), taken, records, yielded_soft


def _section_note(s: SectionSpec, n_kept: int, cut: bool, yielded_soft: bool) -> str | None:
    """The note a section's solve leaves: ``min_items`` yielded to the window, or items
    kept beyond the soft share to honour it (counts without the section's ``offset``)."""
    if s.min_items and n_kept < s.min_items and cut:
        return (
            f"{s.name}: min_items={s.min_items - s.offset} yields to the window; kept "
            f"{n_kept - s.offset}."
        )
    if yielded_soft:
        return (
            f"{s.name}: kept {n_kept - s.offset} items beyond its soft share "
            f"({s.share}) to honour min_items={s.min_items - s.offset}."
        )
    return None


def _within(items: Iterable[int], room: int, max_items: int | None) -> list[int]:
    """Items read (lazily) until their sum passes ``room`` or there are more than
    ``max_items``: the first item that does not fit is read too, so the caller knows
    why the section stopped."""
    out: list[int] = []
    total = 0
    for t in items:
        out.append(t)
        total += t
        if total > room or (max_items is not None and len(out) > max_items):
            break
    return out


def _prefix_sums(tokens: Sequence[int]) -> list[int]:
    out = [0]
    for t in tokens:
        out.append(out[-1] + t)
    return out


def solve(sections: Sequence[SectionSpec], spec: BudgetSpec, *, model: str = "") -> Allocation:
    """Allocate the window between sections and the output.

    Args:
        sections: The prompt's sections with item token counts in keep order.
        spec: Window, output request, floor, margin, base cost and policy.
        model: Model name, only for error messages.

    Returns:
        An :class:`Allocation` that keeps the promise in the module docstring.

    Raises:
        ContextOverflowError: required input plus the floor does not fit.

    >>> from tokenflex.budget import BudgetSpec, SectionSpec, solve
    >>> a = solve([SectionSpec("history", [400, 300, 5000], contiguous=True)],
    ...           BudgetSpec(context_window=4096, requested_output=1000))
    >>> a.kept["history"], a.max_tokens
    ((0, 1), 1000)
    """
    window, margin = spec.context_window, spec.safety_margin
    floor = spec.floor
    if window <= 0:
        raise ValueError(f"context_window must be positive, got {window!r}")

    # Pass 1: required items. Sequences are indexed; lazy iterables are read only as far
    # as their required prefix.
    iters: dict[str, Iterable[int]] = {}
    required_tokens: dict[str, list[int]] = {}
    for s in sections:
        if s.required == -1:
            req = list(s.items)
            iters[s.name] = ()
        elif s.required > 0:
            it = iter(s.items)
            req = [next(it) for _ in range(s.required)]
            iters[s.name] = it
        else:
            req = []
            iters[s.name] = s.items
        required_tokens[s.name] = req

    used = spec.base_tokens + sum(sum(v) for v in required_tokens.values())
    if used + floor + margin > window:
        raise _overflow(spec, used, model)
    if spec.max_input_tokens is not None and used > spec.max_input_tokens:
        raise _over_input_cap(spec, used, spec.max_input_tokens, model)

    # Room for optional items: the reserve policy keeps the whole request for the output,
    # flex lets the output shrink to the floor. Soft shares are shares of that room.
    hard_total = window - margin - spec.reserved_output
    soft_total = hard_total
    for cap in (spec.input_cap, spec.max_input_tokens):
        if cap is not None:
            hard_total = min(hard_total, cap)
            soft_total = min(soft_total, cap)

    reserved = {s.name: max(0, s.min_tokens - sum(required_tokens[s.name])) for s in sections}
    order = sorted(range(len(sections)), key=lambda i: -sections[i].priority)

    kept: dict[str, tuple[int, ...]] = {}
    section_tokens: dict[str, int] = {}
    dropped: list[DropRecord] = []
    notes: list[str] = []

    for idx in order:
        s = sections[idx]
        req = required_tokens[s.name]
        reserved.pop(s.name, None)
        later_reserve = sum(reserved.values())
        hard_room = window_room = hard_total - used - later_reserve
        soft_room = soft_total - used - later_reserve
        if s.cap is not None:
            cap_room = s.cap - sum(req)
            hard_room = min(hard_room, cap_room)
            soft_room = min(soft_room, cap_room)
        if s.share is not None:
            soft_room = int(s.share * max(0, soft_room))
        soft_room = min(soft_room, hard_room)

        if s.contiguous:
            k, taken, records, yielded_soft = _contiguous(
                s, len(req), iters[s.name], soft_room, hard_room, window_room
            )
            positions: tuple[int, ...] = tuple(range(len(req) + k))
        else:
            positions, taken, records, yielded_soft = _skipping(
                s, len(req), iters[s.name], soft_room, hard_room, window_room
            )
        dropped += records
        note = _section_note(s, len(positions), bool(records), yielded_soft)
        if note:
            notes.append(note)
        used += taken
        kept[s.name] = positions
        section_tokens[s.name] = sum(req) + taken

    max_tokens, note = _output(spec, used)
    if note:
        notes.append(note)
    return Allocation(
        max_tokens=max_tokens,
        input_tokens=used,
        kept=kept,
        section_tokens=section_tokens,
        dropped=tuple(dropped),
        notes=tuple(notes),
        spec=spec,
    )
