"""Credentials removed from any text the proxy or a summarizer stores or logs.

Upstream and summarizer error bodies can echo the key they were sent ("Incorrect API key
provided: sk-..."); such text reaches plan warnings and the log. :func:`redact` replaces
the keys we know (the request's own, the configured ``upstream_api_key`` and
``proxy_key``) and the shapes keys come in (``sk-...``, ``Bearer ...``,
``x-api-key: ...``, ``api_key=...``, ``user:password@`` in URLs) with ``***``.

:class:`RedactingFilter` applies it to every record of the ``tokenflex`` logger; the keys
of the request being served are set with :func:`request_secrets` (a context variable, so
worker threads started for that request see them too).

>>> redact("401: Incorrect API key provided: sk-proj-abcdef123456 (Bearer tok_9f8e7d6c)")
'401: Incorrect API key provided: sk-*** (Bearer ***)'
>>> redact('{"api_key": "hunter22", "x-api-key: k-123456"}')
'{"api_key": "***", "x-api-key: ***"}'
>>> redact("echo my-own-key-77", ["my-own-key-77"])
'echo ***'
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import re
from collections.abc import Iterable, Iterator

__all__ = [
    "MAX_ARG_CHARS",
    "MAX_LOGGED_CHARS",
    "MIN_SECRET_LENGTH",
    "RedactingFilter",
    "redact",
    "request_secrets",
]

MIN_SECRET_LENGTH = 6
"""Known secrets shorter than this are not searched for (they would blank ordinary text);
the shape patterns still catch them after ``Bearer`` or ``api_key=``."""

MASK = "***"
MAX_LOGGED_CHARS = 4000
"""Log messages are cut after this many characters (a 2 MB model name is not a log line)."""
MAX_ARG_CHARS = 1000
"""String arguments of a log call are cut after this many characters: enough for our own
messages passed as ``%s`` (a calibration warning with its fix), not for a 1 MB model name."""

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # OpenAI / Anthropic / most gateways: sk-..., sk-proj-..., sk-ant-...
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"), "sk-" + MASK),
    (re.compile(r"(?i)\b(bearer)(\s+)[A-Za-z0-9_\-.~+/=:]{4,}"), r"\1\2" + MASK),
    (
        re.compile(r"\b(Basic)(\s+)(?=[A-Za-z0-9+/]*[0-9+/=])[A-Za-z0-9+/]{8,}={0,2}"),
        r"\1\2" + MASK,
    ),
    # Authorization: <any scheme> <credential>
    (
        re.compile(
            r"(?i)(\bauthorization[\"']?\s*[:=]\s*[\"']?)(?:[A-Za-z]+\s+)?(?!\*\*\*)[^\s\"',;]+"
        ),
        r"\1" + MASK,
    ),
    # key: value, key=value, "key": "value" for the usual names of credentials
    (
        re.compile(
            r"(?i)(\b(?:x-api-key|api[-_]?key|x-tokenflex-key|access[-_]?token|auth[-_]?token"
            r"|client[-_]?secret|secret|password|passwd)[\"']?\s*[:=]\s*[\"']?)"
            r"(?!\*\*\*)([^\s\"'&,;)}\]]+)"
        ),
        r"\1" + MASK,
    ),
    # credentials inside a URL: scheme://user:password@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s:@]+:[^/\s@]+@"), r"\1" + MASK + "@"),
]

_TRIGGERS: list[tuple[str, ...]] = [
    ("sk-",),
    ("bearer",),
    ("basic",),
    ("authorization",),
    ("key", "access", "auth", "secret", "passw"),
    ("://",),
]
"""For each of :data:`_PATTERNS`, words one of which any text it matches holds (in
:func:`_folded` form): where none is, the pattern cannot match and is not run."""

_WORDS = tuple(dict.fromkeys(w for words in _TRIGGERS for w in words))
"""Every word of :data:`_TRIGGERS`: a text that holds none (most log lines) is looked at
no further."""

_secrets: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "tokenflex_request_secrets", default=()
)


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with every known secret and every credential-shaped token replaced by ``***``.

    Args:
        text: Text that may hold a credential (an error body, a warning, a log line).
        secrets: Keys to remove wherever they occur (None and short ones are skipped);
            the keys of the current request (:func:`request_secrets`) are added.
    """
    known = {s for s in (*secrets, *_secrets.get()) if s and len(s) >= MIN_SECRET_LENGTH}
    for secret in sorted(known, key=len, reverse=True):
        text = text.replace(secret, MASK)
    folded = _folded(text)
    for word in _WORDS:
        if word in folded:
            break
    else:
        return text  # (a plain loop: a generator for each pattern cost more than the scans)
    for (pattern, replacement), words in zip(_PATTERNS, _TRIGGERS, strict=True):
        # a pattern runs only where its words are: a log line with no credential-like
        # word costs a few substring searches instead of six regex scans (~80 us)
        if any(w in folded for w in words):
            text = pattern.sub(replacement, text)
            folded = _folded(text)
    return text


def _folded(text: str) -> str:
    """``text`` lowercased so that every ASCII word a pattern matches case-insensitively
    is found in it: ``re.IGNORECASE`` also matches ``İ`` and ``ı`` for ``i``, ``ſ`` for
    ``s`` and the Kelvin sign for ``k`` (``lower()`` takes care of that one; ``İ``
    lowers to ``i`` and a combining dot, which is dropped)."""
    folded = text.lower()
    if not folded.isascii():
        folded = folded.replace("\u0307", "").replace("\u0131", "i").replace("\u017f", "s")
    return folded


@contextlib.contextmanager
def request_secrets(secrets: Iterable[str | None]) -> Iterator[None]:
    """Within the block, :func:`redact` (and so the log filter) also removes ``secrets``."""
    token = _secrets.set(tuple(s for s in secrets if s))
    try:
        yield
    finally:
        _secrets.reset(token)


class RedactingFilter(logging.Filter):
    """A logging filter that redacts each record's message (with its arguments merged)
    and exception text; ``secrets`` are the configured keys."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        super().__init__()
        self.secrets = tuple(s for s in secrets if s)

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple):
            # a client's 1 MB model name is logged by the library as %r: cut such values
            for a in args:  # (most records have none: looked for before a tuple is made)
                if isinstance(a, str) and len(a) > MAX_ARG_CHARS:
                    record.args = tuple(
                        f"{a[:MAX_ARG_CHARS]}…({len(a):,} chars)"
                        if isinstance(a, str) and len(a) > MAX_ARG_CHARS
                        else a
                        for a in args
                    )
                    break
        clean = redact(record.getMessage(), self.secrets)
        if len(clean) > MAX_LOGGED_CHARS:
            clean = f"{clean[:MAX_LOGGED_CHARS]}…(cut, {len(clean):,} chars)"
        # the message as it is logged, merged once: the handlers do not format it again
        record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            exc_text = str(record.exc_info[1])
            if redact(exc_text, self.secrets) != exc_text:
                # the traceback would repeat the secret: keep the type and our message only
                record.msg = f"{record.msg} ({type(record.exc_info[1]).__name__}, redacted)"
                record.exc_info, record.exc_text = None, None
        return True
