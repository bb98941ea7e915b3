"""Every way a command line or an input can be wrong ends in one line on stderr and an
exit code (2: the command line or the input; 1: anything else), never a traceback unless
``--debug`` or TOKENFLEX_DEBUG asks for one."""

from __future__ import annotations

import io
import json
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import pytest

from tokenflex.cli import MAX_MESSAGE_CHARS, main
from tokenflex.errors import UpstreamError

CHAT = [{"role": "user", "content": "hello"}]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_error_line(err: str) -> str:
    """Exactly one line, ``error: ...``, no traceback."""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def chat_file(tmp_path: Path) -> str:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(CHAT))
    return str(path)


# --- usage errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "needle", "hint"),
    [
        pytest.param(["cont"], "No such command 'cont'. Did you mean 'count'?", "", id="typo"),
        pytest.param(["fit"], "Missing argument 'file'.", "fit", id="missing-argument"),
        pytest.param(
            ["fit", "{chat}", "--max-tokens", "abc"],
            "Invalid value 'abc' for '--max-tokens'",
            "fit",
            id="not-an-int",
        ),
        pytest.param(
            ["fit", "{chat}", "--history-share=lots"],
            "Invalid value 'lots' for '--history-share'",
            "fit",
            id="not-a-float-with-equals",
        ),
        pytest.param(["count", "--bogus"], "No such option: --bogus", "count", id="unknown-opt"),
        pytest.param(["pack", "{chat}"], "Missing option '--budget'", "pack", id="missing-opt"),
        pytest.param(
            ["inspect", "{chat}", "--policy"], "requires an argument", "inspect", id="no-value"
        ),
        pytest.param(["--max-input-mb", "0", "fit", "{chat}"], "--max-input-mb", "", id="zero"),
    ],
)
def test_usage_error_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], chat_file: str, args: list[str], needle: str, hint: str
) -> None:
    code, out, err = run(capsys, *[a.replace("{chat}", chat_file) for a in args])
    line = assert_one_error_line(err)
    assert code == 2 and out == ""
    assert needle in line
    assert line.endswith(f"Try 'tokenflex{' ' + hint if hint else ''} --help'.")


@pytest.mark.parametrize(
    ("option", "usage"),
    [
        pytest.param(["--max-input-mb", "9"], "tokenflex --max-input-mb N <command>", id="limit"),
        pytest.param(["--version"], "tokenflex --version", id="version"),
    ],
)
def test_global_option_after_the_command(
    capsys: pytest.CaptureFixture[str], chat_file: str, option: list[str], usage: str
) -> None:
    code, _, err = run(capsys, "fit", chat_file, *option)
    line = assert_one_error_line(err)
    assert code == 2 and f"{option[0]} goes before the command: {usage}" in line


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys)
    assert code == 2 and "Usage: tokenflex" in out and "fit" in out and err == ""


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fit", "--help")
    assert code == 0 and "--max-tokens" in out and "--strict" in out


@pytest.mark.parametrize("args", [["--version"], ["version"]])
def test_version(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    code, out, err = run(capsys, *args)
    assert (code, out, err) == (0, f"tokenflex {version('tokenflex')}\n", "")


# --- bad input: one bounded line, exit 2 --------------------------------------------

Make = Callable[[Path], str]


def _non_utf8(tmp: Path) -> str:
    path = tmp / "latin1.json"
    path.write_bytes(json.dumps(CHAT).replace("hello", "caf\xe9").encode("latin-1"))
    return str(path)


def _deep_json(tmp: Path) -> str:  # past Python's own parser limit: RecursionError
    path = tmp / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    return str(path)


def _nested_json(tmp: Path) -> str:  # parses, but far deeper than any request
    path = tmp / "nested.json"
    deep = "[" * 300 + "]" * 300
    path.write_text(f'[{{"role": "user", "content": [{{"type": "text", "text": "x"}}, {deep}]}}]')
    return str(path)


def _surrogate(tmp: Path) -> str:
    path = tmp / "surrogate.json"
    path.write_text('[{"role": "user", "content": "half a pair: \\ud800"}]')
    return str(path)


def _not_finite(tmp: Path) -> str:
    path = tmp / "nan.json"
    path.write_text('[{"role": "user", "content": "hi", "score": NaN, "x": 1e400}]')
    return str(path)


def _directory(tmp: Path) -> str:
    return str(tmp)


def _missing(tmp: Path) -> str:
    return str(tmp / "missing.json")


BAD_INPUTS = [
    pytest.param(_non_utf8, "not UTF-8 text (byte 0xe9", id="non-utf8"),
    pytest.param(_deep_json, "nested more than 100 levels", id="deep-json"),
    pytest.param(_nested_json, "nested more than 100 levels", id="nested-json"),
    pytest.param(_surrogate, "lone surrogate '\\ud800'", id="lone-surrogate"),
    pytest.param(_not_finite, "holds NaN, which is not a finite number", id="nan"),
    pytest.param(_directory, "it is a directory", id="directory"),
    pytest.param(_missing, "no such file", id="missing"),
]

COMMANDS = [
    pytest.param(["fit", "{}", "-m", "gpt-4"], id="fit"),
    pytest.param(["inspect", "{}", "-m", "gpt-4"], id="inspect"),
    pytest.param(["count", "{}"], id="count"),
    pytest.param(["count", "hi", "--tools", "{}"], id="count-tools"),
    pytest.param(["pack", "{}", "--budget", "100"], id="pack"),
]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("make", "needle"), BAD_INPUTS)
def test_bad_input_file_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    command: list[str],
    make: Make,
    needle: str,
) -> None:
    path = make(tmp_path)
    code, out, err = run(capsys, *[a.replace("{}", path) for a in command])
    line = assert_one_error_line(err)
    assert code == 2 and out == ""
    assert needle.lower() in line.lower(), line
    assert repr(path) in line  # the line names the file
    assert len(line) < 600


