"""The pure solver: the seeds' worked examples, the promise as a property, a slow reference."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenflex.budget import BudgetSpec, SectionSpec, solve
from tokenflex.errors import ContextOverflowError


def _spec(window: int, request: int, **kw: object) -> BudgetSpec:
    return BudgetSpec(context_window=window, requested_output=request, **kw)  # type: ignore[arg-type]


# Seed 000's three examples: (window, input, requested) -> max_tokens, flex policy.
@pytest.mark.parametrize(
    ("window", "input_tokens", "requested", "expected"),
    [
        pytest.param(128_000, 1_750, 3_000, 3_000, id="seed000-ex1-llama3.2-no-reduction"),
        pytest.param(16_385, 13_000, 5_000, 3_285, id="seed000-ex2-gpt-3.5-reduced"),
    ],
)
def test_seed000_flex_examples(
    window: int, input_tokens: int, requested: int, expected: int
) -> None:
    a = solve(
        [SectionSpec("input", [input_tokens], required=-1)],
        _spec(window, requested, policy="flex", min_output_tokens=500, safety_margin=100),
    )
    assert a.max_tokens == expected
    assert a.input_tokens + a.max_tokens + 100 <= window


def test_seed000_example3_required_input_raises_instead_of_overflowing() -> None:
    # 16,000 window, 15,500 input, 100 margin: the seed returns 500 and overflows by 100.
    with pytest.raises(ContextOverflowError) as exc:
        solve(
            [SectionSpec("input", [15_500], required=-1)],
            _spec(16_000, 3_000, policy="flex", min_output_tokens=500, safety_margin=100),
            model="deepseek-coder:6.7b",
        )
    err = exc.value
    assert err.overflow == 100
    assert "15,500" in str(err) and "16,000" in str(err) and "fallback_models" in str(err)


def test_seed000_example3_shrinks_history_to_make_room_for_the_floor() -> None:
    # Same numbers with 60 messages x 250 as droppable history and a 500-token system prompt.
    a = solve(
        [
            SectionSpec("system", [500], required=-1, priority=100),
            SectionSpec("history", [250] * 60, contiguous=True),
        ],
        _spec(16_000, 3_000, policy="flex", min_output_tokens=500, safety_margin=100),
    )
    assert a.input_tokens + a.max_tokens + 100 <= 16_000
    assert a.max_tokens >= 500
    assert len(a.kept["history"]) == 59  # 500 + 59*250 = 15,250 <= 15,400
    assert a.dropped[0].reason == "budget"


@pytest.mark.parametrize(
    ("window", "target"),
    [
        pytest.param(8_192, 3_753, id="seed001-gpt-4"),
        pytest.param(200_000, 157_200, id="seed001-claude"),
    ],
)
def test_seed001_history_share_target(window: int, target: int) -> None:
    # (window - maxTokens - system) * 0.8, with 1-token messages so the target is hit exactly.
    a = solve(
        [
            SectionSpec("system", [500], required=-1, priority=100),
            SectionSpec("history", _ones(), contiguous=True, share=0.8),
        ],
        _spec(window, 3_000, safety_margin=0),
    )
    assert a.section_tokens["history"] == target
    assert a.dropped[0].reason == "share"


def _ones():  # type: ignore[no-untyped-def]
    while True:
        yield 1


def test_lazy_items_read_only_as_far_as_needed() -> None:
    consumed = 0

    def items():  # type: ignore[no-untyped-def]
        nonlocal consumed
        for _ in range(10_000):
            consumed += 1
            yield 100

    solve([SectionSpec("history", items(), contiguous=True)], _spec(8_192, 1_000))
    assert consumed == 71  # 70 fit (7,000 <= 7,092), the 71st stops the read


def test_min_items_beats_the_soft_share_but_not_the_window() -> None:
    secs = [SectionSpec("history", [1_000] * 10, contiguous=True, share=0.1, min_items=3)]
    a = solve(secs, _spec(4_000, 500, safety_margin=0))
    assert len(a.kept["history"]) == 3
    assert any("soft share" in n for n in a.notes)
    secs = [SectionSpec("history", [1_000] * 10, contiguous=True, share=0.1, min_items=8)]
    a = solve(secs, _spec(4_000, 500, safety_margin=0))
    assert len(a.kept["history"]) == 3  # the hard window wins
    assert any("yields to the window" in n for n in a.notes)


def test_reserve_policy_lowers_output_only_for_required_input() -> None:
    a = solve([SectionSpec("current", [7_000], required=-1)], _spec(8_192, 2_000))
    assert a.max_tokens == 8_192 - 100 - 7_000
    assert any("max_tokens reduced" in n for n in a.notes)


def test_priorities_caps_and_skip_and_continue() -> None:
    secs = [
        SectionSpec("docs", [300, 5_000, 200], priority=50, cap=600),
        SectionSpec("history", [100] * 5, contiguous=True, priority=10),
    ]
    a = solve(secs, _spec(8_192, 1_000))
    assert a.kept["docs"] == (0, 2)
    assert [d.reason for d in a.dropped if d.section == "docs"] == ["cap"]
    assert a.kept["history"] == (0, 1, 2, 3, 4)


def test_min_tokens_reserves_room_against_higher_priorities() -> None:
    secs = [
        SectionSpec("memories", [1_000] * 10, priority=50),
        SectionSpec("history", [100] * 30, contiguous=True, priority=10, min_tokens=2_000),
    ]
    a = solve(secs, _spec(8_192, 1_000))
    assert a.section_tokens["history"] >= 2_000


def test_max_items() -> None:
    a = solve([SectionSpec("history", [10] * 50, contiguous=True, max_items=5)], _spec(8_192, 100))
    assert len(a.kept["history"]) == 5
    assert a.dropped[0].reason == "max_items"


def test_input_cap() -> None:
    a = solve(
        [SectionSpec("history", [100] * 50, contiguous=True)],
        _spec(100_000, 1_000, input_cap=1_050),
    )
    assert a.input_tokens == 1_000


def _reference(required: int, history: list[int], spec: BudgetSpec) -> tuple[int, int] | None:
    """Slow and obviously right: try every k, keep the largest that fits."""
    floor = min(spec.min_output_tokens, spec.requested_output)
    if required + floor + spec.safety_margin > spec.context_window:
        return None
    out_reserved = spec.requested_output if spec.policy == "reserve" else floor
    best = 0
    for k in range(len(history) + 1):
        if required + sum(history[:k]) + out_reserved + spec.safety_margin <= spec.context_window:
            best = k
        else:
            break
    inp = required + sum(history[:best])
    return best, min(spec.requested_output, spec.context_window - spec.safety_margin - inp)


@settings(max_examples=300, deadline=None)
@given(
    window=st.integers(1, 50_000),
    request=st.integers(0, 20_000),
    floor=st.integers(0, 2_000),
    margin=st.integers(0, 500),
    required=st.lists(st.integers(0, 5_000), max_size=4),
    history=st.lists(st.integers(0, 3_000), max_size=60),
    policy=st.sampled_from(["reserve", "flex"]),
)
def test_promise_property_against_reference(
    window: int,
    request: int,
    floor: int,
    margin: int,
    required: list[int],
    history: list[int],
    policy: str,
) -> None:
    spec = BudgetSpec(window, request, floor, margin, policy=policy)  # type: ignore[arg-type]
    ref = _reference(sum(required), history, spec)
    secs = [
        SectionSpec("required", required, required=-1, priority=100),
        SectionSpec("history", history, contiguous=True),
    ]
    if ref is None:
        with pytest.raises(ContextOverflowError):
            solve(secs, spec)
        return
    a = solve(secs, spec)
    assert a.input_tokens + a.max_tokens + margin <= window
    assert a.max_tokens >= min(floor, request)
    assert a.kept["required"] == tuple(range(len(required)))
    assert (len(a.kept["history"]), a.max_tokens) == ref


def test_deterministic() -> None:
    secs = [SectionSpec("a", [5, 3, 9, 1], priority=1), SectionSpec("b", [2, 2, 2], priority=1)]
    results = {
        repr(solve(secs, _spec(120, 100, safety_margin=0, min_output_tokens=10))) for _ in range(5)
    }
    assert len(results) == 1
