"""The proxy as a Starlette app: every chat request is fitted before it goes upstream.

Routes (``/ROUTE/...`` repeats the ``/v1`` ones for each ``[routes.ROUTE]`` table):

- ``POST /v1/chat/completions``: parse, check, fit with :func:`tokenflex.afit`, forward
  the fitted body, stream or return the upstream's answer unchanged, plus ``x-tokenflex-*``
  headers with the plan summary;
- ``GET /v1/models``: the upstream's list (or the config's models when it has none);
- ``POST /tokenflex/count`` (alias ``/v1/tokenize``): ``{"model", "messages" | "text"}``
  -> ``{"tokens": n, ...}``;
- ``GET /tokenflex/plans/{id}``: a recent plan, in full; ``GET /tokenflex/health``;
- anything else: passed through to the upstream unchanged.

Errors the proxy makes itself are OpenAI-shaped; upstream errors come back with their own
status and body; an unexpected exception becomes an OpenAI-shaped 500 carrying the
request id (the log has the traceback), never a bare one.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio.to_thread
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..calibration import Calibration
from ..errors import TokenflexError
from ..models import get_model
from ._calibration import calibration_figures, observe_response

# The "X as X" imports re-export names that were defined here before _fitter.py existed.
from ._fitter import Fitter, library_error, plan_headers
from ._models import Discover, ModelResolver
from ._upstream import Upstream, check_proxy_key
from ._validate import parse_chat, parse_count
from .config import ServerConfig, check_fit_options, patch_model, split_options
from .errors import ProxyError, error_response
from .plans import PlanStore, new_plan_id

__all__ = ["Proxy", "create_app"]

log = logging.getLogger("tokenflex")

Handler = Callable[[Request, "str | None"], Awaitable[Response]]
_DRAIN_CAP = 32 * 1024 * 1024  # read (and discard) this much of an oversized body
# Starlette routes to plain functions default to GET only; pass-through takes every method.
_ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, or a 413 when it is over ``limit`` bytes.

    An oversized body is still read (up to a cap) so the client gets the 413 instead of
    a connection reset while it is still sending.
    """
    declared = request.headers.get("content-length", "")
    size = int(declared) if declared.isdigit() else 0
    chunks: list[bytes] = []
    if size <= limit + _DRAIN_CAP:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit + _DRAIN_CAP:
                break
            if size <= limit:
                chunks.append(chunk)
    if size > limit:
        raise ProxyError(
            413,
            f"The request body is {size:,}+ bytes; this proxy accepts at most {limit:,} "
            "(max_body_bytes). Send a shorter conversation or raise max_body_bytes.",
            code="request_too_large",
        )
    return b"".join(chunks)


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

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """Open the shared upstream client and load the tokenizers of the models named in
        the config (about a second for an OpenAI encoding) before serving; close the
        client at shutdown."""
        _ = self.upstream.client
        await anyio.to_thread.run_sync(self._warm_tokenizers)
        log.info("tokenflex proxy: forwarding to %s", self.config.upstream)
        try:
            yield
        finally:
            await self.upstream.aclose()

    def _warm_tokenizers(self) -> None:
        from ..counting import get_counter

        for name, table in self.config.models.items():
            patch, _, _ = split_options(table)
            try:
                get_counter(patch_model(get_model(name), patch)).tokenizer.count("warm up")
            except TokenflexError as exc:
                log.warning("Cannot load the tokenizer for %r at startup: %s", name, exc)

    def endpoint(
        self, handler: Handler, *, route: str | None = None, auth: bool = True
    ) -> Callable[[Request], Awaitable[Response]]:
        """Wrap a handler: request id, proxy key, OpenAI-shaped errors, no bare 500."""

        async def run(request: Request) -> Response:
            rid = "req_" + secrets.token_hex(8)
            request.state.request_id = rid
            try:
                if auth and not check_proxy_key(self.config, request.headers):
                    raise ProxyError(
                        401,
                        "Missing or wrong proxy key. Send it as 'x-tokenflex-key: KEY' or "
                        "'Authorization: Bearer KEY'.",
                        code="invalid_api_key",
                    )
                response = await handler(request, route)
            except ProxyError as exc:
                response = exc.to_response()
            except Exception:
                log.exception("request %s: unexpected error in %s", rid, request.url.path)
                response = internal_error(rid)
            response.headers["x-tokenflex-request-id"] = rid
            return response

        return run

    # -- chat ------------------------------------------------------------------------
    async def chat(self, request: Request, route: str | None) -> Response:
        """``POST /v1/chat/completions``: fit, forward, pass the answer back."""
        started = time.perf_counter()
        rid: str = request.state.request_id
        status, note, plan, plan_id, fit_ms = 0, "", None, "", 0.0
        try:
            raw = await read_body(request, self.config.max_body_bytes)
            req = parse_chat(raw)
            note = f"model={req.model!r} stream={'yes' if req.stream else 'no'}"
            forward_headers = self.upstream.request_headers(request.headers)
            plan = await self.fitter.fit(req, route, len(raw), bearer(forward_headers))
            fit_ms = (time.perf_counter() - started) * 1000
            plan_id = new_plan_id()
            self.plans.put(plan_id, plan, size=len(raw))
            headers = plan_headers(plan, plan_id)
            body = self.fitter.fitted_body(req, plan, route)
            upstream = await self.upstream.send(
                "POST",
                self.upstream.url("/v1/chat/completions", request.scope["query_string"]),
                forward_headers,
                body,
            )
            status = upstream.status_code
            if req.stream and status < 400:
                return self.upstream.streamed(upstream, headers, request_id=rid)
            response = await self.upstream.buffered(upstream, headers)
            if self.config.calibrate:
                observe_response(self.calibration, plan, response)
            return response
        except ProxyError as exc:
            status = exc.status_code
            note += f" error={exc.code}"
            raise
        finally:
            if plan is not None:
                log.info(
                    "chat %s %s status=%d window=%d input=%d max_tokens=%d (asked %d) "
                    "dropped=%d summary=%s plan=%s fit_ms=%.1f total_ms=%.1f",
                    rid,
                    note,
                    status,
                    plan.context_window,
                    plan.input_tokens,
                    plan.max_tokens,
                    plan.requested_max_tokens,
                    len(plan.dropped),
                    "yes" if plan.summary is not None else "no",
                    plan_id,
                    fit_ms,
                    (time.perf_counter() - started) * 1000,
                )
            else:
                log.info("chat %s %s status=%d (not fitted)", rid, note.strip(), status)

    # -- other endpoints ---------------------------------------------------------------
    async def list_models(self, request: Request, route: str | None) -> Response:
        """``GET /v1/models``: the upstream's list; the config's when the upstream has none."""
        url = self.upstream.url("/v1/models", request.scope["query_string"])
        headers = self.upstream.request_headers(request.headers)
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
        """``POST /tokenflex/count``: tokens of messages (with the chat envelope) or text."""
        from ..counting import count_tokens, get_counter

        name, messages, text, tools = parse_count(
            await read_body(request, self.config.max_body_bytes)
        )
        api_key = bearer(self.upstream.request_headers(request.headers))
        model, _, _ = await self.fitter.model_for(name, route, api_key)
        try:
            counter = get_counter(model)
            if messages is not None:
                tokens = counter.count(messages, tools=tools)
            else:
                tokens = count_tokens(text or "", model=model)
        except TokenflexError as exc:
            raise library_error(exc) from None
        return JSONResponse(
            {
                "object": "tokenflex.count",
                "model": model.name,
                "tokens": tokens,
                "exact": bool(counter.exact),
                "tokenizer": model.tokenizer,
                "context_window": model.context_window,
            }
        )

    async def plan(self, request: Request, route: str | None) -> Response:
        """``GET /tokenflex/plans/{id}``: a recent plan as ``plan.to_dict()``."""
        plan_id = request.path_params["plan_id"]
        plan = self.plans.get(plan_id)
        if plan is None:
            raise ProxyError(
                404,
                f"No plan {plan_id!r}: unknown, or older than the last "
                f"{self.config.plans_max:,} plans this proxy keeps (plans_max).",
                param="plan_id",
                code="plan_not_found",
            )
        return JSONResponse(plan.to_dict())

    async def health(self, request: Request, route: str | None) -> Response:
        """``GET /tokenflex/health``: the proxy is up (the upstream is not checked)."""
        return JSONResponse({"status": "ok"})

    async def passthrough(self, request: Request, route: str | None) -> Response:
        """Anything else: forwarded unchanged, answer streamed back unchanged."""
        # the raw path, so percent-escapes (%2F) reach the upstream as the client sent them
        path = request.scope.get("raw_path", b"").decode("latin-1") or request.scope["path"]
        if route is not None:
            path = path[len(route) + 1 :] or "/"
        body = await read_body(request, self.config.max_body_bytes)
        upstream = await self.upstream.send(
            request.method,
            self.upstream.url(path, request.scope["query_string"]),
            self.upstream.request_headers(request.headers),
            body or None,
        )
        return self.upstream.streamed(upstream, request_id=request.state.request_id)


