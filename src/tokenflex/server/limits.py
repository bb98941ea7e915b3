"""How much the proxy takes on, and for how long: load shedding, time limits on clients
and on the servers the proxy calls.

- :class:`LargeBodies`: requests with large bodies are counted and fitted one at a time
  (``large_body_bytes``, ``large_body_workers``), so their CPU work cannot starve others;
- :class:`Busy`, an ASGI middleware that counts the requests in flight to the upstream
  (background summaries run when there are none);
- :class:`Limits`, an ASGI middleware around the app: at most ``max_inflight`` requests
  are handled at once and ``max_queue`` wait (each at most ``queue_timeout``); beyond
  that a 503 with ``Retry-After``. One set of credentials has at most
  ``max_inflight_per_client`` of them (in flight or waiting, streams included): a 429.
  A request's body must arrive within ``body_timeout`` (408). A client that goes away
  before its answer started cancels the work done for it (the upstream call included).
  Token counts of a request that is answered with an error never reach the count caches
  (:func:`tokenflex.tokenizers.base.count_scope`).
- :func:`uvicorn_options`: the server settings ``tokenflex serve`` runs with, among them
  a protocol that closes connections which send no complete request headers within
  ``header_timeout`` (slowloris; uvicorn itself only times out idle keep-alive ones).
- :func:`bounded_transports`: httpx transports that give a whole exchange one deadline
  and cap the body, for calls whose client the proxy does not own (the summarizer).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import httpx
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..summarize.background import Activity
from ..tokenizers.base import count_scope
from .config import ServerConfig
from .deadline import Deadline
from .errors import ProxyError, error_body
from .plans import CREDENTIAL_HEADERS, request_owner, scope_headers

__all__ = [
    "HANGUP",
    "Busy",
    "Hangup",
    "LargeBodies",
    "Limits",
    "bounded_transports",
    "freeze_startup",
    "header_deadline_protocol",
    "trim_heap",
    "uvicorn_options",
]

log = logging.getLogger("tokenflex")

UNLIMITED_PATHS = frozenset({"/tokenflex/health"})
"""Answered even when the proxy is full: a load balancer must see that it is up."""
RETRY_AFTER_SECONDS = 1
DRAIN_SECONDS = 1.0  # longest a refused request's body is read before the 503
ARRIVED = "tokenflex.arrived"
"""Scope key: the event loop's time when the server read the request (set by
:func:`header_deadline_protocol`)."""
HANGUP = "tokenflex.hangup"
"""Scope key: the request's :class:`Hangup`, told when its connection is lost (set by
:func:`header_deadline_protocol`; a server without it: a task waits for the disconnect)."""
KEEP_ALIVE_SECONDS = 5  # the upstream client's keepalive_expiry (4 s) stays under it


class Limits:
    """ASGI middleware: admission (in flight + queue), body deadline, cancel on disconnect,
    count caching only for answered requests. See the module docstring."""

    def __init__(
        self, app: ASGIApp, config: ServerConfig, on_shed: Callable[[str], None] | None = None
    ) -> None:
        self.app = app
        self.config = config
        self.on_shed = on_shed
        """Called with the path of each request refused at capacity (the metrics)."""
        self.waiting = 0
        self.inflight = 0
        self.shed = 0
        """503s answered since the last overload warning."""
        self._logged_at = float("-inf")
        self._slots: anyio.Semaphore | None = None
        given = config.max_inflight_per_client
        self.per_client = max(1, config.max_inflight // 2) if given is None else given
        """Requests one set of credentials may have in flight or waiting (0: no limit)."""
        self.clients: dict[str, int] = {}
        """Requests in flight or waiting, per credential digest (only those above 0)."""
        self.untrimmed = False
        """A large body was handled since the C heap was last trimmed (:func:`trim_heap`)."""

    @property
    def slots(self) -> anyio.Semaphore:
        if self._slots is None:  # made in the server's event loop, on first use
            self._slots = anyio.Semaphore(self.config.max_inflight)
        return self._slots

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNLIMITED_PATHS:
            await self.app(scope, receive, send)
            return
        client = self._client(scope)
        if client is not None and self.clients.get(client, 0) >= self.per_client:
            await self._refuse(self._client_full(), scope, receive, send)
            return
        if client is not None:  # counted from arrival: its queued requests hold too
            self.clients[client] = self.clients.get(client, 0) + 1
        try:
            refusal = await self._admit(scope.get(ARRIVED))
            if refusal is not None:
                await self._refuse(refusal, scope, receive, send)
                return
            self.inflight += 1
            try:
                await _Exchange(self.app, self.config, scope, receive, send).run()
            finally:
                self.inflight -= 1
                self.slots.release()
                if _declared_size(scope) >= self.config.large_body_bytes:
                    self.untrimmed = True
                if self.untrimmed and self.inflight == 0:
                    # idle after large bodies: hand their freed memory back, off the loop
                    self.untrimmed = False
                    with anyio.CancelScope(shield=True):
                        await anyio.to_thread.run_sync(trim_heap)
        finally:
            if client is not None:
                left = self.clients.pop(client) - 1
                if left:
                    self.clients[client] = left

    async def _refuse(
        self, refusal: ProxyError, scope: Scope, receive: Receive, send: Send
    ) -> None:
        if self.on_shed is not None:
            self.on_shed(scope["path"])
        headers = {"retry-after": str(RETRY_AFTER_SECONDS)}
        if not await self._drain(receive):
            headers["connection"] = "close"
        await refusal.to_response(headers)(scope, receive, send)

    def _client(self, scope: Scope) -> str | None:
        """The credential digest of a request that carries credentials, when a
        per-client limit is on (None: not limited per client)."""
        if not self.per_client:
            return None
        headers = scope_headers(scope)
        if not any(headers.get(name) for name in CREDENTIAL_HEADERS):
            return None
        return request_owner(scope, headers)

    def _client_full(self) -> ProxyError:
        return ProxyError(
            429,
            f"These credentials already have {self.per_client:,} requests in flight or "
            "waiting (max_inflight_per_client); wait for one to finish. Retry after "
            f"{RETRY_AFTER_SECONDS} s, or ask the operator to raise max_inflight_per_client.",
            type="rate_limit_error",
            code="client_inflight_limit",
        )

    async def _admit(self, arrived: float | None) -> ProxyError | None:
        """None once a slot is held; the 503 to answer otherwise.

        ``arrived`` is when the server read the request: time the event loop took to get
        to it counts as time in the queue, so a saturated loop sheds too.
        """
        c = self.config
        try:
            self.slots.acquire_nowait()
            return None
        except anyio.WouldBlock:
            pass
        now = anyio.current_time()
        left = c.queue_timeout if arrived is None else arrived + c.queue_timeout - now
        if left <= 0:
            return self._overloaded(
                f"a request waited {now - arrived if arrived else 0:.1f} s before the proxy "
                f"could look at it, over queue_timeout ({c.queue_timeout:g} s)"
            )
        if self.waiting >= c.max_queue:
            return self._overloaded(
                f"{self.inflight:,} requests in flight (max_inflight) and {self.waiting:,} "
                "waiting (max_queue)"
            )
        self.waiting += 1
        try:
            with anyio.move_on_after(left):
                await self.slots.acquire()
                return None
        finally:
            self.waiting -= 1
        return self._overloaded(
            f"no slot freed within {c.queue_timeout:g} s (queue_timeout) with "
            f"{c.max_inflight:,} requests in flight (max_inflight)"
        )

    async def _drain(self, receive: Receive) -> bool:
        """Read and drop a refused request's body, so that closing does not reset the
        connection before the client reads the 503. False when it is too big or slow:
        then the connection is closed after the answer."""
        size = 0
        with anyio.move_on_after(DRAIN_SECONDS):
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return False
                size += len(message.get("body", b""))
                if not message.get("more_body", False):
                    return True
                if size > self.config.max_body_bytes:
                    return False
        return False

    def _overloaded(self, why: str) -> ProxyError:
        # one line per second at most: under overload, a line per request is more load
        self.shed += 1
        now = time.monotonic()
        if now - self._logged_at >= 1.0:
            log.warning("overloaded: %s; answered 503 to %d request(s)", why, self.shed)
            self.shed, self._logged_at = 0, now
        return ProxyError(
            503,
            f"The tokenflex proxy is at capacity: {why}. Retry after "
            f"{RETRY_AFTER_SECONDS} s, or raise max_inflight / max_queue if the machine "
            "has room.",
            type="server_error",
            code="proxy_overloaded",
        )


class LargeBodies:
    """Requests with bodies of ``large_body_bytes`` or more are counted and fitted
    ``large_body_workers`` at a time (one by default); the next waits at most
    ``queue_timeout`` for its turn, then gets a 503 with Retry-After.

    Counting is CPU work that holds Python's GIL: six clients counting 3.9 MB texts at
    once slowed every other client's answers tenfold. One at a time, a large request
    costs the others at most one thread's share, whatever the number sent.
    """

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._lanes: anyio.Semaphore | None = None

    @property
    def lanes(self) -> anyio.Semaphore:
        if self._lanes is None:  # made in the server's event loop, on first use
            self._lanes = anyio.Semaphore(self.config.large_body_workers)
        return self._lanes

    @contextlib.asynccontextmanager
    async def turn(self, size: int) -> AsyncIterator[None]:
        """Hold a lane for the block when ``size`` (body bytes) is large; a 503 when none
        frees within ``queue_timeout``."""
        c = self.config
        if size < c.large_body_bytes:
            yield
            return
        admitted = False
        with anyio.move_on_after(c.queue_timeout):
            await self.lanes.acquire()
            admitted = True
        if not admitted:
            raise ProxyError(
                503,
                f"The proxy is counting {c.large_body_workers:,} other large request(s) "
                f"(bodies of {c.large_body_bytes:,} bytes or more: large_body_bytes, "
                f"large_body_workers) and none finished within {c.queue_timeout:g} s. Retry "
                f"after {RETRY_AFTER_SECONDS} s, or send a shorter conversation.",
                type="server_error",
                code="proxy_overloaded",
                headers={"retry-after": str(RETRY_AFTER_SECONDS)},
            )
        try:
            yield
        finally:
            self.lanes.release()


def freeze_startup() -> None:
    """Take every object alive now out of the garbage collector's walks (``gc.freeze``,
    after a collection, so no garbage is kept): the server process's start-up (modules,
    registries, the configured models' tokenizers) lives as long as the process, and a
    full collection, which a long request's many objects set off every few requests,
    no longer walks it. For a process that serves one app for its life: ``tokenflex
    serve`` calls it once the app is made (an object frozen is never collected as part
    of a cycle)."""
    gc.collect()
    gc.freeze()


def _declared_size(scope: Scope) -> int:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


def trim_heap() -> None:
    """Hand the C heap's free memory back to the OS now (glibc's ``malloc_trim``;
    elsewhere nothing): what the worker threads' arenas keep after large requests.
    Called in a worker thread (it holds no GIL) when the proxy goes idle after one."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        return


