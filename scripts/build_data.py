"""Rebuild every generated file of the project, in the order they depend on each other.

    .venv/bin/python scripts/build_data.py            # every step (make data)
    .venv/bin/python scripts/build_data.py --list     # the steps, the files, the commands
    .venv/bin/python scripts/build_data.py --only family-bounds,snapshot

Each generated file is built by one step; a file says only how it is built, and why a
file's numbers are what they are is in docs/estimator.md. What is not generated: the model
registry (``data/models.toml``, kept by hand with a source per entry), and the estimator's
text corpus (``tests/data/estimator/corpus.jsonl.xz``) and word lists, collected once from
the texts installed on one machine (``bench_estimator.py --build``, which see) so that every
table is reproducible anywhere. Refitting changes the held-out tables in docs/estimator.md:
re-run them (``bench_families.py --pivot``, ``bench_estimator.py --markdown``) before
committing a refit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Step:
    name: str
    output: str
    command: tuple[str, ...]
    what: str


STEPS: tuple[Step, ...] = (
    Step(
        "estimate",
        "src/tokenflex/data/estimate.json.gz",
        ("scripts/bench_estimator.py", "--fit"),
        "the default estimate's piece tables, fitted on the corpus's tune half",
    ),
    Step(
        "family-vocab",
        "src/tokenflex/data/family_vocab.json.gz",
        ("scripts/bench_families.py", "--vocab"),
        "per family, the table pieces that are one token in every reference tokenizer",
    ),
    Step(
        "family-runs",
        "src/tokenflex/data/family_runs.json",
        ("scripts/bench_families.py", "--runs"),
        "per family, the scripts its bound was fitted on (others priced at the ceiling)",
    ),
    Step(
        "family-table-tokens",
        "src/tokenflex/data/family_table_tokens.json.gz",
        ("scripts/bench_families.py", "--table-tokens"),
        "per family, the tokens each table piece costs where it is not one token",
    ),
    Step(
        "family-joins",
        "src/tokenflex/data/family_joins.json",
        ("scripts/bench_families.py", "--joins"),
        "per family of JOINS (gemma, Thai), the letter pairs and triples inside its tokens",
    ),
    Step(
        "family-bounds",
        "src/tokenflex/tokenizers/family_bounds.py",
        ("scripts/bench_families.py", "--fit"),
        "the families' fitted weights (a linear program per family)",
    ),
    Step(
        "snapshot",
        "tests/data/estimator/counts_snapshot.json",
        ("scripts/build_data.py", "--snapshot"),
        "the estimate of every 8th corpus text, the guard that a speed-up changes no count",
    ),
    Step(
        "options-table",
        "docs/fit.md",
        ("scripts/options_table.py",),
        "the options table of docs/fit.md, from FitOptions",
    ),
)
"""Every generated file and the command that builds it, in build order."""

SNAPSHOT_EVERY = 8


def snapshot() -> None:
    """Write ``counts_snapshot.json``: [estimate, low, high] of every 8th corpus text."""
    sys.path[:0] = [str(ROOT / "src"), str(ROOT / "scripts")]
    import bench_estimator

    from tokenflex.tokenizers.estimate import estimate_tokens, estimate_tokens_range

    texts = [r["text"] for r in bench_estimator.load(bench_estimator.CORPUS)][::SNAPSHOT_EVERY]
    counts = [[estimate_tokens(t), *estimate_tokens_range(t)] for t in texts]
    note = (
        f"[estimate_tokens, low, high] of corpus.jsonl.xz[::{SNAPSHOT_EVERY}]; "
        "built by scripts/build_data.py --only snapshot"
    )
    out = ROOT / "tests" / "data" / "estimator" / "counts_snapshot.json"
    data = {"note": note, "every": SNAPSHOT_EVERY, "counts": counts}
    out.write_text(json.dumps(data, separators=(", ", ": ")) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--list", action="store_true", help="print the steps and exit")
    ap.add_argument("--only", metavar="STEP,...", help="run only these steps")
    ap.add_argument("--snapshot", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.snapshot:
        snapshot()
        return 0
    if args.list:
        for s in STEPS:
            print(f"{s.name:20} {s.output}\n{'':20} python {' '.join(s.command)}: {s.what}")
        return 0
    names = {s.name for s in STEPS}
    only = set(args.only.split(",")) if args.only else names
    if only - names:
        ap.error(f"unknown steps {sorted(only - names)}; the steps are {[s.name for s in STEPS]}")
    for s in STEPS:
        if s.name in only:
            print(f"== {s.name}: {s.output}", flush=True)
            subprocess.run([sys.executable, *s.command], cwd=ROOT, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
