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


def reference_warning(
    name: str,
    role: str,
    label: str,
    reasons: dict[str, int],
    kept: int,
    window: int,
    tokens: int,
    max_tokens: int | None,
) -> str:
    """The warning's whole text, written out (the rule of the fix as above)."""
    dropped = sum(reasons.values())
    counts = ", ".join(f"{r}: {n:,}" for r, n in reasons.items())
    which = "the newest " if role == "history" else ""
    text = (
        f"{name}: dropped {dropped:,} of {dropped + kept:,} messages ({counts}); kept "
        f"{which}{kept:,} in the {window:,}-token window ({tokens:,} tokens). "
        "plan.dropped lists each one."
    )
    if not label:
        main = max(reasons, key=lambda k: (k != "orphan", reasons[k]))
        fallback = "lower max_tokens" if max_tokens is not None else "lower min_output_tokens"
        fix = FIXES.get(main, fallback)
        text += f" To keep more: {fix}, add fallback_models=[...], or pass summarizer=."
    return text


@given(
    section=st.tuples(
        st.sampled_from(["history", "pinned", "current"]),
        st.sampled_from(["history", "current"]),
        st.sampled_from(["", "History source: "]),
    ),
    reasons=st.dictionaries(st.sampled_from(REASONS), st.integers(1, 10**6), min_size=1),
    turns=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**7)), min_size=1),
    window=st.integers(1, 10**7),
    max_tokens=st.sampled_from([None, 500]),
)
def test_the_warning_reads_the_same_turn_after_turn(
    section: tuple[str, str, str],
    reasons: dict[str, int],
    turns: list[tuple[int, int]],
    window: int,
    max_tokens: int | None,
) -> None:
    # a held cut writes the same reasons every turn with new kept counts: each text is
    # the whole warning for its own numbers, whatever was written before it
    name, role, label = section
    s = MessageSection(name, [], 0, 0, mode="newest", role=role, label=label)
    for kept, tokens in turns:
        text = dropped_warning(s, reasons, kept, window, tokens, max_tokens)
        assert text == reference_warning(
            name, role, label, reasons, kept, window, tokens, max_tokens
        )