class Busy:
    """ASGI middleware: every request that may go upstream (all but the proxy's own
    ``/tokenflex/`` endpoints) counts in ``activity`` from its arrival (a request waiting
    for a slot counts) to its last byte; background summaries wait for it to be idle."""

    def __init__(self, app: ASGIApp, activity: Activity) -> None:
        self.app = app
        self.activity = activity

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/tokenflex/"):
            await self.app(scope, receive, send)
            return
        with self.activity.track():
            await self.app(scope, receive, send)


class Hangup:
    """What a request does when its connection is lost: the server's protocol calls
    :meth:`lost` (from ``connection_lost``), which calls the callback the request set
    once its body was read. It spares each request a task that waits for the disconnect
    and its cancel (~35 µs of a 10-message request).

    ``body_in``: the server holds the request's whole body (its parser read the message's
    end): reading it cannot wait, so it is read without the body deadline's cancel scope
    (~7 µs a request)."""

    __slots__ = ("body_in", "callback", "gone")

    def __init__(self) -> None:
        self.callback: Callable[[], None] | None = None
        self.gone = False
        self.body_in = False

    def lost(self) -> None:
        """The connection is lost: call the callback (once)."""
        self.gone = True
        callback, self.callback = self.callback, None
        if callback is not None:
            callback()


