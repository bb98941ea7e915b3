"""Summarizers chosen by the ``summarize`` / ``summarizer`` options of a config table.

- ``summarize = true`` (or ``summarizer = "upstream"``): the upstream itself summarizes,
  with the request's own model, through :class:`tokenflex.summarize.ChatSummarizer`;
- ``summarizer = "extractive"``: the offline :class:`~tokenflex.summarize.ExtractiveSummarizer`;
- ``summarizer = {base_url = "...", model = "...", ...}``: another OpenAI-compatible
  server (fixed by config, like the upstream); keys are ChatSummarizer arguments
  (``api_key``, ``temperature``, ``timeout``, ``context_window``, ``system_prompt``).

A background job's calls to the upstream pause while clients use it
(:func:`~tokenflex.summarize.background.pause_for_clients`, called by the sync transport).

fit() only calls the summarizer when history does not fit; when it fails, fit() drops
instead and says so in the plan's warnings. A summarizer's ``timeout`` is a deadline for
the whole call, not per read (a trickling server cannot hold a request longer), and its
answer is read up to :data:`SUMMARY_MAX_BYTES`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from ..models import Model
from ..summarize.background import pause_for_clients
from .config import ServerConfig
from .limits import bounded_transports

__all__ = ["SUMMARY_MAX_BYTES", "build_summarizer", "calls_upstream"]

UPSTREAM_SUMMARY_TIMEOUT = 60.0
SUMMARY_MAX_BYTES = 1024 * 1024
"""Largest summarizer answer read (a summary is a few KB; more is a broken server)."""
CHAT_SUMMARIZER_TIMEOUT = 30.0  # ChatSummarizer's own default
Wrap = Callable[
    [httpx.BaseTransport, httpx.AsyncBaseTransport],
    tuple[httpx.BaseTransport, httpx.AsyncBaseTransport],
]
"""Wraps a summarizer's sync and async transports."""


def calls_upstream(options: dict[str, Any], config: ServerConfig) -> bool:
    """Whether the summarizer ``options`` choose calls the proxy's upstream: the upstream
    summarizer, or a ``summarizer = {base_url = ...}`` on the same scheme, host and port
    (the server the proxy's clients are using)."""
    spec = options.get("summarizer")
    if spec is None or spec == "upstream":
        return True
    if not isinstance(spec, dict):
        return False
    try:
        theirs, ours = httpx.URL(str(spec.get("base_url", ""))), httpx.URL(config.upstream)
    except httpx.InvalidURL:
        return False
    return (theirs.scheme, theirs.host, theirs.port) == (ours.scheme, ours.host, ours.port)


def build_summarizer(
    options: dict[str, Any],
    *,
    config: ServerConfig,
    model: Model,
    request_model: str,
    api_key: str | None,
    transports: Wrap | None = None,
) -> Any:
    """The summarizer for one request (None when summarizing is off); pops the two keys.

    Summarizers are cheap objects without connections, so one is built per request: the
    upstream summarizer then carries that request's own key. ``transports`` wraps the
    HTTP transports of a summarizer that calls a server (the proxy counts its calls).
    """
    spec = options.pop("summarizer", None)
    if not options.pop("summarize", spec is not None):
        return None
    from ..summarize import ChatSummarizer, ExtractiveSummarizer

    if spec == "extractive":
        return ExtractiveSummarizer()
    if spec is None or spec == "upstream":
        key = config.upstream_api_key.get_secret_value() if config.upstream_api_key else api_key
        timeout = min(config.read_timeout, UPSTREAM_SUMMARY_TIMEOUT)
        transport, async_transport = bounded_transports(
            timeout, SUMMARY_MAX_BYTES, what="upstream summarizer", before=pause_for_clients
        )
        if transports is not None:
            transport, async_transport = transports(transport, async_transport)
        return ChatSummarizer(
            f"{config.upstream}/v1",
            request_model,
            key,
            timeout=timeout,
            context_window=model.context_window,
            transport=transport,
            async_transport=async_transport,
        )
    table = dict(spec)
    transport, async_transport = bounded_transports(
        float(table.get("timeout", CHAT_SUMMARIZER_TIMEOUT)),
        SUMMARY_MAX_BYTES,
        what="summarizer",
        before=pause_for_clients,  # a job bound to the upstream's activity pauses there
    )
    if transports is not None:
        transport, async_transport = transports(transport, async_transport)
    return ChatSummarizer(
        table.pop("base_url"),
        table.pop("model"),
        table.pop("api_key", None),
        transport=transport,
        async_transport=async_transport,
        **table,
    )
