from __future__ import annotations

import pytest

from tokenflex import Model, register_model
from tokenflex.errors import ContextOverflowError, InvalidInputError
from tokenflex.fallback import choose_model
from tokenflex.tokenizers import get_tokenizer


@pytest.fixture(autouse=True)
def chain() -> None:
    register_model(name="small-cheap", context_window=8_000, input_price=0.1, output_price=0.2)
    register_model(name="mid", context_window=32_000, input_price=1.0, output_price=2.0)
    register_model(name="mid-twin", context_window=32_000, input_price=1.0, output_price=2.0)
    register_model(name="big", context_window=1_000_000, input_price=0.3, output_price=2.5)
    register_model(name="huge-unpriced", context_window=2_000_000)
    register_model(
        name="short-output", context_window=500_000, max_output_tokens=256, input_price=0.01
    )


def test_primary_fits() -> None:
    c = choose_model("small-cheap", ["big"], required_input_tokens_by_model=7_000)
    assert c.model.name == "small-cheap" and not c.switched
    assert c.output_room == 8_000 - 7_000 - 100
    assert c.reason == ("small-cheap (8,000) fits 7,000 input + 500 output floor + 100 margin.")
    assert [x.model for x in c.considered] == ["small-cheap"]  # fallbacks not even counted


def test_cheapest_fitting_fallback() -> None:
    c = choose_model(
        "small-cheap", ["huge-unpriced", "mid", "big"], required_input_tokens_by_model=20_000
    )
    # big ($0.30/M) is cheaper than mid ($1/M) and fits; the unpriced one sorts last.
    assert c.model.name == "big" and c.switched and c.primary.name == "small-cheap"
    assert "using big (1,000,000, $0.3/M input) for this request" in c.reason
    assert [x.model for x in c.considered] == ["small-cheap", "big"]


def test_cheaper_one_too_small_is_skipped() -> None:
    c = choose_model("small-cheap", ["mid", "big"], required_input_tokens_by_model=40_000)
    assert c.model.name == "big"
    c = choose_model("small-cheap", ["mid"], required_input_tokens_by_model=20_000)
    assert c.model.name == "mid"


def test_ties_keep_chain_order() -> None:
    c = choose_model("small-cheap", ["mid-twin", "mid"], required_input_tokens_by_model=10_000)
    assert c.model.name == "mid-twin"
    c = choose_model("small-cheap", ["mid", "mid-twin"], required_input_tokens_by_model=10_000)
    assert c.model.name == "mid"


def test_unknown_price_last_but_used_when_only_fit() -> None:
    c = choose_model(
        "small-cheap", ["huge-unpriced", "big"], required_input_tokens_by_model=1_500_000
    )
    assert c.model.name == "huge-unpriced" and "unknown price" in c.reason


def test_output_limit_must_hold_the_floor() -> None:
    c = choose_model("small-cheap", ["short-output", "big"], required_input_tokens_by_model=9_000)
    assert c.model.name == "big"  # short-output is cheaper but cannot emit 500 tokens
    assert [x.fits for x in c.considered] == [False, False, True]


def test_required_input_recounted_per_model() -> None:
    """Tokenizers differ, so the same request costs different tokens per model."""
    register_model(name="small-a", context_window=1_000, tokenizer="cl100k_base", input_price=0.1)
    register_model(name="small-b", context_window=1_000, tokenizer="o200k_base", input_price=0.2)
    text = "Привет, как дела? Сегодня хорошая погода. " * 12
    seen: list[str] = []

    def required(m: Model) -> int:
        seen.append(m.name)
        return get_tokenizer(m.tokenizer).count(text)

    a, b = get_tokenizer("cl100k_base").count(text), get_tokenizer("o200k_base").count(text)
    assert b < a  # o200k is kinder to Cyrillic
    floor = 1_000 - 100 - b  # exactly fits small-b, not small-a
    c = choose_model(
        "small-a", ["small-b"], required_input_tokens_by_model=required, min_output_tokens=floor
    )
    assert seen == ["small-a", "small-b"] and c.model.name == "small-b"
    assert c.required_input_tokens == b and c.output_room == floor


def test_none_fits_raises_with_numbers() -> None:
    with pytest.raises(ContextOverflowError) as exc:
        choose_model("small-cheap", ["mid"], required_input_tokens_by_model=40_000)
    msg = str(exc.value)
    assert "small-cheap (8,000): 40,000 input, 32,600 over" in msg
    assert "mid (32,000): 40,000 input, 8,600 over" in msg
    assert "window of at least 40,600 tokens" in msg
    assert exc.value.context_window == 32_000 and exc.value.overflow == 8_600


def test_duplicates_and_primary_in_chain_ignored() -> None:
    c = choose_model(
        "small-cheap", ["small-cheap", "mid", "mid"], required_input_tokens_by_model=10_000
    )
    assert [x.model for x in c.considered] == ["small-cheap", "mid"]
    assert c.to_dict()["model"] == "mid"


def test_bad_required() -> None:
    with pytest.raises(InvalidInputError, match="required input for 'small-cheap'"):
        choose_model("small-cheap", required_input_tokens_by_model=lambda m: -1)
