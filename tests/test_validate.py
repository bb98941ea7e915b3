from __future__ import annotations

import pytest

from tokenflex.errors import InvalidInputError
from tokenflex.tokenizers import get_tokenizer
from tokenflex.validate import rag_budget, validate_budget

# Seed 003 §2 components and §5.2 "Validation Results" table.
STANDARD = {"base": 5_000, "style": 1_000, "analyze": 15_000, "section": 3_000, "rag": 0}
RAG_HEAVY = {"base+style+analyze": 21_000, "section": 3_000, "rag": 40_000}
MINIMAL = {"base": 5_000, "style": 1_000, "analyze": 3_000, "section": 3_000, "rag": 0}
OVERFLOW = {"base+style+analyze": 21_000, "section": 3_000, "rag": 60_000}


@pytest.mark.parametrize(
    ("components", "output", "total_input", "total", "usage", "status"),
    [
        pytest.param(STANDARD, 20_000, 24_000, 44_000, 37, "OK", id="standard-no-rag"),
        pytest.param(RAG_HEAVY, 25_000, 64_000, 89_000, 74, "OK", id="rag-heavy-40k"),
        pytest.param(MINIMAL, 20_000, 12_000, 32_000, 27, "OK", id="minimal-analyze"),
        pytest.param(OVERFLOW, 32_000, 84_000, 116_000, 97, "FALLBACK", id="rag-overflow-60k"),
    ],
)
def test_seed_003_table(
    components: dict[str, int], output: int, total_input: int, total: int, usage: int, status: str
) -> None:
    v = validate_budget(components, expected_output=output, total_budget=120_000)
    assert v.total_input == total_input
    assert v.total_tokens == total
    assert round(v.usage_percent) == usage
    assert v.status == status
    assert v.valid  # the seed: valid means total <= 120K, even for the fallback row
    assert f"{total:,}" in v.message


def test_seed_messages() -> None:
    v = validate_budget(OVERFLOW, expected_output=32_000, total_budget=120_000)
    assert v.message == (
        "Total 116,000 exceeds the 115,200 threshold (96% of 120,000; 96.7% usage). "
        "Use a larger-context fallback model for this request."
    )
    v = validate_budget({"in": 109_000}, expected_output=5_000, total_budget=120_000)
    assert v.status == "FALLBACK" and v.message.startswith(
        "Input 109,000 exceeds the 108,000 threshold (90% of 120,000)."
    )
    v = validate_budget({"rag": 80_000, "base": 25_000}, expected_output=0, total_budget=120_000)
    assert v.status == "WARNING"
    assert v.message == (
        "Token usage at 87.5% (105,000/120,000). Consider reducing 'rag' (80,000 tokens)."
    )


@pytest.mark.parametrize(
    ("input_tokens", "output", "status"),
    [
        pytest.param(100_000, 15_200, "WARNING", id="total-at-96pct-not-over"),
        pytest.param(100_000, 15_201, "FALLBACK", id="total-just-over-96pct"),
        pytest.param(108_000, 0, "WARNING", id="input-at-90pct-not-over"),
        pytest.param(108_001, 0, "FALLBACK", id="input-just-over-90pct"),
        pytest.param(102_000, 0, "OK", id="usage-at-85pct-not-over"),
        pytest.param(102_001, 0, "WARNING", id="usage-just-over-85pct"),
    ],
)
def test_threshold_boundaries_are_exact(input_tokens: int, output: int, status: str) -> None:
    v = validate_budget({"in": input_tokens}, expected_output=output, total_budget=120_000)
    assert v.status == status


def test_seed_literal_115k_trigger() -> None:
    """The seed's constant is 115,000 (it calls it 96%); a fraction reproduces it exactly."""
    kw = {"total_budget": 120_000, "fallback_total_at": 115_000 / 120_000}
    assert validate_budget({"in": 100_000}, expected_output=15_000, **kw).status == "WARNING"
    assert validate_budget({"in": 100_000}, expected_output=15_001, **kw).status == "FALLBACK"


def test_not_valid_over_total() -> None:
    v = validate_budget({"in": 100_000}, expected_output=30_000, total_budget=120_000)
    assert not v.valid and v.status == "FALLBACK"


def test_input_cap_turns_ok_into_warning() -> None:
    v = validate_budget(
        {"in": 95_000},
        expected_output=0,
        total_budget=120_000,
        input_cap=90_000,
        fallback_input_at=0.95,
    )
    assert v.status == "WARNING" and "input cap 90,000" in v.message
    ok = validate_budget({"in": 80_000}, expected_output=0, total_budget=120_000, input_cap=90_000)
    assert ok.status == "OK"


def test_text_components_are_counted() -> None:
    tok = get_tokenizer("o200k_base")
    text = "The quick brown fox jumps over the lazy dog. " * 50
    v = validate_budget(
        {"prompt": text, "rag": 100}, expected_output=50, total_budget=4_000, tokenizer=tok
    )
    assert v.components == {"prompt": tok.count(text), "rag": 100}
    assert v.total_tokens == tok.count(text) + 150


def test_to_dict() -> None:
    d = validate_budget(STANDARD, expected_output=20_000, total_budget=120_000).to_dict()
    assert d["status"] == "OK" and d["total_trigger"] == 115_200 and d["input_trigger"] == 108_000


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        pytest.param({"total_budget": 0}, "total_budget", id="zero-budget"),
        pytest.param({"warning_at": 1.5}, "warning_at", id="fraction-over-one"),
        pytest.param({"fallback_total_at": 0}, "fallback_total_at", id="fraction-zero"),
        pytest.param({"input_cap": -1}, "input_cap", id="negative-cap"),
        pytest.param({"expected_output": -5}, "expected_output", id="negative-output"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {"expected_output": 10, "total_budget": 100, **kwargs}
    with pytest.raises(InvalidInputError, match=match):
        validate_budget({"a": 1}, **args)  # type: ignore[arg-type]


def test_bad_component() -> None:
    with pytest.raises(InvalidInputError, match="'rag'"):
        validate_budget({"rag": -1}, expected_output=0, total_budget=100)


@pytest.mark.parametrize("components", [[1, 2], "base", 5, None], ids=repr)
def test_components_must_be_a_mapping(components: object) -> None:
    with pytest.raises(InvalidInputError, match="components must be a mapping"):
        validate_budget(components, expected_output=0, total_budget=100)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("used", "expected"),
    [
        pytest.param(5_000 + 1_000 + 15_000 + 3_000, 40_000, id="seed-analyze-15k"),
        pytest.param(5_000 + 1_000 + 30_000 + 3_000, 40_000, id="seed-analyze-30k"),
        pytest.param(70_000, 20_000, id="less-left-than-cap"),
        pytest.param(90_000, 0, id="nothing-left"),
        pytest.param(120_000, 0, id="over-the-cap-never-negative"),
    ],
)
def test_rag_budget_seed_examples(used: int, expected: int) -> None:
    assert rag_budget(used, input_cap=90_000, rag_cap=40_000) == expected


def test_rag_budget_rejects_negative() -> None:
    with pytest.raises(InvalidInputError, match="used_tokens"):
        rag_budget(-1, input_cap=1, rag_cap=1)
