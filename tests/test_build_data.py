"""Every generated file has one build step, and each step's command exists."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import build_data

ROOT = Path(__file__).resolve().parent.parent
HAND_KEPT = {"src/tokenflex/data/models.toml"}


def test_every_data_file_is_built_by_a_step() -> None:
    outputs = {s.output for s in build_data.STEPS}
    shipped = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "src" / "tokenflex" / "data").iterdir()
        if p.is_file()
    }
    assert shipped - HAND_KEPT <= outputs, sorted(shipped - HAND_KEPT - outputs)
    assert all((ROOT / o).is_file() for o in outputs), outputs


def test_each_step_names_a_script_and_a_flag_it_has() -> None:
    for step in build_data.STEPS:
        script, *flags = step.command
        text = (ROOT / script).read_text(encoding="utf-8")
        for flag in flags:
            assert f'"{flag}"' in text, (step.name, flag)


def test_the_list_names_every_step() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_data.py"), "--list"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert [line.split()[0] for line in out.splitlines()[::2]] == [s.name for s in build_data.STEPS]
