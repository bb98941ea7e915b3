"""User text is data, never rich markup: brackets, closing tags, emoji codes and
backslashes in message content, chunk ids and sources, component names, model names and
model queries come out exactly as they went in, and the command exits 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import tokenflex
from tokenflex.cli import main

# pieces rich would read as markup (tags, closing tags, links, emoji codes, escapes)
PIECES = [
    "[",
    "]",
    "[/",
    "[b]",
    "[/b]",
    "[/]",
    "[INST]",
    "[/INST]",
    "[x³ sin x]",
    "[link=https://x.org]",
    "[bold red]",
    "[@click=app.bell]",
    ":smile:",
    "\\[",
    "\\",
    " ",
]
LATIN = st.characters(min_codepoint=0x21, max_codepoint=0x24F)
user_text = (
    st.lists(st.sampled_from(PIECES) | st.text(LATIN, min_size=1, max_size=3), max_size=8)
    .map(lambda parts: " ".join("".join(parts).split()))  # previews collapse whitespace
    .filter(lambda t: 0 < len(t) <= 28 and "[" in t)
)
PROPERTY = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def squash(text: str) -> str:
    """Whitespace-insensitive form: tables pad cells and long lines wrap at spaces."""
    return " ".join(text.split())


def run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Traceback" not in err
    return out


@pytest.fixture(autouse=True)
def columns80(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("[INST] hello [/INST]", id="inst-tags"),
        pytest.param("[/b] closes nothing", id="closing-tag"),
        pytest.param("[x³ sin x] vanished once", id="not-a-tag"),
    ],
)
def test_issue_examples_as_content(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str
) -> None:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps([{"role": "user", "content": text}]))
    assert text in run(capsys, "count", str(path), "--per-message")
    assert text in run(capsys, "inspect", str(path), "-m", "gpt-4")


@PROPERTY
@given(text=user_text)
def test_message_content_verbatim(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str
) -> None:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps([{"role": "user", "content": text}]))
    assert squash(text) in squash(run(capsys, "count", str(path), "--per-message"))
    run(capsys, "count", str(path))  # the summary does not show content, but must not crash
    assert squash(text) in squash(run(capsys, "inspect", str(path), "-m", "gpt-4o"))


@PROPERTY
@given(chunk_id=user_text.filter(lambda t: len(t) <= 16), source=user_text)
def test_chunk_id_and_source_verbatim(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, chunk_id: str, source: str
) -> None:
    path = tmp_path / "chunks.json"
    chunks = [
        {"text": "A short passage.", "id": chunk_id, "source": source},
        {"text": "word " * 400, "id": chunk_id, "source": source},  # dropped
    ]
    path.write_text(json.dumps(chunks))
    out = squash(run(capsys, "pack", str(path), "--budget", "200"))
    assert squash(chunk_id) in out and squash(source) in out
    assert "Dropped: 1 chunks" in out


@PROPERTY
@given(name=user_text)
def test_component_name_verbatim(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    path = tmp_path / "spec.toml"
    # a JSON string is a TOML basic string for these characters (no control characters)
    path.write_text(
        f"total_budget = 1000\nexpected_output = 100\n[components]\n{json.dumps(name)} = 50\n"
    )
    assert squash(name) in squash(run(capsys, "validate", str(path)))


@PROPERTY
@example(query="-[")  # a query that looks like an option: after "--", as a user types it
@given(query=user_text)
def test_model_query_verbatim(capsys: pytest.CaptureFixture[str], query: str) -> None:
    assert squash(repr(query)) in squash(run(capsys, "models", "--", query))


@PROPERTY
@given(name=user_text)
def test_unknown_model_name_verbatim(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    assume(not name.startswith("-") and not tokenflex.get_model(name).known)
    path = tmp_path / "chat.json"
    path.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    assert squash(name) in squash(run(capsys, "fit", str(path), "-m", name))
    assert squash(name) in squash(run(capsys, "count", "hello", "-m", name))
