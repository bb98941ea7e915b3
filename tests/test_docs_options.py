"""docs/fit.md's options table is generated from FitOptions and fails here when it drifts."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from tokenflex import FitOptions

ROOT = Path(__file__).resolve().parent.parent


def test_the_options_table_is_generated_from_fit_options() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    script = ROOT / "scripts" / "options_table.py"
    result = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr  # run scripts/options_table.py to update
    doc = (ROOT / "docs" / "fit.md").read_text(encoding="utf-8")
    for field in dataclasses.fields(FitOptions):  # every option has its own row
        assert f"\n| `{field.name}` | `{field.default!r}` |" in doc, field.name
