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
from .budget import Allocation, BudgetSpec, SectionSpec, solve
from .conversation import Conversation
from .counting import MessageCounter, count_messages, count_tokens, get_counter
from .fit import FitOptions, afit, fit
from .history import SQLiteMessageStore
from .models import Model, get_model, list_models, load_models_file, register_model
from .tokenizers import get_tokenizer, register_tokenizer
from .plan import DroppedItem, Plan, SummaryInfo
from .tokenizers.estimate import estimate_tokens

__version__ = "0.1.0"

__all__ = [
    "Allocation",
    "BudgetSpec",
    "ConfigError",
    "ContextOverflowError",
    "Conversation",
    "DroppedItem",
    "FitOptions",
    "InvalidInputError",
    "InvalidMessagesError",
    "MessageCounter",
    "Model",
    "Plan",
    "SQLiteMessageStore",
    "SectionSpec",
    "SummarizerError",
    "SummaryInfo",
    "TokenflexError",
    "TokenizerUnavailableError",
    "UnknownModelError",
    "UpstreamError",
    "__version__",
    "afit",
    "count_messages",
    "count_tokens",
    "estimate_tokens",
    "fit",
    "get_counter",
    "get_model",
    "get_tokenizer",
    "list_models",
    "load_models_file",
    "register_model",
    "register_tokenizer",
    "solve",
]
