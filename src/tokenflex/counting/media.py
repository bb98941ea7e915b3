"""What a file (PDF) or an audio clip in a request costs: conservative estimates, read from
the request's own bytes, never fetched.

No provider publishes an exact formula for these, so each is an upper-leaning estimate and
a plan that holds one says so in its warnings (:func:`estimate_notes`):

- **PDF / file** (OpenAI chat ``file``, Responses ``input_file``, Anthropic ``document``):
  providers send every page as its extracted text *and* an image of the page; Anthropic
  documents 1,500-3,000 text tokens per page, and a page image costs at most ~1,600. A page
  costs :data:`PDF_TOKENS_PER_PAGE` (3,000 + 1,600). Pages are counted in the PDF itself
  (``/Type /Page`` objects, or the page tree's ``/Count``); when neither can be read
  (compressed object streams), one page per :data:`PDF_BYTES_PER_PAGE` bytes. A plain-text
  file is counted as its text. A file given only by id or URL costs
  :data:`UNKNOWN_FILE_TOKENS`.
- **Audio** (``input_audio``): :data:`AUDIO_TOKENS_PER_SECOND` per second (the highest
  published rate: Gemini's 32/s; OpenAI's audio models use ~10/s). The duration comes from
  a WAV header (exact) or an MP3 frame header's bitrate (exact for constant bitrate); any
  other format is assumed to be 8 kbit/s, the lowest common speech bitrate.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = [
    "AUDIO_TOKENS_PER_SECOND",
    "PDF_BYTES_PER_PAGE",
    "PDF_TOKENS_PER_PAGE",
    "UNKNOWN_FILE_TOKENS",
    "audio_seconds",
    "audio_tokens",
    "estimate_notes",
    "estimated_at",
    "file_tokens",
    "pdf_pages",
]

PDF_TOKENS_PER_PAGE = 4600
"""A page's text (at most ~3,000 tokens) plus its image (at most ~1,600)."""
PDF_BYTES_PER_PAGE = 20_000
"""Bytes per page assumed when a PDF's page count cannot be read."""
UNKNOWN_FILE_TOKENS = 10 * PDF_TOKENS_PER_PAGE
"""A file given only by id or URL: assumed to be a 10-page PDF."""
AUDIO_TOKENS_PER_SECOND = 32
"""Tokens per second of audio (conservative across providers)."""
_UNKNOWN_AUDIO_BPS = 8000 // 8  # 8 kbit/s in bytes per second

_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")
_COUNT = re.compile(rb"/Type\s*/Pages\b[^>]*?/Count\s+(\d+)|/Count\s+(\d+)[^>]*?/Type\s*/Pages\b")


def _decode(b64: str, chars: int | None = None) -> bytes | None:
    chunk = b64 if chars is None or chars >= len(b64) else b64[: chars - chars % 4]
    try:
        return base64.b64decode(chunk + "=" * (-len(chunk) % 4))
    except (binascii.Error, ValueError):
        return None


def _data_url(url: str) -> tuple[str, str] | None:
    """``(media type, base64 payload)`` of a base64 data URL, else None."""
    if not url.startswith("data:"):
        return None
    header, sep, payload = url.partition(",")
    if not sep or not header.endswith(";base64"):
        return None
    return header[5:].removesuffix(";base64"), payload


def pdf_pages(data: bytes) -> int:
    """Pages in a PDF, read from its objects (see the module doc for the fallback).

    >>> pdf_pages(b"%PDF-1.4 1 0 obj <</Type /Pages /Kids [2 0 R 3 0 R] /Count 2>> endobj")
    2
    """
    pages = len(_PAGE.findall(data))
    counts = [int(a or b) for a, b in _COUNT.findall(data)]
    found = max([pages, *counts])
    return found if found > 0 else max(1, math.ceil(len(data) / PDF_BYTES_PER_PAGE))


def file_tokens(data: str | None, count: Callable[[str], int]) -> int:
    """Tokens of one file given as a base64 data URL (``None``: only an id or URL).

    Args:
        data: ``data:<media type>;base64,<payload>`` (or bare base64, taken as a PDF).
        count: The model's text counter, for text files.
    """
    if data is None:
        return UNKNOWN_FILE_TOKENS
    parsed = _data_url(data)
    media, payload = parsed if parsed is not None else ("application/pdf", data)
    raw = _decode(payload)
    if raw is None:
        return UNKNOWN_FILE_TOKENS
    if media.startswith("text/") or media in ("application/json", "application/xml"):
        return count(raw.decode("utf-8", errors="replace"))
    return pdf_pages(raw) * PDF_TOKENS_PER_PAGE


_MP3_KBPS = {
    # (MPEG-1 layer III, MPEG-2/2.5 layer III) bitrates by index
    1: (32, 8),
    2: (40, 16),
    3: (48, 24),
    4: (56, 32),
    5: (64, 40),
    6: (80, 48),
    7: (96, 56),
    8: (112, 64),
    9: (128, 80),
    10: (160, 96),
    11: (192, 112),
    12: (224, 128),
    13: (256, 144),
    14: (320, 160),
}


