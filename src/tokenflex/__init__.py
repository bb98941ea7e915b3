"""tokenflex: make every LLM request fit its context window, and say what was left out.

The public surface is declared once, here. Modules that pull in optional or heavier
dependencies (httpx, pydantic) are imported on first use, so ``import tokenflex`` stays
light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .budget import Allocation, BudgetSpec, SectionSpec, solve
from .conversation import Conversation
from .cost import Cost, Savings, estimate_cost, savings
from .counting import MessageCounter, count_messages, count_tokens, get_counter
from .documents import Chunk, DroppedChunk, PackResult, pack_chunks
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
from .fallback import FallbackChoice, choose_model
from .fit import afit, fit
from .history import SQLiteMessageStore
from .models import Model, get_model, list_models, load_models_file, register_model
from .options import FitOptions
from .plan import DroppedItem, Plan, SummaryInfo
from .prompt import Prompt
from .recall import recall
from .summarize import SUMMARY_PREFIX, is_summary_message, summary_message
from .tokenizers import get_tokenizer, register_tokenizer
from .tokenizers.estimate import estimate_tokens, estimate_tokens_range
from .validate import Validation, rag_budget, validate_budget

if TYPE_CHECKING:
    from .models.discovery import adiscover_model, discover_model
    from .models.gguf import model_from_gguf
    from .settings import Settings, get_settings
    from .summarize import (
        ChatSummarizer,
        ExtractiveSummarizer,
        Summarizer,
        asummarize_span,
        summarize_span,
    )

__version__ = "0.1.0"

_LAZY = {
    "ChatSummarizer": "summarize",
    "ExtractiveSummarizer": "summarize",
    "Summarizer": "summarize",
    "summarize_span": "summarize",
    "asummarize_span": "summarize",
    "discover_model": "models.discovery",
    "adiscover_model": "models.discovery",
    "Settings": "settings",
    "model_from_gguf": "models.gguf",
    "get_settings": "settings",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tokenflex' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "SUMMARY_PREFIX",
    "Allocation",
    "BudgetSpec",
    "ChatSummarizer",
    "Chunk",
    "ConfigError",
    "ContextOverflowError",
    "Conversation",
    "Cost",
    "DroppedChunk",
    "DroppedItem",
    "ExtractiveSummarizer",
    "FallbackChoice",
    "FitOptions",
    "InvalidInputError",
    "InvalidMessagesError",
    "MessageCounter",
    "Model",
    "PackResult",
    "Plan",
    "Prompt",
    "SQLiteMessageStore",
    "Savings",
    "SectionSpec",
    "Settings",
    "Summarizer",
    "SummarizerError",
    "SummaryInfo",
    "TokenflexError",
    "TokenizerUnavailableError",
    "UnknownModelError",
    "UpstreamError",
    "Validation",
    "__version__",
    "adiscover_model",
    "afit",
    "asummarize_span",
    "choose_model",
    "count_messages",
    "count_tokens",
    "discover_model",
    "estimate_cost",
    "estimate_tokens",
    "estimate_tokens_range",
    "fit",
    "get_counter",
    "get_model",
    "get_settings",
    "get_tokenizer",
    "is_summary_message",
    "list_models",
    "load_models_file",
    "model_from_gguf",
    "pack_chunks",
    "rag_budget",
    "recall",
    "register_model",
    "register_tokenizer",
    "savings",
    "solve",
    "summarize_span",
    "summary_message",
    "validate_budget",
]