class _Exchange:
    """One admitted request: the app runs with a receive that enforces the body deadline
    and notices a disconnect, and a send that records whether the answer started."""

    def __init__(
        self, app: ASGIApp, config: ServerConfig, scope: Scope, receive: Receive, send: Send
    ) -> None:
        self.app, self.config, self.scope = app, config, scope
        self.receive_, self.send_ = receive, send
        self.started = False
        self.status = 0
        self.body_done = False
        self.pending: Message | None = None
        self.gone = asyncio.Event()  # (anyio's looks its backend up: 6x the time)
        self.deadline = asyncio.get_running_loop().time() + config.body_timeout
        self.cancel_scope: anyio.CancelScope | None = None
        self.watcher: asyncio.Task[None] | None = None
        hangup = scope.get(HANGUP)
        self.hangup = hangup if type(hangup) is Hangup else None
        """What the server tells of the connection (None: a server without it)."""

    async def run(self) -> None:
        headers = dict(self.scope.get("headers", []))
        if b"content-length" not in headers and b"transfer-encoding" not in headers:
            # no body: take the empty one now, so a disconnect is noticed from the start
            self.pending = await self.receive_()
            if self.pending["type"] == "http.disconnect":
                return
        try:
            with anyio.CancelScope() as self.cancel_scope:
                if self.pending is not None:
                    self._body_complete()
                with count_scope() as counts:
                    try:
                        await self.app(self.scope, self.receive, self.send)
                    finally:
                        if self.status >= 400 or not self.started:
                            counts.discard()
        finally:
            if self.watcher is not None:
                self.watcher.cancel()
            if self.hangup is not None:
                # the answer is done: nothing to tell. (The callback, a bound method of
                # this exchange, would otherwise close a cycle through the scope, the
                # server's request cycle and this exchange: the request's objects left
                # to the cyclic collector, not freed as it ends.)
                self.hangup.callback = None

    def _body_complete(self) -> None:
        self.body_done = True
        hangup = self.hangup
        if hangup is not None:  # the server says when the connection is lost
            if hangup.gone:
                self._hung_up()
            else:
                hangup.callback = self._hung_up
            return
        # a plain task and a cancel scope, not an anyio task group: the group's task and
        # its cancel cost ~60 us more a request (anyio formats the task into the reason)
        self.watcher = asyncio.get_running_loop().create_task(self._watch())

    async def receive(self) -> Message:
        if self.pending is not None:
            first, self.pending = self.pending, None
            return first
        if self.body_done:
            await self.gone.wait()
            return {"type": "http.disconnect"}
        message: Message | None = None
        if self.hangup is not None and self.hangup.body_in:
            message = await self.receive_()  # (the server holds it: no wait)
        else:
            with Deadline(self.deadline):
                message = await self.receive_()
        if message is None:
            raise ProxyError(
                408,
                f"The request body did not arrive within {self.config.body_timeout:g} s "
                "(body_timeout). Send it at once, or ask the operator to raise body_timeout.",
                code="request_timeout",
            )
        if message["type"] == "http.disconnect":
            self.gone.set()
        elif not message.get("more_body", False):
            self._body_complete()
        return message

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            self.status = int(message["status"])
            if self.status == 408:  # the rest of the body may still be coming: close
                message = dict(message)
                message["headers"] = [*message.get("headers", []), (b"connection", b"close")]
        await self.send_(message)

    async def _watch(self) -> None:
        """After the body: wait for the client to go; before its answer started, cancel
        the work for it (an upstream call, a fit)."""
        while (await self.receive_())["type"] != "http.disconnect":
            pass
        self._hung_up()

    def _hung_up(self) -> None:
        """The client is gone: a waiting ``receive`` hears it; before its answer
        started, the work for it is cancelled."""
        self.gone.set()
        if not self.started and self.cancel_scope is not None:
            log.info(
                "client went away before its answer on %s; the work for it is cancelled",
                self.scope.get("path", ""),
            )
            self.cancel_scope.cancel()


