"""A fault-injection upstream: a raw asyncio HTTP/1.1 server on 127.0.0.1 that answers
wrong on purpose (faults a real server cannot be made to produce).

The fault is chosen by the request body's ``model``: ``fault-<name>`` (see ``FAULTS``);
any other model gets a correct chat completion. A request whose first message is the
summarizer's own system prompt gets ``summary-<name>`` when the model is
``fault-summary-<name>`` (so the summarizer call fails and the forwarded one does not).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from typing import Any

HOST = "127.0.0.1"

REPLY = json.dumps(
    {
        "id": "chatcmpl-ok",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
    }
).encode()
POISON = json.dumps(
    {
        "id": "chatcmpl-POISON",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "POISON"},
                "finish_reason": "stop",
            }
        ],
    }
).encode()

FAULTS = {
    "desync": "a correct answer followed, in the same write, by a second whole response",
    "slow": "waits 30 s before the headers",
    "never": "reads the request and never answers",
    "trickle": "headers at once, then one body byte every 0.2 s",
    "midclose": "Content-Length 1,000, 100 bytes sent, connection closed",
    "chunked-midclose": "a chunked JSON body cut off mid-way",
    "sse-midclose": "an SSE stream cut off after two events",
    "huge": "a 400 MB body with its Content-Length, as fast as the reader takes it",
    "huge-chunked": "a 400 MB chunked body (no length announced)",
    "badframe": "a response that is not HTTP",
}


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} OK"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _json(body: bytes) -> bytes:
    return _head(200, {"content-type": "application/json", "content-length": str(len(body))}) + body


class FaultUpstream:
    """The server in a daemon thread with its own event loop; ``with`` starts and stops it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.server: asyncio.Server | None = None
        self.port = 0
        self.requests = 0
        self.connections = 0
        self.seen: list[str] = []
        self.abandoned = 0
        """'never' requests whose client (the proxy) closed the connection."""
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def __enter__(self) -> FaultUpstream:
        self.thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._start(), self.loop)
        fut.result(timeout=10)
        return self

    async def _start(self) -> None:
        self.server = await asyncio.start_server(self._serve, HOST, 0)
        self.port = self.server.sockets[0].getsockname()[1]

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            assert self.server is not None
            self.server.close()
            for w in list(self.writers):
                w.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length) if length else b""
                self.requests += 1
                if not await self._answer(self._fault(body), reader, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self.writers.discard(writer)
            writer.close()

    def _fault(self, body: bytes) -> str:
        try:
            data: Any = json.loads(body)
            model = str(data.get("model", ""))
            first = data.get("messages", [{}])[0].get("content", "")
        except (ValueError, AttributeError, IndexError):
            return "ok"
        summarizing = isinstance(first, str) and first.startswith("You summarize")
        fault = model.removeprefix("fault-") if model.startswith("fault-") else "ok"
        if fault.startswith("summary-"):
            fault = fault.removeprefix("summary-") if summarizing else "ok"
        self.seen.append(fault)
        return fault

    async def _answer(
        self, fault: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Write the answer for ``fault``; False when the connection is done."""
        if fault == "ok":
            writer.write(_json(REPLY))
        elif fault == "desync":
            writer.write(_json(REPLY) + _json(POISON))
        elif fault == "slow":
            await asyncio.sleep(30)
            writer.write(_json(REPLY))
        elif fault == "never":
            await reader.read()  # returns when the client closes the connection
            self.abandoned += 1
            return False
        elif fault == "trickle":
            writer.write(_head(200, {"content-type": "application/json", "content-length": "500"}))
            for i in range(500):
                writer.write(b" ")
                await writer.drain()
                await asyncio.sleep(0.2 if i else 0)
        elif fault == "sse-endless":  # events until the client closes the connection
            writer.write(
                _head(200, {"content-type": "text/event-stream", "transfer-encoding": "chunked"})
            )
            event = b'data: {"n": 1}\n\n'
            try:
                for _ in range(600):
                    writer.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                    await writer.drain()
                    await asyncio.sleep(0.05)
            except ConnectionError:
                self.abandoned += 1
            return False
        elif fault == "midclose":
            writer.write(_head(200, {"content-type": "application/json", "content-length": "1000"}))
            writer.write(b"{" + b" " * 99)
            await writer.drain()
            return False
        elif fault == "chunked-midclose":
            writer.write(
                _head(200, {"content-type": "application/json", "transfer-encoding": "chunked"})
            )
            writer.write(b"10\r\n" + REPLY[:16] + b"\r\n")
            await writer.drain()
            return False
        elif fault == "sse-midclose":
            writer.write(
                _head(200, {"content-type": "text/event-stream", "transfer-encoding": "chunked"})
            )
            for event in (b'data: {"n": 1}\n\n', b'data: {"n": 2}\n\n'):
                writer.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            await writer.drain()
            return False
        elif fault == "huge":
            size = 400 * 1024 * 1024
            writer.write(
                _head(200, {"content-type": "application/json", "content-length": str(size)})
            )
            block = b" " * (1024 * 1024)
            for _ in range(400):
                writer.write(block)
                await writer.drain()
        elif fault == "huge-chunked":
            writer.write(
                _head(200, {"content-type": "application/json", "transfer-encoding": "chunked"})
            )
            block = b"100000\r\n" + b" " * (1024 * 1024) + b"\r\n"
            for _ in range(400):
                writer.write(block)
                await writer.drain()
            writer.write(b"0\r\n\r\n")
        elif fault == "badframe":
            writer.write(b"NOT HTTP AT ALL\r\n\r\n")
            await writer.drain()
            return False
        await writer.drain()
        return True


if __name__ == "__main__":  # manual use: python tests/fault_upstream.py
    with FaultUpstream() as up, contextlib.suppress(KeyboardInterrupt):
        print(f"fault upstream on {up.url}; faults: {', '.join(FAULTS)}")
        threading.Event().wait()
