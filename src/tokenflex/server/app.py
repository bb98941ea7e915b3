"""The proxy as a Starlette app: every chat request is fitted before it goes upstream.

Routes (``/ROUTE/...`` repeats the ``/v1`` ones for each ``[routes.ROUTE]`` table):

- ``POST /v1/chat/completions``: parse, check, fit with :func:`tokenflex.afit`, forward
  the fitted body, stream or return the upstream's answer unchanged, plus ``x-tokenflex-*``
  headers with the plan summary;
- ``POST /v1/messages`` (Anthropic) and ``POST /v1/responses``: the same, fitted in their
  own format, and their count routes ``/v1/messages/count_tokens`` and
  ``/v1/responses/input_tokens`` (see :mod:`tokenflex.server.protocols`);
- ``GET /v1/models``: the upstream's list (or the config's models when it has none);
- ``POST /tokenflex/count`` (alias ``/v1/tokenize``): ``{"model", "messages" | "text"}``
  -> ``{"tokens": n, ...}``;
- ``GET /tokenflex/plans/{id}``: a recent plan, in full; ``GET /tokenflex/plans``: the
  caller's recent plans; ``GET /tokenflex/ui``: a page that shows them;
  ``GET /tokenflex/health``; ``GET /metrics``: Prometheus metrics;
- ``GET /tokenflex/recall/{id}``: what a plan left out under a recall id (same
  credentials only); non-streamed answers that call ``tokenflex_recall`` are resolved
  by the proxy (:mod:`tokenflex.recall`);
- the fitted routes' other spellings (a trailing slash, no ``/v1``): fitted the same;
  any other spelling an upstream may read as one of them is refused, never passed on;
- anything else: passed through to the upstream unchanged.

Errors the proxy makes itself are OpenAI-shaped (Anthropic-shaped on the Anthropic
routes); upstream errors come back with their own
status and body; an unexpected exception becomes an OpenAI-shaped 500 carrying the
request id (the log has the traceback), never a bare one.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..calibration import Calibration
from ..counting.provider import with_provider_counts
from ..errors import TokenflexError
from ..models import load_models_file
from ..recall import MAX_ROUNDS
from ..redact import RedactingFilter, redact, request_secrets
from ..roundtrip import replay
from ..tokenizers import prefer_fast_backend
from ..tracing import plan_changed
from ._calibration import UsageTap, calibration_figures, observe_response
from ._fitter import (
    Fitter,
    Observation,
    Unfitted,
    inline_bytes,
    off_loop,
    plan_headers,
    tokenizer_panic,
)
from ._models import Discover, ModelResolver, display_name
from ._upstream import Upstream, check_proxy_key
from ._validate import ChatRequest, ParsedBodies, parse_count
from .config import ServerConfig, check_fit_options, check_models
from .errors import ProxyError, error_response
from .limits import Busy, LargeBodies, Limits
from .metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .metrics import ProxyMetrics, exc_kind
from .paths import aliases, fitted_variant, path_allowed, upstream_path
from .plans import (
    CREDENTIAL_HEADERS,
    LAZY_DROPPED,
    KeptPlan,
    Later,
    LivePlan,
    PlanStore,
    credential_hash,
    defer,
    held_bytes,
    new_plan_id,
    request_owner,
    scope_headers,
)
from .protocols import Wire, as_sent, count_input, fitted_body, openai_error, wires
from .ui import ui_routes

__all__ = ["Proxy", "create_app"]

log = logging.getLogger("tokenflex")

Handler = Callable[[Request, "str | None"], Awaitable[Response]]
_DRAIN_BYTES = 64 * 1024 * 1024  # read (and discard) this much of an oversized body ...
_DRAIN_SECONDS = 10.0  # ... for at most this long, so the client can read the 413
# Starlette routes to plain functions default to GET only; pass-through takes every method.
_ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
_POST = ("POST",)
FITTED_PATHS = frozenset(w.path for w in wires() if "{" not in w.path)
"""The routes whose requests are fitted (or counted): never passed through in any
spelling (:func:`~tokenflex.server.paths.fitted_variant`)."""
_GET = ("GET", "HEAD")


async def drain(chunks: AsyncIterator[bytes], limit: int = _DRAIN_BYTES) -> None:
    """Read and discard what is left of a request body (at most ``limit`` bytes, for at
    most ``_DRAIN_SECONDS``): a client still sending when the connection closes gets a
    reset instead of our answer."""
    seen = 0
    with anyio.move_on_after(_DRAIN_SECONDS), contextlib.suppress(Exception):
        async for chunk in chunks:
            seen += len(chunk)
            if seen > limit:
                break


def too_large(size: int, limit: int, declared: bool) -> ProxyError:
    """The 413 for a body of ``size`` bytes (a lower bound unless ``declared``)."""
    shown = f"{size:,} bytes (Content-Length)" if declared else f"over {limit:,} bytes"
    return ProxyError(
        413,
        f"The request body is {shown}; this proxy accepts at most {limit:,} "
        "(max_body_bytes). Send a shorter conversation or raise max_body_bytes.",
        code="request_too_large",
    )


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, or a 413 when it is over ``limit`` bytes.

    A declared Content-Length over the limit is answered without keeping any of the
    body; the rest is drained (bounded) first so the client can read the 413.
    """
    declared = scope_headers(request.scope).get("content-length", "").strip()
    stream = request.stream()
    if declared.isdigit() and int(declared) > limit:
        await drain(stream)
        raise too_large(int(declared), limit, declared=True)
    chunks: list[bytes] = []
    size = 0
    async for chunk in stream:
        size += len(chunk)
        if size > limit:
            await drain(stream)
            raise too_large(size, limit, declared=False)
        if chunk:  # (the stream ends with b"": a body in one chunk is not copied)
            chunks.append(chunk)
    return b"".join(chunks)


