"""``tokenflex count`` and ``tokenflex models`` through ``tokenflex.cli.main``."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest
from _cookbook import COOKBOOK_MESSAGES, COOKBOOK_TOOL_MESSAGES, COOKBOOK_TOOLS

import tokenflex
from tokenflex.cli import main

COOKBOOK = COOKBOOK_MESSAGES
TOOLS = COOKBOOK_TOOLS
WEATHER = COOKBOOK_TOOL_MESSAGES


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    assert main([*args, "--json"]) == 0
    data: dict[str, object] = json.loads(capsys.readouterr().out)
    return data


@pytest.fixture
def messages_file(tmp_path: Path) -> Path:
    path = tmp_path / "messages.json"
    path.write_text(json.dumps(COOKBOOK))
    return path


@pytest.mark.parametrize(("model", "tokens"), [("gpt-4", 129), ("gpt-4o", 124)])
def test_count_messages_file_json(
    capsys: pytest.CaptureFixture[str], messages_file: Path, model: str, tokens: int
) -> None:
    data = run_json(capsys, "count", str(messages_file), "--model", model)
    assert data["tokens"] == tokens
    assert data["kind"] == "messages"
    assert data["exact"] is True
    per_message = data["messages"]
    assert isinstance(per_message, list) and len(per_message) == 6
    assert sum(per_message) + 3 == tokens


def test_count_messages_table(capsys: pytest.CaptureFixture[str], messages_file: Path) -> None:
    assert main(["count", str(messages_file), "-m", "gpt-4o"]) == 0
    out = capsys.readouterr().out
    assert "124" in out and "128,000" in out
    assert "gpt-4o" in out and "priming" in out


def test_count_request_body_with_tools(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    body = tmp_path / "request.json"
    body.write_text(json.dumps({"model": "gpt-4o-mini", "messages": WEATHER, "tools": TOOLS}))
    data = run_json(capsys, "count", str(body))
    assert (data["model"], data["tokens"]) == ("gpt-4o-mini", 101)


def test_count_tools_option(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    messages, tools = tmp_path / "m.json", tmp_path / "t.json"
    messages.write_text(json.dumps(WEATHER))
    tools.write_text(json.dumps(TOOLS))
    data = run_json(capsys, "count", str(messages), "--tools", str(tools), "-m", "gpt-4")
    assert data["tokens"] == 105


def test_count_text_argument(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "count", "tiktoken is great!", "-m", "gpt-4")
    assert (data["kind"], data["tokens"]) == ("text", 6)
    assert main(["count", "tiktoken is great!", "-m", "gpt-4"]) == 0
    assert "6 tokens" in capsys.readouterr().out


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(["count", "tiktoken is great!"], id="text"),
        pytest.param(["count", "{FILE}"], id="file"),
        pytest.param(["count", "{FILE}", "-m", "gpt-4"], id="file-m"),
        pytest.param(["count", "--model=claude-sonnet-4", "héllo wörld ✓"], id="estimate"),
        pytest.param(["count", "{BOM}"], id="utf8-bom"),
        pytest.param(["count", "{FILE}", "--model", "no-such-model-x"], id="unknown-model"),
        pytest.param(["count", '  {"role": "user"}'], id="json-looking-text"),
        pytest.param(["count", "{JSON}"], id="messages-file"),
        pytest.param(["count", "{FILE}", "-m", "gpt-4", "-m", "gpt-4o"], id="two-models"),
    ],
)
def test_a_plain_count_line_answers_as_typer_does(
    line: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A plain ``count`` line is answered without typer (cli._fast, issue 24): the same
    output and exit code as the typer command (``--debug`` always goes through typer);
    lines it does not answer fall through to typer."""
    files = {
        "{FILE}": tmp_path / "notes.txt",
        "{BOM}": tmp_path / "bom.md",
        "{JSON}": tmp_path / "messages.json",
    }
    files["{FILE}"].write_text("The quick brown fox jumps over the lazy dog.\n" * 20)
    files["{BOM}"].write_bytes("\ufeffBonjour, ça va ?".encode())
    files["{JSON}"].write_text(json.dumps(COOKBOOK))
    args = [str(files[a]) if a in files else a for a in line]
    codes, outputs = [], []
    for argv in (args, ["--debug", *args]):
        codes.append(main(argv))
        captured = capsys.readouterr()
        outputs.append((captured.out, captured.err))
    assert codes[0] == codes[1]
    assert outputs[0] == outputs[1]
    assert outputs[0][0].strip()


def test_count_plain_text_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("tiktoken is great!")
    assert run_json(capsys, "count", str(path), "-m", "gpt-4")["tokens"] == 6


