"""A :class:`~tokenflex.models.Model` built from a GGUF model file's metadata: its own
tokenizer (``gguf:PATH``, see :mod:`tokenflex.tokenizers.gguf`), chat template, BOS/EOS
and training window, so it counts exactly like a llama.cpp server serving that file.
"""

from __future__ import annotations

import logging
import os

from ..errors import ConfigError
from ..tokenizers import get_tokenizer
from ..tokenizers.gguf import GGUFTokenizer
from .registry import Model

__all__ = ["model_from_gguf"]

log = logging.getLogger("tokenflex")


def model_from_gguf(
    path: str | os.PathLike[str],
    *,
    name: str | None = None,
    context_window: int | None = None,
    max_output_tokens: int | None = None,
) -> Model:
    """A :class:`~tokenflex.models.Model` that counts exactly like a llama.cpp server
    serving this GGUF file: its own tokenizer (``gguf:PATH``) and chat template.

    Args:
        path: The ``.gguf`` model file.
        name: Model name; default the file name without ``.gguf``.
        context_window: The window the server really runs with (its ``--n_ctx``); default
            the training window from the metadata. Servers often run smaller: pass it, or
            use :func:`tokenflex.models.discovery.discover_model` to ask the server.
        max_output_tokens: The model's output limit, if it has one.

    Raises:
        TokenizerUnavailableError: the file cannot be read (see
            :class:`~tokenflex.tokenizers.gguf.GGUFTokenizer`).
        ConfigError: no window in the metadata and none given.

    >>> m = model_from_gguf("SmolLM2.gguf", context_window=2048)  # doctest: +SKIP
    >>> m.tokenizer, m.chat_format, m.context_window  # doctest: +SKIP
    ('gguf:SmolLM2.gguf', 'template', 2048)
    """
    tokenizer_name = f"gguf:{os.fspath(path)}"
    tok = get_tokenizer(tokenizer_name).tokenizer
    assert isinstance(tok, GGUFTokenizer)
    window = context_window if context_window is not None else tok.context_length
    if window is None:
        raise ConfigError(
            f"{str(tok.path)!r} has no context_length in its metadata; pass "
            "context_window= (the server's n_ctx)."
        )
    template = tok.chat_template
    if template is None:
        log.warning(
            "tokenflex: %s has no tokenizer.chat_template; counting with the generic "
            "per-message overhead (an estimate).",
            tok.path,
        )
    return Model(
        name=name or tok.path.name.removesuffix(".gguf"),
        context_window=window,
        max_output_tokens=max_output_tokens,
        tokenizer=tokenizer_name,
        chat_format="template" if template is not None else "generic",
        chat_template=template,
        bos_token=tok.bos_token,
        eos_token=tok.eos_token,
        provider="gguf",
        source="gguf",
    )
