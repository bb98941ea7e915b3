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
:data:`SUMMARY_PREFIX` (seed 002's format), built by :func:`summary_message`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import httpx

from ._summary_format import SUMMARY_PREFIX, is_summary_message, summary_message
from ._types import Message
from .errors import SummarizerError

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

log = logging.getLogger("tokenflex")

DEFAULT_SYSTEM_PROMPT = (
    "You summarize conversations. Write a concise summary in plain prose that preserves "
    "key facts, decisions, names, numbers and open questions. Do not add anything that "
    "was not said. Output only the summary."
)

Count = Callable[[str], int]


@runtime_checkable
class Summarizer(Protocol):
    """Anything that turns messages (plus an earlier summary) into a short text."""

    def summarize(
        self, messages: Sequence[Message], *, previous_summary: str | None, max_tokens: int
    ) -> str:
        """A summary of ``previous_summary`` followed by ``messages``, about
        ``max_tokens`` long at most. Raises :class:`SummarizerError` on failure."""
        ...

    async def asummarize(
        self, messages: Sequence[Message], *, previous_summary: str | None, max_tokens: int
    ) -> str:
        """Async twin of :meth:`summarize`."""
        ...


# -- transcript ---------------------------------------------------------------------------


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                if isinstance(part.get("text"), str):
                    parts.append(part["text"])
                elif part.get("type") in ("image_url", "image", "input_image"):
                    parts.append("[image]")
                elif part.get("type") in ("input_audio", "audio"):
                    parts.append("[audio]")
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return str(content)


def _message_line(msg: Message) -> str:
    """One message as transcript text: ``"User: ..."``, tool calls spelled out."""
    role = str(msg.get("role", "user"))
    text = _content_text(msg.get("content"))
    if role in ("tool", "function"):
        label = f"Tool result ({msg.get('name')})" if msg.get("name") else "Tool result"
    elif is_summary_message(msg):
        label, text = "Earlier summary", text[len(SUMMARY_PREFIX) :]
    else:
        label = role.capitalize()
    calls = msg.get("tool_calls") or []
    call_texts = []
    for call in calls if isinstance(calls, Sequence) else []:
        fn = call.get("function", {}) if isinstance(call, Mapping) else {}
        if isinstance(fn, Mapping):
            call_texts.append(f"[calls {fn.get('name', '?')}({fn.get('arguments', '')})]")
    if isinstance(msg.get("function_call"), Mapping):
        fc = msg["function_call"]
        call_texts.append(f"[calls {fc.get('name', '?')}({fc.get('arguments', '')})]")
    body = " ".join(t for t in [text.strip(), *call_texts] if t)
    return f"{label}: {body}"


def render_transcript(messages: Sequence[Message]) -> str:
    """Messages as the plain transcript a summarizer reads, one paragraph per message.

    >>> print(render_transcript([{"role": "user", "content": "Hi"},
    ...                          {"role": "assistant", "content": "Hello!"}]))
    User: Hi
    <BLANKLINE>
    Assistant: Hello!
    """
    return "\n\n".join(_message_line(m) for m in messages)


def _counter_fn(counter: Any) -> Count:
    """A text counter from a MessageCounter (``.tokenizer.count``), a tokenizer
    (``.count``), a callable, a tokenizer name, or None (the conservative estimator)."""
    if counter is None:
        from .tokenizers import get_tokenizer

        return get_tokenizer("estimate").count
    if isinstance(counter, str):
        from .tokenizers import get_tokenizer

        return get_tokenizer(counter).count
    tok = getattr(counter, "tokenizer", None)
    if tok is not None and callable(getattr(tok, "count", None)):
        fn: Count = tok.count
        return fn
    if callable(getattr(counter, "count", None)):
        fn = counter.count
        return fn
    if callable(counter):
        return counter  # type: ignore[no-any-return]
    raise TypeError(f"Cannot count tokens with {counter!r}: pass a tokenizer or a counter.")


# -- sentences and trimming -----------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?。！？])[\"')\]]*\s+")
_BOUNDARY = re.compile(r"(?<=[.!?。！？])[\"')\]]*\s+|\n+")
_CODE_FENCE = re.compile(r"```.*?(```|\Z)", re.S)


def _sentences(text: str) -> list[str]:
    text = _CODE_FENCE.sub(" [code] ", text)
    out: list[str] = []
    for para in re.split(r"\n\s*\n|\n(?=\s*(?:[-*•]|\d+[.)])\s)", text):
        para = " ".join(para.split())
        if para:
            out.extend(s.strip() for s in _SENTENCE_END.split(para) if s.strip())
    return out


def _trim_to_tokens(text: str, max_tokens: int, count: Count) -> str:
    """The longest prefix of ``text`` within ``max_tokens`` that ends at a sentence end
    (or, if no sentence fits, at a word boundary, with an ellipsis)."""
    text = text.strip()
    if count(text) <= max_tokens:
        return text
    ends = [m.start() for m in _BOUNDARY.finditer(text)]
    lo, hi, best = 0, len(ends) - 1, ""
    while lo <= hi:  # counts grow with the prefix: binary search the last end that fits
        mid = (lo + hi) // 2
        candidate = text[: ends[mid]].rstrip()
        if count(candidate) <= max_tokens:
            best, lo = candidate, mid + 1
        else:
            hi = mid - 1
    if best:
        return best
    words = text.split()
    lo, hi = 0, len(words)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(" ".join(words[:mid]) + " …") <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo]) + " …" if lo else ""