def check_json_request(request: Request) -> None:
    """415 for a fitted route's body that is encoded or not declared as JSON."""
    headers = scope_headers(request.scope)
    encoding = headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        raise ProxyError(
            415,
            f"Content-Encoding {encoding[:40]!r} is not accepted: send the JSON body "
            "uncompressed (no Content-Encoding header).",
            code="unsupported_media_type",
        )
    media = headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        shown = f"Content-Type {media[:60]!r}" if media else "no Content-Type"
        raise ProxyError(
            415,
            f"The request has {shown}; this endpoint takes a JSON body. Send "
            "'Content-Type: application/json'.",
            code="unsupported_media_type",
        )


def host_allowed(host: str, patterns: Sequence[str]) -> bool:
    """Whether a ``Host`` header (port removed) matches one of ``patterns``.

    >>> host_allowed("proxy.local:8787", ["proxy.local"]), host_allowed("evil.com", ["*.local"])
    (True, False)
    >>> host_allowed("[::1]:8787", ["::1"])
    True
    """
    name = host.strip().lower()
    if name.startswith("["):
        name = name[1:].partition("]")[0]
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    return any(fnmatch.fnmatchcase(name, p.lower()) for p in patterns)


def request_credentials(request: Request) -> list[str]:
    """The credential values a request carries (its keys, and bearer tokens alone)."""
    headers = scope_headers(request.scope)
    values = [headers.get(name, "") for name in CREDENTIAL_HEADERS]
    values += [v.partition(" ")[2].strip() for v in values if " " in v]
    return [v for v in values if v]


def peer(request: Request) -> str | None:
    """The client's address as the proxy sees it (for ``forwarded_for``)."""
    return request.client.host if request.client is not None else None


