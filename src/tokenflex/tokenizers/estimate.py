"""A conservative token estimate without a tokenizer: an upper bound in practice.

The estimate is a weighted sum of character-class counts, fitted so that it is at least
the token count of *both* OpenAI encodings (``o200k_base`` and ``cl100k_base``) on real
prose, code, JSON, CJK and other scripts. BPE tokenizers first split text into
"pre-tokens" (a word with its leading space, a run of up to three digits, a run of
punctuation, a run of whitespace); each pre-token is at least one token and long or rare
ones are split further. We count the same things with C-speed byte operations:

- runs of ASCII letters (words), with extra cost for long words (``floor(len / k)``),
  camelCase humps and ALL-CAPS pairs;
- digit runs and groups of three digits, a space before a number;
- punctuation characters and runs, whitespace runs and newline runs;
- every non-ASCII character, priced by its UTF-8 lead byte (which names its script
  block: Latin-1, Greek, Cyrillic, Armenian, Hebrew, Arabic, Indic, CJK, Hangul, emoji).

The text is first routed by cheap statistics to one of four weight sets (ASCII, Latin
with diacritics, CJK, other scripts) and the weighted sum is floored. The weights come
from a linear program run by ``scripts/bench_estimator.py --fit`` on half of a corpus of
real text; ``docs/estimator.md`` has the measured table on the other half. No vocabulary
is used, so the same estimate is a reasonable bound for tokenizers of the same family
(Llama 3, Qwen, Mistral's tekken) too, but it is measured only against the two above.
"""

from __future__ import annotations

import math

__all__ = ["FEATURES", "EstimatorTokenizer", "estimate_tokens", "estimate_tokens_range"]


def _table(classify: object) -> bytes:
    fn = classify  # a callable int -> str, typed loosely to keep the table builders short
    return bytes(ord(fn(i)) for i in range(256))  # type: ignore[operator]


def _is_letter(i: int) -> bool:
    return 65 <= i <= 90 or 97 <= i <= 122


def _is_punct(i: int) -> bool:
    return 33 <= i < 127 and not chr(i).isalnum()


def _lead_class(i: int) -> str:
    """One letter per UTF-8 lead-byte range (a script block), '.' for ASCII, 'c' for
    continuation bytes."""
    if i < 0x80:
        return "."
    if i < 0xC0:
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
        if i < limit:
            return cls
    return "e"  # 4-byte sequences: emoji, CJK ext. B+


_LETTERS = _table(lambda i: "a" if _is_letter(i) else ".")
_CONTEXT = _table(
    lambda i: (
        "a"
        if _is_letter(i)
        else "d"
        if 48 <= i <= 57
        else "s"
        if i == 32
        else "t"
        if i in (9, 11, 12)
        else "n"
        if i in (10, 13)
        else "p"
        if _is_punct(i)
        else "h"
    )
)
_CASE = _table(lambda i: "l" if 97 <= i <= 122 else "U" if 65 <= i <= 90 else ".")
_DIGITS = _table(lambda i: "d" if 48 <= i <= 57 else ".")
_PUNCT = _table(lambda i: "p" if _is_punct(i) else ".")
_SPACE = _table(lambda i: "s" if i in (32, 9, 11, 12) else "n" if i in (10, 13) else ".")
_LEAD = _table(_lead_class)
_ASCII = bytes(range(128))
_SCRIPTS = "xgmGrAHRoijqkzKfe"
_SCRIPT_BYTES = tuple(c.encode() for c in _SCRIPTS)

FEATURES: tuple[str, ...] = (
    "bias",  # 1
    "words",  # runs of ASCII letters
    "words_bare",  # ... not preceded by a space, tab or punctuation (line or text start)
    "words_cap",  # ... starting with a capital
    "letters",  # ASCII letters
    "L3",  # sum over words of floor(len / 3); likewise L4..L12: cost of long words
    "L4",
    "L5",
    "L6",
    "L7",
    "L8",
    "L10",
    "L12",
    "humps",  # lowercase -> uppercase inside a word (camelCase)
    "caps",  # pairs of capitals (ACRONYMS, CONSTANTS)
    "numbers",  # digit runs
    "digit3",  # groups of three digits
    "space_digit",  # a space before a digit (its own token)
    "alnum_mix",  # letter/digit boundaries (hex, base64, identifiers)
    "punct_runs",  # punctuation runs that are not a one-char prefix of a word
    "punct",  # punctuation characters
    "punct2",  # pairs / triples / quads inside punctuation runs
    "punct3",
    "punct4",
    "space_runs",  # runs of two or more spaces or tabs
    "tabs",  # tab characters
    "newline_runs",  # newline runs not glued to the punctuation before them
    "punct_newline",  # punctuation followed by a newline
    "trailing_space",  # the text ends in whitespace
    "escapes",  # backslash-u escapes (JSON with ensure_ascii): 3+ tokens each
    "sqrt_bytes",  # sqrt(UTF-8 bytes): slack that matters only for short texts
    "sqrt_pieces",  # sqrt(words + punctuation runs + numbers + whitespace runs)
    *(f"script_{c}" for c in _SCRIPTS),  # non-ASCII characters per lead-byte class
)

