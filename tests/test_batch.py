"""Batch fitting: tokenflex.batch (one line) and ``tokenflex batch`` (a file, on local
processes and on a real Dask LocalCluster)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tokenflex.batch import fit_line, read_body
from tokenflex.cli import main
from tokenflex.counting import get_counter
from tokenflex.errors import InvalidInputError
from tokenflex.models import get_model
from tokenflex.roundtrip import prepare

WORDS = "alpha beta gamma delta " * 400  # ~1,600 tokens


def _conversation(n: int, tag: str) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": "Answer briefly."}]
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        msgs.append({"role": role, "content": f"[{tag}:{i}] {WORDS}"})
    msgs.append({"role": "user", "content": f"[{tag}] so?"})
    return msgs


def _openai_line(i: int, n: int) -> dict[str, Any]:
    body = {"model": "gpt-4", "messages": _conversation(n, f"c{i}"), "max_tokens": 500}
    return {"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}


def _input_tokens(body: dict[str, Any], fmt: str, model: str) -> int:
    """The body's input tokens, counted from scratch (the reference for the promise)."""
    req = read_body(body, format=fmt)
    prepared = prepare(req.messages, format=fmt, system=req.system, tools=req.tools)
    return get_counter(get_model(model)).count(list(prepared.messages), tools=prepared.tools)


@pytest.mark.parametrize(
    ("line", "fmt", "model"),
    [
        pytest.param(_openai_line(0, 9), "chat", "gpt-4", id="openai-batch-chat"),
        pytest.param(
            {
                "custom_id": "r",
                "method": "POST",
                "url": "/v1/responses",
                "body": {
                    "model": "gpt-4",
                    "instructions": "Answer briefly.",
                    "input": _conversation(9, "r")[1:],
                    "max_output_tokens": 500,
                },
            },
            "responses",
            "gpt-4",
            id="openai-batch-responses",
        ),
        pytest.param(
            {
                "custom_id": "a",
                "params": {
                    "model": "gpt-4",
                    "system": "S " * 3000,
                    "max_tokens": 500,
                    "messages": _conversation(5, "a")[1:],
                },
            },
            "anthropic",
            "gpt-4",
            id="anthropic-batch-with-system",
        ),
    ],
)
def test_a_line_is_fitted_in_its_own_shape(line: dict[str, Any], fmt: str, model: str) -> None:
    text = json.dumps(line)
    result = fit_line(7, text, model=None, options={"safety_margin": 100})
    assert result.status == "fitted" and result.number == 7
    out = json.loads(result.text)
    assert out["custom_id"] == line["custom_id"]
    assert out.keys() == line.keys()
    key = "body" if "body" in line else "params"
    body = out[key]
    limit = {"chat": "max_tokens", "anthropic": "max_tokens", "responses": "max_output_tokens"}
    # the promise, counted independently of the fit (the system is counted: the
    # Anthropic line's 3,000-token system leaves far less room for its messages)
    used = _input_tokens(body, fmt, model) + body[limit[fmt]] + 100
    assert used <= get_model(model).context_window
    assert result.tokens_dropped > 0
    # what fits goes out as it is: the fitted line, fitted again, is unchanged
    again = fit_line(7, result.text, model=None, options={"safety_margin": 100})
    assert again.status == "unchanged" and again.text == result.text


def test_a_gemini_body_is_read_from_the_format_registry() -> None:
    """Every registered format has a body shape: a Gemini body (``contents``, its limit
    nested in ``generationConfig``) is told, fitted and written back in its own shape."""
    contents = [
        {"role": "user" if i % 2 == 0 else "model", "parts": [{"text": f"[g:{i}] {WORDS}"}]}
        for i in range(9)
    ]
    body = {
        "systemInstruction": {"parts": [{"text": "Answer briefly."}]},
        "contents": contents,
        "generationConfig": {"maxOutputTokens": 500, "temperature": 0.2},
    }
    assert read_body(body).format == "gemini" and read_body(body).max_tokens == 500
    result = fit_line(3, json.dumps(body), model="gpt-4", options={"safety_margin": 100})
    assert result.status == "fitted"
    out = json.loads(result.text)
    assert out.keys() == body.keys() and len(out["contents"]) < len(contents)
    assert out["generationConfig"]["temperature"] == 0.2
    limit = out["generationConfig"]["maxOutputTokens"]
    used = _input_tokens(out, "gemini", "gpt-4") + limit + 100
    assert used <= get_model("gpt-4").context_window
    with pytest.raises(InvalidInputError, match="maxOutputTokens"):
        read_body({**body, "generationConfig": {"maxOutputTokens": 0}})


