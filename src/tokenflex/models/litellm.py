"""A LiteLLM ``model_prices_and_context_window.json`` file as registry entries, offline.

LiteLLM keeps a community-maintained table of models (name → window, output limit,
prices) that often lists a release before this registry does. :func:`models_from_litellm`
turns its chat models into :class:`~tokenflex.models.Model` entries;
:func:`~tokenflex.models.load_models_file` (and ``TOKENFLEX_MODELS_FILE``) load such a
file when its name ends in ``.json``, and ``tokenflex models --import FILE`` shows what it
adds. Only the numbers come from the file: how a model counts (tokenizer, chat format,
family) is the registry's for that name (its entry, alias, dated version or family
pattern), else the conservative estimator.

Field mapping: ``max_input_tokens`` (LiteLLM's context window; ``max_tokens`` when it is
missing) → ``context_window``; ``max_output_tokens`` → ``max_output_tokens`` (capped at
the window); ``input_cost_per_token`` / ``output_cost_per_token`` /
``cache_read_input_token_cost`` / ``cache_creation_input_token_cost`` × 10⁶ → the prices.
Entries whose ``mode`` is not ``chat`` or ``responses`` (embeddings, images, audio) and
entries without a window are skipped.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from .registry import FILE_READERS, Model, find_model

__all__ = ["LITELLM_MODES", "models_from_litellm", "read_litellm_file"]

log = logging.getLogger("tokenflex")

LITELLM_MODES = frozenset({"chat", "responses"})
"""LiteLLM ``mode`` values whose models take chat requests (the others are skipped)."""

_PRICES = {
    "input_price": "input_cost_per_token",
    "output_price": "output_cost_per_token",
    "cache_read_price": "cache_read_input_token_cost",
    "cache_write_price": "cache_creation_input_token_cost",
}


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return int(value)


def _price(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return round(float(value) * 1_000_000, 6)


def models_from_litellm(data: Mapping[str, Any], source: str = "LiteLLM file") -> list[Model]:
    """The chat models of a parsed LiteLLM price file.

    >>> [m] = models_from_litellm({"acme-chat": {"mode": "chat", "max_input_tokens": 32000,
    ...     "max_output_tokens": 4096, "input_cost_per_token": 1e-06,
    ...     "output_cost_per_token": 2e-06, "litellm_provider": "acme"}})
    >>> (m.context_window, m.max_output_tokens, m.input_price, m.tokenizer)
    (32000, 4096, 1.0, 'estimate:all')
    """
    models: list[Model] = []
    skipped = 0
    for name, spec in data.items():
        if name == "sample_spec" or not isinstance(spec, Mapping) or not name.strip():
            continue
        window = _positive_int(spec.get("max_input_tokens")) or _positive_int(
            spec.get("max_tokens")
        )
        if spec.get("mode", "chat") not in LITELLM_MODES or window is None:
            skipped += 1
            continue
        output = _positive_int(spec.get("max_output_tokens"))
        prices: dict[str, Any] = {field: _price(spec.get(key)) for field, key in _PRICES.items()}
        if (prices["input_price"] is None) != (prices["output_price"] is None):
            prices["input_price"] = prices["output_price"] = None  # half a price is none
        like = find_model(name)
        counting: dict[str, Any] = (
            {
                "tokenizer": like.tokenizer,
                "chat_format": like.chat_format,
                "exact_tokenizer": like.exact_tokenizer,
                "family": like.family,
                "chat_template": like.chat_template,
                "bos_token": like.bos_token,
                "eos_token": like.eos_token,
            }
            if like is not None
            else {"tokenizer": "estimate:all", "chat_format": "generic"}
        )
        try:
            models.append(
                Model(
                    name=name.strip().lower(),
                    context_window=window,
                    max_output_tokens=min(output, window) if output is not None else None,
                    provider=str(spec.get("litellm_provider") or ""),
                    source=source,
                    **counting,
                    **prices,
                )
            )
        except ConfigError as exc:
            log.warning("%s: entry %r skipped: %s", source, name, exc)
            skipped += 1
    log.info("%s: %d chat models read, %d entries skipped", source, len(models), skipped)
    return models


def read_litellm_file(path: str | os.PathLike[str]) -> list[Model]:
    """The chat models of a LiteLLM price file on disk (see :func:`models_from_litellm`).

    Raises:
        ConfigError: the file cannot be read or is not a JSON object.
    """
    where = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise ConfigError(f"Cannot read models file {where!r}: {exc.strerror}.") from exc
    except ValueError as exc:
        raise ConfigError(f"Models file {where!r} is not valid JSON: {exc}.") from exc
    if not isinstance(data, dict):
        raise ConfigError(
            f"Models file {where!r}: expected a LiteLLM price table (a JSON object of "
            f"model name -> fields), got a {type(data).__name__}."
        )
    return models_from_litellm(data, source=where)


FILE_READERS[".json"] = read_litellm_file
