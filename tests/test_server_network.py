"""The upstream connections' asyncio backend (``tokenflex.server._network``) over real
loopback sockets, side by side with httpcore's own anyio backend, the reference for
what each case must do: the bytes read are the bytes sent however they are cut; a
timeout, an end, a refused connection and stray bytes on an idle connection are told the
same way; TLS and Unix sockets work; and the proxy's upstream pool goes through it.

``data/tls/localhost.pem`` is a self-signed certificate and key for ``localhost`` and
127.0.0.1 (made with ``openssl req -x509 -newkey rsa:2048 -nodes -days 36500``), only
for these tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import httpcore
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenflex.server import ServerConfig
from tokenflex.server._network import AsyncioBackend, AsyncioStream
from tokenflex.server._upstream import Upstream, upstream_request

HOST = "127.0.0.1"
CERT = Path(__file__).parent / "data" / "tls" / "localhost.pem"
BACKENDS = {"asyncio": AsyncioBackend, "anyio": httpcore.AnyIOBackend}

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def serving(handler: Handler, tls: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    """A loopback server answering each connection with ``handler``; its port. On exit
    every connection still open is cut and its handler cancelled."""
    handlers: set[asyncio.Task[None]] = set()

    async def guarded(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
                await handler(reader, writer)
        finally:
            writer.transport.abort()
            handlers.discard(task)

    server = await asyncio.start_server(guarded, HOST, 0, ssl=tls)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for task in list(handlers):
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)


def sends_when(event: asyncio.Event, data: bytes) -> Handler:
    """A handler that sends ``data`` once ``event`` is set."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await event.wait()
        writer.write(data)
        await writer.drain()

    return handler


def server_tls() -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(CERT)
    return ctx


async def read_all(stream: httpcore.AsyncNetworkStream, max_bytes: int) -> list[bytes]:
    reads = []
    while chunk := await stream.read(max_bytes, timeout=5):
        reads.append(chunk)
    return reads


async def echo_exchange(backend: str, pieces: list[bytes], max_bytes: int) -> list[bytes]:
    """``pieces`` written one write each to a server that reads them all and sends them
    back one write each before closing; what the client read, read by read."""
    total = sum(map(len, pieces))

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.readexactly(total)
        at = 0
        for piece in pieces:  # sent back cut as it came
            writer.write(data[at : at + len(piece)])
            at += len(piece)
            await writer.drain()
            await asyncio.sleep(0)

    async with serving(echo) as port:
        stream = await BACKENDS[backend]().connect_tcp(HOST, port, timeout=5)
        for piece in pieces:
            await stream.write(piece, timeout=5)
        reads = await read_all(stream, max_bytes)
        await stream.aclose()
    return reads


@pytest.mark.parametrize("backend", list(BACKENDS))
@settings(max_examples=30, deadline=None)
@given(
    pieces=st.lists(st.binary(min_size=1, max_size=70_000), min_size=1, max_size=6),
    max_bytes=st.sampled_from([1, 7, 1000, 4096, 65_536]),
)
def test_what_is_read_is_what_was_sent(backend: str, pieces: list[bytes], max_bytes: int) -> None:
    if max_bytes == 1:
        pieces = [p[:64] for p in pieces]  # a byte a read: keep it short
    asyncio.run(echoes_whole(backend, pieces, max_bytes))


async def echoes_whole(backend: str, pieces: list[bytes], max_bytes: int) -> None:
    """What is read back is what was sent, in reads of 1 to ``max_bytes`` bytes."""
    reads = await echo_exchange(backend, pieces, max_bytes)
    assert b"".join(reads) == b"".join(pieces)
    assert all(0 < len(r) <= max_bytes for r in reads)


async def quiet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(30)  # neither reads nor writes; cancelled when the test ends


@pytest.mark.parametrize("backend", list(BACKENDS))
async def test_a_read_times_out_and_the_stream_reads_on(backend: str) -> None:
    late = asyncio.Event()
    async with serving(sends_when(late, b"late")) as port:
        stream = await BACKENDS[backend]().connect_tcp(HOST, port, timeout=5)
        t0 = time.monotonic()
        with pytest.raises(httpcore.ReadTimeout):
            await stream.read(100, timeout=0.1)
        assert 0.05 < time.monotonic() - t0 < 2
        late.set()
        assert await stream.read(100, timeout=5) == b"late"
        await stream.aclose()


