from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

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


# -- one policy: choose_model and fit(fallback_models=...) ---------------------------------

PRICES = (None, 0.1, 0.2, 0.5, 1.0)


def _reference_pick(
    models: list[Model], required: dict[str, int], floor: int, margin: int, share: float | None
) -> str | None:
    """The documented policy, written out: the primary, then the fallbacks cheapest first
    (unknown prices last, ties in the given order, repeats and the primary left out); a
    model fits when its required input plus the output floor plus the margin fits its
    window and it can emit the floor; the first that fits with its required input at or
    under ``share`` of its window serves, else the first that fits; else none."""
    primary, *rest = models
    seen: list[Model] = []
    for m in rest:
        if m.name != primary.name and m.name not in [s.name for s in seen]:
            seen.append(m)
    priced = sorted(
        range(len(seen)),
        key=lambda i: (seen[i].input_price is None, seen[i].input_price or 0.0, i),
    )
    order = [primary] + [seen[i] for i in priced]

    def fits(m: Model) -> bool:
        out_ok = m.max_output_tokens is None or m.max_output_tokens >= floor
        return required[m.name] + floor + margin <= m.context_window and out_ok

    fitting = [m for m in order if fits(m)]
    under = [m for m in fitting if share is None or required[m.name] <= share * m.context_window]
    if under:
        return under[0].name
    return fitting[0].name if fitting else None


_model_specs = st.lists(
    st.tuples(
        st.integers(200, 4_000),
        st.sampled_from(PRICES),
        st.sampled_from(["cl100k_base", "o200k_base"]),
        st.sampled_from([None, 64, 1_000]),
    ),
    min_size=1,
    max_size=4,
)


def _register(
    specs: list[tuple[int, float | None, str, int | None]], *, outputs: bool
) -> list[Model]:
    return [
        register_model(
            name=f"fb-{i}",
            context_window=window,
            input_price=price,
            output_price=price,
            tokenizer=tokenizer,
            max_output_tokens=limit if outputs else None,
        )
        for i, (window, price, tokenizer, limit) in enumerate(specs)
    ]


@settings(max_examples=150, deadline=None)
@given(
    specs=_model_specs,
    repeat=st.integers(0, 3),
    required=st.lists(st.integers(0, 2_000), min_size=5, max_size=5),
    floor=st.integers(0, 300),
    margin=st.integers(0, 100),
    share=st.sampled_from([None, 0.3, 0.6, 0.9, 1.0]),
)
def test_choose_model_follows_the_documented_policy(
    specs: list[tuple[int, float | None, str, int | None]],
    repeat: int,
    required: list[int],
    floor: int,
    margin: int,
    share: float | None,
) -> None:
    models = _register(specs, outputs=True)
    chain = models[1:] + models[: min(repeat, len(models))]  # repeats and the primary too
    need = {m.name: required[i] for i, m in enumerate(models)}
    expected = _reference_pick(models[:1] + chain, need, floor, margin, share)
    try:
        got = choose_model(
            models[0],
            chain,
            required_input_tokens_by_model=lambda m: need[m.name],
            min_output_tokens=floor,
            safety_margin=margin,
            max_input_share=share,
        )
    except ContextOverflowError:
        assert expected is None
        return
    assert got.model.name == expected
    assert got.switched == (expected != models[0].name)
    # served at once (the last one considered), or, over the share, after every other
    # model was considered: either way it was considered
    assert expected in [c.model for c in got.considered]


@settings(max_examples=80, deadline=None)
@given(
    specs=st.lists(
        st.tuples(
            st.integers(400, 2_500),
            st.sampled_from(PRICES),
            st.sampled_from(["cl100k_base", "o200k_base"]),
            st.none(),
        ),
        min_size=1,
        max_size=4,
    ),
    words=st.integers(300, 1_200),
    max_tokens=st.integers(1, 300),
    share=st.sampled_from([None, 0.5, 0.7, 0.9]),
)
@example(  # the primary fits above the share; the cheaper fallback is under it
    specs=[(1_000, 1.0, "cl100k_base", None), (2_500, 0.1, "cl100k_base", None)],
    words=700,
    max_tokens=100,
    share=0.7,
)
def test_fit_picks_the_model_choose_model_picks(
    specs: list[tuple[int, float | None, str, int | None]],
    words: int,
    max_tokens: int,
    share: float | None,
) -> None:
    """fit(..., fallback_models=...) and choose_model() are one policy: for a request
    whose input is all required they pick the same model (and both the reference's)."""
    from tokenflex import fit, get_counter
    from tokenflex.budget import MIN_OUTPUT_TOKENS, SAFETY_MARGIN

    models = _register(specs, outputs=False)
    messages = [
        {"role": "system", "content": "word " * words},
        {"role": "user", "content": "What now?"},
    ]
    need = {m.name: get_counter(m).count(messages) for m in models}
    floor = min(MIN_OUTPUT_TOKENS, max_tokens)
    expected = _reference_pick(models, need, floor, SAFETY_MARGIN, share)
    names = [m.name for m in models]
    try:
        chosen: str | None = choose_model(
            names[0],
            names[1:],
            required_input_tokens_by_model=lambda m: need[m.name],
            min_output_tokens=floor,
            max_input_share=share,
        ).model.name
    except ContextOverflowError:
        chosen = None
    try:
        plan = fit(
            messages,
            model=names[0],
            max_tokens=max_tokens,
            fallback_models=names[1:],
            fallback_input_share=share,
        )
        fitted: str | None = plan.model.name
    except ContextOverflowError:
        fitted = None
    assert fitted == chosen == expected


def test_a_cheaper_fallback_above_the_share_is_passed_over() -> None:
    """The primary cannot hold the output floor (its input is under the share); the
    cheapest fallback fits but above the share, a dearer one fits under it: the dearer
    one serves, as in fit() (it once took the cheaper one)."""
    register_model(name="over-cheap", context_window=2_000, input_price=0.05)
    register_model(name="under-dear", context_window=4_000, input_price=0.5)
    need = {"small-cheap": 450, "over-cheap": 1_100, "under-dear": 1_100}
    c = choose_model(
        register_model(name="small-cheap", context_window=1_000, input_price=0.1),
        ["under-dear", "over-cheap"],
        required_input_tokens_by_model=lambda m: need[m.name],
        max_input_share=0.5,
    )
    assert c.model.name == "under-dear" and c.switched
    assert [x.model for x in c.considered] == ["small-cheap", "over-cheap", "under-dear"]
    assert "cannot hold 450 input + 500 output floor + 100 margin" in c.reason