def _wav_seconds(head: bytes, total: int) -> float | None:
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    i, byte_rate = 12, 0
    while i + 8 <= len(head):
        tag, size = head[i : i + 4], int.from_bytes(head[i + 4 : i + 8], "little")
        if tag == b"fmt " and i + 20 <= len(head):
            byte_rate = int.from_bytes(head[i + 16 : i + 20], "little")
        elif tag == b"data":
            if byte_rate <= 0:
                return None
            size = min(size, total - i - 8)  # streamed WAVs write 0xFFFFFFFF
            return max(0, size) / byte_rate
        i += 8 + size + (size & 1)
    return None


def _mp3_seconds(head: bytes, total: int) -> float | None:
    start = 0
    if head[:3] == b"ID3" and len(head) >= 10:
        start = 10 + ((head[6] << 21) | (head[7] << 14) | (head[8] << 7) | head[9])
    for i in range(start, min(len(head) - 3, start + 4096)):
        if head[i] == 0xFF and head[i + 1] & 0xE0 == 0xE0:
            version = (head[i + 1] >> 3) & 0x3  # 3: MPEG-1
            index = head[i + 2] >> 4
            if index in _MP3_KBPS and version != 1:
                kbps = _MP3_KBPS[index][0 if version == 3 else 1]
                return (total - i) * 8 / (kbps * 1000)
    return None


def audio_seconds(data: str, audio_format: str | None) -> float:
    """Duration of base64 audio: exact for WAV, from the bitrate for MP3, else assumed
    8 kbit/s (longer than real: conservative)."""
    total = len(data) * 3 // 4 - (len(data) - len(data.rstrip("=")))  # less the padding
    head = _decode(data, 1 << 16) or b""
    seconds = _wav_seconds(head, total)
    if seconds is None:
        seconds = _mp3_seconds(head, total)
    if seconds is None:
        seconds = total / _UNKNOWN_AUDIO_BPS
    return seconds


def audio_tokens(data: str, audio_format: str | None = None) -> int:
    """Tokens of one base64 audio clip (see the module doc).

    >>> import base64, struct
    >>> wav = b"RIFF" + struct.pack("<I", 36 + 32000) + b"WAVEfmt " + struct.pack(
    ...     "<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16) + b"data" + struct.pack("<I", 32000)
    >>> audio_tokens(base64.b64encode(wav + bytes(32000)).decode(), "wav")  # 1 second
    32
    """
    return math.ceil(audio_seconds(data, audio_format) * AUDIO_TOKENS_PER_SECOND)


def _walk_parts(messages: Iterable[Any]) -> Iterable[Mapping[str, Any]]:
    for m in messages:
        content = m.get("content") if isinstance(m, Mapping) else None
        if isinstance(content, list):
            for part in content:
                if isinstance(part, Mapping):
                    yield part


def _estimated(part: Mapping[str, Any]) -> str | None:
    """Why ``part``'s cost is an estimate: ``file`` (its data given), ``unknown`` (a file
    given only by id or URL), ``audio``, ``remote`` (an image by URL); None: it is not."""
    ptype = part.get("type")
    if ptype == "file":
        f = part.get("file")
        return (
            "file" if isinstance(f, Mapping) and isinstance(f.get("file_data"), str) else "unknown"
        )
    if ptype == "input_audio":
        return "audio"
    if ptype in ("image_url", "input_image"):
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else image
        if isinstance(url, str) and not url.startswith("data:"):
            return "remote"
    return None


def estimated_at(messages: Iterable[Any]) -> list[int]:
    """The places of the chat messages with a part whose cost is an estimate (what
    :func:`estimate_notes` warns of); a request that has none needs no notes, whichever
    of its messages a plan keeps."""
    return [i for i, m in enumerate(messages) if any(map(_estimated, _walk_parts((m,))))]


def estimate_notes(messages: Iterable[Any]) -> list[str]:
    """Warnings for the parts of chat messages whose cost is an estimate: files, audio
    and images given by URL (counted at the model's worst case)."""
    files = unknown = audio = remote = 0
    for part in _walk_parts(messages):
        why = _estimated(part)
        if why is None:
            continue
        if why in ("file", "unknown"):
            files += 1
            unknown += why == "unknown"
        elif why == "audio":
            audio += 1
        else:
            remote += 1
    notes = []
    if files:
        extra = (
            f" ({unknown} given only by id or URL: {UNKNOWN_FILE_TOKENS:,} tokens each)"
            if unknown
            else ""
        )
        notes.append(
            f"{files} file(s) counted as an estimate, {PDF_TOKENS_PER_PAGE:,} tokens per "
            f"PDF page{extra}; pass the file's data to count its pages."
        )
    if audio:
        notes.append(
            f"{audio} audio clip(s) counted as an estimate, {AUDIO_TOKENS_PER_SECOND} tokens "
            "per second of audio."
        )
    if remote:
        notes.append(
            f"{remote} image(s) given by URL counted at the model's largest image cost "
            "(never fetched); send a data URL to count the real size."
        )
    return notes
