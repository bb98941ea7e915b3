"""Script blocks and writing systems of characters, cheaply (for the estimator).

A character's UTF-8 lead byte names its script block (Latin-1, Cyrillic, CJK, ...), so
``bytes.translate`` classifies a whole string at C speed; ``split_by_system`` cuts a
letter piece where its writing system changes (no BPE token spans two systems).
"""

from __future__ import annotations

__all__ = ["script_of", "split_by_system"]


def _lead_class(lead: int) -> str:
    """One letter per UTF-8 lead-byte range (a script block); '.' for ASCII, 'c' for
    continuation bytes."""
    if lead < 0x80:
        return "."
    if lead < 0xC0:
        return "c"
    for limit, cls in (
        (0xC4, "x"),  # U+0080-00FF  Latin-1 supplement (accented Latin, symbols)
        (0xCC, "g"),  # U+0100-02FF  Latin extended, IPA
        (0xCE, "m"),  # U+0300-037F  combining marks
        (0xD0, "G"),  # U+0380-03FF  Greek, Coptic
        (0xD4, "r"),  # U+0400-04FF  Cyrillic
        (0xD7, "A"),  # U+0500-05BF  Cyrillic supplement, Armenian, Hebrew points
        (0xD8, "H"),  # U+05C0-05FF  Hebrew
        (0xDC, "R"),  # U+0600-06FF  Arabic, Persian, Urdu
        (0xE0, "o"),  # U+0700-07FF  Syriac, Thaana, NKo
        (0xE1, "i"),  # U+0800-0FFF  Indic scripts, Thai, Lao, Tibetan
        (0xE2, "j"),  # U+1000-1FFF  Myanmar, Georgian, Ethiopic, Khmer, Latin/Greek ext.
        (0xE3, "q"),  # U+2000-2FFF  punctuation, symbols, arrows, box drawing
        (0xE4, "k"),  # U+3000-3FFF  CJK punctuation, kana, CJK ext. A
        (0xEA, "z"),  # U+4000-9FFF  CJK unified ideographs
        (0xEE, "K"),  # U+A000-DFFF  Hangul syllables, Yi (and surrogates)
        (0xF0, "f"),  # U+E000-FFFF  private use, CJK compatibility, fullwidth forms
    ):
        if lead < limit:
            return cls
    return "e"  # 4-byte sequences: emoji, CJK ext. B+


_LEAD = bytes(ord(_lead_class(i)) for i in range(256))
_ASCII = bytes(range(128))
_NOT_ASCII_LETTER = bytes(i for i in range(256) if not chr(i).isalpha() or i >= 128)


def script_of(ch: str) -> str:
    """The script block of a non-ASCII character (one letter, see _lead_class); the mixed
    U+1000-1FFF block is told apart by code point."""
    cp = ord(ch)
    if 0x1000 <= cp < 0x2000:
        if cp >= 0x1F00:
            return "G"  # Greek extended
        if cp >= 0x1E00:
            return "g"  # Latin extended additional (Vietnamese)
        if 0x10A0 <= cp < 0x1100:
            return "J"  # Georgian
        return "j"  # Myanmar, Hangul Jamo, Ethiopic, Cherokee, Khmer, Mongolian, ...
    return _lead_class(ch.encode("utf-8", "surrogatepass")[0])


# Writing systems by script block: Latin (ASCII letters, Latin-1, Latin extended,
# combining marks) is one; kana and Han are one (Japanese mixes them in a word); every
# other block is its own. "c" (continuation bytes) and "q" (punctuation) are none. The
# lead byte of U+1000-1FFF ("j") does not say which system (Vietnamese letters sit next
# to Georgian and Myanmar), so a piece with it is checked character by character.
_SYSTEM = {"x": "L", "g": "L", "m": "L", "k": "C", "z": "C", "c": "", "q": ""}


def split_by_system(piece: str) -> list[str]:
    raw = piece.encode("utf-8", "surrogatepass")
    systems = {_SYSTEM.get(c, c) for c in raw.translate(_LEAD, _ASCII).decode("ascii")}
    if raw.translate(None, _NOT_ASCII_LETTER):
        systems.add("L")
    systems.discard("")
    if len(systems) < 2:
        return [piece]
    parts: list[str] = []
    start, current = 0, ""
    for i, ch in enumerate(piece):
        if not ch.isalpha():
            continue
        system = "L" if ch.isascii() else _SYSTEM.get(script_of(ch), script_of(ch))
        if not system:
            continue
        if current and system != current:
            parts.append(piece[start:i])
            start = i
        current = system
    parts.append(piece[start:])
    return parts
