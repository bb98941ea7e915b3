"""Moved to :mod:`tokenflex.message.objects` (kept while importers move)."""

from __future__ import annotations

from ..message.objects import is_json, is_langchain, plain, plain_message

__all__ = ["is_json", "is_langchain", "plain", "plain_message"]