# -- the extractive summarizer --------------------------------------------------------------

_DECISION = re.compile(
    r"\b(decid\w*|agree\w*|chose|choose|chosen|will|must|should|need\w*|plan\w*|deadline|"
    r"todo|action|remember|prefer\w*|important|always|never|use|using|switch\w*|because|"
    r"budget|goal|require\w*|confirm\w*)\b",
    re.I,
)
_NUMBER = re.compile(r"\d")
_NAME = re.compile(r"(?<=[a-z,;:] )[A-Z][\w-]+|\b[A-Z]{2,}\b|`[^`]+`")


class ExtractiveSummarizer:
    """An offline summarizer: key sentences of the span, in order, under the budget.

    Priority: the previous summary's sentences, then the first sentence of each user
    turn, then sentences carrying decisions, numbers or names (user turns before
    assistant turns), then the first sentence of each assistant turn. Deterministic.

    >>> s = ExtractiveSummarizer()
    >>> s.summarize([{"role": "user", "content": "Use Postgres 16. It is fast."}],
    ...             previous_summary=None, max_tokens=50)
    'User: Use Postgres 16.'
    """

    def __init__(self, tokenizer: str | Any | None = None) -> None:
        """Args:
        tokenizer: What to count the budget with: a tokenizer name, a tokenizer or a
            callable; None uses the conservative estimator, unless
            :func:`summarize_span` hands it the caller's tokenizer.
        """
        self.tokenizer = tokenizer
        self._count = _counter_fn(tokenizer)

    def with_counter(self, counter: Any) -> ExtractiveSummarizer:
        """A copy that counts with ``counter`` (what :func:`summarize_span` uses)."""
        return ExtractiveSummarizer(counter)

    def summarize(
        self,
        messages: Sequence[Message],
        *,
        previous_summary: str | None = None,
        max_tokens: int = 512,
    ) -> str:
        """Key sentences of ``previous_summary`` + ``messages`` within ``max_tokens``."""
        # (priority, position, line): lower priority value is kept first
        candidates: list[tuple[int, int, str]] = []
        pos = 0
        if previous_summary:
            for s in _sentences(previous_summary):
                candidates.append((0, pos, s))
                pos += 1
        for msg in messages:
            role = str(msg.get("role", ""))
            if is_summary_message(msg):
                for s in _sentences(str(msg["content"])[len(SUMMARY_PREFIX) :]):
                    candidates.append((0, pos, s))
                    pos += 1
                continue
            if role in ("system", "developer"):
                continue
            label, _, text = _message_line(msg).partition(": ")
            for i, s in enumerate(_sentences(text)):
                line = f"{label}: {s}"
                keyed = bool(_DECISION.search(s) or _NUMBER.search(s) or _NAME.search(s))
                if role == "user":
                    prio = 1 if i == 0 else (2 if keyed else 9)
                elif role == "assistant":
                    # an assistant's opener ("Sure!", "Lovely!") says nothing on its own
                    opener = i == 0 and len(s.split()) >= 4
                    prio = 3 if keyed else (4 if opener else 9)
                else:  # tool results: only what carries facts
                    prio = 5 if keyed else 9
                if prio < 9:
                    candidates.append((prio, pos, line))
                pos += 1
        chosen: list[tuple[int, str]] = []
        order = sorted(candidates, key=lambda c: (c[0], c[1]))
        for prio, p, line in order:
            trial = sorted([*chosen, (p, line)])
            if self._count("\n".join(t for _, t in trial)) <= max_tokens:
                chosen = trial
            elif prio == 0 and not chosen:
                # even the first sentence of the previous summary is too long: cut it
                cut = _trim_to_tokens(line, max_tokens, self._count)
                if cut:
                    chosen = [(p, cut)]
        return "\n".join(t for _, t in chosen)

    async def asummarize(
        self,
        messages: Sequence[Message],
        *,
        previous_summary: str | None = None,
        max_tokens: int = 512,
    ) -> str:
        """Same as :meth:`summarize` (CPU only, no I/O)."""
        return self.summarize(messages, previous_summary=previous_summary, max_tokens=max_tokens)

    def __repr__(self) -> str:
        return f"ExtractiveSummarizer(tokenizer={self.tokenizer!r})"


