"""Hugging Face ``tokenizer.json`` files through the ``tokenizers`` package (extra ``[hf]``).

Exact counts for open models, offline: point a model's ``tokenizer`` at
``hf:/path/to/tokenizer.json`` (or the folder that holds it). Special-token strings in the
text (``<|im_start|>``) count as the single tokens they are, as when a server tokenizes a
rendered chat template; no BOS/EOS is added (templates render those themselves).
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import TokenizerUnavailableError

__all__ = ["HFTokenizer"]


class HFTokenizer:
    """Exact counts with a Hugging Face ``tokenizers.Tokenizer``."""

    exact = True

    def __init__(self, tokenizer: Any, name: str) -> None:
        self.name = name
        self.tokenizer = tokenizer

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> HFTokenizer:
        """Load ``tokenizer.json`` (or a folder containing one). Nothing is downloaded.

        Raises:
            TokenizerUnavailableError: the ``tokenizers`` package is missing, or the file
                is missing, unreadable or not a tokenizer.
        """
        path = os.fspath(path)
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise TokenizerUnavailableError(
                f"Tokenizer 'hf:{path}' needs the 'tokenizers' package: "
                "pip install 'tokenflex[hf]'."
            ) from exc
        file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
        if not os.path.isfile(file):
            raise TokenizerUnavailableError(
                f"No tokenizer file at {file!r}. Pass the path of a model's tokenizer.json "
                "(or its folder) as 'hf:PATH'."
            )
        try:
            tok = Tokenizer.from_file(file)
        except Exception as exc:  # the Rust side raises plain Exception subclasses
            raise TokenizerUnavailableError(
                f"Cannot load {file!r} as a Hugging Face tokenizer: {exc}. It must be the "
                "tokenizer.json of a model (not tokenizer_config.json)."
            ) from exc
        return cls(tok, f"hf:{path}")

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, tokens: list[int]) -> str:
        return str(self.tokenizer.decode(tokens, skip_special_tokens=False))

    def __repr__(self) -> str:
        return f"HFTokenizer({self.name!r})"
