"""Summarizers: compact old history into a short text, with a real model or without one.

- :class:`ChatSummarizer` asks any OpenAI-compatible server (vLLM, llama.cpp, Ollama,
  OpenAI) for a summary with a low temperature and its own short system prompt, sync or
  async. It never returns an error text as a summary: timeouts, HTTP errors, empty output
  and outputs that read like error messages raise :class:`~tokenflex.errors.SummarizerError`.
- :class:`ExtractiveSummarizer` needs no model: it keeps key sentences (the first sentence
  of each user turn, sentences with decisions, numbers and names) under the token budget,
  deterministically.
- :func:`summarize_span` / :func:`asummarize_span` summarize a span that does not fit the
  summarizer's own window in pieces, rolling: the summary of piece *k* is the previous
  summary of piece *k + 1*. The result is trimmed at a sentence boundary to ``max_tokens``
  of the caller's tokenizer.

A summary goes into a conversation as a system message starting with
:data:`SUMMARY_PREFIX` (a known prefix, so it can be found again), built by :func:`summary_message`.

Modules: ``spans`` (the :class:`Summarizer` protocol and the span functions), ``chat``
(the HTTP summarizer and its prompt), ``extractive`` (the offline one), ``transcript``
(messages as text), ``sentences`` (sentence cuts under a token budget) and ``format``
(the summary message). ``chat`` needs httpx and is imported on first use of its names,
so importing this package stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .extractive import ExtractiveSummarizer
from .format import SUMMARY_PREFIX, is_summary_message, summary_message
from .spans import Summarizer, asummarize_span, summarize_span
from .transcript import render_transcript

if TYPE_CHECKING:
    from .chat import DEFAULT_SYSTEM_PROMPT, ChatSummarizer

_LAZY = {"ChatSummarizer": "chat", "DEFAULT_SYSTEM_PROMPT": "chat"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "SUMMARY_PREFIX",
    "ChatSummarizer",
    "ExtractiveSummarizer",
    "Summarizer",
    "asummarize_span",
    "is_summary_message",
    "render_transcript",
    "summarize_span",
    "summary_message",
]