def bearer(headers: dict[str, str]) -> str | None:
    """The bearer token in forwarded headers (never the proxy key: it is removed)."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


class Proxy:
    """The proxy's state (config, upstream client, models, fitter, plan store) and endpoints."""

    def __init__(self, config: ServerConfig, *, discover: Discover | None = None) -> None:
        self.config = config
        self.upstream = Upstream(config)
        self.models = ModelResolver(config, discover)
        self.calibration = Calibration()
        self.fitter = Fitter(config, self.models, self.calibration if config.calibrate else None)
        self.plans = PlanStore(max_plans=config.plans_max, max_bytes=config.plans_max_bytes)
        self.keeps_plans = config.store_plans and config.plans_max > 0
        self.metrics = ProxyMetrics(config, self.calibration if config.calibrate else None)
        self.fitter.store = self.metrics.store(self.fitter.store)
        self.fitter.summarizer_transports = self.metrics.summarizer_transports
        self.large = LargeBodies(config)
        """Large requests are counted one at a time (``large_body_bytes``)."""
        self.bodies = ParsedBodies(config.parsed_bodies_max_bytes)
        """Bodies parsed lately, by client: a conversation's next turn reuses their items."""

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """Open the shared upstream connections before serving; close them at shutdown. (The
        configured models' tokenizers were loaded and checked by :func:`create_app`.)
        A long-running proxy counts OpenAI encodings with fastokens when it is installed
        (same ids as tiktoken, faster); without it, tiktoken."""
        _ = self.upstream.transport
        self.fitter.background.open()  # closed by a previous shutdown of this app
        fast = prefer_fast_backend()
        log.info("tokenflex proxy: %s", f"fastokens for {', '.join(fast)}" if fast else "tiktoken")
        log.info("tokenflex proxy: forwarding to %s", redact(self.config.upstream))
        try:
            yield
        finally:
            self.fitter.background.close()
            await self.upstream.aclose()

    def endpoint(
        self,
        handler: Handler,
        *,
        route: str | None = None,
        auth: bool = True,
        methods: Sequence[str] | None = None,
        json_body: bool = False,
        errors: Callable[[ProxyError], Response] = openai_error,
    ) -> Callable[[Request], Awaitable[Response]]:
        """Wrap a handler: request id, Host allowlist, CORS, proxy key, method (405) and
        JSON body (415) checks, redaction of the request's keys in logs, errors shaped by
        ``errors`` (OpenAI's by default), no bare 500."""

        async def run(request: Request) -> Response:
            rid = "req_" + secrets.token_hex(8)
            request.state.request_id = rid
            origin = self._cors_origin(request)
            with request_secrets(request_credentials(request)):
                try:
                    response = await self._checked(
                        request, route, handler, auth, methods, json_body
                    )
                except ProxyError as exc:
                    response = errors(exc)
                except Exception:
                    log.exception("request %s: unexpected error in %s", rid, request.url.path)
                    response = errors(internal_proxy_error(rid))
                except BaseException as exc:  # a tokenizer's panic is one; it must not escape
                    panic = tokenizer_panic(exc)
                    if panic is None:
                        raise
                    response = errors(panic)
            response.headers["x-tokenflex-request-id"] = rid
            if origin is not None:
                response.headers["access-control-allow-origin"] = origin
                response.headers["vary"] = "Origin"
            return response

        return run

    async def _checked(
        self,
        request: Request,
        route: str | None,
        handler: Handler,
        auth: bool,
        methods: Sequence[str] | None,
        json_body: bool,
    ) -> Response:
        c = self.config
        if c.allowed_hosts is not None and not host_allowed(
            request.headers.get("host", ""), c.allowed_hosts
        ):
            host = request.headers.get("host", "")
            raise ProxyError(
                421,
                f"Host {host[:80]!r} is not served here; allowed hosts: "
                f"{', '.join(c.allowed_hosts)} (allowed_hosts).",
                code="host_not_allowed",
            )
        if request.method == "OPTIONS" and self._cors_origin(request) is not None:
            return self._preflight(request)
        if auth and not check_proxy_key(c, request.headers):
            raise ProxyError(
                401,
                "Missing or wrong proxy key. Send it as 'x-tokenflex-key: KEY' or "
                "'Authorization: Bearer KEY'.",
                code="invalid_api_key",
            )
        if methods is not None and request.method not in methods:
            raise ProxyError(
                405,
                f"{request.method} is not allowed on {request.url.path}; use "
                f"{' or '.join(m for m in methods if m != 'HEAD')}.",
                code="method_not_allowed",
                headers={"allow": ", ".join(methods)},
            )
        if json_body:
            check_json_request(request)
        return await handler(request, route)

    def _cors_origin(self, request: Request) -> str | None:
        """The request's Origin when ``cors_origins`` lets it in (``*``: any)."""
        origin = scope_headers(request.scope).get("origin")
        allowed = self.config.cors_origins
        if origin is None or not allowed:
            return None
        return origin if ("*" in allowed or origin in allowed) else None

    def _preflight(self, request: Request) -> Response:
        asked = request.headers.get("access-control-request-headers", "")
        return Response(
            status_code=204,
            headers={
                "access-control-allow-methods": ", ".join(_ALL_METHODS),
                "access-control-allow-headers": asked[:1000] or "content-type, authorization",
                "access-control-max-age": "600",
            },
        )

    # -- chat ------------------------------------------------------------------------
    async def chat(self, request: Request, route: str | None, wire: Wire) -> Response:
        """``POST /v1/chat/completions`` (or ``wire``'s route): fit, forward, pass the
        answer back."""
        started = time.perf_counter()
        rid: str = request.state.request_id
        status, note, plan, plan_id, fit_ms = 0, "", None, "", 0.0
        record, error = self.metrics.record(wire.name, route, request.headers), ""
        try:
            raw = await read_body(request, self.config.max_body_bytes)
            owner = request_owner(request.scope, request.headers)
            req = wire.parse(raw, request.path_params.get("model"), bodies=self.bodies, owner=owner)
            raw = req.raw or raw  # (the same body again: the copy kept, this one let go)
            record.requested(req.model)
            note = f"model={display_name(req.model)!r} stream={'yes' if req.stream else 'no'}"
            forward_headers = self.upstream.request_headers(request.headers, peer(request))
            learned: int | None = None  # a window the upstream's refusal taught: one retry
            sent_raw: bytes | None = raw  # the client's bytes (None once recall appended)
            rounds = 0  # tokenflex_recall calls this proxy answered itself
            while True:
                async with self.large.turn(len(raw)):
                    plan = await self.fitter.fit(
                        req, route, len(raw), bearer(forward_headers), owner=owner
                    )
                if isinstance(plan, Unfitted):  # forwarded as sent (unknown model)
                    headers, body, plan = plan.headers(), as_sent(req, raw), None
                else:
                    fit_ms = (time.perf_counter() - started) * 1000
                    record.planned(plan, fit_ms / 1000, plan_changed(plan, req.requested_output))
                    if not rounds:  # a recall round's plan is the first one's, grown
                        plan_id = await self._keep(plan, owner, raw, req, wire)
                    headers = plan_headers(plan, plan_id)
                    body = fitted_body(self.fitter, req, plan, route, sent_raw)
                if rounds:
                    headers["x-tokenflex-recall-rounds"] = str(rounds)
                if learned is not None:
                    headers["x-tokenflex-learned-window"] = str(learned)
                upstream = await self.upstream.send(
                    "POST", self._upstream_url(request, wire), forward_headers, body
                )
                status = upstream.status_code
                if req.stream and status < 400:
                    record.answered(status, None)
                    tap = self._usage_tap(plan, owner)
                    return self.upstream.streamed(
                        upstream, headers, request_id=rid, tap=tap, error_event=wire.stream_error
                    )
                response = await self.upstream.buffered(upstream, headers)
                record.answered(status, bytes(response.body))
                if status >= 400 and learned is None:
                    learned = self.fitter.learn_window(
                        req.model, status, bytes(response.body), plan
                    )
                    if learned is not None:
                        continue  # refit into the window the refusal states, send once more
                inline = len(raw) <= inline_bytes(req.format)
                await self._observe_usage(plan, owner, response, inline=inline)
                response = wire.answer(response, query_string(request))
                if status < 400 and rounds < MAX_ROUNDS:
                    again = self.fitter.recall_round(req, plan, bytes(response.body), owner, route)
                    if again is not None:  # the model asked for what was left out: answer it
                        req, sent_raw, rounds = again, None, rounds + 1
                        continue
                return response
        except ProxyError as exc:
            status = exc.status_code
            note += f" error={exc.code}"
            error = exc_kind(exc)
            raise
        finally:
            record.finish(status, error=error)
            if plan is not None:
                log.info(
                    "%s %s %s status=%d window=%d input=%d max_tokens=%d (asked %d) "
                    "dropped=%d summary=%s plan=%s fit_ms=%.1f total_ms=%.1f",
                    wire.name,
                    rid,
                    note,
                    status,
                    plan.context_window,
                    plan.input_tokens,
                    plan.max_tokens,
                    plan.requested_max_tokens,
                    len(plan.dropped),
                    "yes" if plan.summary is not None else "no",
                    plan_id or "-",
                    fit_ms,
                    (time.perf_counter() - started) * 1000,
                )
            else:
                log.info("%s %s %s status=%d (not fitted)", wire.name, rid, note.strip(), status)

    async def observe(self, request: Request, route: str | None, wire: Wire) -> Response:
        """A fitted route in ``mode = "observe"``: the client's body is forwarded byte for
        byte; the plan fit mode would have sent is made, kept and reported in
        ``x-tokenflex-would-*`` headers (:class:`~tokenflex.server._fitter.Observation`).
        What fit mode would refuse is forwarded too, with ``x-tokenflex-would-refuse``."""
        started = time.perf_counter()
        rid: str = request.state.request_id
        status, plan_id, fit_ms = 0, "", 0.0
        seen: Observation | None = None
        record, error = self.metrics.record(wire.name, route, request.headers), ""
        try:
            raw = await read_body(request, self.config.max_body_bytes)
            forward_headers = self.upstream.request_headers(request.headers, peer(request))
            owner = request_owner(request.scope, request.headers)
            async with self.large.turn(len(raw)):
                parse = functools.partial(
                    wire.parse,
                    model=request.path_params.get("model"),
                    bodies=self.bodies,
                    owner=owner,
                )
                seen = await self.fitter.observe(
                    parse, raw, route, bearer(forward_headers), owner=owner
                )
            fit_ms = (time.perf_counter() - started) * 1000
            if seen.request is not None:
                record.requested(seen.request.model)
            if seen.plan is not None:
                record.planned(seen.plan, fit_ms / 1000, seen.changes)
            if seen.plan is not None and seen.request is not None:
                kept = seen.request.raw or raw  # (as chat does: one copy of a body sent again)
                plan_id = await self._keep(seen.plan, owner, kept, seen.request, wire)
            if seen.request is not None:
                raw = as_sent(seen.request, raw)
            elif wire.format.via_chat and seen.refusal is not None:
                raise seen.refusal  # a body that cannot be converted cannot be sent on
            url = self._upstream_url(request, wire)
            upstream = await self.upstream.send("POST", url, forward_headers, raw)
            status = upstream.status_code
            headers = seen.headers(plan_id)
            counted = None if seen.changes else seen.plan  # calibrate on the body it counted
            if seen.request is None or (seen.request.stream and status < 400):
                record.answered(status, None)
                tap = self._usage_tap(counted, owner)
                return self.upstream.streamed(
                    upstream, headers, request_id=rid, tap=tap, error_event=wire.stream_error
                )
            response = await self.upstream.buffered(upstream, headers)
            record.answered(status, bytes(response.body))
            inline = len(raw) <= inline_bytes(wire.format.name)
            await self._observe_usage(counted, owner, response, inline=inline)
            return wire.answer(response, query_string(request))
        except ProxyError as exc:
            status = exc.status_code
            error = exc_kind(exc)
            raise
        finally:
            record.finish(status, error=error, observed=True)
            log.info(
                "%s %s mode=observe status=%d %s plan=%s fit_ms=%.1f total_ms=%.1f",
                wire.name,
                rid,
                status,
                seen.log_fields() if seen is not None else "(not read)",
                plan_id or "-",
                fit_ms,
                (time.perf_counter() - started) * 1000,
            )

    def _upstream_url(self, request: Request, wire: Wire) -> Any:
        """Where a fitted route's body goes (a body sent as chat takes no query: the
        client's is for its own API, such as Gemini's ``alt=sse`` or ``key=``)."""
        query = b"" if wire.format.via_chat else request.scope["query_string"]
        return self.upstream.url(wire.upstream_path, query)

    def _usage_tap(self, plan: Any, owner: str) -> UsageTap | None:
        """What reads a streamed answer's usage for calibration (None: not observed)."""
        if not self.config.calibrate or plan is None:
            return None
        return UsageTap(
            self.calibration,
            plan,
            upstream=self.config.upstream,
            owner=owner,
            limiter=self.fitter.limiter,
        )

    async def _observe_usage(
        self, plan: Any, owner: str, response: Response, *, inline: bool
    ) -> None:
        """Calibrate on a buffered answer's usage (``x-tokenflex-calibration``): on the
        event loop for a body its fit may run on (``inline``; the counts are a recount of
        what the fit counted), else in a worker thread."""
        if self.config.calibrate and plan is not None:
            await observe_response(
                self.calibration,
                plan,
                response,
                upstream=self.config.upstream,
                owner=owner,
                run=_inline if inline else functools.partial(off_loop, self.fitter.limiter),
            )

    async def _keep(self, plan: Any, owner: str, raw: bytes, req: ChatRequest, wire: Wire) -> str:
        """Keep the plan (warnings redacted, serialized when asked for) for its owner; its
        id, or '' when the store is off or the plan was not kept."""
        if not self.keeps_plans:
            return ""
        local = self.config.count != "provider" and not plan.model.tokenizer.startswith("server:")
        lazy = LAZY_DROPPED if local else None  # counted later only where counted here
        make = functools.partial(kept_plan, plan, req, raw, wire, lazy_dropped=lazy)
        inline = len(raw) <= inline_bytes(req.format)
        data = make() if inline else await off_loop(self.fitter.limiter, make)
        plan_id = new_plan_id()
        if data is None or not self.plans.put(plan_id, data, owner=owner):
            return ""
        return plan_id

    # -- other endpoints ---------------------------------------------------------------
    async def list_models(self, request: Request, route: str | None) -> Response:
        """``GET /v1/models``: the upstream's list; the config's when the upstream has none."""
        url = self.upstream.url("/v1/models", request.scope["query_string"])
        headers = self.upstream.request_headers(request.headers, peer(request))
        try:
            upstream = await self.upstream.send("GET", url, headers, None)
        except ProxyError:
            if not self.config.models:
                raise
            return self._config_models()
        if upstream.status_code < 400 or not self.config.models:
            return await self.upstream.buffered(upstream)
        await upstream.aclose()
        return self._config_models()

    def _config_models(self) -> Response:
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "tokenflex-config"}
            for name in self.config.models
        ]
        return JSONResponse({"object": "list", "data": data})

    async def count(self, request: Request, route: str | None) -> Response:
        """``POST /tokenflex/count``: tokens of messages (with the chat envelope) or text.

        Counting runs in a worker thread: a 4 MB text must not stall other clients."""
        from ..counting import count_tokens, get_counter

        raw = await read_body(request, self.config.max_body_bytes)
        name, messages, text, tools = parse_count(raw)
        api_key = bearer(self.upstream.request_headers(request.headers, peer(request)))
        model, _, _ = await self.fitter.model_for(name, route, api_key)

        def work() -> tuple[int, bool]:
            counter = get_counter(model)
            if messages is not None:
                exact = counter.exact_for(messages, tools)  # nothing estimated
                return counter.count(messages, tools=tools), exact
            return count_tokens(text or "", model=model), bool(counter.tokenizer.exact)

        async with self.large.turn(len(raw)):
            tokens, exact = await off_loop(self.fitter.limiter, work)
        return JSONResponse(
            {
                "object": "tokenflex.count",
                "model": model.name,
                "tokens": tokens,
                "exact": exact,
                "tokenizer": model.counting().tokenizer,
                "context_window": model.context_window,
            }
        )

    async def count_input(self, request: Request, route: str | None, wire: Wire) -> Response:
        """``POST /v1/messages/count_tokens`` and ``/v1/responses/input_tokens``: the
        request's input tokens as the proxy counts them when it fits (in a worker thread):
        with ``count = "provider"``, through the upstream's count endpoint (the estimate
        where it fails)."""
        raw = await read_body(request, self.config.max_body_bytes)
        req = wire.parse(raw, request.path_params.get("model"))
        api_key = bearer(self.upstream.request_headers(request.headers, peer(request)))
        model, _, _ = await self.fitter.model_for(req.model, route, api_key)
        if self.fitter.calibration is not None:  # as fitting counts: the learned factor
            model = self.fitter.calibration.apply(model, self.config.upstream)
        async with self.large.turn(len(raw)):
            work: Callable[[], Response] = functools.partial(count_input, req, model)
            if self.config.count == "provider":  # as fitting counts: asked per client
                config = self.fitter.count_config(api_key, credential_hash(request.headers))
                work = with_provider_counts(config, work)
            return await off_loop(self.fitter.limiter, work)

    async def plan(self, request: Request, route: str | None) -> Response:
        """``GET /tokenflex/plans/{id}``: a recent plan as ``plan.to_dict()``, only for the
        credentials that made it (others get the 404 of an unknown id)."""
        plan_id = request.path_params["plan_id"]
        if not self.keeps_plans:
            raise ProxyError(
                404,
                "This proxy does not keep plans (store_plans = false or plans_max = 0).",
                param="plan_id",
                code="plan_not_found",
            )
        # serialized when read (a long plan's dropped items counted then): off the loop
        read = functools.partial(self.plans.get, plan_id, owner=credential_hash(request.headers))
        data = await off_loop(self.fitter.limiter, read)
        if data is None:
            raise ProxyError(
                404,
                f"No plan {plan_id[:40]!r} for these credentials: unknown, made with other "
                f"credentials, or older than the last {self.config.plans_max:,} plans this "
                "proxy keeps (plans_max). Send the same API key as the request that made it.",
                param="plan_id",
                code="plan_not_found",
            )
        return Response(data, media_type="application/json")

    async def recall(self, request: Request, route: str | None) -> Response:
        """``GET /tokenflex/recall/{id}``: what a plan left out under a recall id
        (:func:`tokenflex.recall`), only for the credentials whose request it was (others
        get the 404 of an unknown id)."""
        from ..recall import recall

        recall_id = request.path_params["recall_id"]
        owner = request_owner(request.scope, request.headers)
        for name in [None, *self.config.routes]:
            items = recall(recall_id, state=self.fitter.tenant(owner, name))
            if items is not None:
                return JSONResponse({"object": "tokenflex.recall", "id": recall_id, "items": items})
        raise ProxyError(
            404,
            f"No recall id {recall_id[:40]!r} for these credentials: unknown, left out of "
            "another client's request, or expired. Send the same API key as the request "
            "whose cut note named it.",
            param="recall_id",
            code="recall_not_found",
        )

    async def health(self, request: Request, route: str | None) -> Response:
        """``GET /tokenflex/health``: the proxy is up (the upstream is not checked)."""
        return JSONResponse({"status": "ok"})

    async def not_found(self, request: Request, route: str | None) -> Response:
        """``/tokenflex/...`` paths are the proxy's own: never forwarded."""
        raise ProxyError(
            404,
            f"No tokenflex endpoint {request.url.path[:80]!r}; see docs/proxy.md.",
            code="not_found",
        )

    async def passthrough(self, request: Request, route: str | None) -> Response:
        """Anything else: forwarded unchanged, answer streamed back unchanged.

        The upstream path is rebuilt from the request's checked segments
        (:func:`~tokenflex.server.paths.upstream_path`) and must match
        ``passthrough_paths`` when that list is set."""
        raw_path = request.scope.get("raw_path", b"").decode("latin-1") or request.scope["path"]
        path = upstream_path(raw_path, route)
        if fitted_variant(path, FITTED_PATHS):
            raise ProxyError(
                400,
                f"{path[:80]!r} is another spelling of a route this proxy fits; it is not "
                "passed through unfitted. Send it to /v1/chat/completions, /v1/messages or "
                "/v1/responses (or their count routes) as spelled there.",
                param="path",
                code="invalid_path",
            )
        if not path_allowed(path, self.config.passthrough_paths):
            raise ProxyError(
                404,
                f"{path[:80]!r} is not forwarded by this proxy (passthrough_paths).",
                param="path",
                code="path_not_allowed",
            )
        url = self.upstream.url(path, request.scope["query_string"])
        body = await read_body(request, self.config.max_body_bytes)
        upstream = await self.upstream.send(
            request.method,
            url,
            self.upstream.request_headers(request.headers, peer(request)),
            body or None,
        )
        return self.upstream.streamed(upstream, request_id=request.state.request_id)

    async def metrics_text(self, request: Request, route: str | None) -> Response:
        """``GET /metrics``: every metric in the Prometheus text format."""
        body = await off_loop(self.fitter.limiter, self.metrics.exposition)
        return Response(body, headers={"content-type": METRICS_CONTENT_TYPE})


