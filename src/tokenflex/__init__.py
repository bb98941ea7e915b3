"""tokenflex: make every LLM request fit its context window, and say what was left out.

The public surface is declared once, here. Every name is imported on first use (the
module that defines it, and what that module needs), so ``import tokenflex`` costs
almost nothing and a command pays only for what it uses.
"""

from __future__ import annotations

import importlib
import sys
import types

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy reads it so)
if TYPE_CHECKING:
    from typing import Any

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
    from .models.discovery import adiscover_model, discover_model
    from .models.gguf import model_from_gguf
    from .options import CacheStable, Documents, Fallback, FitOptions, History, Shrink, Summarize
    from .plan import DroppedItem, Plan, SummaryInfo
    from .prompt import Prompt
    from .recall import recall
    from .settings import Settings, get_settings
    from .summarize import (
        SUMMARY_PREFIX,
        ChatSummarizer,
        ExtractiveSummarizer,
        Summarizer,
        asummarize_span,
        is_summary_message,
        summarize_span,
        summary_message,
    )
    from .tokenizers import get_tokenizer, register_tokenizer
    from .tokenizers.estimate import estimate_tokens, estimate_tokens_range
    from .validate import Validation, rag_budget, validate_budget

__version__ = "0.1.0"

_LAZY = {
    "Conversation": "conversation",
    "Cost": "cost",
    "Savings": "cost",
    "estimate_cost": "cost",
    "savings": "cost",
    "MessageCounter": "counting",
    "count_messages": "counting",
    "count_tokens": "counting",
    "get_counter": "counting",
    "Chunk": "documents",
    "DroppedChunk": "documents",
    "PackResult": "documents",
    "pack_chunks": "documents",
    "ConfigError": "errors",
    "ContextOverflowError": "errors",
    "InvalidInputError": "errors",
    "InvalidMessagesError": "errors",
    "SummarizerError": "errors",
    "TokenflexError": "errors",
    "TokenizerUnavailableError": "errors",
    "UnknownModelError": "errors",
    "UpstreamError": "errors",
    "FallbackChoice": "fallback",
    "choose_model": "fallback",
    "afit": "fit",
    "fit": "fit",
    "SQLiteMessageStore": "history",
    "Model": "models",
    "get_model": "models",
    "list_models": "models",
    "load_models_file": "models",
    "register_model": "models",
    "adiscover_model": "models.discovery",
    "discover_model": "models.discovery",
    "model_from_gguf": "models.gguf",
    "CacheStable": "options",
    "Documents": "options",
    "Fallback": "options",
    "FitOptions": "options",
    "History": "options",
    "Shrink": "options",
    "Summarize": "options",
    "DroppedItem": "plan",
    "Plan": "plan",
    "SummaryInfo": "plan",
    "Prompt": "prompt",
    "recall": "recall",
    "Settings": "settings",
    "get_settings": "settings",
    "ChatSummarizer": "summarize",
    "ExtractiveSummarizer": "summarize",
    "SUMMARY_PREFIX": "summarize",
    "Summarizer": "summarize",
    "asummarize_span": "summarize",
    "is_summary_message": "summarize",
    "summarize_span": "summarize",
    "summary_message": "summarize",
    "get_tokenizer": "tokenizers",
    "register_tokenizer": "tokenizers",
    "estimate_tokens": "tokenizers.estimate",
    "estimate_tokens_range": "tokenizers.estimate",
    "Validation": "validate",
    "rag_budget": "validate",
    "validate_budget": "validate",
}
"""Where each public name lives: imported on first use, so ``import tokenflex`` loads
nothing until a name is used (``tokenflex count`` pays for counting only)."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tokenflex' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """The package keeps a public name that is also a submodule's (``fit``): importing
    the submodule binds it on the package (Python does that on first import), which
    would hide the function; the submodule stays in ``sys.modules``."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__all__ = [
    "SUMMARY_PREFIX",
    "CacheStable",
    "ChatSummarizer",
    "Chunk",
    "ConfigError",
    "ContextOverflowError",
    "Conversation",
    "Cost",
    "Documents",
    "DroppedChunk",
    "DroppedItem",
    "ExtractiveSummarizer",
    "Fallback",
    "FallbackChoice",
    "FitOptions",
    "History",
    "InvalidInputError",
    "InvalidMessagesError",
    "MessageCounter",
    "Model",
    "PackResult",
    "Plan",
    "Prompt",
    "SQLiteMessageStore",
    "Savings",
    "Settings",
    "Shrink",
    "Summarize",
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
    "summarize_span",
    "summary_message",
    "validate_budget",
]
