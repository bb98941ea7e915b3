"""Where the proxy fits a request: on its event loop, or in a worker thread.

A fit on the loop costs least (no hand-off, and the caches of the core that parsed the
body); a worker thread lets the loop serve other requests while a tokenizer works on new
text. The proxy fits a chat body of up to 2 MiB (a native one of up to 256 KiB) on the
loop until the fit has 256 Ki characters of new text to tokenize, and then again in a
worker thread, with the counts made so far kept. Against a real HTTP upstream on
loopback, with the real fit() watched (not replaced) to see which thread runs it.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_server import Fake, ServerThread, fake_upstream, make_client, start_proxy

from tokenflex.server._fitter import INLINE_BYTES, INLINE_CHAT_BYTES, INLINE_NEW_CHARS
from tokenflex.tokenizers import get_tokenizer
from tokenflex.tokenizers.base import CountCache, CountingBudgetExceeded, count_scope

CLAUDE = "claude-sonnet-4-5"


@pytest.fixture(scope="module")
def servers() -> Iterator[ServerThread]:
    upstream = ServerThread(fake_upstream(Fake()))
    with upstream, start_proxy(upstream.url) as proxy:
        # a model's first request loads its tokenizer (afit: each step in a worker)
        post(proxy, "/v1/chat/completions", chat_body(10, "warm"))
        hello = [{"role": "user", "content": "hello"}]
        post(proxy, "/v1/messages", {"model": CLAUDE, "max_tokens": 16, "messages": hello})
        yield proxy


@pytest.fixture
def fits(servers: ServerThread, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The threads that ran each fit() the proxy made, in order: ``loop`` (the server's
    own thread, where its event loop runs) or ``worker``; a fit stopped by its budget is
    listed as ``loop (stopped)``."""
    module = importlib.import_module("tokenflex.fit")  # (the package's ``fit`` is the function)
    real = module.fit
    seen: list[str] = []

    def watched(*args: Any, **kwargs: Any) -> Any:
        where = "loop" if threading.current_thread() is servers.thread else "worker"
        try:
            plan = real(*args, **kwargs)
        except CountingBudgetExceeded:
            seen.append(f"{where} (stopped)")
            raise
        seen.append(where)
        return plan

    monkeypatch.setattr(module, "fit", watched)
    return seen


def chat_body(chars: int, tag: str) -> dict[str, Any]:
    """A chat request of about ``chars`` characters of text, every message's text its
    own (``tag`` makes them new to the count caches)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    i = 0
    while sum(len(m["content"]) for m in messages) < chars:
        role = "user" if i % 2 == 0 else "assistant"
        messages.append({"role": role, "content": f"{tag} {i}: " + f"w{i} " * 400})
        i += 1
    messages.append({"role": "user", "content": f"{tag}: and now?"})
    return {"model": "gpt-4o", "messages": messages, "max_tokens": 256}


def post(proxy: ServerThread, path: str, body: dict[str, Any]) -> httpx.Response:
    with make_client() as client:
        r = client.post(f"{proxy.url}{path}", json=body, headers={"authorization": "Bearer k"})
    assert r.is_success, r.text  # (the fake echoes a path it does not serve: 201)
    return r


def test_a_conversation_seen_before_is_fitted_on_the_loop(
    servers: ServerThread, fits: list[str]
) -> None:
    """A chat request of ~1 MiB of new text (past the new-text budget, under the chat
    body limit): its fit starts on the loop, stops at the budget and is made in a worker
    thread; the same conversation sent again (its texts counted now) is fitted on the
    loop. Both plans are the same plan."""
    body = chat_body(1_000_000, "seen")
    assert INLINE_NEW_CHARS < 1_000_000 < len(httpx.Request("POST", "/", json=body).content)
    first = post(servers, "/v1/chat/completions", body)
    assert fits == ["loop (stopped)", "worker"]
    fits.clear()
    again = post(servers, "/v1/chat/completions", body)
    assert fits == ["loop"]
    for h in ("x-tokenflex-input-tokens", "x-tokenflex-dropped", "x-tokenflex-max-tokens"):
        assert first.headers[h] == again.headers[h]
    assert int(first.headers["x-tokenflex-dropped"]) > 0  # (cut: a window of 128K)


def test_a_short_new_request_is_fitted_on_the_loop(servers: ServerThread, fits: list[str]) -> None:
    post(servers, "/v1/chat/completions", chat_body(50_000, "short"))
    assert fits == ["loop"]


def test_a_chat_body_past_its_limit_is_fitted_in_a_worker(
    servers: ServerThread, fits: list[str]
) -> None:
    body = chat_body(INLINE_CHAT_BYTES + 1, "past")
    post(servers, "/v1/chat/completions", body)
    assert fits == ["worker"]
    fits.clear()
    post(servers, "/v1/chat/completions", body)  # counted now: the size decides
    assert fits == ["worker"]


def test_a_native_body_past_its_limit_is_fitted_in_a_worker(
    servers: ServerThread, fits: list[str]
) -> None:
    """An agent's Anthropic request costs a fit ~10 µs an item (each converted): past
    256 KiB it goes to a worker, a smaller one is fitted on the loop."""
    messages: list[dict[str, Any]] = []
    for i in range(200):
        messages.append({"role": "user", "content": f"native {i}: " + "x y " * 400})
        messages.append({"role": "assistant", "content": f"ok {i}"})
    messages.append({"role": "user", "content": "go on"})
    body = {"model": CLAUDE, "max_tokens": 1024, "messages": messages}
    assert len(httpx.Request("POST", "/", json=body).content) > INLINE_BYTES
    post(servers, "/v1/messages", body)
    assert fits == ["worker"]
    fits.clear()
    post(servers, "/v1/messages", {**body, "messages": messages[-41:]})
    assert fits == ["loop"]


# -- the budget itself --------------------------------------------------------------------

TEXTS = st.lists(st.text(alphabet="ab c", min_size=1, max_size=12), max_size=20)


@settings(max_examples=100, deadline=None)
@given(cached=TEXTS, asked=TEXTS, budget=st.integers(0, 60))
def test_a_budget_stops_at_the_new_text_it_would_pass(
    cached: list[str], asked: list[str], budget: int
) -> None:
    """Counting ``asked`` in a scope of ``budget`` characters, after ``cached`` was
    counted: it stops (raises) at the first text new to the cache and to the scope whose
    length would take the new characters past the budget, and nowhere else; every count
    before it is the tokenizer's; committed, the counts made reach the cache (a second
    try counts them again for nothing)."""
    tokenizer = get_tokenizer("o200k_base").tokenizer
    cache = CountCache(tokenizer)
    for text in cached:
        cache.count(text)
    # the reference: the same walk, by hand
    known, spent, stop = set(cached), 0, None
    for i, text in enumerate(asked):
        if text in known:
            continue
        if spent + len(text) > budget:
            stop = i
            break
        spent += len(text)
        known.add(text)
    counted: list[int] = []
    with count_scope(budget) as scope:
        try:
            for text in asked:
                counted.append(cache.count(text))
        except CountingBudgetExceeded as exc:
            assert exc.budget == budget and f"budget={budget}" in str(exc)
            scope.commit()
        assert len(counted) == (len(asked) if stop is None else stop)
    assert counted == [tokenizer.count(t) for t in asked[: len(counted)]]
    assert all(t in cache for t in known)
    misses = cache.misses
    for text in asked[: len(counted)]:
        cache.count(text)
    assert cache.misses == misses
