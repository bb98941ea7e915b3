"""The wire formats the proxy fits: one route (or a few) per registered request format.

Each :class:`Wire` is one route of a :class:`~tokenflex.formats.base.RequestFormat`: how
its body is parsed (the format's :meth:`~tokenflex.formats.base.RequestFormat.parse`),
which upstream path the fitted body goes to, what the fitted body looks like and how the
proxy's own errors are shaped (the format's ``error_json`` / ``stream_error``). The
routes are built from the format registry (:func:`wires`); the pipeline (read, check,
fit, keep the plan, forward, stream back) is the one in :mod:`tokenflex.server.app`.

- ``POST /v1/chat/completions``: chat; ``messages`` and the output limit replaced;
- ``POST /v1/messages``: Anthropic Messages; ``system``, ``messages`` and ``max_tokens``
  replaced by the plan's; errors in Anthropic's shape
  (``{"type": "error", "error": {"type", "message"}}``);
- ``POST /v1/responses``: ``instructions``, ``input`` and ``max_output_tokens`` replaced;
  ``previous_response_id`` and every other field passed through untouched (the context
  the upstream keeps for it is not seen, so not counted);
- ``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent``: Gemini,
  converted to chat, fitted as chat (so the count is of what the upstream reads) and
  sent to the OpenAI-compatible upstream
  (:attr:`~tokenflex.formats.base.RequestFormat.via_chat`); the answer is converted back
  (a stream is the whole answer as one event); errors in Google's shape;
- the count routes (``/v1/messages/count_tokens`` -> ``{"input_tokens": n}``,
  ``/v1/responses/input_tokens`` -> ``{"object": "response.input_tokens",
  "input_tokens": n}``, ``/v1beta/models/{model}:countTokens`` -> ``{"totalTokens": n}``):
  answered from the proxy's own count (what fitting budgets with), never forwarded, so
  they work in front of any upstream.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse, Response

from ..formats.base import RequestFormat
from ..formats.registry import default_format, formats, get_format
from ..formats.request import request_body
from ..models import Model
from ..recall import with_recall_tool
from ._fitter import Fitter
from ._validate import ChatRequest, ParsedBodies, dump_json, parse_json, parse_request
from .config import split_options
from .errors import ProxyError

__all__ = [
    "Wire",
    "as_sent",
    "chat_body",
    "count_input",
    "fitted_body",
    "openai_error",
    "wire_for",
    "wires",
]


def openai_error(exc: ProxyError) -> Response:
    """The proxy's own error in OpenAI's shape (the routes that are not a format's)."""
    return exc.to_response()


@dataclass(frozen=True, slots=True)
class Wire:
    """One route of a request format as the proxy serves it."""

    format: RequestFormat
    """The request format (its parse, body, tool shape and error shape)."""
    path: str
    """The route (``{model}``: the model's name, for APIs that put it in the path)."""
    count: bool = False
    """The format's token-count route: answered by the proxy, never forwarded."""
    stream: bool = False
    """A route whose answer is always a stream (Gemini's ``streamGenerateContent``)."""

    @property
    def name(self) -> str:
        """The library's format name."""
        return self.format.name

    @property
    def upstream_path(self) -> str:
        """Where the fitted body goes: this route, or chat's for a format the proxy
        sends as chat."""
        if self.format.via_chat:
            return default_format().path or "/v1/chat/completions"
        return self.path

    def parse(
        self,
        raw: bytes,
        model: str | None = None,
        *,
        bodies: ParsedBodies | None = None,
        owner: str = "",
    ) -> ChatRequest:
        """Parses and checks a body (a 400 :class:`ProxyError` when it is bad);
        ``model``: the route's ``{model}``; ``bodies``: ``owner``'s bodies parsed lately
        (:class:`~tokenflex.server._validate.ParsedBodies`)."""
        return parse_request(self.format, raw, model, bodies=bodies, owner=owner)

    def reparse(self, raw: bytes) -> tuple[list[Any], Any]:
        """The messages and system prompt of a body parsed before (a kept plan's
        conversation is read back from its request when the plan is asked for)."""
        req = self.parse(raw, "")
        return req.messages, req.system

    def error(self, exc: ProxyError) -> Response:
        """The proxy's own error on this route, in the format's shape (status and
        headers as the error says)."""
        body = self.format.error_json(
            exc.status_code, exc.message, type=exc.type, code=exc.code, param=exc.param
        )
        return Response(
            json.dumps(body, ensure_ascii=False).encode(),
            status_code=exc.status_code,
            headers=exc.headers,
            media_type="application/json",
        )

    def stream_error(self, exc: ProxyError) -> bytes:
        """The last event of a stream the upstream broke off, in the format's shape."""
        return self.format.stream_error(
            exc.status_code, exc.message, type=exc.type, code=exc.code, param=exc.param
        )

    def answer(self, response: Response, query: str) -> Response:
        """The upstream's buffered answer as the client's format: as it came, unless
        the format was sent as chat (then converted back; as one server-sent event
        with ``alt=sse``, else a one-element JSON array, on a streaming route)."""
        if not self.format.via_chat:
            return response
        status = response.status_code
        try:
            data = parse_json(bytes(response.body))
        except ProxyError:
            data = {"error": {"message": bytes(response.body)[:2000].decode("utf-8", "replace")}}
        answer = self.format.from_chat_answer(status, data)
        # the upstream's other headers as they came (a name given twice, twice)
        kept = [(k, v) for k, v in response.raw_headers if k not in _REMADE]
        text = json.dumps(answer, ensure_ascii=False).encode()
        if not self.stream or status >= 400:
            out = Response(text, status, media_type="application/json")
        elif "alt=sse" in query:
            out = Response(b"data: " + text + b"\r\n\r\n", status, media_type="text/event-stream")
        else:
            out = Response(b"[" + text + b"]", status, media_type="application/json")
        out.raw_headers[:0] = kept
        return out


_REMADE = (b"content-length", b"content-type", b"content-encoding")
"""The headers of an answer converted back to its format that the conversion makes."""


def wire_for(fmt: RequestFormat) -> list[Wire]:
    """The routes of one format (none: the proxy does not serve it)."""
    out = [Wire(fmt, p) for p in (fmt.path,) if p is not None]
    out += [Wire(fmt, p, stream=True) for p in (fmt.stream_path,) if p is not None]
    out += [Wire(fmt, p, count=True) for p in (fmt.count_path,) if p is not None]
    return out


def wires() -> list[Wire]:
    """Every route of every registered format (the proxy's route table)."""
    return [w for f in formats() for w in wire_for(f)]


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

    Chat is :meth:`Fitter.fitted_body`. Another format gets its conversation, system
    and output limit from the plan (``max_tokens`` always for Anthropic, which requires
    it; Responses' ``max_output_tokens`` when the client sent it or the options do not
    say ``add_max_tokens = false``). A format the proxy sends as chat is
    :func:`chat_body` (``plan`` None: the request as it came, converted). The model is
    replaced only when the plan fell back to another one; every other field is the
    client's.
    """
    fmt = _format(req)
    if fmt.via_chat:
        return chat_body(req, plan)
    if raw is not None and unchanged(req, plan):
        return raw
    if fmt.internal:
        return fitter.fitted_body(req, plan, route)
    body = with_recall_tool(dict(req.body), plan)
    if plan.fallback_from is not None:
        body["model"] = plan.model.name
    body[fmt.items_key] = plan.messages
    if plan.system is not None and fmt.system_key is not None:
        body[fmt.system_key] = plan.system
    _, proxy_options, _ = split_options(fitter.config.options_for(req.model, route))
    if (
        fmt.limit_required
        or req.max_tokens is not None
        or proxy_options.get("add_max_tokens", True)
    ):
        fmt.set_limit(body, plan.max_tokens)
    return dump_json(body)


def _format(req: ChatRequest) -> RequestFormat:
    return get_format(req.format)


def as_sent(req: ChatRequest, raw: bytes) -> bytes:
    """The body of a request forwarded unfitted (an unknown model, observe mode): the
    client's bytes, converted to chat for a format the proxy sends as chat."""
    return chat_body(req, None) if _format(req).via_chat else raw


_CHAT_FIELDS = {"temperature": "temperature", "topP": "top_p", "stopSequences": "stop"}
"""generationConfig fields carried into the chat body (the rest is not)."""


def chat_body(req: ChatRequest, plan: Any) -> bytes:
    """The chat body for a request of a :attr:`~RequestFormat.via_chat` format: the
    plan's (or, with no plan, the request's own) conversation, tools and output limit
    converted to chat; ``temperature``, ``topP`` and ``stopSequences`` carried over;
    never streamed (the answer is converted back whole)."""
    chat = default_format()
    fmt = _format(req)
    if plan is not None:
        body = plan.request(api=chat.name)
        if plan.fallback_from is None:
            body["model"] = req.model
    else:
        body = request_body(
            chat.name,
            fmt=fmt.name,
            model=req.model,
            messages=req.messages,
            system=req.system,
            max_tokens=req.max_tokens or 0,
            tools=req.tools or (),
        )
        if req.max_tokens is None:
            body = {k: v for k, v in body.items() if not k.startswith("max_")}
    config = req.body.get("generationConfig")
    for given, name in _CHAT_FIELDS.items():
        if isinstance(config, dict) and config.get(given) is not None:
            body[name] = config[given]
    body["stream"] = False
    return dump_json(body)


def count_input(req: ChatRequest, model: Model) -> Response:
    """The answer to a count route: the request's input tokens as the proxy counts them
    (conversation, system and tools; no output), in the format's own shape.

    Raises:
        TokenflexError: a message or tool the format's converter or the counter refuses.
    """
    from ..counting import get_counter
    from ..roundtrip import prepare

    fmt = _format(req)
    if fmt.via_chat:  # counted as it is fitted and sent: as chat
        prepared = prepare(
            fmt.to_chat(req.messages, req.system), format=None, system=None, tools=req.tools
        )
    else:
        prepared = prepare(req.messages, format=req.format, system=req.system, tools=req.tools)
    tokens = get_counter(model).count(list(prepared.messages), tools=prepared.tools)
    return JSONResponse(fmt.count_answer(tokens))
