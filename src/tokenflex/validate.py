"""Budget validation for multi-component prompts against one total budget.

A prompt made of named components (base, style, analysis, section, RAG...) plus an
expected output is checked against a *total* budget (input + output). The status follows
this rule order:

1. total > ``fallback_total_at`` × budget (96%) → ``FALLBACK``;
2. input > ``fallback_input_at`` × budget (90%) → ``FALLBACK``;
3. usage > ``warning_at`` (85%) → ``WARNING``;
4. otherwise ``OK``; an input above ``input_cap`` turns ``OK`` into ``WARNING``.

Thresholds are compared exactly (``Fraction`` of the decimal you wrote), so 96% of
120,000 is 115,200, not 115,199.99.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from .budget import MAX_TOKEN_COUNT
from .errors import InvalidInputError
from .models import Model
from .tokenizers import CountCache, Tokenizer

__all__ = ["Status", "Validation", "rag_budget", "validate_budget"]

Status = Literal["OK", "WARNING", "FALLBACK"]


@dataclass(frozen=True, slots=True)
class Validation:
    """The verdict on one request's token budget."""

    components: dict[str, int]
    """Tokens per component, in the order given (texts counted with the tokenizer)."""
    total_input: int
    """Sum of the components."""
    expected_output: int
    """Output tokens the request expects to generate."""
    total_tokens: int
    """``total_input + expected_output``."""
    total_budget: int
    """The total (input + output) budget."""
    input_cap: int | None
    """Most input tokens wanted (e.g. 90,000 of 120,000), if any."""
    usage_percent: float
    """``100 × total_tokens / total_budget``."""
    status: Status
    """``OK``, ``WARNING`` or ``FALLBACK`` (use a larger-context model for this request)."""
    valid: bool
    """``total_tokens <= total_budget`` (a FALLBACK may still be valid)."""
    message: str
    """One line with the numbers and what to do."""
    input_trigger: float
    """Input above this many tokens means FALLBACK (``fallback_input_at × budget``)."""
    total_trigger: float
    """Total above this many tokens means FALLBACK (``fallback_total_at × budget``)."""
    warning_trigger: float
    """Total above this many tokens means WARNING (``warning_at × budget``)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field."""
        return {
            "components": dict(self.components),
            "total_input": self.total_input,
            "expected_output": self.expected_output,
            "total_tokens": self.total_tokens,
            "total_budget": self.total_budget,
            "input_cap": self.input_cap,
            "usage_percent": self.usage_percent,
            "status": self.status,
            "valid": self.valid,
            "message": self.message,
            "input_trigger": self.input_trigger,
            "total_trigger": self.total_trigger,
            "warning_trigger": self.warning_trigger,
        }


def _fraction(name: str, value: float) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise InvalidInputError(f"{name} must be a fraction in (0, 1], got {value!r}.")
    # repr() is the shortest decimal that round-trips: 0.96 compares as exactly 24/25.
    return Fraction(repr(float(value)))


