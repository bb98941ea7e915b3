"""tokenflex: make every LLM request fit its context window, and say what was left out."""

from __future__ import annotations

from .errors import (
    ConfigError,
    ContextOverflowError,
    InvalidInputError,
    InvalidMessagesError,
    SummarizerError,
    TokenflexError,
    TokenizerUnavailableError,
    UnknownModelError,
    UpstreamError,
)
from .models import Model, get_model, list_models, load_models_file, register_model
from .tokenizers import get_tokenizer, register_tokenizer
from .tokenizers.estimate import estimate_tokens

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "ContextOverflowError",
    "InvalidInputError",
    "InvalidMessagesError",
    "Model",
    "SummarizerError",
    "TokenflexError",
    "TokenizerUnavailableError",
    "UnknownModelError",
    "UpstreamError",
    "__version__",
    "estimate_tokens",
    "get_model",
    "get_tokenizer",
    "list_models",
    "load_models_file",
    "register_model",
    "register_tokenizer",
]
