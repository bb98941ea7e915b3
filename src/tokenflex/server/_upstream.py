"""The one shared HTTP client to the upstream, and how requests and responses cross it.

Bytes pass through unchanged (``aiter_raw``: no decompression, no re-encoding); only
hop-by-hop headers are dropped. Transport failures become OpenAI-shaped 502 / 504 errors,
and a stream that breaks after its headers were sent ends with an OpenAI error event.
"""

from __future__ import annotations

import hmac
import http.cookiejar
import logging
from collections.abc import AsyncIterator, Mapping

import httpx
from starlette.background import BackgroundTask
from starlette.datastructures import Headers
from starlette.responses import Response, StreamingResponse

from .config import ServerConfig
from .errors import ProxyError, error_body
from .redact import redact

__all__ = ["Upstream", "check_proxy_key"]

log = logging.getLogger("tokenflex")

# RFC 9110 §7.6.1 hop-by-hop headers, plus what the proxy itself recomputes.
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_REQUEST_DROP = _HOP | {"x-tokenflex-key"}
_RESPONSE_DROP = _HOP | {"date", "server"}  # the proxy's own server sets both


def check_proxy_key(config: ServerConfig, headers: Headers) -> bool:
    """Whether the request may pass. True when no proxy key is configured.

    The key is accepted as ``x-tokenflex-key: KEY`` or ``Authorization: Bearer KEY``.
    Comparison is constant-time.
    """
    if config.proxy_key is None:
        return True
    expected = config.proxy_key.get_secret_value().encode()
    given = headers.get("x-tokenflex-key")
    if given is not None and hmac.compare_digest(given.encode(), expected):
        return True
    auth = headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected)