def internal_error(request_id: str) -> Response:
    """The OpenAI-shaped 500 for an unexpected exception."""
    return error_response(
        500,
        f"Internal error in the tokenflex proxy (request id {request_id}); the proxy log has "
        "the details.",
        type="server_error",
        code="internal_error",
        headers={"x-tokenflex-request-id": request_id},
    )


async def _http_exception(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else "error"
    return error_response(status, str(detail), code="http_error")


async def _unexpected(request: Request, exc: Exception) -> Response:
    rid = "req_" + secrets.token_hex(8)
    log.error("request %s: unexpected error outside an endpoint", rid, exc_info=exc)
    return internal_error(rid)


def create_app(config: ServerConfig, *, discover: Discover | None = None) -> Starlette:
    """The proxy as an ASGI app (run it with uvicorn, or ``tokenflex serve``).

    Args:
        config: Upstream, limits, keys and fit options (:class:`ServerConfig`).
        discover: How to ask the upstream for a model's window
            (``discover(base_url, name) -> Model | None``); defaults to
            :func:`tokenflex.models.discovery.adiscover_model`.

    Raises:
        ConfigError: an option table names an unknown fit() option or a bad value.

    >>> app = create_app(ServerConfig.load(upstream="http://127.0.0.1:8080"))
    >>> app.state.proxy.config.upstream
    'http://127.0.0.1:8080'
    """
    check_fit_options(config)
    proxy = Proxy(config, discover=discover)
    ep = proxy.endpoint
    routes = [
        Route("/tokenflex/health", ep(proxy.health, auth=False), methods=["GET"]),
        Route("/tokenflex/plans/{plan_id}", ep(proxy.plan), methods=["GET"]),
        Route("/tokenflex/count", ep(proxy.count), methods=["POST"]),
        Route(
            "/tokenflex/calibration",
            ep(lambda request, route: calibration_figures(proxy.calibration, request)),
            methods=["GET"],
        ),
        Route("/v1/tokenize", ep(proxy.count), methods=["POST"]),
    ]
    for name in [None, *config.routes]:
        prefix = "" if name is None else f"/{name}"
        routes += [
            Route(f"{prefix}/v1/chat/completions", ep(proxy.chat, route=name), methods=["POST"]),
            Route(f"{prefix}/v1/models", ep(proxy.list_models, route=name), methods=["GET"]),
        ]
        if name is not None:
            routes.append(
                Route(
                    prefix + "/{path:path}", ep(proxy.passthrough, route=name), methods=_ALL_METHODS
                )
            )
    routes.append(Route("/{path:path}", ep(proxy.passthrough), methods=_ALL_METHODS))
    app = Starlette(
        routes=routes,
        lifespan=proxy.lifespan,
        exception_handlers={HTTPException: _http_exception, Exception: _unexpected},
    )
    app.state.proxy = proxy
    return app
