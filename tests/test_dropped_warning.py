"""The history's "dropped N of M" warning names the option that keeps more for the
reason that dropped the most (orphans only when nothing else dropped)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tokenflex.engine.passes import dropped_warning
from tokenflex.engine.sections import MessageSection

FIXES = {
    "share": "raise history_share",
    "max_items": "raise max_messages",
    "cap": "raise max_input_tokens",
}
REASONS = ["share", "budget", "orphan", "low_water", "held", "cap", "max_items"]


@given(
    reasons=st.dictionaries(st.sampled_from(REASONS), st.integers(0, 5), min_size=1),
    max_tokens=st.sampled_from([None, 500]),
)
def test_the_fix_is_the_main_reasons(reasons: dict[str, int], max_tokens: int | None) -> None:
    section = MessageSection("history", [], 0, 0, mode="newest")
    text = dropped_warning(section, reasons, 7, 8192, 1234, max_tokens)
    main = max(reasons, key=lambda k: (k != "orphan", reasons[k]))  # the reference rule
    fallback = "lower max_tokens" if max_tokens is not None else "lower min_output_tokens"
    assert f"To keep more: {FIXES.get(main, fallback)}, " in text
    counts = ", ".join(f"{r}: {n:,}" for r, n in reasons.items())
    assert f"history: dropped {sum(reasons.values()):,} of " in text and f"({counts})" in text
