"""``tokenflex count`` and ``tokenflex models`` through ``tokenflex.cli.main``."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from _cookbook import COOKBOOK_MESSAGES, COOKBOOK_TOOL_MESSAGES, COOKBOOK_TOOLS

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


def test_error_messages_keep_brackets(capsys: pytest.CaptureFixture[str]) -> None:
    from tokenflex.cli import main

    assert main(["count", "/nonexistent/[x].json"]) == 2
    assert "[x].json" in capsys.readouterr().err
