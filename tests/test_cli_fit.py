"""tokenflex fit / inspect / demo through the CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tokenflex.cli import main


def _write(tmp_path: Path, data: Any) -> str:
    p = tmp_path / "req.json"
    p.write_text(json.dumps(data), encoding="utf-8")
    return str(p)


def _chat(n: int) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": "Be brief."}]
    for i in range(n):
        msgs.append(
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"[m{i}] " + "w " * 80}
        )
    msgs.append({"role": "user", "content": "now?"})
    return msgs


def test_fit_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, _chat(300))
    assert main(["fit", path, "--model", "gpt-4", "--max-tokens", "1000", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["input_tokens"] + plan["max_tokens"] + plan["safety_margin"] <= 8192
    assert plan["dropped_count"] > 0 and plan["dropped_runs"][0]["reason"] in ("share", "budget")


def test_fit_table_and_inspect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, {"model": "gpt-4", "max_tokens": 1000, "messages": _chat(300)})
    assert main(["fit", path]) == 0
    out = capsys.readouterr().out
    assert "gpt-4" in out and "Dropped" in out
    assert main(["inspect", path]) == 0
    out = capsys.readouterr().out
    assert "Kept messages" in out and "[m299]" in out  # content is not read as markup


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        pytest.param("{not json", "not valid JSON", id="invalid-json"),
        pytest.param('{"x": 1}', "'messages'", id="no-messages"),
        pytest.param('[{"role": "wizard", "content": "x"}]', "wizard", id="unknown-role"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, needle: str
) -> None:
    p = tmp_path / "bad.json"
    p.write_text(content, encoding="utf-8")
    assert main(["fit", str(p), "--model", "gpt-4o"]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_missing_file_and_overflow(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", str(tmp_path / "nope.json"), "--model", "gpt-4"]) == 2
    assert "Cannot read" in capsys.readouterr().err
    path = _write(tmp_path, [{"role": "user", "content": "word " * 9000}])
    assert main(["fit", path, "--model", "gpt-4"]) == 2
    assert "8,192" in capsys.readouterr().err


def test_demo_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "Output negotiation" in out and "Token-aware history" in out
    assert "raises, never overflows" in out


SYSTEM = "Follow the house style. " * 800  # ~4,000 tokens


def _turns() -> list[dict[str, str]]:
    return [
        {"role": "user", "content": "hello " * 1000},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "so?"},
    ]


def _fit_json(capsys: pytest.CaptureFixture[str], path: str, *args: str) -> dict[str, Any]:
    assert main(["fit", path, "-m", "gpt-4", "--json", *args]) == 0
    plan: dict[str, Any] = json.loads(capsys.readouterr().out)
    return plan


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"system": SYSTEM, "max_tokens": 500, "messages": _turns()}, id="anthropic"),
        pytest.param(
            {"instructions": SYSTEM, "max_output_tokens": 500, "input": _turns()}, id="responses"
        ),
    ],
)
def test_fit_counts_the_system_of_anthropic_and_responses_bodies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: dict[str, Any]
) -> None:
    """The same request as a chat list (its system a message) is the reference: the
    body's top-level system is counted, not ignored (it was ~4,000 tokens short)."""
    chat = _fit_json(capsys, _write(tmp_path, [{"role": "system", "content": SYSTEM}, *_turns()]))
    plan = _fit_json(capsys, _write(tmp_path, body))
    assert plan["input_tokens"] == chat["input_tokens"] > 4000
    assert plan["max_tokens"] == 500  # the body's own output limit


def test_fit_honours_max_completion_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = {"max_completion_tokens": 700, "max_tokens": 900, "messages": _turns()}
    assert _fit_json(capsys, _write(tmp_path, body))["max_tokens"] == 700  # the smaller
    assert _fit_json(capsys, _write(tmp_path, {**body, "max_tokens": None}))["max_tokens"] == 700


def test_fit_reads_json_lines_of_messages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "conv.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in _turns()) + "\n", encoding="utf-8")
    reference = _fit_json(capsys, _write(tmp_path, _turns()))
    assert _fit_json(capsys, str(path))["input_tokens"] == reference["input_tokens"]


def _numbers(out: str, title: str) -> list[str]:
    """The '#' column of one of inspect's tables."""
    block = out.split(title, 1)[1].split("───", 1)[1]
    rows = []
    for line in block.splitlines()[1:]:
        if not line.strip() or line.strip().startswith(("Kept", "Dropped")):
            break
        rows.append(line.split()[0])
    return rows


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"model": "gpt-4", "messages": _chat(150)}, id="chat"),
        pytest.param(
            {
                "model": "gpt-4",
                "system": "Be brief.",
                "max_tokens": 900,
                "messages": _chat(150)[1:],
            },
            id="anthropic",
        ),
    ],
)
def test_inspect_numbers_kept_and_dropped_rows_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: dict[str, Any]
) -> None:
    """Kept and dropped rows carry the message's index in the file: together each index
    once (they were numbered by place in the plan and in the input, and overlapped)."""
    assert main(["inspect", _write(tmp_path, body), "--max-tokens", "900"]) == 0
    out = capsys.readouterr().out
    dropped = [int(n) for n in _numbers(out, "Dropped items")]
    kept = [int(n) for n in _numbers(out, "Kept messages")]
    assert dropped and kept
    assert sorted(dropped + kept) == list(range(len(body["messages"])))
