"""What a request costs, from the registry's per-million-token prices, and what trimming saved.

Prices are estimates: the registry's list prices in USD per million tokens, input and
output. A model without a price gives ``None`` amounts rather than a made-up zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .budget import MAX_TOKEN_COUNT
from .errors import InvalidInputError
from .models import Model, get_model

__all__ = [
    "CacheCost",
    "Cost",
    "Savings",
    "cache_cost",
    "cached_tokens",
    "estimate_cost",
    "savings",
]

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
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKEN_COUNT:
        raise InvalidInputError(
            f"{name} must be a non-negative int up to {MAX_TOKEN_COUNT:,}, got {value!r:.80}."
        )
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


@dataclass(frozen=True, slots=True)
class CacheCost:
    """Predicted input cost of one request whose leading tokens a provider has cached."""

    model: str
    input_tokens: int
    cached_tokens: int
    """Leading input tokens predicted to be read from the prompt cache."""
    cached_usd: float | None
    """Those tokens at the cache read price (None: no price known)."""
    written_usd: float | None
    """The other input tokens, at the cache write price where the provider charges one
    (they become the next request's cached prefix), else at the input price."""
    input_usd: float | None
    """``cached_usd + written_usd``."""
    uncached_usd: float | None
    """The same input with no cache at all, at the input price."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field."""
        return {
            "model": self.model,
            "input_tokens": self.input_tokens,
            "cached_tokens": self.cached_tokens,
            "cached_usd": self.cached_usd,
            "written_usd": self.written_usd,
            "input_usd": self.input_usd,
            "uncached_usd": self.uncached_usd,
        }


def cached_tokens(model: str | Model, prefix_tokens: int) -> int:
    """Of a prefix shared with the previous request, the tokens a provider would read
    from its cache: all of them, or none below the model's ``cache_min_tokens``.

    >>> from tokenflex import Model
    >>> cached_tokens(Model("m", 8192, cache_min_tokens=1024), 900)
    0
    """
    m = get_model(model)
    prefix = _tokens("prefix_tokens", prefix_tokens)
    if m.cache_min_tokens is not None and prefix < m.cache_min_tokens:
        return 0
    return prefix


def cache_cost(model: str | Model, input_tokens: int, cached: int) -> CacheCost:
    """Predicted input cost when the first ``cached`` of ``input_tokens`` are read from
    the provider's prompt cache.

    A model without a cache read price is priced as if reads cost the input price.

    >>> from tokenflex import Model
    >>> m = Model("m", 8192, input_price=3.0, cache_read_price=0.3, cache_write_price=3.75)
    >>> c = cache_cost(m, 10_000, 8_000)
    >>> round(c.input_usd, 6), round(c.uncached_usd, 6)
    (0.0099, 0.03)
    """
    m = get_model(model)
    total = _tokens("input_tokens", input_tokens)
    hit = min(_tokens("cached", cached), total)
    read = m.cache_read_price if m.cache_read_price is not None else m.input_price
    write = m.cache_write_price if m.cache_write_price is not None else m.input_price
    cached_usd, written_usd = _price(hit, read), _price(total - hit, write)
    both = None if cached_usd is None or written_usd is None else cached_usd + written_usd
    return CacheCost(
        m.name, total, hit, cached_usd, written_usd, both, _price(total, m.input_price)
    )