@pytest.mark.parametrize("command", [["fit", "-m", "gpt-4"], ["count"]])
def test_bad_messages_name_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "chat.json"
    path.write_text('[{"role": "user", "content": "hi"}, {"content": "no role"}]')
    code, _, err = run(capsys, command[0], str(path), *command[1:])
    line = assert_one_error_line(err)
    assert code == 2 and f"{str(path)!r}: messages[1] has no 'role'" in line


def test_count_missing_path_shaped_argument(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "count", "./no/such/notes")
    assert code == 2 and "No such file './no/such/notes'" in assert_one_error_line(err)


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["fit", "/dev/zero", "-m", "gpt-4"], id="fit"),
        pytest.param(["count", "/dev/zero"], id="count"),
        pytest.param(["pack", "/dev/zero", "-b", "100"], id="pack"),
        pytest.param(["validate", "/dev/zero"], id="validate"),
    ],
)
def test_unbounded_input_stops_at_the_limit(
    capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero on this system")
    start = time.perf_counter()
    code, _, err = run(capsys, "--max-input-mb", "2", *command)
    line = assert_one_error_line(err)
    assert code == 2 and "more than the 2 MiB input limit" in line and "--max-input-mb" in line
    assert time.perf_counter() - start < 10


def test_input_limit_from_env_and_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, chat_file: str
) -> None:
    monkeypatch.setenv("TOKENFLEX_MAX_INPUT_MB", "1")
    big = json.dumps([{"role": "user", "content": "x " * 600_000}])
    monkeypatch.setattr(sys, "stdin", io.StringIO(big))
    code, _, err = run(capsys, "fit", "-", "-m", "gpt-4")
    assert code == 2 and "more than the 1 MiB input limit" in assert_one_error_line(err)
    # under the limit, the same command works
    assert run(capsys, "fit", chat_file, "-m", "gpt-4")[0] == 0


def test_stdin_bytes_are_bounded_and_decoded(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class Stdin(io.TextIOWrapper):
        def isatty(self) -> bool:
            return False

    raw = "\ufeff" + json.dumps(CHAT)  # a BOM, as Windows editors write it
    monkeypatch.setattr(sys, "stdin", Stdin(io.BytesIO(raw.encode("utf-8"))))
    code, out, _ = run(capsys, "count", "-", "-m", "gpt-4", "--json")
    assert code == 0 and json.loads(out)["kind"] == "messages"
    monkeypatch.setattr(sys, "stdin", Stdin(io.BytesIO(b"\xff\xfe")))
    code, _, err = run(capsys, "count", "-")
    assert code == 2 and "Cannot read '-': not UTF-8 text (byte 0xff" in err


def test_argument_with_non_utf8_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    # what Python makes of the byte 0xff in argv (surrogateescape)
    code, _, err = run(capsys, "count", "caf\udcff")
    assert code == 2 and "lone surrogate '\\udcff'" in assert_one_error_line(err)


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        pytest.param(b"total_budget = 1\n# caf\xe9\n", "not UTF-8 text", id="non-utf8"),
        pytest.param(b"a = " + b"[" * 5000 + b"]" * 5000, "nested too deeply", id="deep"),
    ],
)
def test_validate_bad_spec(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, spec: bytes, needle: str
) -> None:
    path = tmp_path / "spec.toml"
    path.write_bytes(spec)
    code, _, err = run(capsys, "validate", str(path))
    assert code == 2 and needle in assert_one_error_line(err)


