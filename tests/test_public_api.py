"""The public surface is declared once and stays light to import."""

from __future__ import annotations

import subprocess
import sys

import tokenflex


def test_all_is_sorted_unique_and_resolvable() -> None:
    names = tokenflex.__all__

    def ruff_order(n: str) -> tuple[int, str]:  # RUF022: CONSTANTS, Classes, functions
        return (0 if n.isupper() else 1 if n[:1].isupper() else 2, n)

    assert names == sorted(names, key=ruff_order) and len(set(names)) == len(names)
    for name in names:
        assert getattr(tokenflex, name) is not None, name


def test_import_stays_light() -> None:
    code = (
        "import sys, tokenflex; heavy = [m for m in ('httpx', 'pydantic', 'rich', 'typer', "
        "'starlette', 'uvicorn', 'llama_cpp', 'tokenizers', 'numpy', 'tiktoken') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_errors_share_one_base() -> None:
    for name in tokenflex.__all__:
        obj = getattr(tokenflex, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, tokenflex.TokenflexError), name


def test_a_plain_count_loads_no_typer() -> None:
    """``tokenflex count TEXT`` is answered without typer, pydantic or rich (issue 24)."""
    code = (
        "import sys; from tokenflex.cli import main; main(['count', 'hello there']); "
        "print(sorted(m for m in sys.modules if m.startswith('tokenflex.cli') "
        "or m in ('typer', 'pydantic', 'rich')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "['tokenflex.cli', 'tokenflex.cli._fast']"


def test_a_command_loads_only_its_own_module() -> None:
    """``tokenflex count`` does not import the other commands (issue 24 item 6)."""
    code = (
        "import sys; from tokenflex.cli import main; main(['count', '--json', 'hello there']); "
        "print(sorted(m for m in sys.modules if m.startswith('tokenflex.cli._') "
        "or m.startswith('tokenflex.server')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = out.stdout.strip().splitlines()[-1]
    assert loaded == "['tokenflex.cli._app', 'tokenflex.cli._count', 'tokenflex.cli._fast', " + (
        "'tokenflex.cli._input', 'tokenflex.cli._render']"
    )


def test_the_top_level_names_user_nouns_and_the_solver_stays_in_budget() -> None:
    """The solver's records are reached as ``tokenflex.budget.*`` (issue 23 item 8): the
    package's surface is what a user fits, counts and reads back."""
    import tokenflex.budget as budget

    for name in ("Allocation", "BudgetSpec", "SectionSpec", "DropRecord", "solve"):
        assert name not in tokenflex.__all__, name
        assert getattr(budget, name) is not None, name