def kept_plan(
    plan: Any, req: ChatRequest, raw: bytes, wire: Wire, *, lazy_dropped: int | None = LAZY_DROPPED
) -> KeptPlan | None:
    """The plan made for ``req`` (the body ``raw`` on ``wire``'s route) as the plan store
    keeps it: serialized when asked for, warnings redacted; None (logged) when it cannot
    be kept, which request validation should make impossible.

    Its dict is made when it is asked for (most plans never are), its dropped items read
    again from ``raw`` (:func:`~tokenflex.roundtrip.replay`), so the store holds none of
    the request's parsed objects. Where they cannot be read again (an item sent shrunk,
    a request fitted as chat from another format), a plan that left out more than
    ``lazy_dropped`` items is kept live (:class:`~tokenflex.server.plans.LivePlan`), one
    that left out fewer has its dict made now. None: every dict made now (its counts
    must be: they come from a provider or a tokenizer server).
    """
    try:
        if lazy_dropped is not None:
            again = None if wire.format.via_chat else replay(plan)
            if again is not None:
                later = Later.of(plan, again, _redacted)
                return defer(plan, None, req.messages, req.system, raw, wire.reparse, later=later)
            if len(plan.dropped) > lazy_dropped:
                return LivePlan(plan, held_bytes(raw, len(req.messages)), _redacted)
        meta = _redacted(plan.to_dict(include_messages=False))
        return defer(plan, meta, req.messages, req.system, raw, wire.reparse)
    except TokenflexError as exc:
        log.warning("Cannot keep a plan: %s", exc)
        return None