# -- the chat summarizer ---------------------------------------------------------------------

# What servers, proxies and SDKs put where a completion should be. Matched at the start
# of the output only, so a summary that mentions an error ("The build error was fixed")
# is still a summary.
_ERROR_TEXT = re.compile(
    r"^\s*(?:"
    r"(?:error|exception|fatal)\s*(?:[:\[(]|code\b)"
    r"|\{\s*\"(?:error|detail|message)\""
    r"|<(?:!doctype|html|head|body)\b"
    r"|traceback \(most recent call last\)"
    r"|(?:\d{3}\s+)?(?:internal server error|bad gateway|service unavailable|gateway time-?out"
    r"|too many requests|not found|unauthorized|forbidden)\s*(?:$|[:.\n])"
    r"|rate limit (?:exceeded|reached)"
    r"|this model's maximum context length is"
    r"|context_length_exceeded"
    r"|(?:null|none|undefined|nan)\s*$"
    r")",
    re.I,
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
        temperature: Low for factual, repeatable summaries (seed 002 uses 0.1).
        timeout: Seconds for the whole request; a timeout raises SummarizerError.
        system_prompt: The summarizer's own short system prompt.
        context_window: The summarizing model's window; with it, :func:`summarize_span`
            splits spans that do not fit into pieces. None: send the span in one call.
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
                f"Summarizer {self.model!r} at {self.url} timed out after {self.timeout:g} s; "
                "raise timeout= or use a faster model."
            )
        return SummarizerError(
            f"Summarizer {self.model!r} at {self.url} is unreachable "
            f"({type(exc).__name__}: {exc}); is the server running?"
        )

    def _parse(self, r: httpx.Response) -> str:
        if r.status_code != 200:
            raise SummarizerError(
                f"Summarizer {self.model!r} at {self.url} answered HTTP {r.status_code}: "
                f"{r.text[:300]!r}"
            )
        try:
            data = r.json()
            choice = data["choices"][0]
            content = choice["message"].get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise SummarizerError(
                f"Summarizer {self.model!r} at {self.url} answered without a chat "
                f"completion: {r.text[:300]!r}"
            ) from exc
        text = _clean(content if isinstance(content, str) else "")
        if not text:
            raise SummarizerError(
                f"Summarizer {self.model!r} returned an empty summary "
                f"(finish_reason={choice.get('finish_reason')!r}); nothing was replaced."
            )
        if _ERROR_TEXT.match(text):
            raise SummarizerError(
                f"Summarizer {self.model!r} returned what looks like an error message, not a "
                f"summary: {text[:200]!r}"
            )
        if choice.get("finish_reason") == "length":
            # cut mid-sentence by max_tokens: keep whole sentences only
            ends = [m.start() for m in _SENTENCE_END.finditer(text + " ")]
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


# -- spans in pieces ------------------------------------------------------------------------

_MIN_PIECE_TOKENS = 32


def _split_text(text: str, budget: int, count: Count) -> list[str]:
    """``text`` in parts of at most ``budget`` tokens, cut at sentences, then words."""
    parts: list[str] = []
    current = ""
    for s in _sentences(text) or [text]:
        trial = f"{current} {s}".strip()
        if count(trial) <= budget:
            current = trial
            continue
        if current:
            parts.append(current)
        if count(s) <= budget:
            current = s
            continue
        words, current = s.split(), ""
        for w in words:
            trial = f"{current} {w}".strip()
            if count(trial) <= budget or not current:
                current = trial
            else:
                parts.append(current)
                current = w
    if current:
        parts.append(current)
    return parts


def _pieces(span: Sequence[Message], budget: int, count: Count) -> list[list[Message]]:
    """The span in consecutive pieces whose transcripts fit ``budget`` tokens; a message
    larger than the budget is split into several messages of the same role.

    A piece's size is the sum of its lines' counts plus 2 per paragraph break: counting
    each line once (cached) keeps this linear in the span.
    """
    pieces: list[list[Message]] = []
    current: list[Message] = []
    size = 0
    for msg in span:
        line = _message_line(msg)
        n = count(line) + 2
        if size + n <= budget:
            current.append(msg)
            size += n
            continue
        if current:
            pieces.append(current)
            current, size = [], 0
        if n <= budget:
            current, size = [msg], n
            continue
        role = str(msg.get("role", "user"))
        label, _, body = line.partition(": ")
        parts = _split_text(body, max(1, budget - count(label) - 12), count)
        for i, part in enumerate(parts, 1):
            pieces.append([{"role": role, "content": f"(part {i}/{len(parts)}) {part}"}])
    if current:
        pieces.append(current)
    return pieces


