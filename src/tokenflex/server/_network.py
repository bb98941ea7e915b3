"""The upstream connections' sockets, on asyncio's own transports.

httpcore (under httpx) reads and writes a connection through a network backend. Its
default on asyncio goes through anyio: every read and write opens a cancel scope for its
timeout and checks in with the event loop: about a tenth of an upstream exchange's CPU
in process, more in a served proxy (docs/benchmarks.md). :class:`AsyncioBackend` does the
same work with
an ``asyncio.Protocol``, one timer for each timeout, and the anyio backend's rules
(``tests/test_server_network.py`` runs both through the same cases):

- an answer nobody reads yet waits in the kernel, not in this process: reading pauses
  once ``HIGH_WATER`` bytes wait to be read (anyio pauses between reads; a connection
  that keeps reading while idle also sees a stray byte or an end the moment it comes,
  TLS records included, which a check of the socket cannot see once TLS read them);
- a write returns once the kernel has taken every byte (no write buffer), so
  ``write_timeout`` bounds a write to an upstream that stops reading; but a request's
  head (the first write after a read, up to ``HOLD_BYTES``) is held and goes out with the
  body that follows it, or before the next read: one segment for the upstream to take,
  not two (a send of its own and a wakeup saved on each side of the connection);
- a timeout raises httpcore's ``ReadTimeout`` / ``WriteTimeout`` / ``ConnectTimeout``, a
  broken connection its ``ReadError`` / ``WriteError`` / ``ConnectError``: httpx and the
  proxy map them as before;
- an idle connection is readable (and the pool drops it) once the upstream sent anything
  or closed it.

TLS goes through ``loop.start_tls``, Unix sockets through ``create_unix_connection``.
"""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
from collections.abc import Callable, Iterable
from typing import Any, cast

import httpcore

__all__ = ["HIGH_WATER", "LOW_WATER", "AsyncioBackend", "AsyncioStream", "socket_readable"]

HIGH_WATER = 256 * 1024
"""Bytes read from a connection and not yet taken at which its reading pauses (the rest
waits in the kernel, and the upstream is slowed by TCP itself)."""
LOW_WATER = 64 * 1024
"""Bytes not yet taken under which a paused connection reads again."""
HOLD_BYTES = 16 * 1024
"""The longest write held to go out with the next one (a request's head, then its body)."""
JOIN_BYTES = 64 * 1024
"""The longest write sent in one copy with a held head (a longer one goes in a writev)."""


