"""The retention benchmark's script, run small: what its tables claim holds at 8K.

``scripts/bench_retention.py`` plants facts in seeded sessions and looks for each, by its
exact text, in what every variant sends at the session's end (or gets back through
recall). Its planted list is the independent reference. At an 8,192-token window, for a
chat and an agent session: with recall every fact is in the request or recoverable, a
checked summary keeps at least 90% of the planted facts of its span and never fewer than
the unchecked one, dropping alone keeps almost none (so the assertions can fail), recall
keeps the cached prefix of ``cache_stable=True`` (within half a point), and no plan goes
over the window (the script asserts it on every turn).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import bench_retention


@pytest.mark.parametrize("kind", ["chat", "agent"])
def test_recall_and_checked_summaries_keep_the_planted_facts(kind: str) -> None:
    table: dict[str, bench_retention.Row] = {}
    bench_retention.run_cell(8192, kind, [0], table)
    recall = table["tokenflex fit(recall=True)"]
    assert recall.in_request[0] + recall.recoverable[0] >= 0.95, recall
    checked = table["tokenflex + summary, checked"]
    unchecked = table["tokenflex + summary, unchecked"]
    assert checked.span_planted[0] > 0
    assert checked.span_kept[0] >= 0.9 * checked.span_planted[0], checked
    assert checked.span_kept[0] >= unchecked.span_kept[0]
    assert table["tokenflex fit (drop)"].in_request[0] < 0.5  # the budget forces them out
    # recall costs no share of the cached prefix (within the table's rounding)
    stable = table["tokenflex fit(cache_stable=True)"].prefix_share[0]
    with_recall = table["tokenflex fit(recall=True, cache_stable=True)"].prefix_share[0]
    assert with_recall >= stable - 0.005, (with_recall, stable)
