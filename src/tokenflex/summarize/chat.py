"""The chat summarizer: summaries from any OpenAI-compatible chat endpoint.

:class:`ChatSummarizer` asks a server (vLLM, llama.cpp, Ollama, OpenAI) for a summary with a
low temperature and its own short system prompt, :data:`DEFAULT_SYSTEM_PROMPT`, sync or
async. It never returns an error text as a summary: timeouts, HTTP errors, empty output and
outputs that read like error messages raise :class:`~tokenflex.errors.SummarizerError`.

Needs httpx: :mod:`tokenflex.summarize` imports this module on first use of
:class:`ChatSummarizer` or :data:`DEFAULT_SYSTEM_PROMPT`, so ``import tokenflex`` stays light.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import httpx

from .._types import Message
from ..errors import SummarizerError
from ..redact import redact
from .format import SUMMARY_PREFIX, looks_like_error
from .sentences import SENTENCE_END, Count
from .transcript import render_transcript

__all__ = ["DEFAULT_SYSTEM_PROMPT", "ChatSummarizer"]

DEFAULT_SYSTEM_PROMPT = (
    "You summarize conversations. Write a concise summary in plain prose that preserves "
    "key facts, decisions, names, numbers and open questions. Do not add anything that "
    "was not said. Output only the summary."
)

_LEADING_LABEL = re.compile(r"^\s*(?:\*\*)?(?:concise )?summary(?:\*\*)?\s*:\s*(?:\*\*)?\s*", re.I)


class ChatSummarizer:
    """Summaries from any OpenAI-compatible chat endpoint (vLLM, llama.cpp, Ollama, OpenAI).

    >>> s = ChatSummarizer("http://127.0.0.1:8000/v1", "my-model")  # doctest: +SKIP
    >>> s.summarize(messages, previous_summary=None, max_tokens=200)  # doctest: +SKIP
    'The user is planning a trip to Lisbon in May ...'
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        temperature: float = 0.1,
        timeout: float = 30.0,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        context_window: int | None = None,
        tokenizer: str | Any | None = None,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """Args:
        base_url: The OpenAI base URL (``http://host:8000/v1``); ``/chat/completions``
            is appended.
        model: The model name the server expects.
        api_key: Sent as ``Authorization: Bearer ...``.
        temperature: Low for factual, repeatable summaries (0.1 by default).
        timeout: Seconds for the whole request; a timeout raises SummarizerError.
        system_prompt: The summarizer's own short system prompt.
        context_window: The summarizing model's window; with it,
            :func:`~tokenflex.summarize.summarize_span` splits spans that do not fit into
            pieces. None: send the span in one call.
        tokenizer: How to count for that window (a tokenizer name or object); None:
            the caller's tokenizer with 10% headroom.
        transport, async_transport: httpx transports (tests, custom networking).
        """
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.temperature = temperature
        self.timeout = timeout
        self.system_prompt = system_prompt
        self.context_window = context_window
        self.tokenizer = tokenizer
        self._api_key = api_key
        self._transport = transport
        self._async_transport = async_transport

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def prompt(
        self, messages: Sequence[Message], *, previous_summary: str | None, max_tokens: int
    ) -> list[dict[str, str]]:
        """The chat messages sent to the summarizing model."""
        words = max(10, int(max_tokens * 0.6))
        parts = []
        if previous_summary:
            parts.append(f"Summary of the conversation so far:\n{previous_summary.strip()}")
        parts.append(f"Conversation:\n{render_transcript(messages)}")
        parts.append(
            "Write one updated summary of everything above"
            f" in at most {words} words, preserving key facts, decisions and context."
        )
        return [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": "\n\n".join(parts)},
        ]

    def window_tokens(self, max_tokens: int, count: Count) -> int | None:
        """Tokens of transcript one call can carry: the window minus the prompt's fixed
        part and the output. None without a ``context_window``."""
        if self.context_window is None:
            return None
        fixed = self.prompt([], previous_summary=None, max_tokens=max_tokens)
        overhead = sum(count(m["content"]) + 8 for m in fixed) + 16
        return self.context_window - overhead - max_tokens

    def _payload(
        self, messages: Sequence[Message], previous_summary: str | None, max_tokens: int
    ) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": self.prompt(
                messages, previous_summary=previous_summary, max_tokens=max_tokens
            ),
            "temperature": self.temperature,
            "max_tokens": max_tokens,
            "stream": False,
        }

    def _error(self, exc: httpx.HTTPError) -> SummarizerError:
        if isinstance(exc, httpx.TimeoutException):
            return SummarizerError(
                f"Summarizer {self.model!r} at {redact(self.url)} timed out after "
                f"{self.timeout:g} s; raise timeout= or use a faster model."
            )
        return SummarizerError(
            f"Summarizer {self.model!r} at {redact(self.url)} is unreachable "
            f"({type(exc).__name__}: {exc}); is the server running?"
        )

    def _quoted(self, text: str) -> str:
        """Server text for an error message, without credentials: a server may echo the
        key it was sent, and these messages reach plan warnings and logs."""
        return redact(text, [self._api_key])

    def _parse(self, r: httpx.Response) -> str:
        if r.status_code != 200:
            raise SummarizerError(
                f"Summarizer {self.model!r} at {redact(self.url)} answered HTTP {r.status_code}: "
                f"{self._quoted(r.text[:300])!r}"
            )
        try:
            data = r.json()
            choice = data["choices"][0]
            content = choice["message"].get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise SummarizerError(
                f"Summarizer {self.model!r} at {redact(self.url)} answered without a chat "
                f"completion: {self._quoted(r.text[:300])!r}"
            ) from exc
        text = _clean(content if isinstance(content, str) else "")
        if not text:
            raise SummarizerError(
                f"Summarizer {self.model!r} returned an empty summary "
                f"(finish_reason={choice.get('finish_reason')!r}); nothing was replaced."
            )
        if looks_like_error(text):
            raise SummarizerError(
                f"Summarizer {self.model!r} returned what looks like an error message, not a "
                f"summary: {self._quoted(text[:200])!r}"
            )
        if choice.get("finish_reason") == "length":
            # cut mid-sentence by max_tokens: keep whole sentences only
            ends = [m.start() for m in SENTENCE_END.finditer(text + " ")]
            if ends:
                text = text[: ends[-1]].rstrip()
        return text

    def summarize(
        self,
        messages: Sequence[Message],
        *,
        previous_summary: str | None = None,
        max_tokens: int = 512,
    ) -> str:
        """One summary of ``previous_summary`` + ``messages`` from the model.

        Raises:
            SummarizerError: timeout, connection error, HTTP error, no or empty output,
                or an output that reads like an error message.
        """
        payload = self._payload(messages, previous_summary, max_tokens)
        try:
            with httpx.Client(
                timeout=self.timeout, headers=self._headers(), transport=self._transport
            ) as client:
                r = client.post(self.url, json=payload)
        except httpx.HTTPError as exc:
            raise self._error(exc) from exc
        return self._parse(r)

    async def asummarize(
        self,
        messages: Sequence[Message],
        *,
        previous_summary: str | None = None,
        max_tokens: int = 512,
    ) -> str:
        """Async twin of :meth:`summarize`."""
        payload = self._payload(messages, previous_summary, max_tokens)
        try:
            async with httpx.AsyncClient(
                timeout=self.timeout, headers=self._headers(), transport=self._async_transport
            ) as client:
                r = await client.post(self.url, json=payload)
        except httpx.HTTPError as exc:
            raise self._error(exc) from exc
        return self._parse(r)

    def __repr__(self) -> str:
        return f"ChatSummarizer({self.base_url!r}, {self.model!r})"


def _clean(text: str) -> str:
    text = text.strip()
    for _ in range(2):
        text = _LEADING_LABEL.sub("", text, count=1)
        if text.startswith(SUMMARY_PREFIX.strip()):
            text = text[len(SUMMARY_PREFIX.strip()) :].strip()
    return text.strip()
