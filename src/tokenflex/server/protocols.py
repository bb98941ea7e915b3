"""The wire formats the proxy fits: OpenAI chat, Anthropic Messages and OpenAI Responses.

Each :class:`Wire` says how one route's body is parsed, which upstream path it goes to,
what the fitted body looks like and how the proxy's own errors are shaped. The pipeline
(read, check, fit, keep the plan, forward, stream back) is the chat one in
:mod:`tokenflex.server.app`; the conversion between formats is the library's
(:mod:`tokenflex.formats`): a Messages or Responses request is fitted in its own format
and sent on in it.

- ``POST /v1/messages``: Anthropic Messages; ``system``, ``messages`` and ``max_tokens``
  replaced by the plan's; errors in Anthropic's shape
  (``{"type": "error", "error": {"type", "message"}}``);
- ``POST /v1/responses``: ``instructions``, ``input`` and ``max_output_tokens`` replaced;
  ``previous_response_id`` and every other field passed through untouched (the context
  the upstream keeps for it is not seen, so not counted);
- ``POST /v1/messages/count_tokens`` -> ``{"input_tokens": n}`` and
  ``POST /v1/responses/input_tokens`` -> ``{"object": "response.input_tokens",
  "input_tokens": n}``: answered from the proxy's own count (what fitting budgets with),
  never forwarded, so they work in front of any upstream.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse, Response

from ..models import Model
from ..recall import with_recall_tool
from ._fitter import Fitter
from ._upstream import openai_error_event
from ._validate import ChatRequest, parse_anthropic, parse_chat, parse_responses
from .config import split_options
from .errors import ProxyError

__all__ = [
    "ANTHROPIC",
    "CHAT",
    "RESPONSES",
    "Wire",
    "anthropic_error",
    "anthropic_error_event",
    "count_input",
    "fitted_body",
    "openai_error",
    "responses_error_event",
]

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def openai_error(exc: ProxyError) -> Response:
    """The proxy's own error in OpenAI's shape (chat and Responses routes)."""
    return exc.to_response()


def anthropic_error(exc: ProxyError) -> Response:
    """The proxy's own error in Anthropic's shape, so the ``anthropic`` SDK raises the
    matching exception with our message; the status and headers are the same.

    >>> json.loads(anthropic_error(ProxyError(404, "no such plan")).body)
    {'type': 'error', 'error': {'type': 'not_found_error', 'message': 'no such plan'}}
    """
    kind = _ANTHROPIC_TYPES.get(exc.status_code)
    if kind is None:
        kind = "api_error" if exc.status_code >= 500 else "invalid_request_error"
    body = {"type": "error", "error": {"type": kind, "message": exc.message}}
    return Response(
        json.dumps(body, ensure_ascii=False).encode(),
        status_code=exc.status_code,
        headers=exc.headers,
        media_type="application/json",
    )


def anthropic_error_event(exc: ProxyError) -> bytes:
    """A cut ``/v1/messages`` stream's last event: Anthropic's ``event: error``, which the
    ``anthropic`` SDK raises as an ``APIStatusError`` (an OpenAI-shaped event it skips,
    and the user would get an empty message that looks complete)."""
    kind = _ANTHROPIC_TYPES.get(exc.status_code) or (
        "api_error" if exc.status_code >= 500 else "invalid_request_error"
    )
    body = {"type": "error", "error": {"type": kind, "message": exc.message}}
    return b"event: error\ndata: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


def responses_error_event(exc: ProxyError) -> bytes:
    """A cut ``/v1/responses`` stream's last event: the Responses API's own ``error``
    event (``{"type": "error", "code", "message", "param", "sequence_number"}``), never
    followed by ``response.completed``."""
    body = {
        "type": "error",
        "code": exc.code,
        "message": exc.message,
        "param": exc.param,
        "sequence_number": 0,  # the upstream's numbering is not tracked: passed through
    }
    return b"event: error\ndata: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


@dataclass(frozen=True, slots=True)
class Wire:
    """One request format as the proxy serves it."""

    name: str
    """The library's format name: ``chat``, ``anthropic`` or ``responses``."""
    path: str
    """The route, and the upstream path the fitted body is sent to."""
    count_path: str | None
    """The token-count route of this format (None: chat has none)."""
    parse: Callable[[bytes], ChatRequest]
    """Parses and checks a body (a 400 :class:`ProxyError` when it is bad)."""
    error: Callable[[ProxyError], Response]
    """The proxy's own errors on this format's routes."""
    stream_error: Callable[[ProxyError], bytes] = openai_error_event
    """The last event of a stream the upstream broke off, in this format's shape."""

    def reparse(self, raw: bytes) -> tuple[list[Any], Any]:
        """The messages and system prompt of a body parsed before (a kept plan's
        conversation is read back from its request when the plan is asked for)."""
        req = self.parse(raw)
        return req.messages, req.system