class Upstream:
    """Forwards requests to the configured upstream over one pooled ``httpx.AsyncClient``."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.base = config.upstream
        self._client: httpx.AsyncClient | None = None
        self._urls: dict[str, httpx.URL] = {}
        self._base_url = httpx.URL(config.upstream)

    @property
    def client(self) -> httpx.AsyncClient:
        """The shared client, created on first use (or at app startup)."""
        if self._client is None or self._client.is_closed:
            c = self.config
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(
                    connect=c.connect_timeout,
                    read=c.read_timeout,
                    write=c.write_timeout,
                    pool=c.pool_timeout,
                ),
                limits=httpx.Limits(
                    max_connections=c.max_connections,
                    # httpcore scans every pooled connection on each request: a small
                    # idle pool keeps that cheap; bursts still open up to max_connections
                    max_keepalive_connections=min(c.max_keepalive, c.max_connections),
                    # under uvicorn's 5 s keep-alive, so we never reuse a socket being closed
                    keepalive_expiry=4.0,
                ),
                follow_redirects=False,
                trust_env=False,  # loopback upstreams must not go through an HTTP(S)_PROXY
                # One client serves every user: never keep an upstream's cookies for the next.
                cookies=http.cookiejar.CookieJar(
                    policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[])
                ),
            )
        return self._client

    async def aclose(self) -> None:
        """Close the shared client (app shutdown)."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def request_headers(self, headers: Headers) -> dict[str, str]:
        """The client's headers as they go upstream.

        Hop-by-hop headers and ``x-tokenflex-key`` are dropped. ``Authorization`` is
        forwarded, unless it carried the proxy key: then the configured
        ``upstream_api_key`` (if any) takes its place.
        """
        out = {k: v for k, v in headers.items() if k not in _REQUEST_DROP}
        c = self.config
        auth = out.get("authorization")
        if auth is not None and c.proxy_key is not None:
            token = auth.partition(" ")[2].strip().encode()
            if hmac.compare_digest(token, c.proxy_key.get_secret_value().encode()):
                del out["authorization"]
        if "authorization" not in out and c.upstream_api_key is not None:
            out["authorization"] = f"Bearer {c.upstream_api_key.get_secret_value()}"
        # Without this, httpx would ask for gzip on the client's behalf and we would hand
        # the client compressed bytes it never asked for.
        out.setdefault("accept-encoding", "identity")
        return out

    def url(self, path: str, query: bytes = b"") -> httpx.URL:
        """The upstream URL for a path below the base (``/v1/...``, from a fixed route or
        :func:`tokenflex.server.paths.upstream_path`) and a raw query string.

        The path is appended to the base path as a path, never parsed as a URL, and the
        result is checked: the scheme, host and port are the configured ones and the path
        stays under the base path; anything else is a 400 ``invalid_path``. URLs without
        a query are built once and kept (a few fixed paths).
        """
        url = self._urls.get(path) if not query else None
        if url is not None:
            return url
        if not path.startswith("/"):
            path = "/" + path
        base = self._base_url
        prefix = base.raw_path.decode("ascii").split("?")[0].rstrip("/")
        try:
            url = base.copy_with(path=prefix + path, query=query or None)
        except httpx.InvalidURL:
            raise ProxyError(
                400,
                "The request's path or query string cannot be forwarded as a URL (it "
                "holds characters such as '#' or spaces unescaped). Percent-encode them.",
                param="path",
                code="invalid_path",
            ) from None
        if (
            (url.scheme, url.host, url.port) != (base.scheme, base.host, base.port)
            or url.userinfo != base.userinfo
            or not url.raw_path.startswith(prefix.encode() + b"/")
        ):
            raise ProxyError(
                400,
                "The request path would leave the configured upstream; it was not sent.",
                param="path",
                code="invalid_path",
            )
        if not query and len(self._urls) < 64:
            self._urls[path] = url
        return url

    async def send(
        self, method: str, url: httpx.URL, headers: Mapping[str, str], content: bytes | None
    ) -> httpx.Response:
        """Send and return once the response headers are in (body not read yet)."""
        request = self.client.build_request(method, url, headers=headers, content=content)
        try:
            return await self.client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise self._timeout_error(exc) from None
        except httpx.TransportError as exc:
            raise self._transport_error(exc) from None

    async def read(self, response: httpx.Response) -> bytes:
        """The raw (still encoded) body of a response from :meth:`send`, then close it."""
        try:
            return b"".join([chunk async for chunk in response.aiter_raw()])
        except httpx.TimeoutException as exc:
            raise self._timeout_error(exc) from None
        except httpx.TransportError as exc:
            raise self._transport_error(exc) from None
        finally:
            await response.aclose()

    def _timeout_error(self, exc: httpx.TimeoutException) -> ProxyError:
        c = self.config
        kind, limit, setting = {
            httpx.ConnectTimeout: ("connect", c.connect_timeout, "connect_timeout"),
            httpx.WriteTimeout: ("write", c.write_timeout, "write_timeout"),
            httpx.PoolTimeout: ("pool", c.pool_timeout, "pool_timeout"),
        }.get(type(exc), ("read", c.read_timeout, "read_timeout"))
        return ProxyError(
            504,
            f"The upstream {redact(self.base)} did not answer in time ({kind} timeout of "
            f"{limit:g} s). "
            f"Check that it is up and not overloaded, or raise {setting}.",
            type="upstream_error",
            code="upstream_timeout",
        )

    def _transport_error(self, exc: httpx.TransportError) -> ProxyError:
        if isinstance(exc, httpx.ConnectError):
            message = (
                f"Cannot connect to the upstream {self.base} ({exc or type(exc).__name__}). "
                "Check that it is running and that --upstream points at it."
            )
            code = "upstream_unreachable"
        else:
            message = (
                f"The connection to the upstream {self.base} failed: {type(exc).__name__}: {exc}."
            )
            code = "upstream_error"
        return ProxyError(502, redact(message), type="upstream_error", code=code)

    @staticmethod
    def response_headers(response: httpx.Response) -> dict[str, str]:
        """The upstream's response headers minus hop-by-hop ones and its CORS headers
        (``Access-Control-*``): a browser page must not be let in by the upstream's
        policy; the proxy answers CORS itself when ``cors_origins`` is set."""
        return {
            k: v
            for k, v in response.headers.items()
            if k.lower() not in _RESPONSE_DROP and not k.lower().startswith("access-control-")
        }

    async def buffered(
        self, response: httpx.Response, extra_headers: Mapping[str, str] | None = None
    ) -> Response:
        """The whole upstream response as one Starlette response, status and body intact."""
        body = await self.read(response)
        headers = self.response_headers(response)
        headers.update(extra_headers or {})
        return Response(body, status_code=response.status_code, headers=headers)

    def streamed(
        self,
        response: httpx.Response,
        extra_headers: Mapping[str, str] | None = None,
        *,
        request_id: str = "",
    ) -> StreamingResponse:
        """The upstream response streamed through chunk by chunk, unchanged."""
        headers = self.response_headers(response)
        headers.update(extra_headers or {})
        is_sse = response.headers.get("content-type", "").startswith("text/event-stream")
        plain = "content-encoding" not in response.headers

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in response.aiter_raw():
                    yield chunk
            except httpx.TransportError as exc:
                err = (
                    self._timeout_error(exc)
                    if isinstance(exc, httpx.TimeoutException)
                    else self._transport_error(exc)
                )
                log.warning("request %s: upstream stream broke: %s", request_id, err.message)
                if is_sse and plain:
                    # OpenAI SDKs raise an APIError on an error event inside a stream.
                    payload = error_body(err.message, type=err.type, code=err.code)
                    yield b"data: " + payload + b"\n\n"
            finally:
                await response.aclose()

        return StreamingResponse(
            body(),
            status_code=response.status_code,
            headers=headers,
            background=BackgroundTask(response.aclose),
        )
