"""What an image in a chat message costs, from its own header: never fetched.

The size comes from the first bytes of a base64 ``data:`` URL (PNG, JPEG, GIF, WebP). A
remote URL has no size we may read (tokenflex never touches the network while counting),
so it costs the model's worst case: the most any image can cost after the provider's
resizing. Formulas per provider:

- OpenAI tile models (gpt-4o, gpt-4.1, o1, o3, gpt-5, ...): ``detail: low`` costs the base
  tokens; ``high``/``auto`` fits the image in 2048x2048, scales the shortest side down to
  768, and costs ``tile`` per 512px tile plus ``base``. (``auto`` is counted as ``high``:
  the API may pick ``low``, never more.) Images are only scaled down, never up.
- OpenAI patch models (gpt-4.1-mini/nano, gpt-5-mini/nano, o4-mini): 32px patches, at most
  1,536 after scaling down, times a per-model multiplier; ``detail`` is ignored.
- Anthropic: an image costs ``width * height / 750`` after the API scales it down to
  1568 px on the long edge and about 1,600 tokens. The published sizes it does not
  resize go up to 784x1568 (1,640 tokens) and 1092x1092 (1.19 MP, 1,590 tokens), above
  the "1.15 megapixels" the same page names, so only the long edge is applied exactly and
  the cost is capped at the largest published size's (1,640): never below what the API
  charges. A remote URL costs that maximum.
- Google Gemini: 258 tokens for an image within 384x384, else 258 per 768x768 tile.
- Anything else (local vision models): the largest of the gpt-4o tile formula and one
  token per 28x28 patch (Qwen2-VL style), capped at 16,384.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct

from ..models import Model

__all__ = ["anthropic_image_tokens", "image_size", "image_tokens"]

# (name prefix, base tokens, tile tokens); longest prefix wins.
_TILE = (
    ("gpt-4o-mini", 2833, 5667),
    ("gpt-5", 70, 140),
    ("o1", 75, 150),
    ("o3", 75, 150),
    ("computer-use", 65, 129),
)
_TILE_DEFAULT = (85, 170)  # gpt-4o, gpt-4.1, gpt-4.5, gpt-4-turbo
# (name prefix, multiplier) for the 32px-patch models.
_PATCH = (
    ("gpt-4.1-mini", 1.62),
    ("gpt-4.1-nano", 2.46),
    ("gpt-5-mini", 1.62),
    ("gpt-5-nano", 2.46),
    ("o4-mini", 1.72),
)
_PATCH_BUDGET = 1536
_ANTHROPIC_EDGE = 1568
_ANTHROPIC_MAX = math.ceil(784 * 1568 / 750)  # the largest published unresized size
_GENERIC_MAX = 16384


def _tile_tokens(width: int, height: int, base: int, tile: int) -> int:
    if width > 2048 or height > 2048:
        scale = 2048 / max(width, height)
        width, height = int(width * scale), int(height * scale)
    shortest = min(width, height)
    if shortest > 768:
        scale = 768 / shortest
        width, height = int(width * scale), int(height * scale)
    tiles = math.ceil(width / 512) * math.ceil(height / 512)
    return base + tile * tiles


def _patch_tokens(width: int, height: int, multiplier: float) -> int:
    patches = math.ceil(width / 32) * math.ceil(height / 32)
    if patches > _PATCH_BUDGET:
        shrink = math.sqrt(32 * 32 * _PATCH_BUDGET / (width * height))
        w_units, h_units = width * shrink / 32, height * shrink / 32
        shrink *= min(math.floor(w_units) / w_units, math.floor(h_units) / h_units)
        width, height = int(width * shrink), int(height * shrink)
        patches = min(_PATCH_BUDGET, math.ceil(width / 32) * math.ceil(height / 32))
    return math.ceil(patches * multiplier)


def _by_prefix(name: str, table: tuple[tuple[str, float], ...]) -> float | None:
    best: tuple[int, float] | None = None
    for prefix, value in table:
        if name.startswith(prefix) and (best is None or len(prefix) > best[0]):
            best = (len(prefix), value)
    return None if best is None else best[1]


def anthropic_image_tokens(size: tuple[int, int] | None) -> int:
    """Tokens of one image in an Anthropic request (``None``: a remote image, the most
    any image can cost).

    >>> anthropic_image_tokens((1000, 1000)), anthropic_image_tokens((1092, 1092))
    (1334, 1590)
    >>> anthropic_image_tokens((4000, 3000))  # the API's ~1,600-token size, rounded up
    1640
    """
    if size is None:
        return _ANTHROPIC_MAX
    width, height = size
    longest = max(width, height)
    if longest > _ANTHROPIC_EDGE:
        scale = _ANTHROPIC_EDGE / longest
        width, height = math.ceil(width * scale), math.ceil(height * scale)
    return min(_ANTHROPIC_MAX, math.ceil(width * height / 750))


def image_tokens(model: Model, size: tuple[int, int] | None, detail: str = "auto") -> int:
    """Tokens one image costs ``model``; ``size=None`` means unknown (the worst case).

    >>> from tokenflex import get_model
    >>> image_tokens(get_model("gpt-4o"), (1024, 1024), "high")
    765
    >>> image_tokens(get_model("gpt-4o"), None, "low")
    85
    """
    name = model.name
    if model.chat_format in ("openai", "openai-0301"):
        multiplier = _by_prefix(name, _PATCH)
        if multiplier is not None:
            if size is None:
                return math.ceil(_PATCH_BUDGET * multiplier)
            return _patch_tokens(size[0], size[1], multiplier)
        base, tile = _TILE_DEFAULT
        best = -1
        for prefix, b, t in _TILE:
            if name.startswith(prefix) and len(prefix) > best:
                best, base, tile = len(prefix), b, t
        if detail == "low":
            return base
        if size is None:
            # The largest image after resizing is 768x2048: 2 x 4 tiles.
            return base + 8 * tile
        return _tile_tokens(size[0], size[1], base, tile)
    if model.provider == "anthropic":
        return anthropic_image_tokens(size)
    if model.provider == "google" and name.startswith("gemini"):
        if size is None:
            return 258 * 16  # an assumed 3072x3072 worst case
        if size[0] <= 384 and size[1] <= 384:
            return 258
        return 258 * math.ceil(size[0] / 768) * math.ceil(size[1] / 768)
    if size is None:
        return _GENERIC_MAX
    patches = math.ceil(size[0] * size[1] / (28 * 28))
    return min(_GENERIC_MAX, max(patches, _tile_tokens(size[0], size[1], *_TILE_DEFAULT)))


def _dimensions(data: bytes) -> tuple[int, int] | None:
    """Width and height from a PNG, GIF, WebP or JPEG header (None if not found)."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24 and data[12:16] == b"IHDR":
        w, h = struct.unpack(">II", data[16:24])
        return int(w), int(h)
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        w, h = struct.unpack("<HH", data[6:10])
        return int(w), int(h)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP" and len(data) >= 30:
        chunk = data[12:16]
        if chunk == b"VP8 ":
            w, h = struct.unpack("<HH", data[26:30])
            return int(w) & 0x3FFF, int(h) & 0x3FFF
        if chunk == b"VP8L":
            b0, b1, b2, b3 = data[21:25]
            return 1 + (b0 | (b1 & 0x3F) << 8), 1 + (b1 >> 6 | b2 << 2 | (b3 & 0x0F) << 10)
        if chunk == b"VP8X":
            return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(
                data[27:30], "little"
            )
        return None
    if data[:2] == b"\xff\xd8":
        i = 2
        while i + 9 < len(data):
            if data[i] != 0xFF:
                return None
            marker = data[i + 1]
            if marker == 0xFF:  # fill byte
                i += 1
                continue
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length field
                i += 2
                continue
            (length,) = struct.unpack(">H", data[i + 2 : i + 4])
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                h, w = struct.unpack(">HH", data[i + 5 : i + 9])
                return int(w), int(h)
            i += 2 + length
    return None


def image_size(url: str) -> tuple[int, int] | None:
    """Width and height of a base64 ``data:`` image URL, read from its header only.

    Returns None for remote URLs (never fetched), other encodings and unreadable data;
    callers then count the model's worst case.
    """
    if not url.startswith("data:"):
        return None
    header, sep, payload = url.partition(",")
    if not sep or not header.endswith(";base64"):
        return None
    # PNG, GIF and WebP keep their size in the first 30 bytes; a JPEG's frame header can
    # come after large EXIF blocks, so widen the window before decoding everything.
    for chars in (64, 65536, len(payload)):
        chunk = payload[: chars - chars % 4] if chars < len(payload) else payload
        try:
            data = base64.b64decode(chunk + "=" * (-len(chunk) % 4))
        except (binascii.Error, ValueError):
            return None
        size = _dimensions(data)
        if size is not None and size[0] > 0 and size[1] > 0:
            return size
        if chars >= len(payload):
            break
    return None