CHAT = Wire("chat", "/v1/chat/completions", None, parse_chat, openai_error)
ANTHROPIC = Wire(
    "anthropic",
    "/v1/messages",
    "/v1/messages/count_tokens",
    parse_anthropic,
    anthropic_error,
    anthropic_error_event,
)
RESPONSES = Wire(
    "responses",
    "/v1/responses",
    "/v1/responses/input_tokens",
    parse_responses,
    openai_error,
    responses_error_event,
)


def unchanged(req: ChatRequest, plan: Any) -> bool:
    """Whether ``plan`` sends ``req`` as the client sent it
    (:meth:`~tokenflex.Plan.sends_as_given`), the output fields included."""
    limits = (req.body.get(f) for f in _OUTPUT_FIELDS)
    return bool(plan.sends_as_given(req.messages, req.system, limits))


_OUTPUT_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def fitted_body(
    fitter: Fitter, req: ChatRequest, plan: Any, route: str | None, raw: bytes | None = None
) -> bytes:
    """The JSON body to forward: the client's, with the plan's conversation and limit.

    Do no harm: a request the plan sends as it came (:func:`unchanged`) is forwarded as
    the client's own bytes, ``raw``.

    Chat is :meth:`Fitter.fitted_body`. Anthropic always gets ``max_tokens`` (the API
    requires it); Responses gets ``max_output_tokens`` when the client sent it or the
    options do not say ``add_max_tokens = false``. The model is replaced only when the
    plan fell back to another one; every other field is the client's.
    """
    if raw is not None and unchanged(req, plan):
        return raw
    if req.format == "chat":
        return fitter.fitted_body(req, plan, route)
    body = with_recall_tool(dict(req.body), plan)
    if plan.fallback_from is not None:
        body["model"] = plan.model.name
    if req.format == "anthropic":
        body["messages"] = plan.messages
        if plan.system is not None:
            body["system"] = plan.system
        body["max_tokens"] = plan.max_tokens
    else:
        body["input"] = plan.messages
        if plan.system is not None:
            body["instructions"] = plan.system
        _, proxy_options, _ = split_options(fitter.config.options_for(req.model, route))
        if req.max_tokens is not None or proxy_options.get("add_max_tokens", True):
            body["max_output_tokens"] = plan.max_tokens
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def count_input(req: ChatRequest, model: Model) -> Response:
    """The answer to a count route: the request's input tokens as the proxy counts them
    (conversation, system and tools; no output), in the format's own shape.

    Raises:
        TokenflexError: a message or tool the format's converter or the counter refuses.
    """
    from ..counting import get_counter
    from ..formats.fitting import prepare

    prepared = prepare(req.messages, format=req.format, system=req.system, tools=req.tools)
    tokens = get_counter(model).count(list(prepared.messages), tools=prepared.tools)
    if req.format == "anthropic":
        return JSONResponse({"input_tokens": tokens})
    return JSONResponse({"object": "response.input_tokens", "input_tokens": tokens})
