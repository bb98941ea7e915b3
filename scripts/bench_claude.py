"""Measure the Claude counting rule (``estimate:F`` in the registry) against ctok.

    python3.12 -m venv .venv-ctok && .venv-ctok/bin/pip install ctok
    .venv/bin/python scripts/bench_claude.py            # the table in docs/estimator.md
    .venv/bin/python scripts/bench_claude.py --factors  # the least factor per generation

Anthropic publishes no tokenizer. The best reference obtainable offline is ``ctok`` (PyPI),
a third-party *reconstruction* of the token counts of Anthropic's ``count_tokens``
endpoint, for two generations: Claude 3 to 4.6 (``3.0``) and Opus 4.7 and later (``4.7``).
It is not ground truth: its own authors fitted it to count_tokens answers, and a text
unlike theirs may count differently. It needs Python 3.12+, so it runs in its own venv
(``.venv-ctok``), here only: no test depends on it.

Texts: the held-out kinds of ``tests/family_texts.py`` and its blind kinds (Python's
standard library, emoji and ZWJ sequences, random words of every script Unicode names).
For each text the content tokens ctok gives (its count of the text as one user message,
less that generation's message overhead) are divided by the bound the registry
multiplies for that generation (``estimate``, the OpenAI bound, or ``estimate:all``): the
factor a generation needs is the largest ratio (``--factors``, for both bases), and the
table shows, for the rule the registry uses, the share of texts under and the mean
overcount per kind.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

import family_texts  # noqa: E402

from tokenflex.tokenizers.estimate import estimate_family, estimate_tokens  # noqa: E402

CTOK = ROOT / ".venv-ctok" / "bin" / "python"
GENERATIONS = {"claude-3-to-4.6": "3.0", "claude-4.7+": "4.7"}
REGISTRY_RULES = {"claude-3-to-4.6": ("estimate", 1.5), "claude-4.7+": ("all", 1.6)}
"""The base bound and factor the registry's claude-* entries count with (``estimate:1.5``,
``estimate:all:1.6``)."""

_COUNT = """
import json, sys
import ctok
from ctok import main
texts, version = json.load(sys.stdin)
overhead = main._model(main._family(version)).message_overhead
print(json.dumps([max(0, ctok.token_count(t, version) - overhead) for t in texts]))
"""


def ctok_counts(texts: list[str], version: str) -> list[int]:
    """ctok's content tokens of each text for one generation (in the ctok venv)."""
    if not CTOK.exists():
        raise SystemExit(f"{CTOK} not found: python3.12 -m venv .venv-ctok && pip install ctok")
    out = subprocess.run(
        [str(CTOK), "-c", _COUNT],
        input=json.dumps([texts, version]),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    counts: list[int] = json.loads(out)
    return counts


def corpus(per_kind: int) -> list[tuple[str, str]]:
    out = [(k, t) for k in family_texts.KINDS for t in family_texts.texts(k, "test", per_kind)]
    for kind in family_texts.BLIND_KINDS:
        out += [(kind, t) for t in family_texts.blind_texts(kind, per_kind)]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--per-kind", type=int, default=60)
    ap.add_argument("--factors", action="store_true", help="the least factor per generation")
    args = ap.parse_args(argv)
    texts = corpus(args.per_kind)
    plain = [t for _, t in texts]
    bases = {
        "estimate": [estimate_tokens(t) for t in plain],
        "all": [estimate_family(t, "all") for t in plain],
    }
    kinds = sorted({k for k, _ in texts}, key=[k for k, _ in texts].index)
    print(f"{len(texts)} texts, {len(kinds)} kinds\n")
    print("| generation | rule | kind | n | under | worst under | mean over |")
    print("|---|---|---|--:|--:|--:|--:|")
    for gen, version in GENERATIONS.items():
        truth = ctok_counts(plain, version)
        if args.factors:
            for name, base in bases.items():
                need, kind = max(
                    (y / e, k) for (k, _), y, e in zip(texts, truth, base, strict=True) if e
                )
                print(f"{gen} over {name}: least factor {need:.3f} ({kind})", file=sys.stderr)
        name, factor = REGISTRY_RULES[gen]
        est = bases[name]
        rule = f"estimate:{factor:g}" if name == "estimate" else f"estimate:{name}:{factor:g}"
        for kind in kinds:
            rows = [
                (math.ceil(e * factor - 1e-9), y)
                for (k, _), y, e in zip(texts, truth, est, strict=True)
                if k == kind
            ]
            rel = [b / max(y, 1) - 1 for b, y in rows]
            under = sum(r < 0 for r in rel)
            print(
                f"| {gen} | `{rule}` | {kind} | {len(rows)} | {under / len(rows):.1%} | "
                f"{max(0.0, -min(rel)):.0%} | {statistics.mean(rel):+.0%} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
