"""Summaries checked for their facts (tokenflex.summarize.facts).

The generators plant facts of every kind in filler conversation and know what they
planted: that list is the independent reference. Properties: every planted fact is
found; a summary that states a fact in another spelling (thousands separators, the space
before a unit, case) keeps it; ``keep_facts`` never goes over its budget and, with room,
leaves nothing planted missing; ``fit`` with a summarizer that forgets everything
reports the planted facts as kept only when the check is on, and the promise holds.
"""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

import tokenflex
from tokenflex.summarize import summarize_span
from tokenflex.summarize.facts import (
    CARRIED_FORWARD,
    extract_facts,
    fact_report,
    keep_facts,
    missing_facts,
)
from tokenflex.tokenizers import get_tokenizer

COUNT = get_tokenizer("o200k_base").count
FILLER = "we talked about the weather and the plan for lunch and how the day went"
MONTHS = ["January", "March", "June", "September", "December"]
WORDS = ["alpha", "bravo", "delta", "kilo", "oscar", "tango", "zulu"]


@st.composite
def planted(draw: st.DrawFn) -> tuple[str, str]:
    """(fact as written, kind): one of each kind the check knows, with random values."""
    kind = draw(
        st.sampled_from(
            ["number", "money", "date", "path", "url", "email", "id", "version", "time"]
        )
    )
    n = draw(st.integers(10, 99_999))
    w = draw(st.sampled_from(WORDS))
    v = draw(st.sampled_from(WORDS))
    if kind == "number":
        unit = draw(st.sampled_from(["ms", "GB", "%", "tokens", "days"]))
        return f"{n:,} {unit}", kind
    if kind == "money":
        return f"${n:,}", kind
    if kind == "date":
        if draw(st.booleans()):
            return f"2026-{n % 12 + 1:02d}-{n % 28 + 1:02d}", kind
        return f"{draw(st.sampled_from(MONTHS))} {n % 28 + 1}, 2026", kind
    if kind == "path":
        return f"src/{w}/{v}_{n}.py", kind
    if kind == "url":
        return f"https://{w}.example.com/{v}/{n}", kind
    if kind == "email":
        return f"{w}.{v}@example.org", kind
    if kind == "id":
        return draw(st.sampled_from([f"{w.upper()}-{n}", f"{w}_{v}_{n % 97}"])), kind
    if kind == "version":
        return f"v{n % 9 + 1}.{n % 13}.{n % 7}", kind
    return f"{n % 12 + 1}:{n % 60:02d}", kind


@st.composite
def sessions(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[str]]:
    """A chat with planted facts said by the user, the assistant or a tool."""
    facts = draw(st.lists(planted(), min_size=1, max_size=8, unique_by=lambda f: f[0].lower()))
    msgs: list[dict[str, Any]] = []
    for text, _ in facts:
        role = draw(st.sampled_from(["user", "assistant"]))
        msgs.append({"role": role, "content": f"{FILLER.capitalize()}. Note {text} here. Fine."})
        msgs.append({"role": "assistant" if role == "user" else "user", "content": FILLER})
    return msgs, [t for t, _ in facts]


@settings(max_examples=150, deadline=None)
@given(sessions())
def test_every_planted_fact_is_found(session: tuple[list[dict[str, Any]], list[str]]) -> None:
    msgs, planted_facts = session
    found = {f.text for f in extract_facts(msgs)}
    assert set(planted_facts) <= found, (planted_facts, found)


def _respelled(fact: str) -> str:
    """The same fact as a summary may write it: separators, unit spacing and case changed."""
    return fact.replace(",", "").replace(" ms", "ms").replace(" GB", "GB").upper()


def _said(*facts: str) -> tuple[list[dict[str, Any]], list[str]]:
    return [{"role": "user", "content": f"{FILLER}. Note {f} here."} for f in facts], list(facts)


@example(_said("10 ms", "January 11, 2026"))  # a date's comma dropped in the summary
@example(_said("$10", "$11"))  # facts next to each other, no space between them
@settings(max_examples=150, deadline=None)
@given(sessions())
def test_a_summary_that_states_the_facts_keeps_them(
    session: tuple[list[dict[str, Any]], list[str]],
) -> None:
    msgs, planted_facts = session
    summary = "The user and the assistant agreed on " + ", ".join(
        _respelled(f) for f in planted_facts
    )
    missing = {f.text for f in missing_facts(extract_facts(msgs), summary)}
    assert not missing & set(planted_facts), missing


