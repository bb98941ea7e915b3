"""The built artifact: the wheel ``make dist`` builds, installed into a clean venv.

The wheel is built like ``make dist`` builds it (``python -m build``, an isolated build
environment from the registry), installed with ``--no-index --no-deps`` into a venv that
sees none of this one's packages, then its few runtime dependencies are installed from
the registry (pip's cache makes a second run quick). The installed ``tokenflex`` then
runs as a user runs it, with the source tree off its path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import tokenflex

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.pop("TOKENFLEX_MODELS_FILE", None)
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, env=env, cwd=cwd, check=False
    )


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result.stdout


def test_the_version_is_written_once() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "tokenflex.__version__"
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## {tokenflex.__version__}" in changelog  # the release is in the changelog


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The bin/ folder of a clean venv holding the built wheel and its dependencies."""
    tmp = tmp_path_factory.mktemp("dist")
    _ok(_run(sys.executable, "-m", "build", "--wheel", "--outdir", tmp / "dist", ROOT))
    (wheel,) = (tmp / "dist").glob("*.whl")
    # a platform wheel: it holds the estimator's C extension where a compiler exists
    assert wheel.name.startswith(f"tokenflex-{tokenflex.__version__}-")
    names = zipfile.ZipFile(wheel).namelist()
    assert "tokenflex/tokenizers/_fastcut.pyi" in names
    if shutil.which("cc") or shutil.which("gcc"):
        built = [n for n in names if n.endswith((".so", ".pyd"))]
        assert any(n.startswith("tokenflex/tokenizers/_fastcut.") for n in built), names
    venv = tmp / "venv"
    _ok(_run(sys.executable, "-m", "venv", "--without-pip", venv))
    pip = [sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q"]
    _ok(_run(*pip, "--no-index", "--no-deps", wheel))
    _ok(_run(*pip, wheel))  # its runtime dependencies, from the registry
    yield venv / "bin"


def test_the_installed_wheel_runs(installed: Path, tmp_path: Path) -> None:
    where = _ok(_run(installed / "python", "-c", "import tokenflex; print(tokenflex.__file__)"))
    assert str(installed.parent) in where  # the wheel's copy, not the source tree
    version = _ok(_run(installed / "tokenflex", "--version", cwd=tmp_path))
    assert version.strip() == f"tokenflex {tokenflex.__version__}"
    assert "dropped" in _ok(_run(installed / "tokenflex", "demo", cwd=tmp_path))
    turns = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"[{i}] " + "word " * 600}
        for i in range(30)
    ]
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"model": "gpt-4", "max_tokens": 500, "messages": turns}))
    plan = json.loads(_ok(_run(installed / "tokenflex", "fit", request, "--json", cwd=tmp_path)))
    assert plan["input_tokens"] + plan["max_tokens"] + plan["safety_margin"] <= 8192
    assert plan["dropped_count"] > 0
