"""What a model can hold, and where tokenflex learns it.

- :mod:`~tokenflex.models.registry`: :class:`Model` (context window, output limit,
  tokenizer, chat format, prices) and the registry that finds one by name (embedded data,
  ``TOKENFLEX_MODELS_FILE``, :func:`register_model`);
- :mod:`~tokenflex.models.discovery`: ask a running OpenAI-compatible server what model
  it serves and the window it really runs with (``discover_model``, ``adiscover_model``;
  needs httpx, so it is imported on first use);
- :mod:`~tokenflex.models.gguf`: a Model from a GGUF file's metadata
  (``model_from_gguf``);
- :mod:`~tokenflex.models.litellm`: entries from a LiteLLM
  ``model_prices_and_context_window.json`` file (``load_models_file`` reads ``.json``
  files with it).
"""

from __future__ import annotations

from . import litellm as litellm  # registers the ".json" models-file reader
from .registry import (
    CHAT_FORMATS,
    DEFAULT_CONTEXT_WINDOW,
    Family,
    Model,
    close_names,
    family_for,
    find_model,
    get_model,
    list_models,
    load_models_file,
    register_model,
    registry_generation,
    reset_registry,
    unknown_model_warning,
)

__all__ = [
    "CHAT_FORMATS",
    "DEFAULT_CONTEXT_WINDOW",
    "Family",
    "Model",
    "close_names",
    "family_for",
    "find_model",
    "get_model",
    "list_models",
    "load_models_file",
    "register_model",
    "registry_generation",
    "reset_registry",
    "unknown_model_warning",
]