def _count(value: Any, name: str, tokenizer: Any) -> int:
    if isinstance(value, str):
        from .documents.packing import resolve_tokenizer

        return resolve_tokenizer(tokenizer).count(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKEN_COUNT:
        raise InvalidInputError(
            f"Component {name!r:.80} must be a token count (int 0 to {MAX_TOKEN_COUNT:,}) or a "
            f"text, got {value!r:.80}."
        )
    return value


def _num(x: Fraction) -> str:
    f = float(x)
    return f"{f:,.0f}" if f.is_integer() else f"{f:,.1f}"


def validate_budget(
    components: Mapping[str, int | str],
    *,
    expected_output: int,
    total_budget: int,
    input_cap: int | None = None,
    warning_at: float = 0.85,
    fallback_input_at: float = 0.90,
    fallback_total_at: float = 0.96,
    tokenizer: str | CountCache | Tokenizer | Model = "estimate",
) -> Validation:
    """Check prompt components plus the expected output against a total budget.

    Args:
        components: Name → token count, or name → text (counted with ``tokenizer``).
        expected_output: Output tokens the request expects.
        total_budget: Input + output budget (e.g. 120,000).
        input_cap: Most input tokens wanted; above it, ``OK`` becomes ``WARNING``.
        warning_at: Usage fraction above which the status is ``WARNING``.
        fallback_input_at: Input above this fraction of the budget means ``FALLBACK``.
        fallback_total_at: Total above this fraction of the budget means ``FALLBACK``.
        tokenizer: Counts text components (a name, CountCache, tokenizer or Model).

    Returns:
        A :class:`Validation` with usage, status and message.

    Raises:
        InvalidInputError: negative counts, a non-positive budget, bad thresholds.

    >>> from tokenflex.validate import validate_budget
    >>> v = validate_budget({"base": 5_000, "style": 1_000, "analyze": 15_000,
    ...                      "section": 3_000, "rag": 0},
    ...                     expected_output=20_000, total_budget=120_000)
    >>> v.status, round(v.usage_percent), v.message
    ('OK', 37, 'Token usage at 36.7% (44,000/120,000). Within budget.')
    """
    if not isinstance(components, Mapping):
        raise InvalidInputError(
            f"components must be a mapping of name to token count or text, got "
            f"{type(components).__name__}. Pass {{'base': 5_000, 'rag': '...'}}."
        )
    if (
        isinstance(total_budget, bool)
        or not isinstance(total_budget, int)
        or not 0 < total_budget <= MAX_TOKEN_COUNT
    ):
        raise InvalidInputError(
            f"total_budget must be a positive int up to {MAX_TOKEN_COUNT:,}, "
            f"got {total_budget!r:.80}."
        )
    output = _count(expected_output, "expected_output", tokenizer)
    if input_cap is not None and (
        isinstance(input_cap, bool) or not isinstance(input_cap, int) or input_cap < 0
    ):
        raise InvalidInputError(f"input_cap must be a non-negative int or None, got {input_cap!r}.")
    warn = _fraction("warning_at", warning_at)
    f_input = _fraction("fallback_input_at", fallback_input_at)
    f_total = _fraction("fallback_total_at", fallback_total_at)

    counts = {name: _count(v, name, tokenizer) for name, v in components.items()}
    total_input = sum(counts.values())
    total = total_input + output
    usage = 100 * total / total_budget
    input_trigger = f_input * total_budget
    total_trigger = f_total * total_budget
    warning_trigger = warn * total_budget
    budget_s = f"{total_budget:,}"

    status: Status
    if total > total_trigger:
        status = "FALLBACK"
        message = (
            f"Total {total:,} exceeds the {_num(total_trigger)} threshold "
            f"({float(f_total):.0%} of {budget_s}; {usage:.1f}% usage). "
            "Use a larger-context fallback model for this request."
        )
    elif total_input > input_trigger:
        status = "FALLBACK"
        message = (
            f"Input {total_input:,} exceeds the {_num(input_trigger)} threshold "
            f"({float(f_input):.0%} of {budget_s}). "
            "Use a larger-context fallback model for this request."
        )
    elif total > warning_trigger:
        status = "WARNING"
        largest = max(counts, key=lambda k: counts[k]) if counts else "input"
        message = (
            f"Token usage at {usage:.1f}% ({total:,}/{budget_s}). Consider reducing "
            f"{largest!r} ({counts.get(largest, 0):,} tokens)."
        )
    else:
        status = "OK"
        message = f"Token usage at {usage:.1f}% ({total:,}/{budget_s}). Within budget."
        if input_cap is not None and total_input > input_cap:
            status = "WARNING"
            message = (
                f"Input {total_input:,} exceeds the input cap {input_cap:,} "
                f"({usage:.1f}% usage, {total:,}/{budget_s}). Reduce the input, e.g. give "
                "RAG rag_budget(...) tokens."
            )

    return Validation(
        components=counts,
        total_input=total_input,
        expected_output=output,
        total_tokens=total,
        total_budget=total_budget,
        input_cap=input_cap,
        usage_percent=usage,
        status=status,
        valid=total <= total_budget,
        message=message,
        input_trigger=float(input_trigger),
        total_trigger=float(total_trigger),
        warning_trigger=float(warning_trigger),
    )


def rag_budget(used_tokens: int, *, input_cap: int, rag_cap: int) -> int:
    """Tokens the documents (RAG) section may take: ``min(rag_cap, max(0, input_cap - used))``.

    RAG gets ``min(cap, what is left)``; ``used_tokens`` is every other input component.

    >>> from tokenflex.validate import rag_budget
    >>> rag_budget(24_000, input_cap=90_000, rag_cap=40_000)
    40000
    >>> rag_budget(70_000, input_cap=90_000, rag_cap=40_000)
    20000
    """
    for name, v in (("used_tokens", used_tokens), ("input_cap", input_cap), ("rag_cap", rag_cap)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InvalidInputError(f"{name} must be a non-negative int, got {v!r}.")
    return min(rag_cap, max(0, input_cap - used_tokens))
