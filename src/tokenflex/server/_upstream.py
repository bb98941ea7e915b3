"""The one shared HTTP client to the upstream, and how requests and responses cross it.

Bytes pass through unchanged (``aiter_raw``: no decompression, no re-encoding); only
hop-by-hop headers are dropped. Transport failures become OpenAI-shaped 502 / 504 errors,
and a stream that breaks after its headers were sent ends with an error event in the
route's shape (SSE) or an aborted connection (anything else: never a complete-looking answer).

Bounds: one exchange (headers, body or stream) takes at most ``upstream_timeout`` in all,
whatever the upstream trickles; a buffered body is read up to ``max_response_bytes``. A
connection whose response was malformed (bytes past its end, bad framing, truncated) is
closed, never reused: stray bytes would become the next client's answer.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol

import anyio
import h11
import httpcore
import httpx
from starlette.background import BackgroundTask
from starlette.datastructures import Headers
from starlette.responses import Response, StreamingResponse
from starlette.types import Send

from ..redact import redact
from ._network import AsyncioBackend
from .config import ServerConfig
from .deadline import Deadline
from .errors import ProxyError, error_body

__all__ = [
    "StreamTap",
    "Upstream",
    "UpstreamStream",
    "check_proxy_key",
    "connection_named",
    "merged_headers",
    "openai_error_event",
    "trailing_bytes",
    "upstream_request",
]

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
# A reverse proxy answers ``Expect: 100-continue`` itself (the server did, before the body
# was read); forwarding headers are the proxy's to write (``forwarded_for``), never the
# client's: an upstream that trusts them would log or rate-limit a forged address.
_FORWARDING = frozenset(
    {"expect", "forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-real-ip"}
)
_REQUEST_DROP = _HOP | _FORWARDING | {"x-tokenflex-key"}
_SENDS_BODY = frozenset({"POST", "PUT", "PATCH"})
"""Methods httpx gives ``Content-Length: 0`` when they carry no body."""
_RESPONSE_DROP = _HOP | {"date", "server"}  # the proxy's own server sets both


def connection_named(headers: Headers | httpx.Headers) -> frozenset[str]:
    """The header names a message's ``Connection`` header lists (RFC 9110 §7.6.1: they
    are hop-by-hop too and must not be forwarded).

    >>> sorted(connection_named(Headers({"connection": "keep-alive, X-Secret , close"})))
    ['close', 'keep-alive', 'x-secret']
    """
    if type(headers) is Headers:  # (isinstance of another type than httpx's own walks
        given = headers.getlist("connection")  # the ABC machinery: a request's headers)
    elif isinstance(headers, httpx.Headers):
        given = headers.get_list("connection")
    else:
        given = headers.getlist("connection")
    names = ",".join(given)
    return frozenset(n.strip().lower() for n in names.split(",") if n.strip())


def upstream_request(
    method: str,
    url: httpx.URL,
    headers: Mapping[str, str],
    content: bytes | None,
    extensions: dict[str, Any] | None = None,
) -> httpx.Request:
    """The request ``httpx.Request(method, url, headers=..., content=content)`` makes (the
    same header lines, in the same order, and body), made as a transport's caller may:
    the headers httpx adds (``Host``, ``Content-Length``) added here, the body given as
    its stream. It spares httpx's encoding of the content, its look for a multipart
    boundary and its second pass over the headers (~20 µs a request).

    >>> r = upstream_request("POST", httpx.URL("http://up:8000/v1"), {"a": "b"}, b"{}")
    >>> r.headers.raw, r.read()
    ([(b'Host', b'up:8000'), (b'a', b'b'), (b'Content-Length', b'2')], b'{}')
    """
    pairs = [(b"Host", url.netloc), *((_wire(k), _wire(v)) for k, v in headers.items())]
    if content:
        pairs.append((b"Content-Length", str(len(content)).encode()))
    elif method in _SENDS_BODY:
        pairs.insert(1, (b"Content-Length", b"0"))
    return httpx.Request(
        method, url, headers=pairs, stream=httpx.ByteStream(content or b""), extensions=extensions
    )


def _wire(text: str) -> bytes:
    r"""A header's name or value as it goes upstream: the bytes the client sent (the ASGI
    server gives them as latin-1 text); a value the proxy made that latin-1 cannot write
    (an ``upstream_api_key`` in another script) as UTF-8.

    >>> _wire("caf\xc3\xa9"), _wire("caf\xe9"), _wire("\u2615")
    (b'caf\xc3\xa9', b'caf\xe9', b'\xe2\x98\x95')
    """
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode()


_DEADLINE = "tokenflex.deadline"  # response extension: when the exchange must be over


def openai_error_event(err: ProxyError) -> bytes:
    """A chat completions stream's error event: OpenAI SDKs raise an ``APIError`` on a
    ``data: {"error": ...}`` event inside a stream."""
    return b"data: " + error_body(err.message, type=err.type, code=err.code) + b"\n\n"


def trailing_bytes(response: httpx.Response) -> bool | None:
    """Whether the upstream sent bytes past the end of ``response`` (read to its end) on
    its connection; None when that cannot be told.

    httpcore keeps what h11 read past a response's end and parses it as the next
    response on that connection; neither offers a public way to see it, so this reads
    h11's public ``trailing_data`` through httpx's and httpcore's private attributes.
    tests/test_server_faults.py checks the path still works for the installed versions.
    """
    # httpx's BoundAsyncStream -> AsyncResponseStream -> httpcore's PoolByteStream ->
    # HTTP11ConnectionByteStream, whose connection holds the h11 state
    stream: object = response.stream
    for _ in range(8):
        state = getattr(getattr(stream, "_connection", None), "_h11_state", None)
        if isinstance(state, h11.Connection):
            return bool(state.trailing_data[0])
        stream = getattr(stream, "_stream", None) or getattr(stream, "_httpcore_stream", None)
        if stream is None:
            break
    return None


class StreamTap(Protocol):
    """What watches a streamed answer go by (calibration reads its usage)."""

    def feed(self, chunk: bytes) -> None:
        """The next raw bytes, as they are passed on."""

    async def finish(self) -> None:
        """The stream ended complete (never called for a broken one)."""


class UpstreamStream(StreamingResponse):
    """A streamed upstream answer that can be cut off: when the upstream breaks and no
    error event can be sent, the body ends without its last chunk and the server closes
    the connection, so the client sees a truncated answer instead of a complete one."""

    aborted = False

    async def stream_response(self, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        async for chunk in self.body_iterator:
            data = chunk if isinstance(chunk, bytes | memoryview) else chunk.encode(self.charset)
            await send({"type": "http.response.body", "body": data, "more_body": True})
        if not self.aborted:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


def merged_headers(
    upstream: list[tuple[bytes, bytes]], extra: Mapping[str, str] | None
) -> list[tuple[bytes, bytes]]:
    """``upstream``'s raw header pairs with ``extra`` (the proxy's own) in place of any of
    the same name, as raw pairs (latin-1, as an ASGI server writes them).

    >>> merged_headers([(b"set-cookie", b"a=1"), (b"set-cookie", b"b=2"), (b"x-id", b"u")],
    ...                {"X-Id": "mine"})
    [(b'set-cookie', b'a=1'), (b'set-cookie', b'b=2'), (b'x-id', b'mine')]
    """
    if not extra:
        return upstream
    own = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in extra.items()]
    names = {k for k, _ in own}
    return [pair for pair in upstream if pair[0] not in names] + own


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
    """Forwards requests to the configured upstream over one pooled connection transport.

    The proxy sends through ``httpx.AsyncHTTPTransport`` itself, not an
    ``httpx.AsyncClient`` over it: a client's merging of base URL, default headers,
    cookies, auth and redirects is work a reverse proxy does not want (its URL is
    built and checked here, its headers are the client's, it follows no redirect and
    keeps no cookie), and it cost about a third of an exchange's CPU.
    """

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.base = config.upstream
        self._transport: httpx.AsyncBaseTransport | None = None
        self._urls: dict[str, httpx.URL] = {}
        self._base_url = httpx.URL(config.upstream)
        c = config
        self._timeout = httpx.Timeout(
            connect=c.connect_timeout,
            read=c.read_timeout,
            write=c.write_timeout,
            pool=c.pool_timeout,
        ).as_dict()

    @property
    def transport(self) -> httpx.AsyncBaseTransport:
        """The shared connection pool, created on first use (or at app startup)."""
        if self._transport is None:
            c = self.config
            transport = httpx.AsyncHTTPTransport(trust_env=False)
            # httpx's transport takes no network backend: its pool is replaced by one
            # made as it makes it, on asyncio's transports instead of anyio's
            # (tests/test_server_network.py checks an exchange goes through them)
            transport._pool = httpcore.AsyncConnectionPool(
                # no SSL_CERT_* from the environment, as the client had it
                ssl_context=httpx.create_ssl_context(trust_env=False),
                max_connections=c.max_connections,
                # httpcore scans every pooled connection on each request: a small
                # idle pool keeps that cheap; bursts still open up to max_connections
                max_keepalive_connections=min(c.max_keepalive, c.max_connections),
                # under uvicorn's 5 s keep-alive, so we never reuse a socket being closed
                keepalive_expiry=4.0,
                network_backend=AsyncioBackend(),
            )
            self._transport = transport
        return self._transport

    async def aclose(self) -> None:
        """Close the shared connections (app shutdown)."""
        if self._transport is not None:
            await self._transport.aclose()
            self._transport = None

    def request_headers(self, headers: Headers, peer: str | None = None) -> dict[str, str]:
        """The client's headers as they go upstream.

        Hop-by-hop headers (those the ``Connection`` header names too), ``Expect``, the
        client's forwarding headers and ``x-tokenflex-key`` are dropped; ``X-Forwarded-For``
        is written as ``forwarded_for`` says, from ``peer`` (the client's address).
        ``Authorization`` is forwarded, unless it carried the proxy key: then the
        configured ``upstream_api_key`` (if any) takes its place.
        """
        drop = _REQUEST_DROP | connection_named(headers)
        out = {k: v for k, v in headers.items() if k not in drop}
        c = self.config
        if c.forwarded_for != "drop" and peer:
            given = ", ".join(headers.getlist("x-forwarded-for"))
            chain = given if c.forwarded_for == "append" and given else ""
            out["x-forwarded-for"] = f"{chain}, {peer}" if chain else peer
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
        """Send and return once the response headers are in (body not read yet).

        The whole exchange, this and reading the body, must end within
        ``upstream_timeout``: a 504 otherwise.
        """
        request = upstream_request(method, url, headers, content, {"timeout": self._timeout})
        deadline = asyncio.get_running_loop().time() + self.config.upstream_timeout
        response: httpx.Response | None = None
        with Deadline(deadline):
            try:
                response = await self.transport.handle_async_request(request)
                response.request = request
            except httpx.TimeoutException as exc:
                raise self._timeout_error(exc) from None
            except httpx.TransportError as exc:
                raise self._transport_error(exc) from None
        if response is None:
            raise self._deadline_error()
        response.extensions[_DEADLINE] = deadline
        return response

    async def read(self, response: httpx.Response) -> bytes:
        """The raw (still encoded) body of a response from :meth:`send`, then close it.

        Raises:
            ProxyError: 502 over ``max_response_bytes`` or on a broken connection, 504
                past ``upstream_timeout``.
        """
        cap = self.config.max_response_bytes
        declared = response.headers.get("content-length", "")
        chunks: list[bytes] = []
        size, complete = 0, False
        try:
            if declared.isdigit() and int(declared) > cap:
                raise self._too_large(int(declared))
            with Deadline(self._deadline(response)):
                async for chunk in response.aiter_raw():
                    size += len(chunk)
                    if size > cap:
                        raise self._too_large(size)
                    chunks.append(chunk)
                complete = True
            if not complete:
                raise self._deadline_error()
            await self._close_if_desynced(response)
            return b"".join(chunks)
        except httpx.TimeoutException as exc:
            raise self._timeout_error(exc) from None
        except httpx.TransportError as exc:
            raise self._transport_error(exc) from None
        finally:
            # (a body read to its end was closed by httpx as it ended: no shield to enter)
            if not response.is_closed:
                with anyio.CancelScope(shield=True):
                    await response.aclose()

    @staticmethod
    def _deadline(response: httpx.Response) -> float:
        deadline = response.extensions.get(_DEADLINE)
        return float(deadline) if deadline is not None else float("inf")

    async def _close_if_desynced(self, response: httpx.Response) -> None:
        """Close the connection of a fully read response when bytes trail it (or when
        that cannot be told): the pool then opens a fresh one instead of reusing it."""
        trailing = trailing_bytes(response)
        if trailing is False:
            return
        if trailing:
            log.warning(
                "The upstream %s sent bytes past the end of a response (Content-Length or "
                "chunked framing); its connection is closed, not reused.",
                self.base,
            )
        stream = response.extensions.get("network_stream")
        if stream is not None:
            await stream.aclose()

    def _deadline_error(self) -> ProxyError:
        return ProxyError(
            504,
            f"The upstream {self.base} did not finish its answer within "
            f"{self.config.upstream_timeout:g} s (upstream_timeout). Check that it is not "
            "overloaded or trickling, or raise upstream_timeout.",
            type="upstream_error",
            code="upstream_timeout",
        )

    def _too_large(self, size: int) -> ProxyError:
        return ProxyError(
            502,
            f"The upstream {self.base} sent a body of {size:,}+ bytes; this proxy buffers at "
            f"most {self.config.max_response_bytes:,} (max_response_bytes). Ask for less "
            "output, stream the answer, or raise max_response_bytes.",
            type="upstream_error",
            code="upstream_response_too_large",
        )

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
    def response_headers(response: httpx.Response) -> list[tuple[bytes, bytes]]:
        """The upstream's response headers minus hop-by-hop ones and its CORS headers
        (``Access-Control-*``): a browser page must not be let in by the upstream's
        policy; the proxy answers CORS itself when ``cors_origins`` is set. As raw
        pairs, names lowercased: each value the bytes the upstream sent (httpx's own text
        of them is UTF-8, which a byte past ASCII turned into a 500), and a name given
        twice given twice (``Set-Cookie`` cannot be joined into one line)."""
        drop = _RESPONSE_DROP | connection_named(response.headers)
        out: list[tuple[bytes, bytes]] = []
        for raw_key, raw_value in response.headers.raw:
            key = raw_key.lower()
            name = key.decode("latin-1")
            if name in drop or name.startswith("access-control-"):
                continue
            out.append((key, raw_value))
        return out

    async def buffered(
        self, response: httpx.Response, extra_headers: Mapping[str, str] | None = None
    ) -> Response:
        """The whole upstream response as one Starlette response, status and body intact."""
        body = await self.read(response)
        answer = Response(body, status_code=response.status_code)  # (its content-length)
        answer.raw_headers[:0] = merged_headers(self.response_headers(response), extra_headers)
        return answer

    def streamed(
        self,
        response: httpx.Response,
        extra_headers: Mapping[str, str] | None = None,
        *,
        request_id: str = "",
        tap: StreamTap | None = None,
        error_event: Callable[[ProxyError], bytes] | None = None,
    ) -> StreamingResponse:
        """The upstream response streamed through chunk by chunk, unchanged (``tap``,
        if given, sees each chunk, and is told when the stream ended complete).

        When the upstream breaks or passes ``upstream_timeout`` mid-stream, an SSE stream
        ends with an error event in the route's shape (``error_event``; OpenAI's chat
        ``data: {"error": ...}`` by default), which the route's SDK raises or reports;
        any other body is cut off (connection aborted).
        """
        make_event = error_event or openai_error_event
        is_sse = response.headers.get("content-type", "").startswith("text/event-stream")
        plain = "content-encoding" not in response.headers
        deadline = self._deadline(response)

        async def body() -> AsyncIterator[bytes]:
            raw = response.aiter_raw()
            err: ProxyError | None = None
            complete = False
            try:
                while True:
                    chunk: bytes | None = None
                    with Deadline(deadline) as scope:
                        try:
                            chunk = await anext(raw)
                        except StopAsyncIteration:
                            complete = True
                            break
                    if scope.expired or chunk is None:
                        err = self._deadline_error()
                        break
                    if tap is not None:
                        tap.feed(chunk)
                    yield chunk
            except httpx.TransportError as exc:
                err = (
                    self._timeout_error(exc)
                    if isinstance(exc, httpx.TimeoutException)
                    else self._transport_error(exc)
                )
            finally:
                if complete:
                    with anyio.CancelScope(shield=True):
                        await self._close_if_desynced(response)
                with anyio.CancelScope(shield=True):
                    await response.aclose()
            if complete and tap is not None:
                await tap.finish()
            if err is not None:
                log.warning("request %s: upstream stream broke: %s", request_id, err.message)
                if is_sse and plain:
                    yield make_event(err)
                else:
                    streamed.aborted = True

        streamed = UpstreamStream(
            body(), status_code=response.status_code, background=BackgroundTask(response.aclose)
        )
        streamed.raw_headers[:0] = merged_headers(self.response_headers(response), extra_headers)
        return streamed
