"""Blind checks of the estimator's bounds: texts the fit never saw, from sources it never
used (tests/family_texts.py, "blind texts"), against every real tokenizer.

- every script Unicode names whose letters lie out of the scripts the bounds were fitted
  on (Odia, Thaana, Sinhala, Adlam, N'Ko, Deseret, ...): random words, the worst case for
  a vocabulary, which the estimate must cover by its ceiling;
- emoji as people send them (skin tones, ZWJ families, flags, keycaps, tag flags);
- files of Python's own standard library.

Each family's bound (``estimate:FAMILY``; ``all`` over every vocabulary llama.cpp ships,
Baichuan, Falcon, MPT, GPT-NeoX, Aquila and Refact included) and the default ``estimate``
(both OpenAI encodings) must leave no such text under its real count. A fixed sample,
drawn once (derandomized), keeps the test quick; ``scripts/bench_families.py --blind``
prints the full tables (docs/estimator.md).
"""

from __future__ import annotations

import json
import random
from importlib import resources

import family_texts
import pytest

from tokenflex.tokenizers.estimate import (
    FAMILY_BOUNDS,
    estimate_family,
    estimate_tokens,
    family_join_floor,
    fitted,
    join_gram,
    split_text,
)

FAMILIES = sorted(FAMILY_BOUNDS)


def _unfitted_scripts() -> list[str]:
    """The scripts whose letters all lie out of the fitted ones (priced by the ceiling)."""
    return [
        s
        for s, (letters, _) in family_texts.unicode_scripts().items()
        if not any(fitted(ch) for ch in letters)
    ]


def _sample() -> list[tuple[str, str]]:
    rng = random.Random("test_blind")
    scripts = rng.sample(_unfitted_scripts(), 30)
    out = [(s, t) for s in scripts for t in family_texts.script_texts_blind(s, 1)]
    out += [("emoji-zwj", t) for t in family_texts.blind_texts("emoji-zwj", 20)]
    out += [("stdlib", t) for t in family_texts.blind_texts("stdlib", 8)]
    return out


SAMPLE = _sample()


@pytest.mark.parametrize("family", FAMILIES)
def test_family_bound_covers_blind_texts(family: str) -> None:
    under = []
    for kind, text in SAMPLE:
        truth = family_texts.family_count(family, text)
        est = estimate_family(text, family)
        if est < truth:
            under.append((kind, est, truth))
    assert not under, f"{family}: {len(under)} of {len(SAMPLE)} blind texts under: {under[:5]}"


def test_default_estimate_covers_blind_texts() -> None:
    under = []
    for kind, text in SAMPLE:
        truth = family_texts.family_count("openai", text)
        est = estimate_tokens(text)
        if est < truth:
            under.append((kind, est, truth))
    assert not under, f"{len(under)} of {len(SAMPLE)} blind texts under: {under[:5]}"


def test_the_sample_holds_every_blind_source() -> None:
    kinds = {k for k, _ in SAMPLE}
    assert {"emoji-zwj", "stdlib"} <= kinds and len(kinds) >= 30
    # the ceiling is what covers these scripts: each is out of the fitted ones
    assert {"ORIYA", "THAANA", "SINHALA", "ADLAM", "NKO"} <= set(_unfitted_scripts())
    assert "CYRILLIC" not in _unfitted_scripts()


def test_a_ceiling_holds_for_any_character() -> None:
    # every script's letters one by one (no merge at all): the ceiling, not a statistic
    for script in _unfitted_scripts():
        letters, marks = family_texts.unicode_scripts()[script]
        text = " ".join(letters[:64]) + marks[:16]
        for family in ("all", "qwen3.5", "mistral-spm"):
            assert estimate_family(text, family) >= family_texts.family_count(family, text), (
                script,
                family,
            )


# -- random letters in the fitted alphabets (issue 26) --------------------------------------

ALPHABETS = ("ARABIC", "ARMENIAN", "BENGALI", "CYRILLIC", "DEVANAGARI", "ETHIOPIC", "GEORGIAN")
ALPHABETS += ("GREEK", "HEBREW", "TAMIL", "THAI")
LETTERS = [(s, t) for s in ALPHABETS for t in family_texts.script_texts_blind(s, 2, seed=5)]


@pytest.mark.parametrize("family", [*FAMILIES, "estimate"])
def test_random_letters_in_the_fitted_alphabets_are_covered(family: str) -> None:
    # pieces of the fitted scripts are priced by the shapes of real words, which merge;
    # random letters do not, and a dear letter (two or more tokens alone) costs extra
    # (estimate.DEAR_LETTERS); gemma's Thai letters are one token alone (none is dear), and
    # random Thai words cost at least the join floor (estimate.family_join_floor).
    # Seed 5: neither the published draw (0) nor the tuning one (1).
    under = []
    for script, text in LETTERS:
        truth = family_texts.family_count("openai" if family == "estimate" else family, text)
        est = estimate_tokens(text) if family == "estimate" else estimate_family(text, family)
        if est < truth:
            under.append((script, est, truth))
    assert not under, f"{family}: {len(under)} of {len(LETTERS)} random-letter texts under: {under}"


def test_the_join_floor_is_a_lower_bound_and_as_measured() -> None:
    # the floor counts the cuts a tokenizer must make (no token holds those neighbours):
    # never above the real count of a piece, real Thai words or random letters
    floor = family_join_floor("gemma")
    assert floor is not None
    count = family_texts.reference("gguf:gemma-4")
    texts = family_texts.script_texts_blind("THAI", 6, seed=7)
    texts += family_texts.script_texts("th", "test", 10)
    pieces = {p for t in texts for p in split_text(t) if floor(p)}
    assert len(pieces) > 500
    over = [(p, floor(p), count(p)) for p in pieces if floor(p) > count(p)]
    assert not over, over[:5]
    # random letters cut far more often than real words
    random_cuts = [floor(p) / len(p) for p in split_text(texts[0]) if floor(p)]
    assert sum(random_cuts) / len(random_cuts) > 0.5
    # the shipped n-grams are the vocabulary's (scripts/bench_families.py --joins)
    data = json.loads(
        resources.files("tokenflex").joinpath("data", "family_joins.json").read_text("utf-8")
    )["joins"]["gemma"]
    first, last = data["first"], data["last"]
    tokens = family_texts.token_texts("gguf:gemma-4")
    for n in (2, 3):
        found = {
            g
            for t in tokens
            for k in range(len(t) - n + 1)
            if join_gram(g := t[k : k + n], first, last)
        }
        assert "".join(sorted(found)) == data[str(n)]