_REGIMES = ("ascii", "latin", "cjk", "script")

# Fitted by `scripts/bench_estimator.py --fit` (a linear program on the tune half of the
# corpus); paste its output here. One row per regime, in FEATURES order.
# fmt: off
_HIGH: dict[str, tuple[float, ...]] = {
    "ascii": (
        -0.1516, 0.8, 0.1962, 0.0499, 0, 0, 0, 0, 0.9229, 0, 0, 0, 0, 2, 0.7736, 0.5407,
        1.0264, 2, 0.2592, 0, 0.8016, 0, 1.2035, 0, 0.276, 0.3419, 1.7275, 0, 1.0079, 1,
        0.1977, 0.8683, 1.1772, 2.3701, 0.6, 1.1895, 0.8991, 2.3414, 1.3602, 1.3602, 0.6,
        1.8687, 3.135, 0.7694, 1.0282, 1.2444, 1.5723, 0.6, 4
    ),
    "latin": (
        -1, 0.8, 0, 0.2003, 0, 0.0189, 0.515, 0, 0, 0.827, 0, 0, 0, 0, 0.216, 0.5, 0.5,
        1.32, 0, 0, 0.3, 0.0099, 0.8181, 2, 0, 0, 1.4318, 0, 1.04, 1, 0.7685, 0, 1.1772,
        2.3701, 0.6, 1.1895, 0.8991, 2.3414, 1.3602, 1.3602, 0.6, 1.8687, 3.135, 0.7694,
        1.0282, 4, 1.5723, 0.6, 4
    ),
    "cjk": (
        2, 0.8, 0, 0, 0, 0, 0, 0.8669, 0, 0, 0, 0, 2, 2, 0, 0.5, 0.5, 0, 0.5771, 0.4782,
        0.3, 0, 0, 0, 1.4199, 1.3629, 2, 1.886, 0, 1, 0.5623, 0, 1.1772, 4, 0.6, 1.1895,
        0.8991, 2.3414, 1.3602, 1.3602, 0.6, 1.8687, 3.135, 0.7694, 1.0282, 1.2444, 1.5723,
        0.6, 4
    ),
    "script": (
        0.5943, 0.8, 0, 0.6373, 0, 0.4255, 0, 0, 0, 0, 1.0878, 0.1868, 0, 0, 0, 0.5, 0.5,
        1.0724, 0, 0.5429, 0.3, 0, 0, 0, 1.7173, 1.9563, 0.1246, 0, 0, 1, 0.0724, 0.4612,
        1.634, 2.3701, 0.6, 1.1895, 0.8991, 2.3414, 1.3602, 1.3602, 0.6, 1.8687, 3.135,
        0.7694, 4, 1.2444, 1.5723, 0.6, 4
    ),
}
_LOW: dict[str, tuple[float, ...]] = {
    "ascii": (
        0, 0.96, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.96, 0, 0.96, 0, 0.96, 0, 0.96, 0, 0, 0,
        0, 0.96, 0.1487, 0.7526, 0.1459, 0, 0.768, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0
    ),
    "latin": (
        -0.1435, 0.432, 0.0049, 0.1895, 0.0365, 0, 0, 0.0293, 0.2405, 0, 0, 0, 0, 0, 0.0389,
        0.4475, 0, 0.2808, 2, 1.1467, 0.0919, 0.0068, 0, 1.3959, 0, 1.3476, 1.8177, 1.3536,
        0.7055, 0, 0, 0, 0.6504, 0.7768, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2.377, 0, 0, 0, 4, 0
    ),
    "cjk": (
        -1.3867, 0.2635, 0.1149, 0.2017, 0, 0.1652, 0, 0.5057, 0, 0.6076, 0, 0.3321, 0, 0,
        0, 1.0178, 2, 1.1548, 1.4007, 0.0773, 0, 0.5003, 0, 1.1794, 2, 0.667, 1.8399,
        1.7557, 2, 2, 0, 0.776, 1.6613, 1.0782, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0.6901, 0.813,
        0.8533, 1.1108, 0
    ),
    "script": (
        -0.48, 0.4088, 0, 0, 0, 0.1205, 0.3597, 0.1258, 0, 0, 0, 0, 0, 0.0956, 0.1936,
        0.1664, 0, 1.9566, 0, 1.1026, 0.0842, 0, 0, 0, 0.8698, 1.8765, 0.331, 0.2794,
        0.4687, 0, 0, 0, 0, 0, 0, 0.9255, 0.3595, 1.952, 0.9916, 0.672, 0, 0.8, 0.8539,
        1.0615, 1.132, 1.3327, 1.5411, 2.1923, 1.9072
    ),
}
# fmt: on


