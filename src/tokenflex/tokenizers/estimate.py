"""A conservative token estimate without the model's tokenizer: an upper bound in practice.

Byte-level BPE tokenizers (OpenAI's ``o200k_base`` and ``cl100k_base``, and the
tokenizers built the same way: Llama 3, Qwen, Mistral's tekken, DeepSeek) first cut text
into *pieces* with a regular expression (a word with its leading space, up to three
digits, a punctuation run, a whitespace run), then encode each piece on its own. So a
text's count is the sum of its pieces' counts, and a piece that is a whole vocabulary
entry is exactly one token. The estimate follows that structure:

1. Cut the text with ``o200k_base``'s piece pattern (the finer of the two), and a letter
   piece where its writing system changes (no token spans two).
2. A piece that is a single token in *both* encodings (the shipped table: the 84,374
   strings the two vocabularies share) costs exactly 1.
3. Any other piece gets a mean and a variance looked up by its shape: kind (word,
   number, punctuation, whitespace), leading space, case, script, length, and how many
   table entries a greedy longest-match cut needs for it. These statistics were measured
   per piece against ``max(o200k, cl100k)`` on the tuning half of the benchmark corpus.
4. ``estimate = exact pieces + ceil(1.1 * sum of means + 1.0 * sqrt(sum of variances))``,
   with the means of non-ASCII pieces raised another 10%. The margin covers pieces whose
   true count is above their shape's mean; the square root makes the slack grow slower
   than the text, so long texts are not padded by a fixed percentage.
5. A piece with a character out of the scripts and blocks the statistics were fitted on
   (``_FITTED``: Odia, Thaana, an emoji, a variation selector) costs at least its
   ceiling: the tokens its characters cost one by one in the real vocabularies
   (measured per character), a token per UTF-8 byte for one never measured.

``scripts/bench_estimator.py --fit`` rebuilds the data file from the tuning half;
``docs/estimator.md`` has the table on the held-out half. The estimate is measured only
against the two OpenAI encodings: tokenizers that need more tokens than both for the same
text (Anthropic's, measured against ctok) need a factor on top, which the model registry
applies (``tokenizer = "estimate:1.5"``).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import math
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import reduce
from importlib import resources
from itertools import compress, filterfalse
from operator import iadd
from typing import Any

import regex

from ..errors import ConfigError
from ._scripts import script_of, split_by_system
from .family_bounds import FAMILY_BOUNDS, FamilyBound

__all__ = [
    "FAMILY_BOUNDS",
    "FEATURES",
    "PATTERN",
    "EstimatorTokenizer",
    "FamilyBound",
    "FamilyEstimator",
    "clear_caches",
    "coarse_key",
    "estimate_family",
    "estimate_tokens",
    "estimate_tokens_range",
    "family_char_tokens",
    "family_estimator",
    "family_indent_tokens",
    "family_run_lines",
    "family_singles",
    "family_symbol_tokens",
    "family_table_tokens",
    "fitted",
    "piece_features",
    "piece_key",
    "split_pieces",
    "split_text",
    "table_digest",
    "text_features",
]

# o200k_base's pre-tokenizer pattern (tiktoken_ext.openai_public), the finer of the two:
# it also splits on case changes, so its pieces refine cl100k's almost everywhere.
PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_SPLIT = regex.compile(PATTERN).findall

# The same pattern for ASCII text, spelled for the stdlib ``re``, which runs it about three
# times as fast as ``regex`` runs PATTERN. On ASCII, \p{L} is [A-Za-z] (\p{Lt}, \p{Lm}, \p{Lo},
# \p{M} are empty) and \p{N} is [0-9]; ``regex``'s \s is [\t\n\v\f\r ] (``re``'s also takes
# \x1c-\x1f, so it is spelled out). The two letter branches become one: on ASCII they
# match an upper-case run and the lower-case run after it, or a lower-case run (without
# the optional prefix they could only match where the prefix cannot), which is a letter
# followed by [A-Z]*[a-z]* taken greedily. A newline run ``\s*[\r\n]+`` (the longest
# space run that ends in a line break) is taken one stretch of spaces and line breaks at a
# time. Possessive quantifiers (Python 3.11+) where a branch, once its required part
# matched, never gives characters back; the contraction group ends its branch, so it
# never has to either. The same matches, in about three quarters of the time PATTERN
# spelled literally takes. tests/test_estimate.py checks the pieces against PATTERN on
# arbitrary text.
_ASCII_SPACE = r"[\t\n\v\f\r ]"
_ASCII_PATTERN = "|".join(
    [
        r"""[^\r\nA-Za-z0-9]?+(?=[A-Za-z])[A-Z]*+[a-z]*+(?:'(?:[sStTmMdD]|[rR][eE]|[vV][eE]|[lL][lL]))?+""",
        r"""[0-9]{1,3}""",
        r""" ?[^\t\n\v\f\r A-Za-z0-9]++[\r\n/]*+""",
        r"""(?:[\t\v\f ]*+[\r\n]++)++""",
        rf"""{_ASCII_SPACE}+(?![^\t\n\v\f\r ])""",
        rf"""{_ASCII_SPACE}+""",
    ]
)
_ASCII_SPLIT = re.compile(_ASCII_PATTERN).findall

# The cut of ASCII text: the C scanner of the optional extension ``_fastcut`` (built by
# ``pip install`` where a C compiler exists; the same pieces as _ASCII_SPLIT, made by a
# hand-written scanner instead of a regex), else _ASCII_SPLIT. Chosen once, here.
_split_ascii: Callable[[str], list[str]]
try:
    from tokenflex.tokenizers._fastcut import split as _split_ascii
except ImportError:  # built without a C compiler: the stdlib ``re`` cuts
    _split_ascii = _ASCII_SPLIT

# Where a piece always ends, whatever came before: after a "\n" followed by spaces or tabs
# and then a non-space other than "/". The piece holding that "\n" is a newline run
# (``\s*[\r\n]+`` ends at the run's last line break) or punctuation with trailing line
# breaks (``[\r\n/]*`` stops at a space or a non-"/"); letter and digit pieces hold no
# line break. The pattern looks behind nothing, so the text from there on is cut the same
# on its own. ``re``'s \s contains ``regex``'s, so [^\s/] is never a ``regex`` space.
# _CHUNKS cuts a text there in one call: a chunk runs to and takes such a "\n"
# (``\n(?=[ \t]*[^\s/])``; another "\n" stays in the chunk), or to the end of the text.
_CHUNKS = re.compile(r"(?=[\s\S])[^\n]*+(?:\n(?![ \t]*[^\s/])[^\n]*+)*+\n?").findall
# Also after an ASCII letter or digit followed by an ASCII character that is neither (nor
# "'", which may start "'s"): the letter or digit piece ends there, and only letter and
# digit classes ever read past it, which fail on that character as on the end of text.
_WORD_END = re.compile(r"[A-Za-z0-9](?=[\x00-\x26\x28-\x2f\x3a-\x40\x5b-\x60\x7b-\x7f])")
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
# Blocks whose text the stdlib re cuts too (``_wide_pattern``): Latin, Greek, Cyrillic,
# Armenian, Hebrew, Arabic; punctuation, symbols, arrows, box drawing; CJK punctuation,
# kana, Han; Hangul. A line with another character (an emoji, an Indic script, a lone
# surrogate) goes to ``_split_mixed``.
_WIDE_BLOCKS = (
    (0x80, 0x7FF),
    (0x2000, 0x2BFF),
    (0x3000, 0x30FF),
    (0x4E00, 0x9FFF),
    (0xAC00, 0xD7A3),
)
_ALL_BLOCKS = ((0, 0x7F), *_WIDE_BLOCKS)
_OUT_OF_WIDE = re.compile(
    "[^" + "".join(f"\\u{first:04x}-\\u{last:04x}" for first, last in _ALL_BLOCKS) + "]"
).search
_UPPER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"  # PATTERN's upper-case (and caseless) letters
_LOWER = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"  # ... and lower-case ones
_MIXED_RUNS = 2  # non-ASCII runs cut out of a line one by one before the rest goes to regex
_LONG_LINE = 256  # a line longer than twice this is cut after a word about this often
_CHUNK_CACHE_CHARS = 1_000_000  # the line cache is emptied when its keys pass this

