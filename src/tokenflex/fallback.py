"""Fallback models: when a request does not fit, pick a larger-context model for it alone.

A request that overflows its model can go to a larger-context model for that request only.
:func:`choose_model` makes that choice before any call: the primary model if it fits,
otherwise the cheapest model of the chain (by input price; unknown prices last; ties in
chain order) whose window holds the required input plus the output floor plus the
safety margin; with a switch-early share, a model whose required input is above that
share of its window is passed over for a later one that stays under it. The input is
recounted for every model, because tokenizers differ.

The policy is written once, :func:`pick_model`: :func:`choose_model` calls it with
counts, ``fit(fallback_models=...)`` with one fitting pass per model, so the two pick
the same model and say why in the same words.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .budget import MAX_TOKEN_COUNT, MIN_OUTPUT_TOKENS, SAFETY_MARGIN
from .errors import ContextOverflowError, InvalidInputError
from .models import Model, get_model

__all__ = [
    "Candidate",
    "FallbackChoice",
    "Pick",
    "choose_model",
    "fallback_chain",
    "no_model_fits",
    "pick_model",
]

RequiredInput = Callable[[Model], int] | int


@dataclass(frozen=True, slots=True)
class Candidate:
    """One model that was checked."""

    model: str
    context_window: int
    required_input_tokens: int
    """The request's input, counted with this model's tokenizer."""
    fits: bool
    """``required + min_output + margin <= window`` and the model can emit the floor."""
    input_price: float | None
    """USD per million input tokens (``None``: unknown)."""
    max_output_tokens: int | None = None
    """The model's output limit (``None``: only the window limits)."""


@dataclass(frozen=True, slots=True)
class FallbackChoice:
    """The model to use for this request, and why."""

    model: Model
    """The chosen model."""
    primary: Model
    """The model the caller asked for."""
    switched: bool
    """True when a fallback replaces the primary for this request."""
    required_input_tokens: int
    """Input tokens counted with the chosen model's tokenizer."""
    output_room: int
    """Tokens left for the output: ``window - required - margin`` (capped by the model's
    max output); at least ``min_output_tokens``."""
    reason: str
    """One sentence with the numbers."""
    considered: tuple[Candidate, ...]
    """Models checked, in the order they were checked (primary first, then by price)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {
            "model": self.model.name,
            "primary": self.primary.name,
            "switched": self.switched,
            "required_input_tokens": self.required_input_tokens,
            "output_room": self.output_room,
            "reason": self.reason,
            "considered": [
                {
                    "model": c.model,
                    "context_window": c.context_window,
                    "required_input_tokens": c.required_input_tokens,
                    "fits": c.fits,
                    "input_price": c.input_price,
                    "max_output_tokens": c.max_output_tokens,
                }
                for c in self.considered
            ],
        }


def _check_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKEN_COUNT:
        raise InvalidInputError(
            f"{name} must be a non-negative int up to {MAX_TOKEN_COUNT:,}, got {value!r:.80}."
        )
    return value


def _why_not(c: Candidate, floor: int, margin: int) -> str:
    over = c.required_input_tokens + floor + margin - c.context_window
    if over > 0:
        return f"{c.model} ({c.context_window:,}): {c.required_input_tokens:,} input, {over:,} over"
    return f"{c.model}: max output {c.max_output_tokens:,} is below the floor"


@dataclass(frozen=True, slots=True)
class Pick:
    """What the fallback policy (:func:`pick_model`) decided."""

    index: int | None
    """The serving model's place in the models tried (0: the primary); None: none fits."""
    considered: tuple[Candidate, ...]
    """The models checked, in order: ``considered[index]`` is the one that serves."""
    over_share: bool
    """The serving model's required input is above the share: none under it fits."""
    reason: str
    """One sentence with the numbers: why this model serves (empty when none does)."""


def pick_model(
    models: Sequence[Model],
    check: Callable[[Model], Candidate],
    *,
    floor: int,
    margin: int,
    share: float | None = None,
    share_option: str = "max_input_share",
) -> Pick:
    """The fallback policy, for :func:`choose_model` and for ``fit(fallback_models=...)``
    alike: the first of ``models`` (the primary, then :func:`fallback_chain`'s order,
    cheapest first) that fits, where a model whose required input is above ``share`` of
    its window is passed over for a later one that stays under it; if none does, the
    first that fits serves.

    Args:
        models: The primary, then the fallbacks in the order they are tried.
        check: Counts the request for one model; called lazily, in order, and not for
            the models after the one that serves.
        floor: The output floor (for the reason).
        margin: The safety margin (for the reason).
        share: The switch-early share (None: off).
        share_option: How the caller calls ``share`` (for the reason).
    """
    option = "" if share is None else f"{share_option}={share:g}"
    considered: list[Candidate] = []
    backup: int | None = None
    for i, m in enumerate(models):
        c = check(m)
        considered.append(c)
        if not c.fits:
            continue
        if share is not None and c.required_input_tokens > share * c.context_window:
            if backup is None:  # over the share: a model under it is preferred
                backup = i
            continue
        reason = _reason(considered, i, floor, margin, option, kept=False)
        return Pick(i, tuple(considered), False, reason)
    if backup is None:
        return Pick(None, tuple(considered), False, "")
    reason = _reason(considered, backup, floor, margin, option, kept=True)
    return Pick(backup, tuple(considered), True, reason)


