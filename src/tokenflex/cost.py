"""What a request costs, from the registry's per-million-token prices, and what trimming saved.

Prices are estimates: the registry's list prices in USD per million tokens, input and
output. A model without a price gives ``None`` amounts rather than a made-up zero.
"""

from __future__ import annotations

import math
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
    "cache_kept",
    "cached_tokens",
    "estimate_cost",
    "savings",
    "stable_mark",
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


def cache_kept(model: str | Model, input_tokens: int, age_s: float) -> bool:
    """Whether the provider still holds a request's prefix in its cache, ``age_s`` seconds
    later: not if the request was shorter than the model's ``cache_min_tokens`` (nothing
    was cached) or older than its ``cache_ttl_s`` (the cache expired). Unknown limits
    count as kept.

    A cache-stable fit holds its previous cut only to keep a cache: with none kept, a
    rewrite throws nothing away, and the fit keeps all the history that fits.

    >>> from tokenflex import Model
    >>> m = Model("m", 200_000, cache_min_tokens=1024, cache_ttl_s=300)
    >>> cache_kept(m, 5_000, 60), cache_kept(m, 5_000, 301), cache_kept(m, 900, 60)
    (True, False, False)
    """
    m = get_model(model)
    if m.cache_min_tokens is not None and input_tokens < m.cache_min_tokens:
        return False
    return m.cache_ttl_s is None or age_s <= m.cache_ttl_s


STABLE_MARK_RANGE = (0.25, 0.95)
"""The shares of the room :func:`stable_mark` keeps to: at least a quarter of the history
whatever the prices, and room for at least a twentieth to grow."""


def stable_mark(model: str | Model, room: int, growth: float) -> int | None:
    """The history tokens a cache-stable cut keeps, by expected cost: the mark at which
    the history kept is worth most over what it costs, given the model's cache prices and
    how fast the conversation grows (``growth`` tokens appended per request). None when
    the prices are not known (a fixed share applies).

    The model, in units of the input price: after a cut to ``L`` of the ``room``, the
    next ``(room - L) / growth`` requests append to an unchanged prefix, and then the cut
    moves again and the kept ``L`` are written to the cache once more (at the write price
    ``w`` instead of the read price ``r``). A token kept in the history is worth what
    sending it costs without a cache, its input price: the user sends it for that. Per
    request, rewriting costs ``(w - r) L growth / (room - L)``; the kept history is worth
    ``(1 - r) (L + room) / 2`` more than it costs to read. The best ``L`` (the economic
    order quantity) leaves ``sqrt(2 (w - r) growth room / (1 - r))`` tokens of room to
    grow into, within :data:`STABLE_MARK_RANGE` of the room.

    So a cache that is dear to rewrite, or a conversation that grows fast, cuts deeper
    (fewer rewrites); a slowly growing one keeps more. With Anthropic's prices (reads
    0.1x, writes 1.25x) a 7,000-token room growing 400 tokens a request keeps 62%:

    >>> from tokenflex import Model
    >>> m = Model("m", 8192, input_price=3.0, cache_read_price=0.3, cache_write_price=3.75)
    >>> stable_mark(m, 7_000, 400.0), stable_mark(m, 7_000, 100.0), stable_mark(m, 28_000, 400.0)
    (4325, 5662, 22650)
    """
    m = get_model(model)
    price, read = m.input_price, m.cache_read_price
    if not price or read is None or room <= 0 or not growth > 0:
        return None
    write = m.cache_write_price if m.cache_write_price is not None else price
    r, w = read / price, write / price
    if r >= 1 or w <= r:
        return None  # a cache that saves nothing: nothing to trade
    gap = math.sqrt(2 * (w - r) * growth * room / (1 - r))
    lo, hi = STABLE_MARK_RANGE
    return int(room * min(hi, max(lo, 1 - gap / room)))
