"""What a message is: one home below counting, formats and the engine.

- :mod:`~tokenflex.message.checks`: roles, content part kinds, what makes a chat message
  well formed, and :class:`BadMessage`, the error that names what is wrong and the fix;
- :mod:`~tokenflex.message.objects`: the plain dict an SDK, pydantic or LangChain message
  object stands for.

Counting, the request formats, the engine and the proxy all read these; none of them
keeps its own list of roles.
"""

from __future__ import annotations

from .checks import (
    AUDIO_PARTS,
    FILE_PARTS,
    IMAGE_PARTS,
    INSTRUCTION_ROLES,
    ROLES,
    TEXT_PARTS,
    BadMessage,
    bad_part,
    validated_role,
)
from .objects import (
    is_json,
    is_langchain,
    part_types,
    plain,
    plain_message,
    sdk_module,
    untyped_message,
)

__all__ = [
    "AUDIO_PARTS",
    "FILE_PARTS",
    "IMAGE_PARTS",
    "INSTRUCTION_ROLES",
    "ROLES",
    "TEXT_PARTS",
    "BadMessage",
    "bad_part",
    "is_json",
    "is_langchain",
    "part_types",
    "plain",
    "plain_message",
    "sdk_module",
    "untyped_message",
    "validated_role",
]
