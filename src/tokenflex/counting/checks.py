"""Moved to :mod:`tokenflex.message.checks` (kept while importers move)."""

from __future__ import annotations

from ..message.checks import (
    AUDIO_PARTS,
    FILE_PARTS,
    IMAGE_PARTS,
    ROLES,
    TEXT_PARTS,
    BadMessage,
    bad_part,
    validated_role,
)

__all__ = [
    "AUDIO_PARTS",
    "FILE_PARTS",
    "IMAGE_PARTS",
    "ROLES",
    "TEXT_PARTS",
    "BadMessage",
    "bad_part",
    "validated_role",
]
