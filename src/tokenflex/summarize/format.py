"""How a summary message looks, so fit() can find one again (a known prefix).

No dependencies: ``tokenflex`` imports it eagerly, and the engine finds earlier summaries
with :func:`is_summary_message`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["SUMMARY_PREFIX", "is_summary_message", "looks_like_error", "summary_message"]

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
        (type(msg) is dict or isinstance(msg, Mapping))  # (a dict without the ABC's check)
        and msg.get("role") == "system"
        and isinstance(msg.get("content"), str)
        and msg["content"].startswith(SUMMARY_PREFIX)
    )


# What servers, proxies and SDKs put where a completion should be. Matched at the start
# of the output only, so a summary that mentions an error ("The build error was fixed")
# is still a summary.
_ERROR_TEXT = re.compile(
    r"^\s*(?:"
    r"(?:error|exception|fatal)\s*(?:[:\[(]|code\b)"
    r"|\{\s*\"(?:error|detail|message)\""
    r"|<(?:!doctype|html|head|body)\b"
    r"|traceback \(most recent call last\)"
    r"|(?:\d{3}\s+)?(?:internal server error|bad gateway|service unavailable|gateway time-?out"
    r"|too many requests|not found|unauthorized|forbidden)\s*(?:$|[:.\n])"
    r"|rate limit (?:exceeded|reached)"
    r"|this model's maximum context length is"
    r"|context_length_exceeded"
    r"|(?:null|none|undefined|nan)\s*$"
    r")",
    re.I,
)


def looks_like_error(text: str) -> bool:
    """Whether a summarizer's output reads as an error message (a server's, a proxy's, an
    SDK's) rather than a summary: never stored or sent as one, whichever summarizer
    (built-in or the caller's own) returned it.

    >>> looks_like_error("Error: 500 Internal Server Error"), looks_like_error("We fixed an error.")
    (True, False)
    """
    return _ERROR_TEXT.match(text) is not None
