from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenflex import Model, register_model
from tokenflex.cost import STABLE_MARK_RANGE, cache_kept, estimate_cost, savings, stable_mark
from tokenflex.errors import InvalidInputError


@pytest.mark.parametrize(
    ("model", "inp", "out", "expected"),
    [
        pytest.param("gpt-4o", 1_000_000, 0, (2.5, 0.0, 2.5), id="gpt-4o-1M-input"),
        pytest.param("gpt-4o", 100_000, 1_000, (0.25, 0.01, 0.26), id="gpt-4o-mixed"),
        pytest.param("gpt-4", 8_000, 192, (0.24, 0.01152, 0.25152), id="gpt-4-full-window"),
    ],
)
def test_estimate_cost(
    model: str, inp: int, out: int, expected: tuple[float, float, float]
) -> None:
    c = estimate_cost(model, inp, out)
    assert (c.input_usd, c.output_usd, c.total_usd) == pytest.approx(expected)
    assert c.input_tokens == inp and c.output_tokens == out


def test_no_price_gives_none() -> None:
    c = estimate_cost("deepseek-coder:6.7b", 1_000, 100)
    assert c.input_usd is None and c.output_usd is None and c.total_usd is None
    assert "unknown" in repr(c)


def test_partial_price() -> None:
    register_model(name="half-priced", context_window=1_000, input_price=1.0)
    c = estimate_cost("half-priced", 1_000_000, 10)
    assert c.input_usd == 1.0 and c.output_usd is None and c.total_usd is None


def test_savings() -> None:
    s = savings("gpt-4o", 20_000, 100_000)
    assert s.saved_tokens == 80_000 and s.saved_percent == 80.0
    assert (s.full_usd, s.sent_usd, s.saved_usd) == pytest.approx((0.25, 0.05, 0.2))
    assert savings("deepseek-coder:6.7b", 1, 2).saved_usd is None
    assert savings("gpt-4o", 0, 0).saved_percent == 0.0
    assert savings("gpt-4o", 120, 100).saved_tokens == -20


def test_repr_and_dict() -> None:
    c = estimate_cost("gpt-4o", 100_000, 1_000)
    assert repr(c) == (
        "Cost('gpt-4o': $0.26 = input $0.25 (100,000 tokens) + output $0.01 (1,000 tokens))"
    )
    assert c.to_dict()["total_usd"] == pytest.approx(0.26)
    assert savings("gpt-4o", 1, 2).to_dict()["saved_tokens"] == 1


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_bad_tokens(bad: object) -> None:
    with pytest.raises(InvalidInputError, match="input_tokens"):
        estimate_cost("gpt-4o", bad, 0)  # type: ignore[arg-type]


# -- the low-water mark by expected cost --------------------------------------------------


def session_value(mark: float, room: int, growth: float, w: float, r: float) -> float:
    """Mean cost less worth per request of a session that cuts to ``mark`` tokens when the
    next ``growth`` would pass ``room``, simulated request by request (input-price units:
    a cut writes the kept history at ``w``; otherwise the prefix is read at ``r`` and the
    new tokens written at ``w``; each token sent is worth its input price)."""
    size, total, n = 0.0, 0.0, 3000
    for _ in range(n):
        if size + growth > room:
            size, cost = mark, w * mark
        else:
            size, cost = size + growth, r * size + w * growth
        total += cost - size
    return total / n


@settings(max_examples=60, deadline=None)
@given(
    room=st.integers(2_000, 200_000),
    pace=st.floats(1 / 1000, 1 / 50),
    price=st.floats(0.1, 20),
    r=st.floats(0.05, 0.9),
    premium=st.floats(0.01, 1.2),
)
def test_stable_mark_is_the_cheapest_mark_of_a_simulated_session(
    room: int, pace: float, price: float, r: float, premium: float
) -> None:
    """Independent of its closed form: no mark in the allowed range makes a simulated
    session more than 3% better (cost less worth) than stable_mark's."""
    w = max(r + 0.01, 0.8) + premium - 0.01
    growth = pace * room
    m = Model(
        "m", 2 * room, input_price=price, cache_read_price=r * price, cache_write_price=w * price
    )
    mark = stable_mark(m, room, growth)
    assert mark is not None
    lo, hi = STABLE_MARK_RANGE
    assert lo * room - 1 <= mark <= hi * room
    best = min(
        session_value(room * (lo + (hi - lo) * i / 100), room, growth, w, r) for i in range(101)
    )
    got = session_value(mark, room, growth, w, r)
    assert got <= best + 0.03 * abs(best)


def test_stable_mark_cuts_deeper_for_dearer_rewrites_and_faster_growth() -> None:
    def mark(write: float, growth: float, read: float = 0.3) -> int:
        m = Model("m", 64_000, input_price=3.0, cache_read_price=read, cache_write_price=write)
        got = stable_mark(m, 20_000, growth)
        assert got is not None
        return got

    assert mark(3.75, 400) < mark(3.0, 400)  # a write premium: rewrite less often
    assert mark(3.75, 800) < mark(3.75, 400) < mark(3.75, 100)
    # no price, no cache discount, or nothing known yet: the fixed share applies
    assert stable_mark(Model("m", 64_000), 20_000, 400) is None
    no_discount = Model("m", 64_000, input_price=3.0, cache_read_price=3.0)
    assert stable_mark(no_discount, 20_000, 400) is None
    priced = Model("m", 64_000, input_price=3.0, cache_read_price=0.3)
    assert stable_mark(priced, 20_000, 0.0) is None


def test_cache_kept() -> None:
    m = Model("m", 200_000, cache_min_tokens=1024, cache_ttl_s=300)
    assert cache_kept(m, 1024, 300)
    assert not cache_kept(m, 1023, 1)  # nothing was cached
    assert not cache_kept(m, 5000, 300.5)  # expired
    assert cache_kept(Model("m", 8192), 1, 10**6)  # limits unknown: kept
