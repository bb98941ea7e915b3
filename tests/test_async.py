"""afit, Conversation.afit and Prompt.afit never block the event loop, even when every
count is an HTTP call to a slow tokenize endpoint (a real server on loopback)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import tokenflex
from tokenflex import Chunk, Conversation, Model, Prompt

DELAY = 0.02  # seconds per tokenize call


class _SlowTokenizer(BaseHTTPRequestHandler):
    """llama.cpp's ``POST /tokenize`` dialect: one token per word, after a delay."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/tokenize":
            self.send_response(404)
            self.end_headers()
            return
        time.sleep(DELAY)
        tokens = list(range(len(str(body.get("content", "")).split())))
        data = json.dumps({"tokens": tokens}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow_model() -> Iterator[Model]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowTokenizer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    # a fresh name per test: tokenizers are cached per name, and the server is new
    yield Model(
        f"slow-{server.server_address[1]}",
        context_window=4096,
        tokenizer=f"server:{url}",
        chat_format="generic",
    )
    server.shutdown()
    server.server_close()


def _messages(n: int, tag: str) -> list[dict[str, str]]:
    out = [{"role": "system", "content": f"system {tag}"}]
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        out.append({"role": role, "content": f"{tag} message {i} " + "word " * (i % 7)})
    return out


async def _longest_stall(work: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    """Run ``work`` beside a 5 ms ticker; the longest gap between ticks, and the work's
    duration."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    started = time.perf_counter()
    await work()
    took = time.perf_counter() - started
    done.set()
    await tick
    return max(gaps, default=took), took  # no tick at all: the loop was blocked throughout


@pytest.mark.parametrize("entry", ["afit", "Prompt.afit", "Conversation.afit"])
async def test_async_fits_never_block_the_loop(slow_model: Model, entry: str) -> None:
    msgs = _messages(30, entry)

    async def work() -> object:
        if entry == "afit":
            return await tokenflex.afit(msgs, model=slow_model, max_tokens=256)
        if entry == "Prompt.afit":
            p = Prompt(slow_model, max_tokens=256)
            p.add("system", msgs[:1], required=True).add("history", msgs[1:-1])
            p.add("current", msgs[-1:], required=True)
            return await p.afit()
        conv = Conversation(msgs[:2], model=slow_model)  # counted here, synchronously
        # what afit must count: documents, each an HTTP call
        docs = [Chunk(f"{entry} passage {i} about pumps", f"doc{i}") for i in range(15)]
        return await conv.afit(max_tokens=256, documents=docs)

    stall, took = await _longest_stall(work)
    # 15+ tokenize calls of 20 ms each: the work takes a while, the loop never waits on it
    assert took > 10 * DELAY, took
    assert stall < 5 * DELAY, (stall, took)