def test_count_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(COOKBOOK)))
    assert run_json(capsys, "count", "-", "-m", "gpt-4")["tokens"] == 129
    monkeypatch.setattr("sys.stdin", io.StringIO("tiktoken is great!"))
    assert run_json(capsys, "count", "-", "-m", "gpt-4")["tokens"] == 6


def test_unknown_model_is_conservative_unless_strict(
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = run_json(capsys, "count", "hello", "-m", "no-such-model")
    assert data["known_model"] is False and data["context_window"] == 8192
    assert main(["count", "hello", "-m", "no-such-model", "--strict"]) == 2
    err = capsys.readouterr().err
    assert "Unknown model 'no-such-model'" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("content", "match"),
    [
        pytest.param("{not json", "is not valid JSON", id="invalid-json"),
        pytest.param("42", "holds a JSON int", id="wrong-shape"),
        pytest.param('{"model": "gpt-4o"}', "holds a JSON dict", id="no-messages"),
        pytest.param(
            '[{"role": "bot", "content": "x"}]', r"messages\[0\] has role 'bot'", id="role"
        ),
        pytest.param('[{"role": "user", "content": null}]', "content None", id="none-content"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, match: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert main(["count", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:")
    assert re.search(match, err)
    assert "Traceback" not in err


def test_missing_and_unreadable_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["count", str(tmp_path / "missing.json")]) == 2
    assert "No such file" in capsys.readouterr().err
    binary = tmp_path / "blob.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    assert main(["count", str(binary)]) == 2
    assert "Cannot read" in capsys.readouterr().err
    assert main(["count", "hi", "--tools", str(tmp_path / "nope.json")]) == 2
    assert "Cannot read tools file" in capsys.readouterr().err


def test_models_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "gpt-4o"]) == 0
    out = capsys.readouterr().out
    assert "gpt-4o-mini" in out and "128,000" in out and "$2.50" in out
    assert main(["models", "claude", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["provider"] == "anthropic" for r in rows)
    assert {"name", "context_window", "max_output_tokens", "input_price"} <= set(rows[0])


def test_models_without_match(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "zzz-no-such"]) == 0
    assert "No model matches" in capsys.readouterr().out
    assert main(["models", "zzz-no-such", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


MARKS = "¹²³⁴⁵⁶⁷⁸⁹⁰"


def models_rows(out: str) -> dict[str, list[str]]:
    """The rows of the ``tokenflex models`` table by model name, each as its cells (name
    first): a name folded over several lines is joined back. The notes under the table
    (lines that start with a mark) are not rows."""
    rows: list[list[str]] = []
    for line in out.split("───")[-1].splitlines()[1:]:  # the lines under the header rule
        cells = line.split()
        if not cells:
            continue
        if cells[0][0] in MARKS:  # the notes: the table is over
            break
        if len(cells) == 1:  # the rest of a folded name
            rows[-1][0] += cells[0]
        else:
            rows.append(cells)
    return {cells[0]: cells for cells in rows}


def models_notes(out: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if line[:1] in MARKS]


MISTRAL_EXACT = {
    "mistral-nemo": "mistral:tekken",
    "mistral-small": "mistral:tekken",
    "mistral:7b": "mistral:v3",
    "mixtral:8x7b": "mistral:v1",
}


def test_models_show_the_exact_tokenizer_when_it_loads(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mistral_common")
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["models", "mistral"]) == 0
    out = capsys.readouterr().out
    rows = models_rows(out)
    for name, exact in MISTRAL_EXACT.items():
        assert rows[name][-1] == exact, rows[name]
    assert rows["mistral-large"][-1] == "estimate:all"  # no exact tokenizer in the registry
    assert models_notes(out) == []
    assert main(["models", "mistral-nemo", "--json"]) == 0
    (nemo,) = json.loads(capsys.readouterr().out)
    assert nemo["tokenizer"] == "estimate:tekken"  # the registry entry, as written
    assert nemo["exact_tokenizer"] == "mistral:tekken"
    assert nemo["counting_tokenizer"] == "mistral:tekken"
    assert nemo["counting_chat_format"] == "mistral"


def test_models_show_the_estimate_and_what_the_exact_tokenizer_needs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "mistral_common", None)  # the extra is not installed
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["models", "mistral"]) == 0
    out = capsys.readouterr().out
    rows = models_rows(out)
    marks = {exact: rows[name][-1][-1] for name, exact in MISTRAL_EXACT.items()}
    assert len(set(marks.values())) == 3  # one mark per exact tokenizer: tekken, v3, v1
    assert rows["mistral-nemo"][-1] == "estimate:tekken" + marks["mistral:tekken"]
    assert rows["mistral-small"][-1] == "estimate:tekken" + marks["mistral:tekken"]
    assert rows["mistral:7b"][-1] == "estimate:mistral-spm" + marks["mistral:v3"]
    assert rows["mixtral:8x7b"][-1] == "estimate:mistral-spm" + marks["mistral:v1"]
    assert rows["mistral-large"][-1] == "estimate:all"
    assert models_notes(out) == [
        f"{marks[exact]} estimate here: exact {exact} needs pip install 'tokenflex[mistral]'"
        for exact in ("mistral:tekken", "mistral:v3", "mistral:v1")
    ]
    assert main(["models", "mistral-nemo", "--json"]) == 0
    (nemo,) = json.loads(capsys.readouterr().out)
    assert nemo["exact_tokenizer"] == "mistral:tekken"
    assert nemo["counting_tokenizer"] == "estimate:tekken"
    assert nemo["counting_chat_format"] == "generic"


def test_models_say_when_an_exact_tokenizer_does_not_load(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("mistral_common")  # installed: the file is what is missing
    missing = "mistral:no-such-file.json"  # a path, relative to the test's empty cwd
    tokenflex.register_model(
        tokenflex.Model(
            name="house-model", context_window=32_768, tokenizer="estimate:all",
            exact_tokenizer=missing,
        )
    )  # fmt: skip
    assert main(["models", "house-model"]) == 0
    out = capsys.readouterr().out
    assert models_rows(out)["house-model"][-1] == "estimate:all¹"
    assert models_notes(out) == [f"¹ estimate here: exact {missing} does not load here"]
    assert main(["models", "gpt-4o-mini", "--json"]) == 0
    (mini,) = json.loads(capsys.readouterr().out)
    assert mini["exact_tokenizer"] is None
    assert mini["counting_tokenizer"] == mini["tokenizer"] == "o200k_base"


def test_error_messages_keep_brackets(capsys: pytest.CaptureFixture[str]) -> None:
    from tokenflex.cli import main

    assert main(["count", "/nonexistent/[x].json"]) == 2
    assert "[x].json" in capsys.readouterr().err


def test_count_reads_anthropic_and_responses_bodies(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A body's top-level system counts like the same text as a chat system message."""
    system = "Translate corporate jargon into plain English. " * 50
    turns = [
        {"role": "user", "content": "Let's circle back on the deliverables."},
        {"role": "assistant", "content": "Let's talk about this later."},
        {"role": "user", "content": "We need to leverage our synergies."},
    ]
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps([{"role": "system", "content": system}, *turns]))
    reference = run_json(capsys, "count", str(chat), "-m", "gpt-4")["tokens"]
    assert isinstance(reference, int) and reference > 400
    bodies = {
        "anthropic.json": {"model": "gpt-4", "system": system, "messages": turns},
        "responses.json": {"model": "gpt-4", "instructions": system, "input": turns},
    }
    for name, body in bodies.items():
        path = tmp_path / name
        path.write_text(json.dumps(body))
        assert run_json(capsys, "count", str(path))["tokens"] == reference, name


def test_count_reads_json_lines(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "conversation.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in COOKBOOK) + "\n")
    assert run_json(capsys, "count", str(path), "-m", "gpt-4")["tokens"] == 129


def test_count_without_an_argument_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["count"]) == 2
    captured = capsys.readouterr()
    assert "Usage: tokenflex count" in captured.out + captured.err
    assert "0 tokens" not in captured.out
    assert main(["count", "--model", "gpt-4o"]) == 2  # options alone: still nothing to count
    assert "Nothing to count" in capsys.readouterr().err


def test_a_models_file_in_the_proxy_style_loads(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[models."NAME"]`` tables (as in the proxy config) are models, never zero models."""
    path = tmp_path / "models.toml"
    path.write_text(
        '[models."house-llm"]\ncontext_window = 32768\ntokenizer = "cl100k_base"\n'
        '[models."gpt-4"]\ncontext_window = 9000\n'  # a patch of a registry model
    )
    monkeypatch.setenv("TOKENFLEX_MODELS_FILE", str(path))
    found = run_json(capsys, "models", "house-llm")
    assert [(m["name"], m["context_window"]) for m in found] == [("house-llm", 32768)]  # type: ignore[index,union-attr]
    data = run_json(capsys, "count", "hi", "-m", "gpt-4")
    assert data["context_window"] == 9000 and data["tokenizer"] == "cl100k_base"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        pytest.param('[fit]\npolicy = "flex"\n', "defines no models", id="no-models"),
        pytest.param(
            '[models."gpt-4"]\ndefault_max_tokens = 100\n', "default_max_tokens", id="fit-option"
        ),
    ],
)
def test_a_models_file_that_defines_nothing_is_an_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, needle: str
) -> None:
    path = tmp_path / "models.toml"
    path.write_text(text)
    assert main(["models", "--import", str(path)]) == 2
    assert needle in capsys.readouterr().err