_GREEDY_MAX = 24  # the longest table entry tried by the greedy cut, in characters
_DATA_FILE = "estimate.json.gz"

# The characters the estimate's statistics and the family bounds were fitted on, beyond
# ASCII: the scripts of the tuning languages (Latin, Greek, Cyrillic, Armenian, Hebrew,
# Arabic, Devanagari, Bengali, Tamil, Thai, Georgian, Ethiopic, Vietnamese, CJK, Hangul)
# and the punctuation and symbol blocks of the tuning texts. A piece with any other
# character (Odia, Thaana, Adlam, an emoji, a variation selector, a tag) is priced at
# least at its ceiling (``_ceiling``): the tokens its characters cost one by one, as the
# family's real tokenizers spend them alone (measured per letter, mark, digit and symbol
# by ``scripts/bench_families.py --vocab``), a token per UTF-8 byte for a character never
# measured. No byte-level BPE or byte-fallback SentencePiece vocabulary spends more than
# a token per byte, and merges only lower the one-by-one count.
_FITTED = (
    (0x80, 0x2AF),  # Latin-1, Latin extended, IPA
    (0x300, 0x6FF),  # combining marks, Greek, Cyrillic, Armenian, Hebrew, Arabic
    (0x900, 0x9FF),  # Devanagari, Bengali
    (0xB80, 0xBFF),  # Tamil
    (0xE00, 0xE7F),  # Thai
    (0x10A0, 0x10FF),  # Georgian
    (0x1200, 0x137F),  # Ethiopic
    (0x1E00, 0x1FFF),  # Latin extended additional (Vietnamese), Greek extended
    (0x2000, 0x2BFF),  # punctuation, symbols, arrows, box drawing (the ZWJ too)
    (0x3000, 0x30FF),  # CJK punctuation, kana
    (0x4E00, 0x9FFF),  # Han
    (0xAC00, 0xD7A3),  # Hangul
    (0xFF00, 0xFFEF),  # fullwidth and halfwidth forms
)
_OUT_OF_FITTED = re.compile(
    "[^\\x00-\\x7f" + "".join(f"\\u{first:04x}-\\u{last:04x}" for first, last in _FITTED) + "]"
).search


ESTIMATE_DEAR = 0.25
"""The default ``estimate``'s share of a dear letter's extra tokens (the OpenAI
encodings'), as :data:`DEAR_LETTERS` gives a family's."""
_ALPHABETS = (
    (0x370, 0x6FF),  # Greek, Cyrillic, Armenian, Hebrew, Arabic
    (0x900, 0x9FF),  # Devanagari, Bengali
    (0xB80, 0xBFF),  # Tamil
    (0xE00, 0xE7F),  # Thai
    (0x10A0, 0x10FF),  # Georgian
    (0x1200, 0x137F),  # Ethiopic
    (0x1F00, 0x1FFF),  # Greek extended
)
"""The fitted alphabets whose dear letters cost extra (:data:`DEAR_LETTERS`): not Latin
(accented letters are common in real text), not CJK, kana or Hangul (a character costs
two or three tokens there in real text too, which their shapes price)."""
_ALPHABET_CHAR = re.compile(
    "[" + "".join(f"\\u{first:04x}-\\u{last:04x}" for first, last in _ALPHABETS) + "]"
).fullmatch


def fitted(text: str) -> bool:
    """Whether every character of ``text`` lies in the scripts and symbol blocks the
    estimate was fitted on (else its pieces with other characters are priced at least at
    their ceiling: the tokens their characters cost one by one).

    >>> from tokenflex.tokenizers.estimate import fitted
    >>> fitted("Привет, 世界"), fitted("ଓଡ଼ିଆ"), fitted("👍")
    (True, False, False)
    """
    return _OUT_OF_FITTED(text) is None


def _ceiling(piece: str, chars: Mapping[str, int]) -> int:
    """The tokens ``piece``'s characters cost one by one: one per ASCII character, what
    ``chars`` says for another (see :func:`family_char_tokens`), else its UTF-8 bytes.
    The character after a leading space or punctuation costs its UTF-8 bytes: the
    vocabulary may merge the space with its first byte ("\u0020\xe0") and then spend a
    token on each byte left (Qwen 3.5: " ຂ" is three tokens, "ຂ" one)."""
    n, start = 0, 0
    if len(piece) > 1 and piece[0] < "\x80" and piece[1] >= "\x80":
        n, start = 1 + len(piece[1].encode("utf-8", "surrogatepass")), 2
    for ch in piece[start:]:
        if ch < "\x80":
            n += 1
        else:
            n += chars.get(ch) or len(ch.encode("utf-8", "surrogatepass"))
    return n


def split_pieces(text: str) -> list[str]:
    """``text`` cut into BPE pieces; they join back to ``text``.

    ``o200k_base``'s pattern, then a letter piece that runs across writing systems
    (``Щоб短横线``: Cyrillic then Han) is cut where the system changes: no token spans
    two systems, and each part is priced by its own.
    """
    out: list[str] = []
    for piece in _SPLIT(text):
        if piece.isascii() or len(piece) < 2:
            out.append(piece)
        else:
            out.extend(split_by_system(piece))
    return out


def _wide_pattern() -> str:
    """PATTERN spelled for ``re`` on text of ASCII and ``_WIDE_BLOCKS`` characters.

    The same branches, each ``regex`` class written out as the characters ``regex``
    puts in it (so the two agree whatever Unicode version either was built with), and the
    case-insensitive contractions as the characters that fold to each letter ("ſ" is an
    "s"). On such text no other character can occur, so a negated class means the same.
    Only the branches' ends are possessive: unlike on ASCII, a combining mark is in the
    letter prefix's class and in both letter classes, so the prefix may have to give it
    back to them (and the letter classes to each other).
    """
    blocks = ["".join(map(chr, range(first, last + 1))) for first, last in _ALL_BLOCKS]

    def members(cls: str) -> str:
        out = []
        for chars in blocks:
            for m in regex.finditer(f"(?:{cls})+", chars):
                first, last = re.escape(m[0][0]), re.escape(m[0][-1])
                out.append(first if len(m[0]) == 1 else f"{first}-{last}")
        return "".join(out)

    letters, upper, lower = members(r"[\p{L}\p{N}]"), members(_UPPER), members(_LOWER)
    digits, space, word = members(r"\p{N}"), members(r"\s"), members(r"[\s\p{L}\p{N}]")
    inline = members(r"(?![\r\n])\s")  # spaces other than line breaks
    folds = {c: f"[{members(f'(?i:{c})')}]" for c in "strevmld"}
    contraction = (
        "'(?:"
        + "|".join(
            "".join(folds[c] for c in ending) for ending in ("s", "t", "re", "ve", "m", "ll", "d")
        )
        + ")"
    )
    return "|".join(
        [
            rf"[^\r\n{letters}]?[{upper}]*[{lower}]+(?:{contraction})?+",
            rf"[^\r\n{letters}]?[{upper}]+[{lower}]*(?:{contraction})?+",
            rf"[{digits}]{{1,3}}",
            rf" ?[^{word}]++[\r\n/]*+",
            rf"(?:[{inline}]*+[\r\n]++)++",
            rf"[{space}]+(?![^{space}])",
            rf"[{space}]+",
        ]
    )


_wide_split: Callable[[str], list[str]] | None = None


def _split_wide(chunk: str) -> list[str]:
    global _wide_split
    split = _wide_split
    if split is None:  # compiled on the first line that needs it (20-25 ms, once)
        split = _wide_split = re.compile(_wide_pattern()).findall
    return split(chunk)