def _reason(
    considered: Sequence[Candidate], i: int, floor: int, margin: int, option: str, *, kept: bool
) -> str:
    """Why ``considered[i]`` serves, with the numbers (``option``: the switch-early share
    as the caller names it; ``kept``: the model is above it, none under it fits)."""
    first, m = considered[0], considered[i]

    def need(req: int) -> str:
        return f"{req:,} input + {floor:,} output floor + {margin:,} margin"

    def share_of(c: Candidate) -> str:
        return f"{c.model}'s required input is {c.required_input_tokens / c.context_window:.0%}"

    if kept and i == 0:
        return (
            f"{share_of(m)} of its window, above {option}, but no fallback model fits under "
            f"it; kept {m.model}."
        )
    if i == 0:
        return f"{m.model} ({m.context_window:,}) fits {need(m.required_input_tokens)}."
    price = "unknown price" if m.input_price is None else f"${m.input_price:g}/M input"
    using = f"using {m.model} ({m.context_window:,}, {price}) for this request"
    if first.fits:  # it fits, above the share
        return f"{share_of(first)} of its window, above {option}; {using}."
    return (
        f"{first.model} ({first.context_window:,}) cannot hold "
        f"{need(first.required_input_tokens)}; {using}: the cheapest fallback that fits "
        f"{need(m.required_input_tokens)}."
    )


def choose_model(
    primary: str | Model,
    fallbacks: Sequence[str | Model] = (),
    *,
    required_input_tokens_by_model: RequiredInput,
    min_output_tokens: int = MIN_OUTPUT_TOKENS,
    safety_margin: int = SAFETY_MARGIN,
    max_input_share: float | None = None,
) -> FallbackChoice:
    """The primary model if the request fits it, else the cheapest fallback that fits
    (the policy of :func:`pick_model`, which ``fit(fallback_models=...)`` follows too).

    Args:
        primary: The model the caller asked for.
        fallbacks: The fallback chain, in preference order for equal prices.
        required_input_tokens_by_model: Input tokens the request needs, as a callable
            ``model -> tokens`` (recounted per model: tokenizers differ) or one int.
        min_output_tokens: The output floor the chosen model must leave room for.
        safety_margin: Tokens kept free in the window.
        max_input_share: Switch early: a model whose required input is above
            this share of its window (e.g. 0.9) is passed over for a model in the
            chain that stays under it; if none does, the plain fit rule decides.

    Returns:
        A :class:`FallbackChoice` naming the model and the reason.

    Raises:
        ContextOverflowError: no model in the chain fits (the message has the numbers).

    >>> from tokenflex.fallback import choose_model
    >>> c = choose_model("gpt-4", ["gpt-4o"], required_input_tokens_by_model=9_000)
    >>> c.model.name, c.switched
    ('gpt-4o', True)
    """
    floor = _check_int("min_output_tokens", min_output_tokens)
    margin = _check_int("safety_margin", safety_margin)
    first = get_model(primary)
    if isinstance(fallbacks, str | Model) or not isinstance(fallbacks, Sequence):
        raise InvalidInputError(
            f"fallbacks must be a list of model names or Models, got {type(fallbacks).__name__}"
            f" {fallbacks!r:.80}. Pass e.g. ['gpt-4o']."
        )
    if max_input_share is not None and (
        isinstance(max_input_share, bool)
        or not isinstance(max_input_share, int | float)
        or not 0 < max_input_share <= 1
    ):
        raise InvalidInputError(f"max_input_share={max_input_share!r} must be in (0, 1], e.g. 0.9.")
    models = [first, *fallback_chain(first, [get_model(f) for f in fallbacks])]

    def check(m: Model) -> Candidate:
        if callable(required_input_tokens_by_model):
            req = _check_int(f"required input for {m.name!r}", required_input_tokens_by_model(m))
        else:
            req = _check_int("required_input_tokens_by_model", required_input_tokens_by_model)
        fits = req + floor + margin <= m.context_window and (
            m.max_output_tokens is None or m.max_output_tokens >= floor
        )
        return Candidate(m.name, m.context_window, req, fits, m.input_price, m.max_output_tokens)

    pick = pick_model(models, check, floor=floor, margin=margin, share=max_input_share)
    if pick.index is None:
        raise no_model_fits(pick.considered, floor, margin, primary=first.name)
    m, c = models[pick.index], pick.considered[pick.index]
    room = m.context_window - c.required_input_tokens - margin
    if m.max_output_tokens is not None:
        room = min(room, m.max_output_tokens)
    return FallbackChoice(
        m, first, m is not first, c.required_input_tokens, room, pick.reason, pick.considered
    )


def fallback_chain(primary: Model, fallbacks: Sequence[Model]) -> list[Model]:
    """The fallbacks in the order they are tried: cheapest input first, unknown prices
    last, ties in the given order; the primary and repeats left out."""
    chain: list[Model] = []
    for m in fallbacks:
        if m.name != primary.name and all(m.name != c.name for c in chain):
            chain.append(m)
    # sorted() is stable, so ties keep chain order
    return sorted(chain, key=lambda m: (m.input_price is None, m.input_price or 0.0))


def no_model_fits(
    considered: Sequence[Candidate], floor: int, margin: int, *, primary: str
) -> ContextOverflowError:
    """The error when no model of the chain fits, with every model's shortfall."""
    rows = "; ".join(_why_not(c, floor, margin) for c in considered)
    smallest = min(c.required_input_tokens for c in considered) + floor + margin
    widest = max(considered, key=lambda c: c.context_window)
    return ContextOverflowError(
        f"No model fits the request with a {floor:,}-token output floor and a "
        f"{margin:,}-token margin: {rows}. Shorten the input, lower min_output_tokens, or "
        f"add a fallback model with a window of at least {smallest:,} tokens.",
        model=primary,
        context_window=widest.context_window,
        required_tokens=widest.required_input_tokens,
        max_tokens=floor,
        safety_margin=margin,
    )