class _SpanJob:
    """Shared by the sync and async span functions: pieces, budgets, the final trim."""

    def __init__(
        self,
        summarizer: Any,
        span: Sequence[Message],
        *,
        previous_summary: str | None,
        max_tokens: int,
        window_tokens: int | None,
        counter: Any,
    ) -> None:
        if max_tokens <= 0:
            raise SummarizerError(f"max_tokens must be positive, got {max_tokens!r}.")
        self.count = _counter_fn(counter)
        if isinstance(summarizer, ExtractiveSummarizer) and summarizer.tokenizer is None:
            summarizer = summarizer.with_counter(self.count)
        self.summarizer = summarizer
        self.max_tokens = max_tokens
        self.previous = previous_summary
        own = getattr(summarizer, "tokenizer", None)
        if window_tokens is None and callable(getattr(summarizer, "window_tokens", None)):
            # Counted in the caller's tokenizer the summarizer's window needs headroom.
            sizer = _counter_fn(own) if own is not None else self.count
            window_tokens = summarizer.window_tokens(max_tokens, sizer)
            if window_tokens is not None and own is None:
                window_tokens = int(window_tokens * 0.9)
        self.window = window_tokens
        self.piece_count = _counter_fn(own) if own is not None else self.count
        if self.window is None:
            self.pieces = [list(span)] if span else []
        else:
            # each call also carries the rolling summary: reserve what it can grow to
            reserve = max(max_tokens, self.piece_count(previous_summary or ""))
            budget = self.window - reserve
            if budget < _MIN_PIECE_TOKENS:
                raise SummarizerError(
                    f"The summarizer's window leaves {budget} tokens for the conversation "
                    f"(window_tokens={self.window}, summary reserve={reserve}); use a model "
                    "with a larger window or a smaller summary budget."
                )
            self.pieces = _pieces(span, budget, self.piece_count)
        if len(self.pieces) > 1:
            log.info("tokenflex: summarizing %d messages in %d pieces", len(span), len(self.pieces))

    def finish(self, text: str) -> str:
        out = _trim_to_tokens(text, self.max_tokens, self.count)
        if not out.strip():
            raise SummarizerError("The summarizer returned nothing that fits the summary budget.")
        return out


def summarize_span(
    summarizer: Summarizer,
    span: Sequence[Message],
    *,
    previous_summary: str | None = None,
    max_tokens: int = 512,
    window_tokens: int | None = None,
    counter: Any = None,
) -> str:
    """Summarize ``span`` (rolled together with ``previous_summary``) into at most
    ``max_tokens`` tokens, in pieces when it does not fit the summarizer's window.

    Args:
        summarizer: Any :class:`Summarizer`.
        span: The messages to summarize, oldest first.
        previous_summary: The summary these messages continue (rolling summaries).
        max_tokens: Budget of the summary, in ``counter``'s tokens.
        window_tokens: Tokens one summarizer call can take for conversation text plus the
            rolling summary (its window minus its prompt and output); default what the
            summarizer says (``ChatSummarizer(context_window=...)``), else one call.
        counter: How to count: a MessageCounter, a tokenizer, a tokenizer name or a
            callable; None: the conservative estimator.

    Raises:
        SummarizerError: the summarizer failed on any piece (nothing is half-done: the
            caller keeps its messages).

    >>> summarize_span(ExtractiveSummarizer(), [{"role": "user", "content": "Ship v2 on May 3."}])
    'User: Ship v2 on May 3.'
    """
    job = _SpanJob(
        summarizer,
        span,
        previous_summary=previous_summary,
        max_tokens=max_tokens,
        window_tokens=window_tokens,
        counter=counter,
    )
    summary = job.previous
    for piece in job.pieces:
        summary = job.summarizer.summarize(piece, previous_summary=summary, max_tokens=max_tokens)
    if summary is None:
        raise SummarizerError("Nothing to summarize: the span is empty and there is no summary.")
    return job.finish(summary)


async def asummarize_span(
    summarizer: Summarizer,
    span: Sequence[Message],
    *,
    previous_summary: str | None = None,
    max_tokens: int = 512,
    window_tokens: int | None = None,
    counter: Any = None,
) -> str:
    """Async twin of :func:`summarize_span` (awaits ``asummarize``)."""
    job = _SpanJob(
        summarizer,
        span,
        previous_summary=previous_summary,
        max_tokens=max_tokens,
        window_tokens=window_tokens,
        counter=counter,
    )
    summary = job.previous
    for piece in job.pieces:
        summary = await job.summarizer.asummarize(
            piece, previous_summary=summary, max_tokens=max_tokens
        )
    if summary is None:
        raise SummarizerError("Nothing to summarize: the span is empty and there is no summary.")
    return job.finish(summary)