def _split_mixed(chunk: str) -> list[str]:
    """Pieces of a run with characters out of ``_WIDE_BLOCKS``: ``regex`` cuts only the
    words around them.

    Each run of non-ASCII characters is cut out from the last word end before it to the
    first after it (``_WORD_END``), and the ASCII between goes to ``re``: mostly-ASCII text
    (an emoji in a chat line) is not all cut by the slower ``regex``. After two runs (text
    in another script) the rest goes to ``regex`` whole.
    """
    out: list[str] = []
    pos, n = 0, len(chunk)
    for _ in range(_MIXED_RUNS):
        m = _NON_ASCII.search(chunk, pos)
        if m is None:
            if pos < n:
                out += _split_ascii(chunk[pos:])
            return out
        cut = pos
        for w in _WORD_END.finditer(chunk, max(pos, m.start() - 32), m.start()):
            cut = w.end()
        if cut > pos:
            out += _split_ascii(chunk[pos:cut])
        word = _WORD_END.search(chunk, m.end())
        after = word.end() if word is not None else n
        out += _SPLIT(chunk[cut:after])
        pos = after
    if pos < n:
        out += _SPLIT(chunk[pos:])
    return out


class _ChunkCache(dict[str, list[str]]):
    """The pieces of every chunk (a line, or a run of a long line) cut so far: a lookup of
    a chunk not in it cuts the chunk (``map(cache.__getitem__, chunks)`` runs in C for the
    chunks seen before)."""

    chars = 0  # the length of the keys: the cache is emptied past _CHUNK_CACHE_CHARS

    def __missing__(self, chunk: str) -> list[str]:
        if len(chunk) <= 2 * _LONG_LINE:
            return self.cut(chunk)
        # a long line is cut after a word about every _LONG_LINE characters, and the runs
        # are kept one by one (a run, like any chunk, is never empty, nor are its pieces)
        out: list[str] = []
        start, end = 0, len(chunk)
        while end - start > 2 * _LONG_LINE:
            m = _WORD_END.search(chunk, start + _LONG_LINE, end)
            if m is None:
                break
            run = chunk[start : m.end()]
            out += self.get(run) or self.cut(run)
            start = m.end()
        if start == 0:
            return self.cut(chunk)
        run = chunk[start:]
        out += self.get(run) or self.cut(run)
        return out

    def cut(self, chunk: str) -> list[str]:
        """The pieces of ``chunk``, kept."""
        if chunk.isascii():
            pieces = _split_ascii(chunk)
        elif _OUT_OF_WIDE(chunk) is None:
            pieces = _split_wide(chunk)
        else:
            pieces = _split_mixed(chunk)
        if self.chars + len(chunk) > _CHUNK_CACHE_CHARS:
            self.clear()
        self[chunk] = pieces
        self.chars += len(chunk)
        return pieces

    def clear(self) -> None:
        super().clear()
        self.chars = 0


_chunk_cache = _ChunkCache()


def split_text(text: str) -> list[str]:
    """``text`` cut by ``PATTERN`` alone: the pieces the estimate prices, in order.

    The same list as ``regex.findall(PATTERN, text)``, made faster: the text is cut into
    lines (and long lines into runs of about 256 characters) where a piece always ends;
    a run of ASCII, Latin, Greek, Cyrillic, CJK ... (``_WIDE_BLOCKS``) is cut by the stdlib
    ``re`` (the same pattern spelled for ``re``; ASCII by the C extension where built); the
    pieces of each run are cached, so text seen before (a conversation sent again with one
    more turn) is cut by dictionary lookups.

    >>> from tokenflex.tokenizers.estimate import split_text
    >>> split_text("Hello, world! It's 2024.")
    ['Hello', ',', ' world', '!', " It's", ' ', '202', '4', '.']
    """
    # the chunks' lists of pieces joined by list += in C; the first joins a new list
    return reduce(iadd, map(_chunk_cache.__getitem__, _CHUNKS(text)), [])


def _greedy(piece: str, table: frozenset[str]) -> tuple[int, int]:
    """Greedy longest-match cut of ``piece`` into table entries: (parts, unmatched chars)."""
    i, n, parts, unmatched = 0, len(piece), 0, 0
    while i < n:
        j = min(n, i + _GREEDY_MAX)
        while j > i + 1 and piece[i:j] not in table:
            j -= 1
        if j == i + 1 and piece[i] not in table:
            unmatched += 1
        i = j
        parts += 1
    return parts, unmatched