@example(_said("src/alpha/alpha_10.py"), 15)  # exactly as much room as the line needs
@settings(max_examples=150, deadline=None)
@given(sessions(), st.integers(8, 400))
def test_carried_forward_within_budget_and_complete_with_room(
    session: tuple[list[dict[str, Any]], list[str]], budget: int
) -> None:
    msgs, planted_facts = session
    facts = extract_facts(msgs)
    out = keep_facts("They talked.", facts, budget, COUNT)
    assert COUNT(out) <= max(budget, COUNT("They talked."))
    need = COUNT("They talked.\n" + CARRIED_FORWARD + "; ".join(f.text for f in facts))
    if need <= budget:
        assert not missing_facts(facts, out), out
        assert all(f in out for f in planted_facts)


def test_a_fact_that_is_gone_is_reported_missing() -> None:
    msgs = [{"role": "user", "content": "The staging port is 8443 and the cap is 2,500 ms."}]
    kept, missing = fact_report(msgs, None, "The user set the staging port to 8443.")
    assert kept == ("8443",) and missing == ("2,500 ms",)
    # a longer number that contains the fact is not the fact
    assert fact_report(msgs, None, "Port 18443, cap 12,500 ms.")[0] == ()


def test_instructions_are_facts_and_match_by_their_words() -> None:
    msgs = [{"role": "user", "content": "Never deploy the billing service on Fridays."}]
    facts = [f for f in extract_facts(msgs) if f.kind == "instruction"]
    assert [f.text for f in facts] == ["Never deploy the billing service on Fridays."]
    assert not missing_facts(facts, "User: no billing service deploys on Fridays, never.")
    assert missing_facts(facts, "User: deploy whenever.") == facts


class Forgetful:
    """A summarizer that keeps nothing of substance (a real model's worst case)."""

    def summarize(self, messages: Any, *, previous_summary: str | None, max_tokens: int) -> str:
        return "The user and the assistant talked for a while."

    async def asummarize(
        self, messages: Any, *, previous_summary: str | None, max_tokens: int
    ) -> str:
        return self.summarize(messages, previous_summary=previous_summary, max_tokens=max_tokens)


def _long_session(planted_facts: list[str]) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(40):
        said = f" Remember {planted_facts[i]}." if i < len(planted_facts) else ""
        msgs.append({"role": "user", "content": f"Turn {i}: {FILLER}.{said} " + FILLER * 3})
        msgs.append({"role": "assistant", "content": f"Sure. {FILLER}. " * 4})
    msgs.append({"role": "user", "content": "What did I ask you to remember?"})
    return msgs


@settings(max_examples=25, deadline=None)
@given(st.lists(planted(), min_size=1, max_size=6, unique_by=lambda f: f[0].lower()))
def test_fit_carries_the_facts_a_summary_forgot(facts: list[tuple[str, str]]) -> None:
    planted_facts = [t for t, _ in facts]
    msgs = _long_session(planted_facts)
    model = tokenflex.get_model("gpt-4o").replace(name="small", context_window=4096)
    checked = tokenflex.fit(msgs, model=model, max_tokens=500, summarizer=Forgetful())
    unchecked = tokenflex.fit(
        msgs, model=model, max_tokens=500, summarizer=Forgetful(), summary_facts=False
    )
    for plan in (checked, unchecked):
        assert plan.summary is not None
        assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= 4096
        assert plan.summary.tokens <= plan.input_tokens
    start, _ = checked.summary.covers if checked.summary else (0, 0)
    covered = [f for i, f in enumerate(planted_facts) if 1 + 2 * i >= start]
    in_span = [f for f in covered if f in str(msgs[1 : checked.summary.covers[1]])]
    assert set(in_span) <= set(checked.summary.facts_kept), checked.summary
    assert all(f in checked.summary.text for f in in_span)
    assert unchecked.summary is not None
    assert set(in_span) <= set(unchecked.summary.facts_missing)
    assert COUNT(checked.summary.text) <= 512


def test_summarize_span_checks_by_default_and_says_what_it_carried() -> None:
    msgs = [{"role": "user", "content": "Ship build 7731 to eu-west-1 on 2026-02-03."}]
    text = summarize_span(Forgetful(), msgs, max_tokens=64, counter=COUNT)
    assert text.startswith("The user and the assistant talked for a while.")
    assert CARRIED_FORWARD + "2026-02-03; 7731" in text  # a bare number after the rest
    assert summarize_span(Forgetful(), msgs, max_tokens=64, check_facts=False).endswith("while.")


def test_a_fact_the_model_still_sees_is_not_carried() -> None:
    span = [{"role": "user", "content": "Use port 8443 and ship on 2026-02-03."}]
    recent = [{"role": "assistant", "content": "Port 8443 it is."}]
    assert [f.text for f in extract_facts(span, sent=recent)] == ["2026-02-03"]
    text = summarize_span(Forgetful(), span, max_tokens=64, counter=COUNT, sent=recent)
    assert text.endswith(CARRIED_FORWARD + "2026-02-03")
    assert fact_report(span, None, text, sent=recent) == (("2026-02-03",), ())
