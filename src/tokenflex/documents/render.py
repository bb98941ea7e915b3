"""How packed chunks look in the context: numbered markdown or XML-tagged documents.

Markdown numbers each passage (``[1] text``) and lists the citations after a ``Sources:``
line; XML wraps each passage and its citation in a ``<document>``. The packer counts a
chunk by rendering it with :func:`chunk_parts`, so what it counts is what
:func:`render_context` sends.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .chunks import Chunk

__all__ = ["chunk_parts", "context_frame", "omitted_notice", "render_context"]


def _citation(chunk: Chunk) -> str:
    parts = [chunk.source, chunk.identifier]
    if chunk.extras:
        parts.append(_extras_json(chunk.extras))
    return " — ".join(p for p in parts if p) or "unknown source"


def _extras_json(extras: Mapping[str, Any]) -> str:
    return json.dumps(
        dict(extras), sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str
    )


def omitted_notice(fmt: str, omitted: int, total: int) -> str:
    """The partial-context notice: ``omitted`` of ``total`` passages left out."""
    text = f"{omitted} of {total} retrieved passages omitted to fit the budget."
    return f"<notice>{text}</notice>\n" if fmt == "xml" else f"Note: {text}\n\n"


def chunk_parts(fmt: str, n: str, chunk: Chunk) -> tuple[str, ...]:
    """The rendered pieces of one chunk: ``n`` is its citation number as text."""
    if fmt == "xml":
        lines = [f'<document index="{n}">\n']
        if chunk.source:
            lines.append(f"<source>{chunk.source}</source>\n")
        if chunk.identifier:
            lines.append(f"<identifier>{chunk.identifier}</identifier>\n")
        if chunk.extras:
            lines.append(f"<metadata>{_extras_json(chunk.extras)}</metadata>\n")
        lines.append(f"<document_content>\n{chunk.text}\n</document_content>\n</document>\n")
        return ("".join(lines),)
    return f"[{n}] {chunk.text}\n\n", f"[{n}] {_citation(chunk)}\n"


def context_frame(fmt: str) -> tuple[str, str]:
    """Text before and after the chunks (only when at least one is admitted)."""
    return ("<documents>\n", "</documents>\n") if fmt == "xml" else ("", "Sources:\n")


def render_context(fmt: str, chunks: Sequence[Chunk], omitted: int, total: int) -> str:
    """The documents context: the notice (when ``omitted``), the chunks and their citations."""
    notice = omitted_notice(fmt, omitted, total) if omitted else ""
    if not chunks:
        return notice
    head, tail = context_frame(fmt)
    pieces = [chunk_parts(fmt, str(i), c) for i, c in enumerate(chunks, 1)]
    if fmt == "xml":
        return notice + head + "".join(p[0] for p in pieces) + tail
    return notice + "".join(p[0] for p in pieces) + tail + "".join(p[1] for p in pieces)