# --- --strict: an unknown model is an error with close registry names -----------------


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["count", "hello"], id="count"),
        pytest.param(["fit", "{chat}"], id="fit"),
        pytest.param(["inspect", "{chat}"], id="inspect"),
        pytest.param(["pack", "{chunks}", "-b", "100"], id="pack"),
    ],
)
def test_strict_unknown_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, chat_file: str, command: list[str]
) -> None:
    chunks = tmp_path / "chunks.json"
    chunks.write_text('["a passage"]')
    args = [a.replace("{chat}", chat_file).replace("{chunks}", str(chunks)) for a in command]
    code, out, err = run(capsys, *args, "-m", "gtp-4", "--strict")
    line = assert_one_error_line(err)
    assert code == 2 and out == ""
    assert "Unknown model 'gtp-4' (--strict). Did you mean 'gpt-4'" in line
    # without --strict: the conservative default and a warning, exit 0
    code, out, err = run(capsys, *args, "-m", "gtp-4")
    assert code == 0 and "gtp-4" in err and "Traceback" not in err


def test_strict_unknown_model_in_validate_spec(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'model = "claude-3-5-sonet"\ntotal_budget = 9000\nexpected_output = 100\n'
        '[components]\nbase = "hello"\n'
    )
    code, _, err = run(capsys, "validate", str(spec), "--strict")
    assert code == 2 and "Did you mean 'claude-3-5-sonnet'" in assert_one_error_line(err)
    assert run(capsys, "validate", str(spec))[0] == 0


def test_strict_known_model_and_alias_pass(
    capsys: pytest.CaptureFixture[str], chat_file: str
) -> None:
    assert run(capsys, "fit", chat_file, "-m", "gpt-4o-2024-08-06", "--strict")[0] == 0
    assert run(capsys, "count", "hi", "-m", "gpt-4", "--strict")[0] == 0


def test_error_line_is_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "count", "hi", "--strict", "-m", "x" * 100_000)
    line = assert_one_error_line(err)
    assert code == 2 and len(line) <= len("error: ") + MAX_MESSAGE_CHARS


# --- runtime failures: exit 1; tracebacks only on request ----------------------------


def _boom(*args: object, **kwargs: object) -> object:
    raise RuntimeError("disk on fire")


def _upstream(*args: object, **kwargs: object) -> object:
    raise UpstreamError("upstream answered 503: overloaded")


def _interrupt(*args: object, **kwargs: object) -> object:
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    ("fault", "code", "needle"),
    [
        pytest.param(_boom, 1, "internal error (RuntimeError: disk on fire)", id="bug"),
        pytest.param(_upstream, 1, "upstream answered 503", id="upstream"),
        pytest.param(_interrupt, 130, None, id="ctrl-c"),
    ],
)
def test_runtime_failures(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    chat_file: str,
    fault: Callable[..., object],
    code: int,
    needle: str | None,
) -> None:
    # a fake, because a bug or a dead upstream in the middle of fit() cannot be provoked
    monkeypatch.setattr(sys.modules["tokenflex.fit"], "fit", fault)
    got, _, err = run(capsys, "fit", chat_file, "-m", "gpt-4")
    assert got == code
    if needle is None:
        assert err == ""
    else:
        assert needle in assert_one_error_line(err)


@pytest.mark.parametrize(
    "how",
    [
        pytest.param(["--debug", "fit"], id="before-command"),
        pytest.param(["fit", "--debug"], id="after-command"),
        pytest.param(["fit"], id="env"),
    ],
)
def test_debug_adds_the_traceback(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    chat_file: str,
    how: list[str],
) -> None:
    monkeypatch.setattr(sys.modules["tokenflex.fit"], "fit", _boom)
    if how == ["fit"]:
        monkeypatch.setenv("TOKENFLEX_DEBUG", "1")
    code, _, err = run(capsys, *how, chat_file, "-m", "gpt-4")
    assert code == 1
    assert "Traceback (most recent call last)" in err and "RuntimeError: disk on fire" in err
    assert err.splitlines()[-1].startswith("error: internal error")
    monkeypatch.delenv("TOKENFLEX_DEBUG", raising=False)
    assert "Traceback" not in run(capsys, "fit", chat_file, "-m", "gpt-4")[2]


def test_library_warnings_are_escaped_lines_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "count", "hi", "-m", "[/b]no-such-model")
    assert code == 0 and "tokens" in out
    assert err.startswith("warning: Unknown model '[/b]no-such-model'")
    assert len(err.splitlines()) == 1


def test_serve_on_a_busy_port_is_one_line_before_any_startup(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The port is bound before the app starts: no "startup complete" and then a failure."""
    import socket

    pytest.importorskip("uvicorn")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        args = ["serve", "--upstream", "http://127.0.0.1:9", "--port", str(port)]
        assert main(args) == 2
    captured = capsys.readouterr()
    assert f"Cannot listen on 127.0.0.1:{port}: the port is in use" in captured.err
    assert "--port N" in captured.err
    assert "startup" not in (captured.out + captured.err).lower()
