from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenflex.cli import main
from tokenflex.tokenizers import get_tokenizer


def _chunks(n: int = 12) -> list[dict[str, object]]:
    return [
        {
            "text": f"Passage {i}: " + "retrieval context budget token citation " * (i % 5 + 2),
            "source": f"Doc {i}",
            "url": f"https://ex.org/{i}",
            "metadata": {"page": i},
            "score": round(1 - i / n, 3),
            "id": f"c{i}",
        }
        for i in range(n)
    ]


@pytest.fixture
def chunks_file(tmp_path: Path) -> Path:
    p = tmp_path / "chunks.json"
    p.write_text(json.dumps(_chunks()))
    return p


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_pack_readable(chunks_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["pack", str(chunks_file), "--budget", "400", "--model", "gpt-4o"], capsys)
    assert code == 0
    assert "Packed 7 of 12 chunks" in out and "tokenizer o200k_base (exact)" in out
    assert "Dropped: 5 chunks" in out
    assert "Note: 5 of 12 retrieved passages omitted to fit the budget." in out
    assert '[1] Doc 0 — https://ex.org/0 — {"page":0}' in out


@pytest.mark.parametrize("policy", ["skip", "stop", "optimal"])
@pytest.mark.parametrize("fmt", ["markdown", "xml"])
def test_pack_json(
    chunks_file: Path, capsys: pytest.CaptureFixture[str], policy: str, fmt: str
) -> None:
    args = ["pack", str(chunks_file), "-b", "400", "--policy", policy, "--format", fmt, "--json"]
    code, out, _ = _run(args, capsys)
    assert code == 0
    d = json.loads(out)
    assert d["policy"] == policy and d["format"] == fmt and d["tokenizer"] == "estimate"
    assert d["tokens"] <= 400 - 64
    assert d["admitted_count"] + d["dropped_count"] == 12
    assert d["admitted"][0]["id"] == "c0"


def test_pack_jsonl_strings_and_chunks_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jl = tmp_path / "c.jsonl"
    jl.write_text('"just a passage"\n{"text": "second", "id": 7}\n')
    code, out, _ = _run(
        ["pack", str(jl), "-b", "200", "--tokenizer", "cl100k_base", "--json"], capsys
    )
    d = json.loads(out)
    assert code == 0 and d["admitted_count"] == 2 and d["tokenizer"] == "cl100k_base"
    assert "just a passage" in d["rendered"] and d["admitted"][1]["id"] == "7"
    obj = tmp_path / "o.json"
    obj.write_text(json.dumps({"chunks": [{"text": "x", "title": "T"}]}))
    code, out, _ = _run(["pack", str(obj), "-b", "100", "--json"], capsys)
    assert code == 0 and json.loads(out)["admitted"][0]["source"] == "T"


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        pytest.param(None, [], "Cannot read", id="missing-file"),
        pytest.param("{not json", [], "is not valid JSON", id="bad-json"),
        pytest.param('[{"txt": "x"}]', [], "chunk 0 has no 'text'", id="no-text"),
        pytest.param('[{"text": "x", "foo": 1}]', [], "unknown keys ['foo']", id="unknown-key"),
        pytest.param('[{"text": "x", "score": "hi"}]', [], "chunk 0: Chunk score", id="bad-score"),
        pytest.param("42", [], "holds a int", id="not-a-list"),
        pytest.param('["x"]', ["--policy", "best"], "policy must be one of", id="bad-policy"),
        pytest.param('["x"]', ["-m", "gpt-4o", "-t", "estimate"], "not both", id="model-and-tok"),
    ],
)
def test_pack_errors(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str | None,
    args: list[str],
    message: str,
) -> None:
    p = tmp_path / "chunks.json"
    if content is not None:
        p.write_text(content)
    code, _, err = _run(["pack", str(p), "--budget", "100", *args], capsys)
    flat = err.replace("\n", "")
    assert code == 2 and message in flat
    assert (str(p) in flat) is not bool(args)  # file problems name the file


SPEC = """
total_budget = 120000
expected_output = {output}
input_cap = 90000
rag_cap = 40000
[components]
"base+style+analyze" = 21000
section = 3000
rag = {rag}
"""


@pytest.mark.parametrize(
    ("rag", "output", "status", "code"),
    [
        pytest.param(40_000, 25_000, "OK", 0, id="seed-rag-heavy"),
        pytest.param(60_000, 32_000, "FALLBACK", 1, id="seed-rag-overflow"),
    ],
)
def test_validate(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    rag: int,
    output: int,
    status: str,
    code: int,
) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.format(rag=rag, output=output))
    got, out, _ = _run(["validate", str(spec)], capsys)
    assert got == code and f"{status}:" in out and "RAG budget: 40,000 tokens" in out
    got, out, _ = _run(["validate", str(spec), "--json"], capsys)
    d = json.loads(out)
    assert got == code and d["status"] == status and d["rag_budget"] == 40_000


def test_validate_texts_files_and_thresholds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "rag.txt").write_text("hello world " * 100)
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'total_budget = 1000\nexpected_output = 100\ntokenizer = "o200k_base"\n'
        "[thresholds]\nwarning_at = 0.2\n"
        '[components]\nsystem = { text = "You are terse." }\nrag = { file = "rag.txt" }\n'
        'inline = "Some words here."\n'
    )
    code, out, _ = _run(["validate", str(spec), "--json"], capsys)
    d = json.loads(out)
    assert code == 0 and d["status"] == "WARNING"
    o200k = get_tokenizer("o200k_base")
    assert d["components"]["rag"] == o200k.count("hello world " * 100)
    assert d["components"]["system"] == o200k.count("You are terse.")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "Cannot read", id="missing"),
        pytest.param("total_budget = ", "not valid TOML", id="bad-toml"),
        pytest.param(
            "total_budget = 1\n[components]\na = 1\n", "needs 'expected_output'", id="no-output"
        ),
        pytest.param(
            "total_budget = 1\nexpected_output = 1\n", "'components' table", id="no-components"
        ),
        pytest.param("x = 1", "unknown keys ['x']", id="unknown-key"),
        pytest.param(
            "total_budget = 1\nexpected_output = 1\n[components]\na = { url = 'x' }\n",
            "component 'a' must be",
            id="bad-component",
        ),
        pytest.param(
            "total_budget = 1\nexpected_output = 1\n[components]\na = { file = 'nope.txt' }\n",
            "component 'a' file",
            id="missing-component-file",
        ),
        pytest.param(
            "total_budget = 0\nexpected_output = 1\n[components]\na = 1\n",
            "total_budget must be",
            id="invalid-number",
        ),
        pytest.param(
            "total_budget = 9\nexpected_output = 1\nrag_cap = 3\n[components]\na = 1\n",
            "rag_cap needs input_cap",
            id="rag-cap-without-input-cap",
        ),
    ],
)
def test_validate_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    spec = tmp_path / "spec.toml"
    if content is not None:
        spec.write_text(content)
    code, _, err = _run(["validate", str(spec)], capsys)
    flat = err.replace("\n", "")
    assert code == 2 and message in flat and str(spec) in flat