@pytest.mark.parametrize("backend", list(BACKENDS))
async def test_a_write_to_a_peer_that_reads_nothing_times_out(backend: str) -> None:
    async with serving(quiet) as port:
        stream = await BACKENDS[backend]().connect_tcp(HOST, port, timeout=5)
        t0 = time.monotonic()
        with pytest.raises(httpcore.WriteTimeout):
            for _ in range(64):  # far more than the kernel's buffers hold
                await stream.write(b"x" * (1 << 20), timeout=0.2)
        assert time.monotonic() - t0 < 10
        await stream.aclose()


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
@pytest.mark.parametrize("peer", ["sends", "closes"])
@pytest.mark.parametrize("backend", list(BACKENDS))
async def test_an_idle_connection_is_readable_once_the_peer_sends_or_closes(
    backend: str, peer: str, tls: bool
) -> None:
    """What the pool reads before it reuses a connection: a stray byte or an end makes
    it readable (then dropped), a quiet one is not; over TLS too."""
    then = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readexactly(5))
        await writer.drain()
        await then.wait()
        if peer == "sends":
            writer.write(b"STRAY")
            await writer.drain()
            await asyncio.sleep(30)
        else:
            writer.close()

    async with serving(handler, server_tls() if tls else None) as port:
        stream = await BACKENDS[backend]().connect_tcp(HOST, port, timeout=5)
        if tls:
            trusted = ssl.create_default_context(cafile=str(CERT))
            stream = await stream.start_tls(trusted, server_hostname="localhost", timeout=5)
        await stream.write(b"hello", timeout=5)
        assert await stream.read(5, timeout=5) == b"hello"
        await asyncio.sleep(0.05)
        assert stream.get_extra_info("is_readable") is False
        then.set()
        deadline = time.monotonic() + 5
        while not stream.get_extra_info("is_readable") and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert stream.get_extra_info("is_readable") is True
        assert await stream.read(5, timeout=5) == (b"STRAY" if peer == "sends" else b"")
        await stream.aclose()


@pytest.mark.parametrize("backend", list(BACKENDS))
async def test_a_refused_connection_is_a_connect_error(backend: str) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind((HOST, 0))
        port = s.getsockname()[1]
    with pytest.raises(httpcore.ConnectError):
        await BACKENDS[backend]().connect_tcp(HOST, port, timeout=5)


@pytest.mark.parametrize("backend", list(BACKENDS))
async def test_a_peer_that_resets_is_a_read_error_or_an_end(backend: str) -> None:
    async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(2)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        writer.transport.abort()  # RST, not FIN

    async with serving(reset) as port:
        stream = await BACKENDS[backend]().connect_tcp(HOST, port, timeout=5)
        await stream.write(b"hi", timeout=5)
        with contextlib.suppress(httpcore.ReadError):
            assert await stream.read(10, timeout=5) == b""
        await stream.aclose()


@pytest.mark.parametrize("backend", list(BACKENDS))
async def test_tls_with_a_trusted_certificate_and_not_without(backend: str) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readexactly(4))
        await writer.drain()

    async with serving(echo, server_tls()) as port:
        stream = await BACKENDS[backend]().connect_tcp(HOST, port, timeout=5)
        trusted = ssl.create_default_context(cafile=str(CERT))
        tls = await stream.start_tls(trusted, server_hostname="localhost", timeout=5)
        assert tls.get_extra_info("ssl_object") is not None
        await tls.write(b"ping", timeout=5)
        assert b"".join(await read_all(tls, 65_536)) == b"ping"
        await tls.aclose()

        stream = await BACKENDS[backend]().connect_tcp(HOST, port, timeout=5)
        with pytest.raises(httpcore.ConnectError):  # the system's roots do not sign it
            await stream.start_tls(ssl.create_default_context(), "localhost", timeout=5)
        await stream.aclose()


