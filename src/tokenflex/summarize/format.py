"""How a summary message looks, so fit() can find one again (a known prefix).

No dependencies: ``tokenflex`` imports it eagerly, and the engine finds earlier summaries
with :func:`is_summary_message`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["SUMMARY_PREFIX", "is_summary_message", "summary_message"]

SUMMARY_PREFIX = "Previous conversation summary: "
"""How a summary message's content starts, so it can be found again."""


def summary_message(text: str) -> dict[str, Any]:
    """The system message that carries a summary.

    >>> summary_message("We chose Postgres.")
    {'role': 'system', 'content': 'Previous conversation summary: We chose Postgres.'}
    """
    return {"role": "system", "content": SUMMARY_PREFIX + text.strip()}


def is_summary_message(msg: Any) -> bool:
    """True for a system message whose content starts with :data:`SUMMARY_PREFIX`.

    >>> is_summary_message({"role": "system", "content": "Previous conversation summary: x"})
    True
    """
    return (
        isinstance(msg, Mapping)
        and msg.get("role") == "system"
        and isinstance(msg.get("content"), str)
        and msg["content"].startswith(SUMMARY_PREFIX)
    )