# -- uvicorn ---------------------------------------------------------------------------------


def header_deadline_protocol(base: type[Any], timeout: float) -> type[Any]:
    """A uvicorn HTTP protocol class that closes a connection when no request is being
    handled ``timeout`` seconds after it opened or after its last answer: a client that
    trickles (or never finishes) its headers cannot hold the connection. It also stamps
    each request's scope with when it was read (``ARRIVED``), for :class:`Limits`, gives
    it a :class:`Hangup` (``HANGUP``) that it tells when the connection is lost before
    the answer is complete, and answers a request it cannot parse with an OpenAI-shaped
    JSON 400, not plain text.

    Works with uvicorn's h11 and httptools protocols (both keep ``cycle``, ``transport``,
    ``loop`` and call ``on_response_complete``).
    """

    class HeaderDeadline(base):  # type: ignore[misc]
        header_timeout = timeout
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self._arm_header_deadline()

        def data_received(self, data: bytes) -> None:
            arrived, cycle = self.loop.time(), self.cycle
            super().data_received(data)
            if self.cycle is None:
                return
            if self.cycle is not cycle:
                # a request started: its task runs later, when the loop gets to it
                scope = self.cycle.scope
                scope[ARRIVED] = arrived
                scope[HANGUP] = Hangup()
            if not self.cycle.more_body:  # its whole body is in (the parser read its end)
                hangup = self.cycle.scope.get(HANGUP)
                if type(hangup) is Hangup:
                    hangup.body_in = True

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm_header_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None
            cycle = self.cycle
            super().connection_lost(exc)
            if cycle is not None and not cycle.response_complete:
                hangup = cycle.scope.get(HANGUP)
                if type(hangup) is Hangup:
                    hangup.lost()

        def send_400_response(self, msg: str) -> None:
            # uvicorn answers unparsable requests in plain text: ours are JSON too
            body = error_body(
                f"Malformed HTTP request ({msg}). Send a valid HTTP/1.1 request.",
                code="invalid_http_request",
            )
            head = (
                "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
            )
            self.transport.write(head.encode("ascii") + body)
            self.transport.close()

        def _arm_header_deadline(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
            self._header_timer = self.loop.call_later(self.header_timeout, self._header_expired)

        def _header_expired(self) -> None:
            self._header_timer = None
            cycle = self.cycle
            if (cycle is None or cycle.response_complete) and not self.transport.is_closing():
                log.debug("closing a connection with no complete request in %g s", timeout)
                self.transport.close()

    HeaderDeadline.__name__ = HeaderDeadline.__qualname__ = f"HeaderDeadline{base.__name__}"
    return HeaderDeadline


def uvicorn_options(config: ServerConfig, http: str = "auto") -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run`` / ``uvicorn.Config`` that bound what one
    client can hold: the header deadline protocol (on uvicorn's ``http`` choice) and a
    short keep-alive."""
    from uvicorn.config import HTTP_PROTOCOLS
    from uvicorn.importer import import_from_string

    base = import_from_string(HTTP_PROTOCOLS[http])
    return {
        "http": header_deadline_protocol(base, config.header_timeout),
        "timeout_keep_alive": KEEP_ALIVE_SECONDS,
        "server_header": False,
        "ws": "none",
        # the client's address is the connection's: a client's X-Forwarded-For is never
        # taken as its address (uvicorn trusts it from loopback by default)
        "proxy_headers": False,
    }


# -- bounded httpx transports ------------------------------------------------------------------


def bounded_transports(
    timeout: float,
    max_bytes: int,
    *,
    what: str = "server",
    before: Callable[[], None] | None = None,
) -> tuple[httpx.BaseTransport, httpx.AsyncBaseTransport]:
    """A sync and an async httpx transport whose every exchange ends within ``timeout``
    seconds in all (not per read) and whose bodies stop at ``max_bytes``. The sync one
    calls ``before()`` first, outside the deadline (the proxy's summarizer pauses there
    while clients use the server: :func:`tokenflex.summarize.background.pause_for_clients`).

    Past the deadline they raise ``httpx.ReadTimeout``, over the cap
    ``httpx.RemoteProtocolError``, so a client handles them as it handles the usual
    timeouts and broken connections. The async one is exact (a cancel scope); the sync
    one bounds each read by the time left and checks the deadline after every chunk, so
    a trickling server is cut off within one read.
    """
    return _SyncBounded(timeout, max_bytes, what, before), _AsyncBounded(timeout, max_bytes, what)


def _late(what: str, timeout: float, request: httpx.Request) -> httpx.ReadTimeout:
    return httpx.ReadTimeout(
        f"the {what} did not answer in full within {timeout:g} s", request=request
    )


def _too_big(what: str, max_bytes: int, request: httpx.Request) -> httpx.RemoteProtocolError:
    return httpx.RemoteProtocolError(
        f"the {what} sent a body over {max_bytes:,} bytes", request=request
    )


class _AsyncBounded(httpx.AsyncBaseTransport):
    def __init__(self, timeout: float, max_bytes: int, what: str) -> None:
        self.timeout, self.max_bytes, self.what = timeout, max_bytes, what
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        deadline = anyio.current_time() + self.timeout
        response: httpx.Response | None = None
        with anyio.CancelScope(deadline=deadline):
            response = await self.inner.handle_async_request(request)
        if response is None:
            raise _late(self.what, self.timeout, request)
        inner = response.stream
        assert isinstance(inner, httpx.AsyncByteStream)

        async def body() -> AsyncIterator[bytes]:
            size = 0
            chunks = inner.__aiter__()
            while True:
                chunk: bytes | None = None
                with anyio.CancelScope(deadline=deadline):
                    try:
                        chunk = await anext(chunks)
                    except StopAsyncIteration:
                        return
                if chunk is None:
                    raise _late(self.what, self.timeout, request)
                size += len(chunk)
                if size > self.max_bytes:
                    raise _too_big(self.what, self.max_bytes, request)
                yield chunk

        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_AsyncStream(body(), inner),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


class _AsyncStream(httpx.AsyncByteStream):
    def __init__(self, chunks: AsyncIterator[bytes], inner: httpx.AsyncByteStream) -> None:
        self.chunks, self.inner = chunks, inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.chunks:
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class _SyncBounded(httpx.BaseTransport):
    def __init__(
        self, timeout: float, max_bytes: int, what: str, before: Callable[[], None] | None
    ) -> None:
        self.timeout, self.max_bytes, self.what = timeout, max_bytes, what
        self.before = before
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.before is not None:
            self.before()
        deadline = time.monotonic() + self.timeout
        # httpcore reads the read timeout when the headers and when the body start:
        # bound both by the time left
        timeouts = dict(request.extensions.get("timeout") or {})
        request.extensions["timeout"] = timeouts
        configured = timeouts.get("read")

        def left() -> float:
            rest = max(deadline - time.monotonic(), 0.001)
            return rest if configured is None else min(configured, rest)

        timeouts["read"] = left()
        response = self.inner.handle_request(request)
        inner = response.stream
        assert isinstance(inner, httpx.SyncByteStream)
        if time.monotonic() > deadline:
            inner.close()
            raise _late(self.what, self.timeout, request)

        def body() -> Iterator[bytes]:
            size = 0
            timeouts["read"] = left()
            for chunk in inner:
                if time.monotonic() > deadline:
                    raise _late(self.what, self.timeout, request)
                size += len(chunk)
                if size > self.max_bytes:
                    raise _too_big(self.what, self.max_bytes, request)
                yield chunk

        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_SyncStream(body(), inner),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self.inner.close()


class _SyncStream(httpx.SyncByteStream):
    def __init__(self, chunks: Iterator[bytes], inner: httpx.SyncByteStream) -> None:
        self.chunks, self.inner = chunks, inner

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks

    def close(self) -> None:
        self.inner.close()