def _redacted(data: dict[str, Any]) -> dict[str, Any]:
    """A plan's dict with its warnings redacted (they may quote the request)."""
    data["warnings"] = [redact(str(w)) for w in data.get("warnings", [])]
    return data


async def _inline(func: Callable[[], Any]) -> Any:
    """``func()``, on the event loop (a ``run`` for work too small for a worker thread)."""
    return func()


def query_string(request: Request) -> str:
    """The request's raw query string (``request.url.query``, without building the
    URL: a few µs of every request)."""
    raw: bytes = request.scope.get("query_string", b"")
    return raw.decode("latin-1")


def internal_proxy_error(request_id: str) -> ProxyError:
    """The 500 for an unexpected exception."""
    return ProxyError(
        500,
        f"Internal error in the tokenflex proxy (request id {request_id}); the proxy log has "
        "the details.",
        type="server_error",
        code="internal_error",
        headers={"x-tokenflex-request-id": request_id},
    )


def internal_error(request_id: str) -> Response:
    """The OpenAI-shaped 500 for an unexpected exception."""
    return internal_proxy_error(request_id).to_response()


async def _http_exception(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else "error"
    rid = "req_" + secrets.token_hex(8)
    return error_response(
        status, str(detail), code="http_error", headers={"x-tokenflex-request-id": rid}
    )


async def _unexpected(request: Request, exc: Exception) -> Response:
    rid = "req_" + secrets.token_hex(8)
    log.error("request %s: unexpected error outside an endpoint", rid, exc_info=exc)
    return internal_error(rid)


def install_redaction(config: ServerConfig) -> None:
    """Redact the configured keys (and every request's own) in the ``tokenflex`` log."""
    keys = [k.get_secret_value() for k in (config.proxy_key, config.upstream_api_key) if k]
    logger = logging.getLogger("tokenflex")
    for f in logger.filters:
        if isinstance(f, RedactingFilter):
            f.secrets = tuple(dict.fromkeys((*f.secrets, *keys)))
            return
    logger.addFilter(RedactingFilter(keys))


def create_app(config: ServerConfig, *, discover: Discover | None = None) -> Starlette:
    """The proxy as an ASGI app (run it with uvicorn, or ``tokenflex serve``).

    Args:
        config: Upstream, limits, keys and fit options (:class:`ServerConfig`).
        discover: How to ask the upstream for a model's window
            (``discover(base_url, name) -> Model | None``); defaults to
            :func:`tokenflex.models.discovery.adiscover_model`.

    Raises:
        ConfigError: an option table names an unknown fit() option or a bad value, or a
            configured model cannot be counted (bad tokenizer, missing template).

    >>> app = create_app(ServerConfig.load(upstream="http://127.0.0.1:8080"))
    >>> app.state.proxy.config.upstream
    'http://127.0.0.1:8080'
    """
    check_fit_options(config)
    if config.models_file is not None:
        load_models_file(config.models_file)  # before the configured models are checked
    check_models(config)
    install_redaction(config)
    proxy = Proxy(config, discover=discover)
    ep = proxy.endpoint
    fitted = functools.partial(ep, methods=_POST, json_body=True)
    routes = [
        Route(
            "/tokenflex/health", ep(proxy.health, auth=False, methods=_GET), methods=_ALL_METHODS
        ),
        Route("/tokenflex/plans/{plan_id}", ep(proxy.plan, methods=_GET), methods=_ALL_METHODS),
        Route(
            "/tokenflex/recall/{recall_id}", ep(proxy.recall, methods=_GET), methods=_ALL_METHODS
        ),
        Route("/tokenflex/count", fitted(proxy.count), methods=_ALL_METHODS),
        Route("/v1/tokenize", fitted(proxy.count), methods=_ALL_METHODS),
        Route(
            "/tokenflex/calibration",
            ep(
                lambda request, route: calibration_figures(
                    proxy.calibration,
                    config.upstream,
                    credential_hash(request.headers),
                    proxy.fitter.limiter,
                ),
                methods=_GET,
            ),
            methods=_ALL_METHODS,
        ),
        *ui_routes(proxy, ep),
        Route("/tokenflex/{rest:path}", ep(proxy.not_found), methods=_ALL_METHODS),
    ]
    if config.metrics:
        routes.append(Route("/metrics", ep(proxy.metrics_text, methods=_GET), methods=_ALL_METHODS))
    # the router tries routes in turn, a regex each: the fitted routes of /v1 come first
    first: list[Route] = []
    for name in [None, *config.routes]:
        prefix = "" if name is None else f"/{name}"
        chat = proxy.observe if config.mode_for(name) == "observe" else proxy.chat
        for wire in wires():  # every registered format's routes
            handler = fitted(
                functools.partial(proxy.count_input if wire.count else chat, wire=wire),
                route=name,
                errors=wire.error,
            )
            spellings = [wire.path] if "{" in wire.path else [wire.path, *aliases(wire.path)]
            made = [Route(prefix + path, handler, methods=_ALL_METHODS) for path in spellings]
            if name is None:  # tried first (no /tokenflex or /metrics path is a format's)
                first += made
            else:
                routes += made
        routes.append(
            Route(f"{prefix}/v1/models", ep(proxy.list_models, route=name), methods=["GET"])
        )
        if name is not None:
            routes.append(
                Route(
                    prefix + "/{path:path}",
                    ep(proxy.metrics.counted(proxy.passthrough), route=name),
                    methods=_ALL_METHODS,
                )
            )
    passthrough = proxy.metrics.counted(proxy.passthrough)
    routes.append(Route("/{path:path}", ep(passthrough), methods=_ALL_METHODS))
    app = Starlette(
        routes=first + routes,
        lifespan=proxy.lifespan,
        exception_handlers={HTTPException: _http_exception, Exception: _unexpected},
        middleware=[
            Middleware(Busy, activity=proxy.fitter.activity),  # background work waits for it
            Middleware(Limits, config=config, on_shed=proxy.metrics.shed),  # load, time, caches
        ],
    )
    app.state.proxy = proxy
    return app
