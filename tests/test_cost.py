from __future__ import annotations

import pytest

from tokenflex import register_model
from tokenflex.cost import estimate_cost, savings
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