def piece_key(piece: str, table: frozenset[str]) -> tuple[str, int, int]:
    """The shape of a piece that is not in the table: ``(key, units, cap)``.

    Statistics are kept per key for up to ``cap`` units (characters, digits or greedy
    parts); a longer piece is priced as ``units / cap`` pieces of the capped key.
    """
    first = piece[0]
    if piece.isspace():
        newline = "\n" in piece or "\r" in piece
        parts, _ = _greedy(piece, table)
        return f"ws|{int(newline)}|{min(parts, 4)}", parts, 4
    if first.isdigit():
        return f"num|{int(piece.isascii())}|{len(piece)}", len(piece), 3
    letters = piece[1:] if not first.isalpha() and len(piece) > 1 else piece
    if letters[:1].isalpha() or letters[1:2].isalpha():  # a letter in the first two
        lead = "" if letters is piece else ("s" if first == " " else "p")
        case = "U" if letters[:1].isupper() else "l"
        if letters.isupper() and len(letters) > 1:
            case = "C"
        if letters.isascii():
            if lead == "":
                alt = (" " + piece) in table
            elif lead == "s":
                alt = (
                    letters in table
                    or (" " + letters.lower()) in table
                    or (" " + letters.capitalize()) in table
                )
            else:
                alt = (" " + letters) in table
            parts, _ = _greedy(piece, table)
            size = min(len(letters), 12) // 3
            return f"wg|{lead}|{case}|{int(alt)}|{min(parts, 6)}|{size}", parts, 6
        script = script_of(next(ch for ch in letters if not ch.isascii()))
        parts, unmatched = _greedy(piece, table)
        share = min(unmatched * 4 // max(parts, 1), 4)
        return f"wn|{script}|{share}|{min(parts, 8)}", parts, 8
    script = "a" if piece.isascii() else script_of(next(ch for ch in piece if not ch.isascii()))
    parts, _ = _greedy(piece, table)
    return f"p|{script}|{min(len(piece), 12) // 4}|{min(parts, 8)}", parts, 8


def coarse_key(key: str) -> str:
    """The back-off key: the same shape without its last (length) field."""
    return key.rsplit("|", 1)[0]


@dataclass(frozen=True)
class _Model:
    table: frozenset[str]
    ordered: tuple[str, ...]  # the table sorted: the family vocabulary's bits index it
    high: dict[str, tuple[float, float]]  # key -> (mean, variance) of max(o200k, cl100k)
    low: dict[str, tuple[float, float]]  # key -> (mean, variance) of min(o200k, cl100k)
    margin: float  # multiplies the means of the pieces not in the table
    script_margin: float  # extra on non-ASCII pieces
    z: float  # standard deviations of slack
    low_factor: float  # scales the low estimate (cl100k may merge o200k's pieces)


_model: _Model | None = None
_lock = threading.Lock()
_PIECE_CACHE_MAX = 100_000


class _PieceCache(dict[str, tuple[float, float, float, float, float]]):
    """The statistics of every piece out of the table priced so far: a lookup of a piece
    not in it prices the piece (``map(cache.__getitem__, pieces)`` runs in C for the
    pieces priced before)."""

    def __missing__(self, piece: str) -> tuple[float, float, float, float, float]:
        return _piece_stats(piece, _load())


_piece_cache = _PieceCache()


def clear_caches() -> None:
    """Empty the estimator's caches (the pieces of the chunks cut so far and the statistics
    of the pieces priced so far), so the next estimate runs cold, as on text never seen:
    for benchmarks, and to give the memory back."""
    _chunk_cache.clear()
    _piece_cache.clear()


def _load() -> _Model:
    global _model
    model = _model
    if model is not None:  # loaded: no lock (callers price pieces one by one)
        return model
    with _lock:
        if _model is None:
            raw = resources.files("tokenflex").joinpath("data", _DATA_FILE).read_bytes()
            data = json.loads(gzip.decompress(raw))
            if data.get("pattern") != PATTERN:
                raise ConfigError(
                    f"{_DATA_FILE} was fitted with another piece pattern; "
                    "re-run scripts/bench_estimator.py --fit"
                )

            def stats(d: dict[str, list[float]]) -> dict[str, tuple[float, float]]:
                return {k: (v[0], v[1]) for k, v in d.items()}

            # the file keeps the table sorted (sorting sorted strings is one cheap pass)
            ordered = tuple(sorted(data["table"]))
            _model = _Model(
                table=frozenset(ordered),
                ordered=ordered,
                high=stats(data["high"]),
                low=stats(data["low"]),
                margin=float(data["params"]["margin"]),
                script_margin=float(data["params"]["script_margin"]),
                z=float(data["params"]["z"]),
                low_factor=float(data["params"]["low_factor"]),
            )
    return _model


def _lookup(
    stats: dict[str, tuple[float, float]], key: str, units: int, cap: int, *, scale: bool
) -> tuple[float, float]:
    st = stats.get(key)
    if st is None:
        head = coarse_key(key)
        length = key[len(head) + 1 :]
        st = stats.get(head)
        if st is None:  # a shape never seen: a token per unit (high), one token (low)
            return (float(units), float(units)) if scale else (1.0, 0.0)
        if scale and length.isdigit():
            # The back-off key averages the shape over every length, mostly short ones:
            # a word of 8+ parts (" zachodniosłowiańskie") would be priced like a word of
            # three. Price it no lower than the longest length seen of its shape, per part.
            for seen in range(int(length) - 1, 0, -1):
                longer = stats.get(f"{head}|{seen}")
                if longer is not None:
                    times = units / seen
                    if longer[0] * times > st[0] * max(1.0, units / cap):
                        return longer[0] * times, longer[1] * times
                    break
    mean, var = st
    if scale and units > cap:
        times = units / cap
        mean, var = mean * times, var * times
    return mean, var


def _piece_stats(piece: str, model: _Model) -> tuple[float, float, float, float, float]:
    """(high mean, high variance, low mean, low variance, top) of a piece not in the
    table; ``top`` is the high mean raised, for a piece with characters out of
    ``_FITTED``, to what its ceiling needs once the estimate's margin is applied (the
    OpenAI encodings' tokens for its characters one by one)."""
    hit = _piece_cache.get(piece)
    if hit is not None:
        return hit
    key, units, cap = piece_key(piece, model.table)
    hm, hv = _lookup(model.high, key, units, cap, scale=True)
    # Long pieces are not scaled down for the low bound: BPE merges long runs (of spaces,
    # dashes, digits' neighbours) into few tokens, so a long piece may cost no more than
    # a capped one.
    lm, lv = _lookup(model.low, key, units, cap, scale=False)
    top = hm
    if not piece.isascii():
        hm *= 1 + model.script_margin
        top = hm
        if _OUT_OF_FITTED(piece):
            top = max(hm, _ceiling(piece, family_char_tokens("openai")) / (1 + model.margin))
        elif ESTIMATE_DEAR:  # the dear letters of the fitted alphabets (DEAR_LETTERS)
            top = hm + ESTIMATE_DEAR * dear_letters("openai")(piece) / (1 + model.margin)
    out = (hm, hv, lm, lv, top)
    if len(_piece_cache) >= _PIECE_CACHE_MAX:
        _piece_cache.clear()
    _piece_cache[piece] = out
    return out


def _count_cut(text: str, table: frozenset[str]) -> tuple[int, list[str]]:
    """(how many pieces of ``text`` are in ``table``, the others in text order)."""
    pieces = split_text(text)
    rest = list(filterfalse(table.__contains__, pieces))
    return len(pieces) - len(rest), rest


# The count of ASCII text: the C scanner of ``_fastcut`` cuts the whole text and looks its
# pieces up in a C hash set of the table's ASCII entries, making a str only of the pieces
# out of the table (no chunk cache: cold, it is faster than the cached cut is warm).
# Without the extension, _count_cut. Chosen once, here.
_count_ascii: Callable[[str, frozenset[str]], tuple[int, list[str]]]
try:
    from tokenflex.tokenizers._fastcut import count as _count_ascii
except ImportError:  # built without a C compiler
    _count_ascii = _count_cut


def _sums(text: str) -> tuple[_Model, int, float, float, float, float]:
    """(model, table pieces, sums of the others' top, high variance, low mean, low
    variance)."""
    model = _load()
    hm = hv = lm = lv = 0.0
    # Most pieces are table entries; the sums run over the others in text order (the
    # same additions in the same order as one loop over all pieces: the same floats).
    if text.isascii():
        exact, rest = _count_ascii(text, model.table)
    else:
        exact, rest = _count_cut(text, model.table)
    for _, b, c, d, top in map(_piece_cache.__getitem__, rest):
        hm += top
        hv += b
        lm += c
        lv += d
    return model, exact, hm, hv, lm, lv


def estimate_tokens(text: str) -> int:
    """A conservative token count for ``text`` without the model's tokenizer.

    At least the ``o200k_base`` and the ``cl100k_base`` count for all but well under 1%
    of real texts (``docs/estimator.md`` has the measured table); it overcounts instead,
    most where the two encodings differ most (CJK and other scripts, where cl100k needs
    more tokens). Use an exact tokenizer when one is available.

    Args:
        text: Any string (lone surrogates are fine).

    Returns:
        0 for the empty string, otherwise at least 1.

    >>> from tokenflex.tokenizers.estimate import estimate_tokens
    >>> estimate_tokens("")
    0
    >>> estimate_tokens("Hello, world!")
    4
    """
    if not text:
        return 0
    model, exact, hm, hv, _, _ = _sums(text)
    if hm == 0.0:
        return exact
    return exact + math.ceil(hm * (1 + model.margin) + model.z * math.sqrt(hv) - 1e-9)


def estimate_tokens_range(text: str) -> tuple[int, int]:
    """A ``(low, high)`` range for the token count of ``text`` without a tokenizer.

    ``high`` is :func:`estimate_tokens`; ``low`` is built the other way round (means of
    ``min(o200k, cl100k)``, scaled down, less the slack): at most both counts for all
    but about 1% of real texts.

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
    model, exact, hm, hv, lm, lv = _sums(text)
    high = exact
    if hm:
        high += math.ceil(hm * (1 + model.margin) + model.z * math.sqrt(hv) - 1e-9)
    low = math.floor(model.low_factor * (exact + lm) - model.z * math.sqrt(lv) + 1e-9)
    return max(1, min(low, high)), max(1, high)


class EstimatorTokenizer:
    """The ``estimate`` tokenizer: :func:`estimate_tokens` behind the Tokenizer protocol.

    ``exact`` is False: counts are conservative estimates (upper bounds in practice),
    never the model's real tokenization. ``factor`` scales them up for tokenizers known
    to need more tokens than the OpenAI encodings (``"estimate:1.5"``: Claude 3 to 4.6);
    ``family`` uses that family's fitted bound instead (``"estimate:qwen2"``), times
    ``factor`` if given (``"estimate:all:1.6"``: Claude Opus 4.7 and later).
    """

    exact = False

    def __init__(self, factor: float = 1.0, *, family: str | None = None) -> None:
        if not math.isfinite(factor) or factor < 1.0:
            raise ConfigError(
                f"estimate factor must be a number >= 1, got {factor!r}; "
                'use "estimate" or e.g. "estimate:1.3"'
            )
        self.factor = factor
        self.family = family
        self._family = family_estimator(family) if family is not None else None
        if family is not None:
            self.name = f"estimate:{family}" + ("" if factor == 1.0 else f":{factor:g}")
        else:
            self.name = "estimate" if factor == 1.0 else f"estimate:{factor:g}"

    def count(self, text: str) -> int:
        """Estimated tokens in ``text`` (an upper bound in practice)."""
        if self._family is not None:
            n = self._family.count(text)
            return n if self.factor == 1.0 else math.ceil(n * self.factor - 1e-9)
        n = estimate_tokens(text)
        return n if self.factor == 1.0 else math.ceil(n * self.factor - 1e-9)

    def count_range(self, text: str) -> tuple[int, int]:
        """``(low, high)`` estimate for ``text``; see :func:`estimate_tokens_range`."""
        low, high = estimate_tokens_range(text)
        if self._family is not None:
            return min(low, high), max(high, self.count(text))
        if self.factor == 1.0:
            return low, high
        return low, math.ceil(high * self.factor - 1e-9)

    def __repr__(self) -> str:
        if self.family is not None:
            times = "" if self.factor == 1.0 else f"{self.factor:g}, "
            return f"EstimatorTokenizer({times}family={self.family!r})"
        args = "" if self.factor == 1.0 else f"{self.factor:g}"
        return f"EstimatorTokenizer({args})"


# ---------------------------------------------------------------- family bounds
#
# Other families cut text differently (Qwen, Gemma, tekken and the SentencePiece models
# split numbers into single digits; GPT-2 and SentencePiece vocabularies have few
# whitespace-run tokens; byte-fallback vocabularies pay a token per byte of an emoji or
# a box-drawing character). A family's bound is linear in a few features of each piece:
# the piece's OpenAI-shaped cost (1 for a table piece, the high mean otherwise) in its
# class slot, and raw counts (digits, whitespace characters, symbol bytes, ...). Weights
# per family are fitted by a linear program (``scripts/bench_families.py --fit``)
# so that no tuning text of any kind is undercounted, at the least total overcount.
# The slack grows with the square root of the summed variance, where a piece seen n
# times adds n * n times its variance: the same piece always costs the same number of
# tokens, so its error repeats instead of averaging out (a catalog that repeats one
# word the shape prices low is under by that word's error times n).
# An indentation (the spaces after a line break, but the one the next word takes) is a
# whitespace piece of its own in the OpenAI split, but some vocabularies have tokens for a
# line break with the spaces after it (command-r: up to 67 spaces in one token, so the
# indentation adds none): it is priced by its own two features instead of the whitespace
# ones, what the family's real tokenizers add for it (data/family_runs.json) and a count.

FEATURES = (
    "ascii-word",  # ASCII word pieces that are one token in both OpenAI encodings
    "ascii-rare-word",  # OpenAI-shaped cost of the other ASCII word pieces
    "ascii-punct",  # ASCII punctuation pieces that are one token in both encodings
    "ascii-rare-punct",  # OpenAI-shaped cost of the other ASCII punctuation pieces
    "whitespace",  # ... of whitespace pieces
    "number",  # ... of digit pieces (up to 3 digits)
    "latin-cyrillic",  # ... of Latin-extended, Greek, Cyrillic, Armenian, Georgian words
    "cjk",  # ... of Han, kana, Hangul words
    "other-script",  # ... of other scripts' words (Arabic, Hebrew, Indic, Thai, ...)
    "symbol",  # ... of non-ASCII symbol pieces (emoji, box drawing, CJK punctuation)
    "digits",  # digit characters
    "space-chars",  # characters of whitespace pieces
    "symbol-bytes",  # UTF-8 bytes of non-ASCII symbol pieces
    "script-chars",  # non-ASCII letters (byte fallback for rare characters)
    "pieces",  # one per piece
    "rare-punct-chars",  # characters of the rare ASCII punctuation pieces
    "rare-word-chars",  # letters of the rare ASCII word pieces
    "caps-chars",  # letters of all-caps ASCII words ("WARRANTY": vocabularies differ most)
    "family-single",  # table pieces that are one token in the family's own vocabulary too
    "symbol-tokens",  # tokens the family spends on a symbol piece's characters one by one
    "indents",  # indentation pieces (spaces after a line break), instead of the above
    "indent-tokens",  # tokens the family's real tokenizers add for those indentations
    "table-tokens",  # tokens the family spends on a table piece it has no token for
)
_N_FEATURES = len(FEATURES)
_CLASS_OF_SCRIPT = {"x": 6, "g": 6, "m": 6, "G": 6, "r": 6, "A": 6, "J": 6}
_CLASS_OF_SCRIPT.update({"k": 7, "z": 7, "K": 7, "f": 7})
_Term = tuple[int, float]  # (index in FEATURES, value): a piece's feature that is not zero
_NO_SYMBOLS: Mapping[str, int] = {}  # no character measured: a token per UTF-8 byte
_TABLE_TOKENS = len(FEATURES) - 1  # index of "table-tokens", the last feature


def _sparse_features(
    piece: str,
    common: bool,
    model: _Model,
    symbols: Mapping[str, int] = _NO_SYMBOLS,
    table_tokens: Mapping[str, int] = _NO_SYMBOLS,
) -> tuple[list[_Term], float]:
    """The non-zero features of a piece that is not a family single, in ``FEATURES``
    order, and its cost's variance; ``common``: the piece is in the table; ``symbols``:
    the tokens the family's vocabulary spends on each non-ASCII character it was measured
    on (see :func:`family_symbol_tokens`); ``table_tokens``: the tokens it spends on each
    table piece that is not one of its singles (see :func:`family_table_tokens`), given
    only for a family whose bound gives the "table-tokens" feature a weight (the others
    price such a piece by its shape, as they were fitted).

    Sparse, because a family's cost is summed over these few terms instead of all of
    them (the zeros add nothing to a float sum, plain or compensated: the same cost).
    """
    if common:
        # a table piece the family splits, for a family whose bound weighs what its
        # tokenizers spend on it: that (measured), one piece; its shape says no more
        tokens = table_tokens.get(piece)
        if tokens:
            return [(14, 1.0), (_TABLE_TOKENS, float(tokens))], 0.0
    return _shape_features(piece, common, model, symbols)


def _shape_features(
    piece: str, common: bool, model: _Model, symbols: Mapping[str, int]
) -> tuple[list[_Term], float]:
    """:func:`_sparse_features` but for the measured table tokens: the piece's shape."""
    if common:
        cost, var = 1.0, 0.0
    else:
        cost, var = _piece_stats(piece, model)[:2]
        cost *= 1 + model.margin
    first = piece[0]
    if piece.isspace():
        return [(4, cost), (11, len(piece)), (14, 1.0)], var
    if first.isdigit():
        return [(5, cost), (10, sum(map(str.isdigit, piece))), (14, 1.0)], var
    if piece[:1].isalpha() or piece[1:2].isalpha():
        if piece.isascii():
            if common:
                terms: list[_Term] = [(0, 1.0), (14, 1.0)]
            else:
                terms = [(1, cost), (14, 1.0), (16, sum(map(str.isalpha, piece)))]
            if piece.isupper() and len(piece) > 2:
                terms.append((17, sum(map(str.isalpha, piece))))
            return terms, var
        ch = next(ch for ch in piece if not ch.isascii())
        cls = _CLASS_OF_SCRIPT.get(script_of(ch), 8)
        ascii_chars = sum(map(str.isascii, piece))
        return [(cls, cost), (13, len(piece) - ascii_chars), (14, 1.0)], var
    if piece.isascii():
        if common:
            return [(2, 1.0), (14, 1.0)], var
        return [(3, cost), (14, 1.0), (15, len(piece))], var
    # UTF-8 bytes of the non-ASCII characters (an ASCII character is one byte)
    utf8 = len(piece.encode("utf-8", "surrogatepass")) - sum(map(str.isascii, piece))
    # ... and the tokens the family spends on the piece's characters one by one: one for
    # a symbol in its vocabulary, two to four for one it lacks (Braille, a newer emoji: a
    # token per byte or two), a token per byte for a character never measured (byte
    # fallback, or byte-level BPE without the merge), one for an ASCII character, and a
    # leading space with the symbol after it as the family spends on the two (" —" is
    # one token in most vocabularies, " 〖" three in GPT-2's). The fit keeps this
    # feature's weight at least 1: a run of one character, or a progress bar of blocks
    # and underscores, is never priced below what the family spends on it one character
    # at a time (merges only lower that), whatever its Unicode block's average.
    tokens, rest = 0, piece
    if piece[0] == " " and len(piece) > 1:
        spaced = symbols.get(piece[:2])
        if spaced is not None:
            tokens, rest = spaced, piece[2:]
    for ch in rest:
        if ch.isascii():
            tokens += 1
        else:
            tokens += symbols.get(ch) or len(ch.encode("utf-8", "surrogatepass"))
    return [(9, cost), (12, utf8), (14, 1.0), (19, tokens)], var


_SINGLE_TERMS: list[_Term] = [(14, 1.0), (18, 1.0)]  # a family single: one piece, one token


def piece_features(
    piece: str,
    singles: frozenset[str] = frozenset(),
    symbols: Mapping[str, int] | None = None,
    table_tokens: Mapping[str, int] | None = None,
) -> tuple[list[float], float]:
    """The features of one piece (see ``FEATURES``) and its cost's variance; ``singles``
    are the table pieces and symbol characters that are one token in the family's
    vocabulary (see :func:`family_singles`), ``symbols`` the tokens it spends on each
    symbol character (see :func:`family_symbol_tokens`; none: a token per UTF-8 byte),
    ``table_tokens`` on each table piece that is not a single (see
    :func:`family_table_tokens`; none: such a piece is priced by its shape)."""
    model = _load()
    common = piece in model.table
    if common and piece in singles:
        terms, var = _SINGLE_TERMS, 0.0
    else:
        terms, var = _sparse_features(
            piece, common, model, symbols or _NO_SYMBOLS, table_tokens or _NO_SYMBOLS
        )
    x = [0.0] * _N_FEATURES
    for i, value in terms:
        x[i] = value
    return x, var


def text_features(
    text: str,
    singles: frozenset[str] = frozenset(),
    symbols: Mapping[str, int] | None = None,
    indents: tuple[int, ...] = (),
    table_tokens: Mapping[str, int] | None = None,
) -> tuple[list[float], float]:
    """Summed piece features of ``text`` and the summed variance (for fitting); an
    indentation piece has its indentation features instead of its own where ``indents``
    (see :func:`family_indent_tokens`) covers its length. The variance is every piece's,
    indentations' too."""
    total = [0.0] * _N_FEATURES
    var = 0.0
    for piece, n in Counter(_SPLIT(text)).items():
        x, v = piece_features(piece, singles, symbols, table_tokens)
        for i, value in enumerate(x):
            total[i] += n * value
        var += n * n * v  # a repeated piece repeats its error
    if indents:
        for piece, n in Counter(_indents(text, len(indents) - 1)).items():
            x, _ = piece_features(piece, singles, symbols, table_tokens)
            for i, value in enumerate(x):
                total[i] -= n * value
            for i, value in _indent_terms(piece, indents):
                total[i] += n * value
    return total, var


def _indent_pattern(max_indent: int) -> re.Pattern[str]:
    """The indentation pieces of a text, up to ``max_indent`` spaces: the spaces after a
    line break and before a printable ASCII character, but the last one. ``PATTERN`` cuts
    them as one whitespace piece whatever comes next: a letter or punctuation takes the
    last space, before a digit it is a piece of its own; the piece before ends at the line
    break (a newline run, or punctuation with the line breaks after it). The line break is
    matched, not looked behind for, and the spaces are the group ``findall`` returns: ``re``
    then only tries where a line break is, twice as fast."""
    return re.compile(r"[\r\n]( {1," + str(max_indent) + r"})(?= [!-~])")


_indent_patterns: dict[int, Callable[[str], list[str]]] = {}


def _indents(text: str, max_indent: int) -> list[str]:
    """The indentation pieces of ``text`` (see :func:`_indent_pattern`), in order."""
    find = _indent_patterns.get(max_indent)
    if find is None:
        find = _indent_patterns[max_indent] = _indent_pattern(max_indent).findall
    return find(text)


def _indent_terms(piece: str, indents: tuple[int, ...]) -> list[_Term]:
    """The features of an indentation piece: one, and the tokens the family adds for it."""
    return [(20, 1.0), (21, float(indents[len(piece)]))]


_VOCAB_FILE = "family_vocab.json.gz"
_singles: dict[str, frozenset[str]] = {}
_vocab: dict[str, Any] | None = None  # the family vocabulary file, once read and checked
# a byte's eight bits, lowest first, as eight bytes 0 or 1 (for itertools.compress)
_BITS = [bytes((byte >> k) & 1 for k in range(8)) for byte in range(256)]
_FLIP = bytes.maketrans(b"\x00\x01", b"\x01\x00")


def _digest(ordered: tuple[str, ...] | list[str]) -> str:
    return hashlib.sha1("\n".join(ordered).encode("utf-8", "surrogatepass")).hexdigest()


def table_digest(table: frozenset[str]) -> str:
    """A digest of the table, which the family vocabulary file's bits are indexed by."""
    return _digest(sorted(table))


def _table_data(name: str, option: str) -> dict[str, Any]:
    """A gzipped JSON data file measured on the estimator's table, checked to be for the
    table shipped (its ``"table"`` digest); ``option``: the ``bench_families.py`` option
    that rewrites it."""
    raw = resources.files("tokenflex").joinpath("data", name).read_bytes()
    data: dict[str, Any] = json.loads(gzip.decompress(raw))
    if data.get("table") != _digest(_load().ordered):
        raise ConfigError(
            f"{name} was measured on another estimator table; "
            f"re-run scripts/bench_families.py {option}"
        )
    return data


def _vocabulary() -> dict[str, Any]:
    global _vocab
    vocab = _vocab
    if vocab is None:
        vocab = _vocab = _table_data(_VOCAB_FILE, "--vocab")
    return vocab


def _flags(bits: str) -> bytes:
    """Base64 of bits, lowest first, as one byte 0 or 1 per bit (for itertools.compress)."""
    return b"".join([_BITS[byte] for byte in base64.b64decode(bits)])


def _family_flags(family: str) -> bytes:
    """One byte per entry of the sorted table: 1 where it is a single for ``family``
    (empty for a family not in the file)."""
    return _flags(_vocabulary()["families"].get(family, ""))


_table_chars: list[tuple[int, str]] | None = None  # (index, entry): one non-ASCII character
_symbol_tokens: dict[str, dict[str, int]] = {}


def family_symbol_tokens(family: str) -> Mapping[str, int]:
    """The tokens ``family``'s vocabulary spends on each non-ASCII character it was
    measured on, alone after a newline (for a family of several tokenizers, the most
    any one spends): the punctuation and symbol characters the file lists (emoji,
    Braille, arrows, ...; kept as runs of code points, first to last, with a digit per
    character and family), and the table's one-character entries that are singles (a
    variation selector, a combining mark: one). Keyed by the character, and by a space
    and the character for what the family spends on the two after a word (" ★").
    Empty for a family not in the file."""
    global _table_chars
    hit = _symbol_tokens.get(family)
    if hit is not None:
        return hit
    symbols = _vocabulary()["symbols"]
    chars = "".join(chr(c) for first, last in symbols["ranges"] for c in range(first, last + 1))
    alone = list(map(int, symbols["tokens"].get(family, "")))
    out = dict(zip(chars, alone, strict=False))
    # " ★": stored as the difference from "★", plus 2
    shift = map(int, symbols["spaced"].get(family, ""))
    out.update((" " + ch, n + d - 2) for ch, n, d in zip(chars, alone, shift, strict=False))
    if _table_chars is None:
        ordered = _load().ordered
        _table_chars = [(i, p) for i, p in enumerate(ordered) if len(p) == 1 and p > "\x7f"]
    flags = _family_flags(family)
    out.update((p, 1) for i, p in _table_chars if flags and flags[i])
    with _lock:
        _symbol_tokens[family] = out
    return out


_char_tokens: dict[str, dict[str, int]] = {}


def family_char_tokens(family: str) -> Mapping[str, int]:
    """The tokens ``family``'s vocabulary spends on each non-ASCII character measured,
    alone after a newline (the most any of its tokenizers spends): the letters, marks
    and digits of every script (but the large blocks of Han, Hangul, Yi, Tangut,
    hieroglyphs and cuneiform) and the symbol characters of :func:`family_symbol_tokens`.
    The estimate's ceiling for a piece out of the scripts it was fitted on; empty for a
    family not in the file (every character then costs its UTF-8 bytes)."""
    hit = _char_tokens.get(family)
    if hit is not None:
        return hit
    letters = _vocabulary().get("letters", {"ranges": [], "tokens": {}})
    chars = "".join(chr(c) for first, last in letters["ranges"] for c in range(first, last + 1))
    out = dict(zip(chars, map(int, letters["tokens"].get(family, "")), strict=False))
    out.update((ch, n) for ch, n in family_symbol_tokens(family).items() if len(ch) == 1)
    with _lock:
        _char_tokens[family] = out
    return out


_dear: dict[str, Callable[[str], int]] = {}


def dear_letters(family: str) -> Callable[[str], int]:
    """The extra tokens of the dear letters in a piece (see :data:`DEAR_LETTERS`): the
    tokens beyond one ``family`` spends on each alone. One regex search, and a lookup
    per dear letter found (real words hold few).

    >>> from tokenflex.tokenizers.estimate import dear_letters
    >>> dear_letters("openai")("hello"), dear_letters("openai")("ϡϡ") > 0
    (0, True)
    """
    hit = _dear.get(family)
    if hit is not None:
        return hit
    extra = {
        c: n - 1
        for c, n in family_char_tokens(family).items()
        if n > 1 and _ALPHABET_CHAR(c) and unicodedata.category(c)[0] in "LM"
    }
    find = re.compile("[" + re.escape("".join(sorted(extra))) + "]").findall if extra else None

    def count(piece: str) -> int:
        return sum(map(extra.__getitem__, find(piece))) if find is not None else 0

    with _lock:
        _dear[family] = count
    return count


def _family_symbols(family: str) -> frozenset[str]:
    """The non-ASCII characters that are one token in ``family``'s vocabulary."""
    tokens = family_symbol_tokens(family)
    return frozenset(ch for ch, n in tokens.items() if n == 1 and len(ch) == 1)


def family_singles(family: str) -> frozenset[str]:
    """The table pieces, and the non-ASCII symbol characters (punctuation, symbols,
    emoji), that are one token in ``family``'s real vocabulary (measured per reference
    tokenizer by ``scripts/bench_families.py --vocab``; for a family of several
    tokenizers, in every one). Empty for a family not in the file."""
    hit = _singles.get(family)
    if hit is not None:
        return hit
    out = frozenset(compress(_load().ordered, _family_flags(family))) | _family_symbols(family)
    with _lock:
        _singles[family] = out
    return out


_TABLE_TOKENS_FILE = "family_table_tokens.json.gz"
_table_tokens_data: dict[str, Any] | None = None  # the file, once read and checked
_table_tokens: dict[str, dict[str, int]] = {}


def _table_tokens_file() -> dict[str, Any]:
    global _table_tokens_data
    data = _table_tokens_data
    if data is None:
        data = _table_tokens_data = _table_data(_TABLE_TOKENS_FILE, "--table-tokens")
    return data


def _not_singles(family: str) -> Iterable[str]:
    """The sorted table's entries that are not singles for ``family`` (all of them for a
    family not in the vocabulary file), in the table's order."""
    ordered = _load().ordered
    flags = _family_flags(family)
    return compress(ordered, flags.translate(_FLIP)) if flags else ordered


def family_table_tokens(family: str) -> Mapping[str, int]:
    """The tokens ``family``'s real tokenizers spend on each table entry that is not one
    of its singles (the most any of them spends, at most 255; measured by
    ``scripts/bench_families.py --table-tokens``: an entry with a leading space after a
    word, any other after a line break). Keyed by the entry; empty for a family not in
    the file."""
    hit = _table_tokens.get(family)
    if hit is not None:
        return hit
    stored = _table_tokens_file()["families"].get(family)
    out: dict[str, int] = {}
    if stored is not None:
        names = list(_not_singles(family))
        counts = base64.b64decode(stored)
        if len(names) != len(counts):
            raise ConfigError(
                f"{_TABLE_TOKENS_FILE} does not match {_VOCAB_FILE}'s singles for "
                f"{family!r}; re-run scripts/bench_families.py --table-tokens"
            )
        out = dict(zip(names, counts, strict=True))
    with _lock:
        _table_tokens[family] = out
    return out


class _Costs(dict[str, tuple[float, float]]):
    """A family's cost and variance of every piece priced so far: a lookup of a piece not
    in it prices the piece."""

    __slots__ = ("_price",)

    def __init__(self, price: Callable[[str], tuple[float, float]]) -> None:
        super().__init__()
        self._price = price

    def __missing__(self, piece: str) -> tuple[float, float]:
        return self._price(piece)


_RUNS_FILE = "family_runs.json"
_runs: dict[str, Any] | None = None


def _runs_data() -> dict[str, Any]:
    global _runs
    data = _runs
    if data is None:
        raw = resources.files("tokenflex").joinpath("data", _RUNS_FILE).read_text("utf-8")
        data = _runs = json.loads(raw)
    return data


def family_run_lines(family: str) -> tuple[int, Mapping[str, tuple[float, float]]]:
    """``(min_run, lines)``: a run of ``n >= min_run`` of one ASCII punctuation character
    costs at most ``a + b * n`` tokens in ``family``'s real tokenizers, ``lines[ch] ==
    (a, b)`` (measured by ``scripts/bench_families.py --runs``). Empty for a family not in
    the file."""
    data = _runs_data()
    lines = data["lines"].get(family, {})
    return int(data["min_run"]), {ch: (float(a), float(b)) for ch, (a, b) in lines.items()}


def family_indent_tokens(family: str) -> tuple[int, ...]:
    """The tokens ``family``'s real tokenizers add for an indentation piece of ``n`` spaces,
    indexed by ``n`` (0 to the longest measured; see :func:`_indent_pattern`): the most any
    of them adds after a line break (alone, after a colon, a blank line, ``\\r\\n``) and
    before a word or punctuation (measured by ``scripts/bench_families.py --runs``). Empty
    for a family not in the file: its indentations are priced as any whitespace piece."""
    return tuple(int(n) for n in _runs_data().get("indents", {}).get(family, ()))


_JOINS_FILE = "family_joins.json"
_joins: dict[str, Callable[[str], int] | None] = {}

JOIN_MARGIN = 1.05
"""A piece of a family's joins block costs at least this times its join floor
(:func:`family_join_floor`): the floor is a lower bound, and random letters cost about
1.2 times it. The smallest of 1, 1.05, 1.1, ... with no random Thai text under for
``gemma`` on a tuning draw (20 texts, seed 1; docs/estimator.md, "Random Thai")."""


def join_gram(gram: str, first: int, last: int) -> bool:
    """Whether ``gram`` is an n-gram the join floor checks: characters of the block
    ``first``..``last`` (code points), a leading space allowed, the last in the block."""
    return (
        first <= ord(gram[-1]) <= last
        and all(first <= ord(ch) <= last for ch in gram[1:-1])
        and (gram[0] == " " or first <= ord(gram[0]) <= last)
    )


def family_join_floor(family: str) -> Callable[[str], int] | None:
    """The join floor of ``family`` (``None`` for a family not in ``family_joins.json``):
    how many tokens a piece needs at least, counted from the 2- and 3-grams of one block
    that occur inside a token of the family's vocabulary (measured by
    ``scripts/bench_families.py --joins``). Where two or three neighbouring characters of
    the block form no such n-gram, no token can span them, so the tokenizer cuts there;
    the floor is one plus those cuts (a greedy cut into the longest runs whose n-grams all
    occur, which is the fewest such runs). Real words of the block merge, so their floor
    is low; random letters mostly do not (gemma spends a token on each Thai letter alone,
    none is dear, and random Thai words were under its real count by up to 18%).

    >>> from tokenflex.tokenizers.estimate import family_join_floor
    >>> floor = family_join_floor("gemma")
    >>> floor is not None and floor("hello") == 0 and floor(" ฆฆฆฆ") > 1
    True
    """
    if family in _joins:
        return _joins[family]
    raw = resources.files("tokenflex").joinpath("data", _JOINS_FILE).read_text("utf-8")
    data = json.loads(raw)["joins"].get(family)
    floor: Callable[[str], int] | None = None
    if data is not None:
        first, last = int(data["first"]), int(data["last"])
        two, three = data["2"], data["3"]
        pairs = frozenset(two[k : k + 2] for k in range(0, len(two), 2))
        triples = frozenset(three[k : k + 3] for k in range(0, len(three), 3))
        block = re.compile(f"[\\u{first:04x}-\\u{last:04x}]").search

        def floor(piece: str) -> int:
            if block(piece) is None:
                return 0
            cuts, start = 0, 0
            for j in range(1, len(piece)):
                pair = piece[j - 1 : j + 1]
                if join_gram(pair, first, last) and pair not in pairs:
                    cuts, start = cuts + 1, j
                    continue
                if j - 2 >= start:
                    triple = piece[j - 2 : j + 1]
                    if join_gram(triple, first, last) and triple not in triples:
                        cuts, start = cuts + 1, j
            return cuts + 1

    with _lock:
        _joins[family] = floor
    return floor


def _punct_runs(min_run: int) -> re.Pattern[str]:
    """Runs of one ASCII punctuation character, ``min_run`` long or more."""
    return re.compile(r"([!-/:-@\[-`{-~])\1{" + str(min_run - 1) + ",}")


DEAR_LETTERS: dict[str, float] = {
    "openai": 0.5,
    "qwen3.5": 0.5,
    "gemma": 2.0,
    "mistral-spm": 0.25,
    "tekken": 0.5,
    "command-r": 0.5,
    "phi3": 0.5,
}
"""Per family: the share of a *dear* letter's extra tokens added to a piece's cost. A
dear letter is a character of the fitted scripts that the family's vocabulary spends
two or more tokens on alone (measured, :func:`family_char_tokens`): a rare Bengali or
Greek letter a byte-fallback vocabulary spells in bytes. Pieces of the fitted scripts
are priced by the shapes of real words, which merge; random letters do not, and the
dear ones cost their bytes (issue 26: random words in fitted scripts were under for
these families by up to 24%). The share is the smallest of 0.25, 0.5, 1 and 2 with no
random-letter text under on a tuning draw (12 texts in each of 10 fitted alphabets, seed
1; docs/estimator.md, "Random letters"); the families not listed had none under.
``gemma`` keeps Thai random words under with any share (Thai letters cost one token
alone there, so none is dear): 2 leaves only those."""


class FamilyEstimator:
    """The bound for one tokenizer family: per-piece costs cached, summed per text."""

    def __init__(self, family: str, bound: FamilyBound) -> None:
        if len(bound.weights) != _N_FEATURES:
            raise ConfigError(
                f"family bound {family!r} has {len(bound.weights)} weights, expected "
                f"{_N_FEATURES} ({', '.join(FEATURES)}); re-run "
                "scripts/bench_families.py --vocab --fit"
            )
        self.family = family
        self.bound = bound
        self._model = _load()
        # Nearly every table piece is a single for every family (99% for qwen2): the
        # estimator keeps the few others, which are cheap to collect, and prices a single
        # with one precomputed cost (the sum of its two terms, as for any piece). The cost
        # cache is not filled with the singles ahead: a cache of the pieces met is small
        # and looked up faster than one of the 84,374 entries (cold and warm).
        # The others, keyed to the tokens the family spends on each (measured; the
        # "table-tokens" feature), or to 0 where its bound gives that feature no weight
        # (the file not read: such a piece is priced by its shape, as the bound was fit).
        tokens = family_table_tokens(family) if bound.weights[_TABLE_TOKENS] else {}
        self._not_single: Mapping[str, int] = tokens or dict.fromkeys(_not_singles(family), 0)
        self._symbols = family_symbol_tokens(family)
        self._min_run, self._run_lines = family_run_lines(family)
        self._punct_runs = _punct_runs(self._min_run).finditer
        self._indent_tokens = family_indent_tokens(family)
        self._indent_deltas: dict[str, float] = {}
        self._single = (self._weighted(_SINGLE_TERMS), 0.0)
        self._dear_rate = DEAR_LETTERS.get(family, 0.0)
        self._dear = dear_letters(family) if self._dear_rate else None
        self._join_floor = family_join_floor(family)
        self._costs = _Costs(self._cost)

    @property
    def singles(self) -> frozenset[str]:
        """The table pieces and symbol characters that are one token in the family's
        vocabulary too."""
        return family_singles(self.family)

    def _weighted(self, terms: list[_Term]) -> float:
        # sum() over the non-zero terms in FEATURES order: the same float as summing every
        # weighted feature (a zero term leaves a sum, plain or compensated, unchanged)
        weights = self.bound.weights
        return sum([weights[i] * value for i, value in terms])

    def _cost(self, piece: str) -> tuple[float, float]:
        """The cost of a piece not in the cache, and its variance; cached."""
        model = self._model
        common = piece in model.table
        if common and piece not in self._not_single:
            out = self._single
        else:
            terms, var = _sparse_features(piece, common, model, self._symbols, self._not_single)
            cost = self._weighted(terms)
            # (a piece shorter than the shortest run measured has no run to floor)
            if len(piece) >= self._min_run and self._run_lines and piece.isascii():
                cost = max(cost, self._run_floor(piece))
            elif not piece.isascii() and _OUT_OF_FITTED(piece):
                cost = max(cost, _ceiling(piece, family_char_tokens(self.family)))
            elif not piece.isascii():
                if self._dear is not None:
                    cost += self._dear_surcharge(piece)
                if self._join_floor is not None:
                    cost = max(cost, JOIN_MARGIN * self._join_floor(piece))
            out = (cost, var)
        self._costs[piece] = out
        return out

    def _dear_surcharge(self, piece: str) -> float:
        """What the dear letters of ``piece`` add (see :data:`DEAR_LETTERS`)."""
        assert self._dear is not None
        return self._dear_rate * self._dear(piece)

    def _run_floor(self, piece: str) -> float:
        """What the family's tokenizers may spend on the long runs of one punctuation
        character in ``piece`` (a rule of 72 "*", a quote of ">>>>"), the rest of the piece
        a token a character; 0 without such runs. The features price a run by its shape,
        and vocabularies differ most there: SentencePiece spends 17 tokens on 72 "*"."""
        covered = 0
        floor = 0.0
        for run in self._punct_runs(piece):
            a, b = self._run_lines[run.group(1)]
            n = run.end() - run.start()
            floor += a + b * n
            covered += n
        return floor + (len(piece) - covered) if covered else 0.0

    def count(self, text: str) -> int:
        if not text:
            return 0
        costs = self._costs
        if len(costs) >= _PIECE_CACHE_MAX:  # bounded: emptied when full
            costs.clear()
        counts = Counter(split_text(text))
        total = var = 0.0
        # the costs looked up by map in C (a miss prices the piece)
        for n, (cost, cost_var) in zip(
            counts.values(), map(costs.__getitem__, counts), strict=True
        ):
            total += n * cost
            if cost_var:  # zero but for pieces out of the table (adding a zero: the same sum)
                var += n * n * cost_var  # a repeated piece repeats its error
        # an indentation piece: its indentation cost instead of its own (its variance kept)
        if self._indent_tokens and ("\n  " in text or "\r  " in text):
            deltas = self._indent_deltas
            for piece, n in Counter(_indents(text, len(self._indent_tokens) - 1)).items():
                delta = deltas.get(piece)
                if delta is None:
                    delta = self._weighted(_indent_terms(piece, self._indent_tokens))
                    delta = deltas[piece] = delta - costs[piece][0]
                total += n * delta
        bound = self.bound
        raw = total + bound.slack * math.sqrt(var) + bound.constant
        return max(1, math.ceil(raw - 1e-9))


_family_estimators: dict[str, FamilyEstimator] = {}


def family_estimator(
    family: str, bounds: Mapping[str, FamilyBound] = FAMILY_BOUNDS
) -> FamilyEstimator:
    """The (cached) estimator of a family named in ``FAMILY_BOUNDS``."""
    est = _family_estimators.get(family)
    if est is None:
        bound = bounds.get(family)
        if bound is None:
            raise ConfigError(
                f"No estimator bound for tokenizer family {family!r}; known: "
                f"{', '.join(sorted(bounds))} (tokenizer 'estimate:FAMILY'), or a factor "
                "such as 'estimate:1.3'."
            )
        est = FamilyEstimator(family, bound)
        with _lock:
            _family_estimators[family] = est
    return est


def estimate_family(text: str, family: str) -> int:
    """A token count for ``text`` that bounds ``family``'s real tokenizer from above.

    ``family`` is a key of ``FAMILY_BOUNDS`` (``"qwen2"``, ``"gemma"``, ``"tekken"``,
    ``"all"``, ...); ``docs/estimator.md`` has the measured table per family and kind.

    >>> from tokenflex.tokenizers.estimate import estimate_family
    >>> estimate_family("", "qwen2")
    0
    >>> estimate_family("2024-01-31", "qwen2") >= 10
    True
    """
    return family_estimator(family).count(text)
