"""What makes a chat message well formed, and the error that names what is wrong with it.

Counters check a message only as far as counting it needs: a dict with a known ``role``
and a string or list ``content`` (``None`` only for an assistant message that makes tool
calls). A bad message raises :class:`BadMessage`, an
:class:`~tokenflex.errors.InvalidMessagesError` whose text carries the problem and the
fix; :meth:`BadMessage.at` adds the message's index once the caller knows it, so the
fast path over a list need not track indexes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import InvalidMessagesError

__all__ = [
    "AUDIO_PARTS",
    "FILE_PARTS",
    "IMAGE_PARTS",
    "INSTRUCTION_ROLES",
    "ROLES",
    "TEXT_PARTS",
    "BadMessage",
    "bad_part",
    "validated_role",
]

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
"""Roles a message may have."""

INSTRUCTION_ROLES = ("system", "developer")
"""Roles that instruct the model (pinned by a fit, a system prompt in every format)."""

TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal"}
"""Content part types that hold text, each mapped to the key holding its string."""

IMAGE_PARTS = ("image_url", "input_image")
"""Content part types that hold an image (under ``image_url``)."""

FILE_PARTS = ("file",)
"""Content part types that hold a file (``{"file": {"file_data" | "file_id": ...}}``)."""

AUDIO_PARTS = ("input_audio",)
"""Content part types that hold audio (``{"input_audio": {"data": ..., "format": ...}}``)."""


class BadMessage(InvalidMessagesError):
    """An invalid message; :meth:`at` names its index in the list.

    Attributes:
        problem: What is wrong, worded to follow "message" (``"has no 'role'"``).
        fix: The sentence that tells the caller how to fix it.
    """

    def __init__(self, problem: str, fix: str, index: int | None = None) -> None:
        where = "message" if index is None else f"messages[{index}]"
        super().__init__(f"{where} {problem}. {fix}")
        self.problem, self.fix = problem, fix

    def at(self, index: int) -> BadMessage:
        """The same error, naming ``messages[index]`` as the bad message."""
        return BadMessage(self.problem, self.fix, index)


def validated_role(msg: Any) -> str:
    """The role of a well-formed message.

    Args:
        msg: One chat message, as given by the caller (any type).

    Returns:
        The message's role, one of :data:`ROLES`.

    Raises:
        BadMessage: ``msg`` is not a dict, has no or an unknown role, or has content
            that is missing or neither a string nor a list.
    """
    if not isinstance(msg, dict) and not isinstance(msg, Mapping):  # (dicts: no ABC check)
        raise BadMessage(
            f"is a {type(msg).__name__}, not a dict",
            "Pass each message as a dict like {'role': 'user', 'content': '...'}",
        )
    if "role" not in msg:
        raise BadMessage("has no 'role'", f"Add 'role': one of {', '.join(ROLES)}")
    role = msg["role"]
    if not isinstance(role, str) or role not in ROLES:
        raise BadMessage(f"has role {role!r}", f"Use one of {', '.join(ROLES)}")
    content = msg.get("content")
    if content is None:
        if role == "assistant" and (msg.get("tool_calls") or msg.get("function_call")):
            return role
        state = "has content None" if "content" in msg else "has no 'content'"
        raise BadMessage(
            state,
            "Give it a string ('' if empty) or a list of content parts; only an assistant "
            "message with tool_calls may have content None",
        )
    if (
        type(content) is not str
        and type(content) is not list
        and not isinstance(content, str | list)
    ):
        raise BadMessage(
            f"has content of type {type(content).__name__}",
            "Content must be a string or a list of parts like {'type': 'text', 'text': '...'}",
        )
    return role


def bad_part(j: int, part: Any) -> BadMessage:
    """The error for ``content[j]``, a content part that could not be counted.

    Counters read parts without checking them first and call this only on a part they
    cannot read, so well-formed content pays for no checks.

    Args:
        j: The part's index in the message's content list.
        part: The part: not a dict, a text part without its string, an image part
            without a URL, or a part of an unsupported type.
    """
    if not isinstance(part, Mapping):
        return BadMessage(
            f"has content[{j}] of type {type(part).__name__}",
            "Each content part is a dict like {'type': 'text', 'text': '...'}",
        )
    raw = part.get("type")
    ptype = raw if isinstance(raw, str) else None  # an unhashable "type" is unsupported
    if ptype in TEXT_PARTS:
        return BadMessage(
            f"has a {ptype!r} part without a string {TEXT_PARTS[ptype]!r}",
            f"Give content[{j}] a string {TEXT_PARTS[ptype]!r}",
        )
    if ptype in IMAGE_PARTS:
        return BadMessage(
            f"has an image part without a URL in content[{j}]",
            "Use {'type': 'image_url', 'image_url': {'url': 'data:image/png;"
            "base64,...', 'detail': 'low'}}",
        )
    if ptype in FILE_PARTS:
        return BadMessage(
            f"has a 'file' part without 'file_data' or 'file_id' in content[{j}]",
            "Use {'type': 'file', 'file': {'file_data': 'data:application/pdf;base64,...', "
            "'filename': 'a.pdf'}} or {'file': {'file_id': 'file-...'}}",
        )
    if ptype in AUDIO_PARTS:
        return BadMessage(
            f"has an 'input_audio' part without a base64 string 'data' in content[{j}]",
            "Use {'type': 'input_audio', 'input_audio': {'data': '<base64>', 'format': 'wav'}}",
        )
    return BadMessage(
        f"has content[{j}] of type {raw!r:.80}",
        "Supported content parts: text, refusal, image_url, file, input_audio (count other "
        "media yourself and reserve it as a section)",
    )