@pytest.mark.parametrize("backend", list(BACKENDS))
async def test_unix_sockets(backend: str, tmp_path: Path) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readexactly(4))
        await writer.drain()
        writer.close()

    path = str(tmp_path / "s")
    server = await asyncio.start_unix_server(echo, path)
    async with server:
        stream = await BACKENDS[backend]().connect_unix_socket(path, timeout=5)
        await stream.write(b"ping", timeout=5)
        assert b"".join(await read_all(stream, 65_536)) == b"ping"
        await stream.aclose()


async def test_an_https_exchange_through_a_pool_on_the_backend() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        await asyncio.sleep(1)

    async with serving(answer, server_tls()) as port:
        pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl.create_default_context(cafile=str(CERT)),
            network_backend=AsyncioBackend(),
        )
        async with pool:
            r = await pool.request("GET", f"https://localhost:{port}/")
            assert (r.status, r.content) == (200, b"ok")


async def test_the_proxys_upstream_pool_sends_through_the_asyncio_backend() -> None:
    """The pool replaced inside httpx's transport is the one used: an httpx upgrade that
    renames it would send through anyio again, silently; this goes red then."""
    connections = 0

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()

    async with serving(answer) as port:
        upstream = Upstream(ServerConfig.load(upstream=f"http://{HOST}:{port}", discover=False))
        try:
            for _ in range(3):
                response = await upstream.send("GET", upstream.url("/v1/models"), {}, None)
                assert isinstance(response.extensions["network_stream"], AsyncioStream)
                assert await upstream.read(response) == b"ok"
        finally:
            await upstream.aclose()
    assert connections == 1  # kept alive and reused


POSTS = 5


@pytest.mark.parametrize("size", [10, 3_000, 60_000])
async def test_a_requests_head_goes_out_with_its_body(size: int) -> None:
    """The upstream takes a request's head and body in one read (one segment, not two):
    a server in its own thread, waiting in ``recv`` on a kept-alive connection when each
    request is sent, records what each ``recv`` returned for it. (Sent as two writes,
    the head alone wakes the server most times: five requests all read whole would be
    chance.)"""
    listener = socket.create_server((HOST, 0))
    reads: list[list[bytes]] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            for expected in (0, *[size] * POSTS):  # a GET to open the connection
                got: list[bytes] = []
                data = b""
                while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < expected:
                    chunk = conn.recv(1 << 20)
                    if not chunk:
                        return
                    got.append(chunk)
                    data += chunk
                reads.append(got)
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    upstream = Upstream(ServerConfig.load(upstream=f"http://{HOST}:{port}", discover=False))
    try:
        opened = await upstream.send("GET", upstream.url("/v1/models"), {}, None)
        assert await upstream.read(opened) == b"ok"  # (a head alone goes out too)
        for _ in range(POSTS):
            await asyncio.sleep(0.02)  # the server waits in recv
            response = await upstream.send(
                "POST",
                upstream.url("/v1/chat/completions"),
                {"content-type": "application/json"},
                b"x" * size,
            )
            assert await upstream.read(response) == b"ok"
    finally:
        await upstream.aclose()
        listener.close()
        thread.join(5)
    assert len(reads) == 1 + POSTS
    for post in reads[1:]:
        assert b"".join(post).partition(b"\r\n\r\n")[2] == b"x" * size
        assert len(post) == 1, [len(r) for r in post]


async def test_a_read_cancelled_from_outside_leaves_the_stream_usable() -> None:
    go = asyncio.Event()
    async with serving(sends_when(go, b"after")) as port:
        stream = await AsyncioBackend().connect_tcp(HOST, port, timeout=5)
        task = asyncio.ensure_future(stream.read(100, timeout=None))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        go.set()
        assert await stream.read(100, timeout=5) == b"after"
        await stream.aclose()
        with pytest.raises(httpcore.ReadError):
            await stream.read(100, timeout=5)
        with pytest.raises(httpcore.WriteError):
            await stream.write(b"x", timeout=5)


