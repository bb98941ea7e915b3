"""What a request costs, from the registry's per-million-token prices, and what trimming saved.

Prices are estimates: the registry's list prices in USD per million tokens, input and
output. A model without a price gives ``None`` amounts rather than a made-up zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import InvalidInputError
from .models import Model, get_model

__all__ = ["Cost", "Savings", "estimate_cost", "savings"]

_PER = 1_000_000


@dataclass(frozen=True, slots=True, repr=False)
class Cost:
    """Estimated USD cost of one request."""

    model: str
    """Model name the prices come from."""
    input_tokens: int
    output_tokens: int
    """Output tokens priced (for a plan: the reserved ``max_tokens``, an upper bound)."""
    input_usd: float | None
    """Input cost, or ``None`` when the model has no input price."""
    output_usd: float | None
    """Output cost, or ``None`` when the model has no output price."""
    total_usd: float | None
    """``input_usd + output_usd``, or ``None`` when either is unknown."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field."""
        return {
            "model": self.model,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "input_usd": self.input_usd,
            "output_usd": self.output_usd,
            "total_usd": self.total_usd,
        }

    def __repr__(self) -> str:
        return (
            f"Cost({self.model!r}: {_usd(self.total_usd)} = input {_usd(self.input_usd)} "
            f"({self.input_tokens:,} tokens) + output {_usd(self.output_usd)} "
            f"({self.output_tokens:,} tokens))"
        )


@dataclass(frozen=True, slots=True)
class Savings:
    """What sending the trimmed input saves compared to sending everything."""

    model: str
    saved_tokens: int
    """``full_input_tokens - sent_input_tokens``."""
    saved_percent: float
    """Share of the full input not sent (0 when the full input is empty)."""
    full_usd: float | None
    """Input cost of sending everything (``None``: no input price)."""
    sent_usd: float | None
    """Input cost of what is sent."""
    saved_usd: float | None
    """``full_usd - sent_usd``."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field."""
        return {
            "model": self.model,
            "saved_tokens": self.saved_tokens,
            "saved_percent": self.saved_percent,
            "full_usd": self.full_usd,
            "sent_usd": self.sent_usd,
            "saved_usd": self.saved_usd,
        }


def _usd(x: float | None) -> str:
    return "unknown" if x is None else f"${x:,.6f}".rstrip("0").rstrip(".")


def _tokens(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"{name} must be a non-negative int, got {value!r}.")
    return value


def _price(tokens: int, per_million: float | None) -> float | None:
    return None if per_million is None else tokens * per_million / _PER


def estimate_cost(model: str | Model, input_tokens: int, output_tokens: int = 0) -> Cost:
    """Estimated cost of sending ``input_tokens`` and generating ``output_tokens``.

    Args:
        model: A model name (registry lookup) or a :class:`~tokenflex.models.Model`.
        input_tokens: Prompt tokens.
        output_tokens: Output tokens (a plan prices its reserved ``max_tokens``).

    Returns:
        A :class:`Cost`; amounts are ``None`` when the model has no price.

    >>> from tokenflex.cost import estimate_cost
    >>> estimate_cost("gpt-4o", 100_000, 1_000).total_usd
    0.26
    """
    m = get_model(model)
    i = _tokens("input_tokens", input_tokens)
    o = _tokens("output_tokens", output_tokens)
    input_usd, output_usd = _price(i, m.input_price), _price(o, m.output_price)
    total = None if input_usd is None or output_usd is None else input_usd + output_usd
    return Cost(m.name, i, o, input_usd, output_usd, total)


def savings(model: str | Model, sent_input_tokens: int, full_input_tokens: int) -> Savings:
    """Input tokens and dollars saved by sending ``sent`` instead of ``full`` tokens.

    Sending more than the full input (a summary added, say) gives negative savings.

    >>> from tokenflex.cost import savings
    >>> s = savings("gpt-4o", 20_000, 100_000)
    >>> s.saved_tokens, s.saved_percent, s.saved_usd
    (80000, 80.0, 0.2)
    """
    m = get_model(model)
    sent = _tokens("sent_input_tokens", sent_input_tokens)
    full = _tokens("full_input_tokens", full_input_tokens)
    full_usd, sent_usd = _price(full, m.input_price), _price(sent, m.input_price)
    return Savings(
        model=m.name,
        saved_tokens=full - sent,
        saved_percent=100 * (full - sent) / full if full else 0.0,
        full_usd=full_usd,
        sent_usd=sent_usd,
        saved_usd=_price(full - sent, m.input_price),
    )