def _features(text: str) -> tuple[str, list[float]]:
    """The regime and the FEATURES vector of ``text`` (non-empty)."""
    b = text.encode("utf-8", "surrogatepass")
    a = b.translate(_LETTERS)
    s = b.translate(_CONTEXT)
    k = b.translate(_CASE)
    d = b.translate(_DIGITS)
    p = b.translate(_PUNCT)
    w = b.translate(_SPACE)
    words = a.count(b".a") + (a[:1] == b"a")
    punct_before_word = s.count(b"pa")
    glued = punct_before_word - s.count(b"ppa")  # one punctuation char + word: one piece
    numbers = d.count(b".d") + (d[:1] == b"d")
    punct_runs = p.count(b".p") + (p[:1] == b"p")
    space_runs = w.count(b".ss") + w.count(b"nss") + (w[:2] == b"ss")
    newline_runs = w.count(b".n") + w.count(b"sn") + (w[:1] == b"n")
    punct_newline = s.count(b"pn")
    f = [
        1.0,
        words,
        words - s.count(b"sa") - punct_before_word - s.count(b"ta"),
        k.count(b".U") + (k[:1] == b"U"),
        a.count(b"a"),
        a.count(b"aaa"),
        a.count(b"aaaa"),
        a.count(b"aaaaa"),
        a.count(b"aaaaaa"),
        a.count(b"aaaaaaa"),
        a.count(b"aaaaaaaa"),
        a.count(b"aaaaaaaaaa"),
        a.count(b"aaaaaaaaaaaa"),
        k.count(b"lU"),
        k.count(b"UU"),
        numbers,
        d.count(b"ddd"),
        s.count(b"sd"),
        s.count(b"ad") + s.count(b"da"),
        punct_runs - glued,
        p.count(b"p"),
        p.count(b"pp"),
        p.count(b"ppp"),
        p.count(b"pppp"),
        space_runs,
        s.count(b"t"),
        newline_runs - punct_newline,
        punct_newline,
        float(text[-1].isspace()),
        b.count(b"\\u"),
        math.sqrt(len(b)),
        math.sqrt(words + punct_runs + numbers + space_runs + newline_runs),
    ]
    if text.isascii():
        f.extend([0.0] * len(_SCRIPTS))
        return "ascii", f
    lead = b.translate(_LEAD, _ASCII)  # drop ASCII first: the counts run on less
    counts = [lead.count(c) for c in _SCRIPT_BYTES]
    f.extend(counts)
    by = dict(zip(_SCRIPTS, counts, strict=True))
    non_ascii = sum(counts)
    if by["k"] + by["z"] + by["K"] >= 0.1 * len(text):
        return "cjk", f
    if by["x"] + by["g"] + by["m"] >= 0.5 * non_ascii:
        return "latin", f
    return "script", f


def _dot(weights: tuple[float, ...], f: list[float]) -> float:
    return sum(x * y for x, y in zip(weights, f, strict=True))


def estimate_tokens(text: str) -> int:
    """A conservative token count for ``text`` without a tokenizer.

    Built to be at least the ``o200k_base`` and ``cl100k_base`` counts for all but about
    1% of real texts (see ``docs/estimator.md`` for the measured table); it overcounts
    instead, most on very short texts. Use an exact tokenizer when one is available.

    Args:
        text: Any string (lone surrogates are fine).

    Returns:
        0 for the empty string, otherwise at least 1.

    >>> from tokenflex.tokenizers.estimate import estimate_tokens
    >>> estimate_tokens("")
    0
    >>> estimate_tokens("Hello, world!") >= 4
    True
    """
    if not text:
        return 0
    regime, f = _features(text)
    return max(1, math.floor(_dot(_HIGH[regime], f) + 1e-9))


def estimate_tokens_range(text: str) -> tuple[int, int]:
    """A ``(low, high)`` range for the token count of ``text`` without a tokenizer.

    ``high`` is :func:`estimate_tokens`; ``low`` is fitted the other way round: at most
    the ``o200k_base`` and ``cl100k_base`` counts for all but about 1% of real texts.

    Args:
        text: Any string.

    Returns:
        ``(0, 0)`` for the empty string, otherwise ``1 <= low <= high``.

    >>> from tokenflex.tokenizers.estimate import estimate_tokens_range
    >>> low, high = estimate_tokens_range("The quick brown fox jumps over the lazy dog.")
    >>> low <= 10 <= high
    True
    """
    if not text:
        return 0, 0
    regime, f = _features(text)
    high = max(1, math.floor(_dot(_HIGH[regime], f) + 1e-9))
    low = max(1, math.ceil(_dot(_LOW[regime], f) - 1e-9))
    return min(low, high), high


class EstimatorTokenizer:
    """The ``estimate`` tokenizer: :func:`estimate_tokens` behind the Tokenizer protocol.

    ``exact`` is False: counts are conservative estimates (upper bounds in practice),
    never the model's real tokenization.
    """

    name = "estimate"
    exact = False

    def count(self, text: str) -> int:
        """Estimated tokens in ``text`` (an upper bound in practice)."""
        return estimate_tokens(text)

    def count_range(self, text: str) -> tuple[int, int]:
        """``(low, high)`` estimate for ``text``; see :func:`estimate_tokens_range`."""
        return estimate_tokens_range(text)

    def __repr__(self) -> str:
        return "EstimatorTokenizer()"
