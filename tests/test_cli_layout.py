"""Long output keeps the useful fact in view: dropped items as runs, ``count`` as a summary,
and every table within 80 columns with the numbers that matter intact."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console
from test_cli_count import MARKS, models_rows

import tokenflex
from tokenflex.cli import main
from tokenflex.cli._app import console
from tokenflex.cli._render import RUN_ROWS, bar_cells, plan_view


@pytest.fixture(autouse=True)
def columns80(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert console.width == 80, "the CLI console ignores COLUMNS (set before import?)"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def assert_fits_80(out: str) -> None:
    wide = [line for line in out.splitlines() if cell_len(line) > 80]
    assert not wide, f"{len(wide)} lines wider than 80 columns, e.g. {wide[0]!r}"


def conversation(turns: int) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": "Be brief."}]
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        msgs.append({"role": role, "content": f"[m{i}] " + "word " * (40 + i % 7)})
    msgs.append({"role": "user", "content": "And now?"})
    return msgs


@pytest.fixture
def long_chat(tmp_path: Path) -> Path:
    path = tmp_path / "long.json"
    path.write_text(json.dumps(conversation(1000)))
    return path


def test_fit_shows_runs_not_rows(capsys: pytest.CaptureFixture[str], long_chat: Path) -> None:
    plan = json.loads(run(capsys, "fit", str(long_chat), "-m", "gpt-4", "--json"))
    out = run(capsys, "fit", str(long_chat), "-m", "gpt-4")
    assert_fits_80(out)
    assert len(out.splitlines()) < 25  # 1,000 messages, a screenful
    # reference: the runs and their tokens from the plan's own per-item list
    tokens: dict[tuple[str, str], int] = {}
    for d in plan["dropped"]:
        key = (d["section"], d["reason"])
        tokens[key] = tokens.get(key, 0) + d["tokens"]
    assert len(plan["dropped"]) == plan["dropped_count"]  # under to_dict's item limit
    rows = [line.split() for line in out.splitlines()]
    for r in plan["dropped_runs"]:
        span = f"{r['start']}–{r['stop'] - 1}" if r["stop"] - r["start"] > 1 else str(r["start"])
        row = next(row for row in rows if row[:2] == [r["section"], span])
        assert row[2] == f"{r['stop'] - r['start']:,}" and row[4] == r["reason"]
    for (section, reason), total in tokens.items():
        found = [row for row in rows if row[:1] == [section] and row[-1:] == [reason]]
        assert sum(int(row[3].replace(",", "")) for row in found) == total
    total = sum(tokens.values())
    assert f"Dropped: {plan['dropped_count']:,} items, {total:,} tokens" in out
    assert f"{plan['input_tokens']:,} input + {plan['max_tokens']:,} output" in out


def test_many_runs_are_summed_in_one_row() -> None:
    # memories ranked out of order and capped: the dropped ones are scattered
    prompt = tokenflex.Prompt("gpt-4", max_tokens=1000)
    memories = [f"memory {i}: " + "fact " * 10 for i in range(200)]
    prompt.add("memories", memories, scores=[(i * 37) % 200 for i in range(200)], cap=1500)
    prompt.add("current", [{"role": "user", "content": "q"}], required=True)
    plan = prompt.fit()
    runs = plan.dropped.runs()
    assert len(runs) > RUN_ROWS  # the case under test
    out_console = Console(width=80, record=True)
    out_console.print(plan_view(plan))
    out = out_console.export_text()
    assert_fits_80(out)
    rows = [line.split() for line in out.splitlines()]
    shown = [row for row in rows if row[:1] == ["memories"]]
    assert len(shown) == RUN_ROWS
    rest = next(row for row in rows if row[:1] == ["…"])
    merged: list[list[Any]] = []  # reference: runs that continue one another are one
    for section, start, stop, reason in runs:
        if merged and merged[-1][0] == section and merged[-1][2:] == [start, reason]:
            merged[-1][2] = stop
        else:
            merged.append([section, start, stop, reason])
    assert rest[1:4] == [f"{len(merged) - RUN_ROWS:,}", "more", "runs"]
    counts = [int(row[2].replace(",", "")) for row in shown] + [int(rest[-2].replace(",", ""))]
    tokens = [int(row[3].replace(",", "")) for row in shown] + [int(rest[-1].replace(",", ""))]
    assert sum(counts) == len(plan.dropped)
    assert sum(tokens) == sum(d.tokens for d in plan.dropped)


def test_inspect_lists_items_kept_and_dropped(
    capsys: pytest.CaptureFixture[str], long_chat: Path
) -> None:
    out = run(capsys, "inspect", str(long_chat), "-m", "gpt-4")
    assert_fits_80(out)
    assert "Dropped items (first 200)" in out and "Kept messages" in out
    assert "[m0]" in out and "And now?" in out


def test_count_summary_by_default(capsys: pytest.CaptureFixture[str], long_chat: Path) -> None:
    msgs = conversation(1000)
    data = json.loads(run(capsys, "count", str(long_chat), "-m", "gpt-4o", "--json"))
    out = run(capsys, "count", str(long_chat), "-m", "gpt-4o")
    assert_fits_80(out)
    assert len(out.splitlines()) < 16
    # reference: a tally by role of the per-message counts
    by_role: dict[str, list[int]] = {}
    for m, n in zip(msgs, data["messages"], strict=True):
        by_role.setdefault(m["role"], []).append(n)
    assert data["by_role"] == {
        r: {"messages": len(v), "tokens": sum(v)} for r, v in by_role.items()
    }
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    for role, counts in by_role.items():
        assert rows[role][1:3] == [f"{len(counts):,}", f"{sum(counts):,}"]
    assert rows["total"][1:3] == [f"{len(msgs):,}", f"{data['tokens']:,}"]
    assert "--per-message" in out


def test_count_per_message(capsys: pytest.CaptureFixture[str], long_chat: Path) -> None:
    data = json.loads(run(capsys, "count", str(long_chat), "-m", "gpt-4", "--json"))
    out = run(capsys, "count", str(long_chat), "-m", "gpt-4", "--per-message")
    assert_fits_80(out)
    rows = [line.split() for line in out.splitlines()]
    numbered = {int(r[0]): r for r in rows if r and r[0].isdigit() and len(r) > 2}
    assert len(numbered) == len(data["messages"])
    for i, tokens in enumerate(data["messages"]):
        assert numbered[i][2] == f"{tokens:,}"


@pytest.mark.parametrize(
    "mistral_extra",
    [pytest.param(True, id="with-mistral-extra"), pytest.param(False, id="without")],
)
def test_models_fit_80_with_every_number_and_tokenizer(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, mistral_extra: bool
) -> None:
    """Every model's numbers and the tokenizer it counts with are whole at 80 columns (a
    long name folds instead); without the extra the estimate is there, marked."""
    if mistral_extra:
        pytest.importorskip("mistral_common")
    else:
        monkeypatch.setitem(sys.modules, "mistral_common", None)
    out = run(capsys, "models")
    assert_fits_80(out)
    rows = models_rows(out)
    for m in tokenflex.list_models():
        row = rows[m.name]
        assert row[1] == f"{m.context_window:,}"
        assert row[2] == ("—" if m.max_output_tokens is None else f"{m.max_output_tokens:,}")
        counts_with = m.counting().tokenizer
        assert row[-1].rstrip(MARKS) == counts_with
        assert (row[-1] != counts_with) == (m.exact_tokenizer not in (None, counts_with))
    marked = [name for name, row in rows.items() if row[-1][-1] in MARKS]
    assert (marked == []) == mistral_extra, marked


def test_models_with_very_long_names_fit_80(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "vendor/an-extremely-long-model-name-that-no-terminal-column-can-hold-v2"
    tokenflex.register_model(tokenflex.Model(name=name, context_window=1_048_576))
    out = run(capsys, "models", "extremely")
    assert_fits_80(out)
    body = out.split("───")[-1].splitlines()[1:]  # the rows under the header rule
    assert "1,048,576" in out
    assert "".join(line.split()[0] for line in body if line.strip()) == name  # folded, whole


def _pack_tables(out: str) -> str:
    return out.split("Rendered context")[0]  # the context itself is data, printed as is


def test_pack_and_validate_fit_80(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    chunks = [
        {
            "text": f"Passage {i}: " + "lorem ipsum " * (20 + i),
            "id": f"chunk-{i}-with-a-long-identifier",
            "source": f"A document title that goes on for a while ({i})",
            "url": f"https://example.org/a/very/long/path/to/the/document/{i}?page={i}",
            "score": 1 - i / 100,
        }
        for i in range(80)
    ]
    path = tmp_path / "chunks.json"
    path.write_text(json.dumps(chunks))
    data = json.loads(run(capsys, "pack", str(path), "-b", "3000", "--json"))
    out = _pack_tables(run(capsys, "pack", str(path), "-b", "3000"))
    assert_fits_80(out)
    assert f"Dropped: {data['dropped_count']:,} chunks, {data['dropped_tokens']:,} tokens" in out
    assert len(out.splitlines()) < 2 * RUN_ROWS + 15
    spec = tmp_path / "spec.toml"
    spec.write_text(
        "total_budget = 120000\nexpected_output = 20000\n[components]\n"
        '"a component whose name is much longer than any column should be" = 50000\n'
        "rag = 40000\n"
    )
    out = run(capsys, "validate", str(spec))
    assert_fits_80(out)
    assert "50,000" in out and "40,000" in out and "120,000" in out


def test_errors_and_demo_fit_80(capsys: pytest.CaptureFixture[str]) -> None:
    assert_fits_80(run(capsys, "demo"))


def test_python_m_tokenflex_in_an_80_column_pipe(long_chat: Path) -> None:
    """The real entry point, as `COLUMNS=80 tokenflex fit ... | less` runs it."""
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(Path(tokenflex.__file__).parents[1])}
    done = subprocess.run(
        [sys.executable, "-m", "tokenflex", "fit", str(long_chat), "-m", "gpt-4"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert_fits_80(done.stdout)
    assert "Dropped:" in done.stdout and "history" in done.stdout


@given(
    sizes=st.lists(st.integers(min_value=0, max_value=10**7), min_size=1, max_size=12),
    width=st.integers(min_value=12, max_value=200),
)
def test_bar_cells_fill_the_width(sizes: list[int], width: int) -> None:
    cells = bar_cells(sizes, width)
    total = sum(sizes)
    if total == 0:
        assert cells == [0] * len(sizes)
        return
    assert sum(cells) == width
    assert all((c == 0) == (s == 0) for s, c in zip(sizes, cells, strict=True))
    exact: list[Any] = [width * s / total for s in sizes]
    if all(e >= 1 for e, s in zip(exact, sizes, strict=True) if s):
        # no part needed a minimum cell: largest remainder is within one cell of exact
        assert all(abs(c - e) < 1 for c, e in zip(cells, exact, strict=True))


def test_models_break_long_names_between_words_at_80(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A name too long for its column is broken after a '-', ':', '/' or '.', never
    mid-word (``qwen3:30b-a3b-instruct-`` / ``2507``, not ``...instruc`` / ``t-2507``)."""
    out = run(capsys, "models")
    assert_fits_80(out)
    lines = [ln for ln in out.split("───")[-1].splitlines()[1:] if ln.strip()]
    folded = 0
    for above, line in itertools.pairwise(lines):
        if len(line.split()) == 1 and line.split()[0][0] not in MARKS:  # a name's next line
            folded += 1
            assert above.split()[0][-1] in "-:/.", (above, line)
    assert folded > 0  # the registry has names longer than the column at 80
    names = set(models_rows(out))
    assert {m.name for m in tokenflex.list_models()} <= names  # joined back, every one whole