class _Protocol(asyncio.Protocol):
    """What arrived on one connection and not yet read, and whether it may be written."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chunks: list[bytes] = []
        self.size = 0  # the bytes in chunks
        self.paused = False  # reading paused: chunks over HIGH_WATER
        self.waiter: asyncio.Future[None] | None = None  # a read waiting for bytes
        self.drained: asyncio.Future[None] | None = None  # a write waiting for the kernel
        self.eof = False  # the upstream closed its side
        self.lost = False  # the connection is gone
        self.error: BaseException | None = None  # why, when it broke
        self.tls = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # the TCP transport, then (start_tls) the TLS one over it
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(0)
        self.paused = False

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.size += len(data)
        if self.size > HIGH_WATER and not self.paused and self.transport is not None:
            self.transport.pause_reading()
            self.paused = True
        self.wake()

    def taken(self, n: int) -> None:
        """``n`` bytes were read out of ``chunks``: reading resumes under ``LOW_WATER``."""
        self.size -= n
        if self.paused and self.size <= LOW_WATER and self.transport is not None:
            self.paused = False
            if not self.transport.is_closing():
                self.transport.resume_reading()

    def eof_received(self) -> bool:
        self.eof = True
        self.wake()
        return not self.tls  # stay open for writing (TLS cannot: it closes)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.error = exc
        self.wake()
        self.resume_writing()

    def pause_writing(self) -> None:
        if self.drained is None:
            self.drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        drained, self.drained = self.drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def wake(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def _expire(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


async def _within(future: asyncio.Future[None], timeout: float | None) -> None:
    """Await ``future``; TimeoutError once ``timeout`` seconds passed (None: no limit)."""
    if timeout is None:
        await future
        return
    timer = asyncio.get_running_loop().call_later(timeout, _expire, future)
    try:
        await future
    finally:
        timer.cancel()


def _seconds(timeout: float | None) -> str:
    return "the time allowed" if timeout is None else f"{timeout:g} s"


def socket_readable(sock: socket.socket | None) -> bool:
    """Whether the kernel holds bytes or an end for ``sock`` (a read would not wait);
    True for a socket that is gone."""
    fd = -1 if sock is None else sock.fileno()
    if fd < 0:
        return True
    poll = getattr(select, "poll", None)
    if poll is None:  # no poll(2) (Windows): select
        return bool(select.select([fd], [], [], 0)[0])
    p = poll()
    p.register(fd, select.POLLIN)
    return bool(p.poll(0))


class AsyncioStream(httpcore.AsyncNetworkStream):
    """One connection to the upstream, read and written through its asyncio transport."""

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._closed = False
        self._held: bytes | None = None  # a head written, to go out with the next write
        self._may_hold = True  # no write held since the last read

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        p = self._protocol
        if self._closed:
            raise httpcore.ReadError("the connection was closed")
        self._may_hold = True
        held, self._held = self._held, None
        if held is not None:  # a request with no body: its head goes now
            if p.lost or self._transport.is_closing():
                raise httpcore.WriteError("the connection was closed")
            self._transport.write(held)
        if not p.chunks and not p.eof and not p.lost:
            waiter = p.waiter = asyncio.get_running_loop().create_future()
            try:
                await _within(waiter, timeout)
            except TimeoutError:
                raise httpcore.ReadTimeout(f"no bytes within {_seconds(timeout)}") from None
            finally:
                p.waiter = None
        if not p.chunks:
            if self._closed:
                raise httpcore.ReadError("the connection was closed")
            if p.error is not None:
                raise httpcore.ReadError(str(p.error) or type(p.error).__name__) from p.error
            return b""  # the upstream closed its side
        chunk = p.chunks.pop(0)
        if len(chunk) > max_bytes:
            p.chunks.insert(0, chunk[max_bytes:])
            chunk = chunk[:max_bytes]
        p.taken(len(chunk))
        return chunk

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        p, t = self._protocol, self._transport
        if self._closed or p.lost or t.is_closing():
            raise httpcore.WriteError("the connection was closed")
        held, self._held = self._held, None
        if held is not None:
            if len(buffer) <= JOIN_BYTES:
                t.write(held + buffer)  # (a copy of a few KiB: cheaper than a writev)
            else:
                t.writelines((held, buffer))  # (one writev where the loop has it)
        elif self._may_hold and len(buffer) <= HOLD_BYTES:
            self._held, self._may_hold = bytes(buffer), False
            return
        else:
            t.write(buffer)
        drained = p.drained
        if drained is not None:
            try:
                await _within(drained, timeout)
            except TimeoutError:
                raise httpcore.WriteTimeout(
                    f"the upstream took no bytes for {_seconds(timeout)}"
                ) from None
            if p.lost:  # before the kernel took every byte
                raise httpcore.WriteError("the connection was lost while writing")

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._transport.abort()  # nothing left to send on a connection given up
            self._protocol.wake()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        self._protocol.tls = True
        try:
            async with asyncio.timeout(timeout):
                transport = await loop.start_tls(
                    self._transport, self._protocol, ssl_context, server_hostname=server_hostname
                )
        except TimeoutError:
            await self.aclose()
            raise httpcore.ConnectTimeout(f"no TLS handshake within {_seconds(timeout)}") from None
        except (OSError, ssl.SSLError) as exc:
            await self.aclose()
            raise httpcore.ConnectError(str(exc)) from exc
        if transport is None:  # the connection closed during the handshake
            await self.aclose()
            raise httpcore.ConnectError("the connection closed during the TLS handshake")
        return AsyncioStream(transport, self._protocol)

    def get_extra_info(self, info: str) -> Any:
        t = self._transport
        if info == "is_readable":
            p = self._protocol
            return bool(p.chunks or p.eof or p.lost or t.is_closing()) or socket_readable(
                t.get_extra_info("socket")
            )
        name = _EXTRA.get(info)
        return None if name is None else t.get_extra_info(name)


_EXTRA = {
    "ssl_object": "ssl_object",
    "client_addr": "sockname",
    "server_addr": "peername",
    "socket": "socket",
}
"""httpcore's names of a connection's facts, and asyncio's."""


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend on asyncio's transports (see the module)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        return await _connected(
            lambda protocol: loop.create_connection(lambda: protocol, host, port, local_addr=local),
            f"{host}:{port}",
            timeout,
            socket_options,
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        return await _connected(
            lambda protocol: loop.create_unix_connection(lambda: protocol, path),
            path,
            timeout,
            socket_options,
        )

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def _connected(
    connect: Callable[[_Protocol], Any],
    where: str,
    timeout: float | None,
    socket_options: Iterable[Any] | None,
) -> AsyncioStream:
    """A stream on the connection ``connect(protocol)`` opens within ``timeout``."""
    protocol = _Protocol()
    try:
        async with asyncio.timeout(timeout):
            transport, _ = await connect(protocol)
    except TimeoutError:
        raise httpcore.ConnectTimeout(
            f"connecting to {where} took over {_seconds(timeout)}"
        ) from None
    except OSError as exc:
        raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
    sock = transport.get_extra_info("socket")
    try:
        for option in socket_options or ():
            sock.setsockopt(*option)
    except OSError as exc:
        transport.abort()
        raise httpcore.ConnectError(str(exc)) from exc
    return AsyncioStream(cast(asyncio.Transport, transport), protocol)
