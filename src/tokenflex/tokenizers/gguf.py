"""Exact counts from a GGUF model file's own vocabulary.

The ``llama_cpp`` package (extra ``[gguf]``) loads the vocabulary only — no weights, no
inference context, about 0.1 s for SmolLM2 — and tokenizes exactly as llama.cpp does. We
call its C API bindings directly (``llama_model_load_from_file`` with ``vocab_only``)
rather than ``Llama(vocab_only=True)``, which also builds an inference context and prints
a warning about it on stderr.

Special-token strings (``"<|im_start|>"``) are parsed as the special tokens they name and
no BOS is added: exactly how llama.cpp servers tokenize a prompt rendered from the chat
template (message contents included), and how Hugging Face tokenizers treat added tokens.
That is what makes ``chat_format="template"`` counts equal the server's
``usage.prompt_tokens``. ``encode(text, special=False)`` tokenizes them as plain text.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import weakref
from pathlib import Path
from typing import Any

from ..errors import TokenizerUnavailableError

__all__ = ["GGUFTokenizer"]

_INSTALL_HINT = "pip install 'tokenflex[gguf]' (or pip install llama-cpp-python)"
_backend_lock = threading.Lock()
_backend_ready = False


def _llama_cpp() -> Any:
    global _backend_ready
    try:
        import llama_cpp
    except ImportError as exc:
        raise TokenizerUnavailableError(
            f"GGUF tokenizers need the llama-cpp-python package: {_INSTALL_HINT}. ({exc})"
        ) from exc
    with _backend_lock:
        if not _backend_ready:
            # llama-cpp-python routes llama.cpp's log through this logger and prints what
            # passes its level to stderr; unset, that is every info line of a model load.
            lib_log = logging.getLogger("llama-cpp-python")
            if lib_log.level == logging.NOTSET:
                lib_log.setLevel(logging.ERROR)
            llama_cpp.llama_backend_init()
            _backend_ready = True
    return llama_cpp


class GGUFTokenizer:
    """The exact tokenizer stored in a GGUF model file.

    >>> tok = GGUFTokenizer("SmolLM2-135M-Instruct.Q4_1.gguf")  # doctest: +SKIP
    >>> tok.count("Hello world")  # doctest: +SKIP
    2
    """

    exact = True

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Load the vocabulary of ``path``.

        Raises:
            TokenizerUnavailableError: llama-cpp-python is missing, or the file does not
                exist or is not a GGUF model llama.cpp can read.
        """
        self.path = Path(path)
        self.name = f"gguf:{path}"
        if not self.path.is_file():
            raise TokenizerUnavailableError(
                f"GGUF file {str(self.path)!r} does not exist; pass the path of a .gguf "
                "model file (gguf:PATH)."
            )
        lib = _llama_cpp()
        self._lib = lib
        params = lib.llama_model_default_params()
        params.vocab_only = True
        model = lib.llama_model_load_from_file(os.fsencode(self.path), params)
        if not model:
            raise TokenizerUnavailableError(
                f"llama.cpp could not read {str(self.path)!r} as a GGUF model (corrupt, not "
                "a GGUF file, or an architecture this llama-cpp-python does not know); "
                "upgrade llama-cpp-python or use another tokenizer."
            )
        self._model = model
        # frees the vocabulary when collected or at exit, while llama_cpp still exists
        self._free = weakref.finalize(self, lib.llama_model_free, model)
        self._vocab = lib.llama_model_get_vocab(model)
        self._lock = threading.Lock()
        self.metadata: dict[str, str] = self._read_metadata()
        """GGUF metadata as strings (arrays are not exposed by llama.cpp's API)."""
        self.vocab_size: int = int(lib.llama_vocab_n_tokens(self._vocab))
        self.bos_token = self._token_text(int(lib.llama_vocab_bos(self._vocab)))
        self.eos_token = self._token_text(int(lib.llama_vocab_eos(self._vocab)))
        self.add_bos: bool = bool(lib.llama_vocab_get_add_bos(self._vocab))
        """Whether llama.cpp adds BOS to a plain tokenize call with this vocabulary."""

    def _read_metadata(self) -> dict[str, str]:
        lib, model = self._lib, self._model
        out: dict[str, str] = {}
        size = 256
        buf = ctypes.create_string_buffer(size)
        for i in range(int(lib.llama_model_meta_count(model))):
            parts: list[str] = []
            for getter in (
                lib.llama_model_meta_key_by_index,
                lib.llama_model_meta_val_str_by_index,
            ):
                n = int(getter(model, i, buf, size))
                if n >= size:  # truncated: n is the full length (chat templates are long)
                    size = n + 1
                    buf = ctypes.create_string_buffer(size)
                    n = int(getter(model, i, buf, size))
                parts.append(buf.value.decode("utf-8", errors="replace") if n >= 0 else "")
            out[parts[0]] = parts[1]
        return out

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        text = self._lib.llama_vocab_get_text(self._vocab, token)
        return bytes(text).decode("utf-8", errors="replace") if text else ""

    def encode(self, text: str, *, special: bool = True, add_bos: bool = False) -> list[int]:
        """Token ids of ``text``.

        Args:
            text: Any text.
            special: Parse special-token strings (``"<|im_start|>"``) as special tokens
                (default, as servers do); False tokenizes them as ordinary characters.
            add_bos: Let llama.cpp add the vocabulary's BOS token (only if the GGUF says
                it should, ``add_bos``).
        """
        self._check_open()
        data = text.encode("utf-8")
        lib = self._lib
        # Every token covers at least one byte; BOS/EOS may add a few more.
        capacity = len(data) + 8
        with self._lock:
            buf = (lib.llama_token * capacity)()
            n = int(
                lib.llama_tokenize(self._vocab, data, len(data), buf, capacity, add_bos, special)
            )
            if n < 0:
                capacity = -n
                buf = (lib.llama_token * capacity)()
                n = int(
                    lib.llama_tokenize(
                        self._vocab, data, len(data), buf, capacity, add_bos, special
                    )
                )
        if n < 0:
            raise TokenizerUnavailableError(
                f"llama.cpp failed to tokenize {len(data):,} bytes with {self.name} (code {n})."
            )
        return list(buf[:n])

    def count(self, text: str) -> int:
        """Tokens in ``text`` as a llama.cpp server counts them in a prompt: special-token
        strings are special tokens, no BOS added."""
        return len(self.encode(text))

    def decode(self, tokens: list[int]) -> str:
        """Text of ``tokens`` (special tokens rendered as their text)."""
        self._check_open()
        lib = self._lib
        arr = (lib.llama_token * len(tokens))(*tokens)
        size = max(16, 8 * len(tokens))
        with self._lock:
            out = ctypes.create_string_buffer(size)
            n = int(lib.llama_detokenize(self._vocab, arr, len(tokens), out, size, False, True))
            if n < 0:
                size = -n
                out = ctypes.create_string_buffer(size)
                n = int(lib.llama_detokenize(self._vocab, arr, len(tokens), out, size, False, True))
        return out.raw[: max(n, 0)].decode("utf-8", errors="replace")

    @property
    def context_length(self) -> int | None:
        """The training window from the metadata (``{architecture}.context_length``)."""
        arch = self.metadata.get("general.architecture", "")
        value = self.metadata.get(f"{arch}.context_length")
        try:
            return int(value) if value is not None else None
        except ValueError:
            return None

    @property
    def chat_template(self) -> str | None:
        """The GGUF's default chat template (``tokenizer.chat_template``), if any."""
        return self.metadata.get("tokenizer.chat_template") or None

    def _check_open(self) -> None:
        if not self._free.alive:
            raise TokenizerUnavailableError(f"{self!r} was closed; create a new one.")

    def close(self) -> None:
        """Free the vocabulary (also done when the object is collected). Idempotent; the
        tokenizer cannot be used afterwards."""
        self._free()

    def __repr__(self) -> str:
        return f"GGUFTokenizer({str(self.path)!r}, vocab_size={self.vocab_size})"