def test_a_line_that_fits_is_its_own_text() -> None:
    text = '{"custom_id": "x",  "body": {"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]}, "url": "/v1/chat/completions"}'  # noqa: E501
    result = fit_line(1, text, model=None, options={})
    assert result.status == "unchanged" and result.text == text  # spacing and key order kept


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        pytest.param("{not json", "JSONDecodeError", id="not-json"),
        pytest.param('{"custom_id": "k", "body": 3}', "JSON int", id="body-not-object"),
        pytest.param('[{"role": "user", "content": "hi"}]', "No model", id="no-model"),
        pytest.param(
            '{"custom_id": "k", "body": {"model": "gpt-4", "messages": [{"role": "wizard", '
            '"content": "x"}]}}',
            "wizard",
            id="bad-role",
        ),
        pytest.param(
            json.dumps(
                {
                    "custom_id": "k",
                    "body": {
                        "model": "gpt-4",
                        "messages": [
                            {"role": "system", "content": WORDS * 6},
                            {"role": "user", "content": "x"},
                        ],
                    },
                }
            ),
            "gpt-4",
            id="cannot-fit",
        ),
    ],
)
def test_a_bad_line_is_a_record_not_an_exception(text: str, needle: str) -> None:
    result = fit_line(12, text, model=None, options={})
    assert result.status == "failed"
    record = json.loads(result.text)
    assert record["line"] == 12 and record["input"] == text and needle in record["error"]


def test_conversation_lines_keep_their_shape() -> None:
    conv = _conversation(9, "l")
    result = fit_line(1, json.dumps(conv), model="gpt-4", options={})
    assert result.status == "fitted"
    out = json.loads(result.text)
    assert isinstance(out, list) and out[0] == conv[0] and out[-1] == conv[-1]
    body = {"model": "gpt-4", "messages": conv}
    out_body = json.loads(fit_line(2, json.dumps(body), model=None, options={}).text)
    assert out_body["messages"] == out and out_body["max_tokens"] > 0


def _batch_file(tmp_path: Path) -> tuple[Path, list[int]]:
    """Fitted, unchanged and bad lines mixed, with a blank line; the bad line numbers."""
    rows: list[str] = []
    bad: list[int] = []
    for i in range(23):
        if i % 7 == 3:
            rows.append("{oops")
            bad.append(len(rows))
        elif i % 5 == 0:
            rows.append(json.dumps(_openai_line(i, 1)))  # fits as it is
        else:
            rows.append(json.dumps(_openai_line(i, 9)))
        if i == 10:
            rows.append("")
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path, bad


def _check_output(source: Path, out: Path, bad: list[int]) -> list[str]:
    lines = out.read_text(encoding="utf-8").splitlines()
    good = [
        json.loads(t)["custom_id"]
        for n, t in enumerate(source.read_text(encoding="utf-8").splitlines(), 1)
        if t.strip() and n not in bad
    ]
    assert [json.loads(t)["custom_id"] for t in lines] == good  # every line, in input order
    errors = out.with_name("out.errors.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(t)["line"] for t in errors] == bad
    return lines


@pytest.mark.parametrize("workers", ["1", "2"])
def test_cli_batch_on_local_workers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], workers: str
) -> None:
    source, bad = _batch_file(tmp_path)
    out = tmp_path / "out.jsonl"
    code = main(["batch", str(source), "-o", str(out), "--workers", workers, "--no-progress"])
    assert code == 1  # lines failed: the run went on, and says so in its exit code
    printed = capsys.readouterr().out
    assert "fitted" in printed and "unchanged" in printed and "tokens dropped" in printed
    assert f"{len(bad)} failed" in printed and "out.errors.jsonl" in printed
    lines = _check_output(source, out, bad)
    unchanged = [t for t in lines if json.loads(t)["custom_id"] in ("req-0", "req-5")]
    assert len(unchanged) == 2 and all(t in source.read_text() for t in unchanged)


def test_resume_fits_only_what_is_left(tmp_path: Path) -> None:
    source, bad = _batch_file(tmp_path)
    full = tmp_path / "full" / "out.jsonl"
    full.parent.mkdir()
    main(["batch", str(source), "-o", str(full), "--workers", "1", "--no-progress"])
    # a run killed after 8 output lines and the first failure, mid-way through line 9
    out = tmp_path / "out.jsonl"
    done = full.read_text(encoding="utf-8").splitlines()
    out.write_text("\n".join(done[:8]) + "\n" + done[8][:40], encoding="utf-8")
    errors = full.with_name("out.errors.jsonl").read_text(encoding="utf-8").splitlines()
    out.with_name("out.errors.jsonl").write_text(errors[0] + "\n", encoding="utf-8")
    args = ["batch", str(source), "-o", str(out), "--resume", "--no-progress", "--workers", "1"]
    assert main(args) == 1
    assert out.read_text(encoding="utf-8") == full.read_text(encoding="utf-8")
    assert _check_output(source, out, bad)


def test_cli_batch_on_a_dask_local_cluster(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    source, bad = _batch_file(tmp_path)
    local = tmp_path / "local" / "out.jsonl"
    local.parent.mkdir()
    main(["batch", str(source), "-o", str(local), "--workers", "1", "--no-progress"])
    out = tmp_path / "out.jsonl"
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
        ) as cluster,
    ):
        args = ["batch", str(source), "-o", str(out), "--dask", cluster.scheduler_address]
        assert main([*args, "--no-progress"]) == 1
    _check_output(source, out, bad)
    assert out.read_text(encoding="utf-8") == local.read_text(encoding="utf-8")