def test_an_httpx_client_over_the_proxys_transport_sees_no_difference() -> None:
    """What a client reads through the proxy's transport is what the server sent, with
    keep-alive, chunked bodies and a body larger than one read."""
    body = bytes(range(256)) * 1024

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            for at in range(0, len(body), 50_000):
                part = body[at : at + 50_000]
                writer.write(b"%x\r\n%s\r\n" % (len(part), part))
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    async def run() -> None:
        async with serving(answer) as port:
            upstream = Upstream(ServerConfig.load(upstream=f"http://{HOST}:{port}", discover=False))
            async with httpx.AsyncClient(transport=upstream.transport) as client:
                for _ in range(3):
                    r = await client.get(f"http://{HOST}:{port}/")
                    assert r.content == body

    asyncio.run(run())


async def test_an_answer_not_read_yet_waits_in_the_kernel_not_in_memory() -> None:
    """Reading is paused between reads: a fast upstream cannot fill this process with
    an answer the proxy's client reads slowly."""
    size = 32 << 20

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"x" * size)
        await writer.drain()

    async with serving(flood) as port:
        stream = await AsyncioBackend().connect_tcp(HOST, port, timeout=5)
        assert isinstance(stream, AsyncioStream)
        got = len(await stream.read(1, timeout=5))
        await asyncio.sleep(0.3)  # the upstream keeps sending meanwhile
        held = sum(map(len, stream._protocol.chunks))
        assert held < 4 << 20, f"{held:,} bytes read ahead"
        while got < size:
            got += len(await stream.read(1 << 20, timeout=5))
        await stream.aclose()


@pytest.mark.parametrize(
    "case",
    [
        lambda: test_a_read_times_out_and_the_stream_reads_on("asyncio"),
        lambda: test_a_write_to_a_peer_that_reads_nothing_times_out("asyncio"),
        lambda: test_an_idle_connection_is_readable_once_the_peer_sends_or_closes(
            "asyncio", "sends", True
        ),
        lambda: test_an_idle_connection_is_readable_once_the_peer_sends_or_closes(
            "asyncio", "closes", False
        ),
        lambda: test_tls_with_a_trusted_certificate_and_not_without("asyncio"),
        lambda: test_an_https_exchange_through_a_pool_on_the_backend(),
        lambda: test_a_read_cancelled_from_outside_leaves_the_stream_usable(),
        lambda: test_an_answer_not_read_yet_waits_in_the_kernel_not_in_memory(),
        lambda: echoes_whole("asyncio", [b"a" * 70_000, b"b" * 3, b"c" * 5000], 4096),
    ],
    ids=[
        "read-timeout",
        "write-timeout",
        "idle-sends-tls",
        "idle-closes",
        "tls",
        "https-pool",
        "cancelled-read",
        "paused-reading",
        "echo",
    ],
)
def test_the_backend_on_uvloop(case: Callable[[], Coroutine[Any, Any, object]]) -> None:
    """The cases above on uvloop's event loop, which uvicorn serves the proxy on where it
    is installed (its transports are its own, not asyncio's)."""
    uvloop = pytest.importorskip("uvloop")
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(case())


_NAMES = st.sampled_from(["authorization", "content-type", "x-api-key", "user-agent", "accept"])
_VALUES = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=255), max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]),
    base=st.sampled_from(["http://up:8000/v1/x", "https://api.example.com/v1/x", "http://[::1]/a"]),
    headers=st.dictionaries(_NAMES, _VALUES, max_size=5),
    content=st.one_of(st.none(), st.binary(max_size=64)),
)
def test_the_upstream_request_is_the_one_httpx_makes_of_its_content(
    method: str, base: str, headers: dict[str, str], content: bytes | None
) -> None:
    """The upstream request is built without httpx's content encoding (its headers added
    by the proxy, the body given as its stream): the reference is httpx's own request
    made with ``content=``: the same header lines in the same order, the same body."""
    url = httpx.URL(base)
    mine = upstream_request(method, url, headers, content)
    wire = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    theirs = httpx.Request(method, url, headers=wire, content=content)
    assert mine.headers.raw == theirs.headers.raw
    assert mine.read() == theirs.read()
    assert (mine.method, mine.url) == (theirs.method, theirs.url)
