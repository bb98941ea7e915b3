"""Mistral's own tokenizers through the ``mistral-common`` package (extra ``[mistral]``).

``mistral:NAME`` loads a tokenizer file that mistral-common ships inside its package, so
nothing is downloaded:

- ``tekken``: ``tekken_240911.json`` (Mistral Nemo, Mistral Small 3.x, Pixtral);
- ``tekken-240718``: ``tekken_240718.json`` (the first Nemo release);
- ``v3``: the SentencePiece v3 vocabulary (mistral:7b v0.3, Mixtral, Codestral 22B);
- ``v7``, ``v2``, ``v1``: the other SentencePiece versions;
- any other NAME is the path of a tekken ``.json`` or SentencePiece ``.model`` file.

Plain text counts as mistral-common encodes one message's text: no BOS, no EOS, and
special-token strings (``"[INST]"``) as ordinary text. :meth:`MistralTokenizer.count_chat`
counts a whole conversation with mistral-common's reference encoder
(``encode_chat_completion``), which is what Mistral's servers tokenize.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InvalidMessagesError, TokenizerUnavailableError
from .base import encodable

__all__ = ["INSTALL_HINT", "NAMED_FILES", "MistralTokenizer", "installed"]

INSTALL_HINT = "pip install 'tokenflex[mistral]'"

NAMED_FILES = {
    "tekken": "tekken_240911.json",
    "tekken-240718": "tekken_240718.json",
    "v7": "mistral_instruct_tokenizer_241114.model.v7",
    "v3": "mistral_instruct_tokenizer_240323.model.v3",
    "v2": "mistral_instruct_tokenizer_240216.model.v2",
    "v1": "tokenizer.model.v1",
}
"""``mistral:NAME`` → the file in mistral-common's ``data`` folder."""


def installed() -> bool:
    """Whether mistral-common can be imported (the ``[mistral]`` extra)."""
    try:
        importlib.import_module("mistral_common")
    except ImportError:
        return False
    return True


def _missing(name: str, exc: ImportError) -> TokenizerUnavailableError:
    return TokenizerUnavailableError(
        f"Tokenizer 'mistral:{name}' needs the mistral-common package with SentencePiece: "
        f"{INSTALL_HINT}. ({exc})"
    )


@functools.lru_cache(maxsize=16)
def _load(name: str) -> tuple[Any, str]:
    """mistral-common's ``MistralTokenizer`` for ``name`` and the file it came from."""
    try:
        import mistral_common
        from mistral_common.tokens.tokenizers.mistral import MistralTokenizer as Reference
    except ImportError as exc:
        raise _missing(name, exc) from exc
    if name in NAMED_FILES:
        file = Path(mistral_common.__file__).parent / "data" / NAMED_FILES[name]
    else:
        file = Path(name).expanduser()
        if not file.is_file():
            raise TokenizerUnavailableError(
                f"Tokenizer 'mistral:{name}': no such file, and not one of the named "
                f"tokenizers {', '.join(NAMED_FILES)}. Pass a name from that list or the path "
                "of a tekken .json or SentencePiece .model file."
            )
    try:
        reference = Reference.from_file(str(file))
    except ImportError as exc:  # sentencepiece is an extra of mistral-common
        raise _missing(name, exc) from exc
    except Exception as exc:  # mistral-common raises plain ValueError/TokenizerException
        raise TokenizerUnavailableError(
            f"mistral-common cannot load {str(file)!r} as a Mistral tokenizer: {exc}. It must "
            "be a tekken .json or SentencePiece .model file from a Mistral model."
        ) from exc
    return reference, str(file)


class MistralTokenizer:
    """Exact counts with a Mistral tokenizer, loaded offline by mistral-common.

    >>> tok = MistralTokenizer("tekken")
    >>> tok.count("Hello, world!")
    4
    """

    exact = True

    def __init__(self, name: str) -> None:
        """Load ``name`` (a key of :data:`NAMED_FILES` or a file path); cached per name.

        Raises:
            TokenizerUnavailableError: mistral-common (or sentencepiece) is not installed,
                or the file is missing or not a Mistral tokenizer.
        """
        self.name = f"mistral:{name}"
        self.reference, self.path = _load(os.fspath(name))
        """mistral-common's ``MistralTokenizer`` (its instruct encoder)."""
        self._raw = self.reference.instruct_tokenizer.tokenizer
        version = self._raw.version
        self.version: str = str(getattr(version, "value", version))
        """The tokenizer version (``v1`` ... ``v13``): how conversations are laid out."""

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no BOS/EOS; special-token strings as text)."""
        if not text:
            return []
        return list(self._raw.encode(encodable(text), bos=False, eos=False))

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def decode(self, tokens: list[int]) -> str:
        return str(self._raw.decode(tokens))

    def count_chat(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None
    ) -> int:
        """Tokens of the prompt mistral-common's reference encoder makes of an OpenAI-style
        conversation (BOS, system prompt placement, tool schemas, calls and results).

        Raises:
            InvalidMessagesError: mistral-common rejects the conversation (it must start
                with a user or system message and end with a user or tool message; tool
                call ids are 9 letters or digits), as Mistral's API would.
        """
        from mistral_common.exceptions import MistralCommonException
        from mistral_common.protocol.instruct.request import ChatCompletionRequest

        try:
            request = ChatCompletionRequest.from_openai(
                messages=[_encodable_values(m) for m in messages],
                tools=[_encodable_values(t) for t in tools] if tools else None,
            )
            return len(self.reference.encode_chat_completion(request).tokens)
        except (MistralCommonException, ValueError, TypeError, KeyError) as exc:
            # pydantic's ValidationError is a ValueError
            raise InvalidMessagesError(
                f"mistral-common cannot encode this conversation for {self.name}: "
                f"{str(exc).strip()[:500]}. Fix the conversation to the shape Mistral "
                "models accept."
            ) from exc

    def __repr__(self) -> str:
        return f"MistralTokenizer({self.name!r}, version={self.version!r})"


def _encodable_values(obj: Any) -> Any:
    """``obj`` (a message or tool: dicts, lists, strings) with every string
    :func:`~tokenflex.tokenizers.base.encodable` (SentencePiece raises on lone surrogates)."""
    if isinstance(obj, str):
        return encodable(obj)
    if isinstance(obj, Mapping):
        return {k: _encodable_values(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_encodable_values(v) for v in obj]
    return obj
