"""Counts from a provider's count endpoint (issue 26 item 4): Anthropic
``/v1/messages/count_tokens`` and OpenAI ``/v1/responses/input_tokens``.

The provider cannot be reached offline, so the upstream is a small real HTTP server on
loopback that counts deterministically, with the shape of the real endpoints: Anthropic
merges consecutive turns of one role and takes the system prompt apart; both add a fixed
overhead per request and per turn. The properties: the sum a counter gives is never below
the endpoint's count of the same whole request, a conversation that grew by one message
costs one call, counts are kept per tenant, and a failing or slow endpoint leaves the
estimate in place, logged and said in the plan.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenflex
from tokenflex.counting import ProviderCounts, count_messages, get_counter, provider_counts
from tokenflex.counting.provider import (
    STORE,
    TURN_SLACK,
    ProviderCounter,
    reset_provider_counts,
)
from tokenflex.models import Model, get_model


def words(text: str) -> int:
    """The fake vocabulary: a token per 4 UTF-8 bytes, at least one."""
    return len(text.encode()) // 4 + 1


def anthropic_count(body: dict[str, Any]) -> int:
    total = 5
    if "system" in body:
        total += 3 + words(body["system"])
    turns: list[tuple[str, list[str]]] = []
    for m in body["messages"]:  # consecutive turns of one role are merged, as Anthropic does
        if turns and turns[-1][0] == m["role"]:
            turns[-1][1].append(m["content"])
        else:
            turns.append((m["role"], [m["content"]]))
    return total + sum(3 + words("\n\n".join(texts)) for _, texts in turns)


def openai_count(body: dict[str, Any]) -> int:
    return 2 + sum(4 + words(item["content"]) for item in body["input"])


class FakeProvider:
    """Answers count requests; ``mode``: ``ok``, ``error`` (HTTP 500) or ``slow``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        self.mode = "ok"
        self.release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.calls.append(
                    (self.path, body, {k.lower(): v for k, v in self.headers.items()})
                )
                if fake.mode == "slow":
                    fake.release.wait(10)
                if fake.mode == "error":
                    self.answer(500, {"error": {"message": "overloaded"}})
                elif self.path == "/v1/messages/count_tokens":
                    self.answer(200, {"input_tokens": anthropic_count(body)})
                elif self.path == "/v1/responses/input_tokens":
                    count = openai_count(body)
                    self.answer(200, {"object": "response.input_tokens", "input_tokens": count})
                elif self.path == "/v1/chat/completions":  # the proxied request itself
                    message = {"role": "assistant", "content": "ok"}
                    choice = {"index": 0, "message": message, "finish_reason": "stop"}
                    self.answer(200, {"id": "c1", "object": "chat.completion", "choices": [choice]})
                else:
                    self.answer(404, {"error": {"message": "no such path"}})

            def answer(self, status: int, data: dict[str, Any]) -> None:
                raw = json.dumps(data).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except OSError:  # the client gave up (timeout test)
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeProvider]:
    server = FakeProvider()
    yield server
    server.close()


@pytest.fixture
def fake(provider: FakeProvider) -> Iterator[FakeProvider]:
    """The module's fake, answering counts, with no call and no count remembered."""
    provider.calls.clear()
    provider.mode = "ok"
    provider.release.clear()
    reset_provider_counts()
    yield provider
    provider.release.set()
    reset_provider_counts()


CLAUDE = "claude-opus-4-7"


def openai_model() -> Model:
    """An OpenAI model counted with an estimate here (no local tokenizer named)."""
    return get_model(CLAUDE).replace(name="gpt-next-x", provider="openai")


def chat(n: int, start: int = 0) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(start, start + n):
        role = "user" if i % 2 == 0 else "assistant"
        msgs.append({"role": role, "content": f"message {i}: " + "lorem ipsum dolor " * (i % 7)})
    return msgs


def whole_count(model: Model, messages: list[dict[str, Any]]) -> int:
    """What the fake endpoint says the whole request costs."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    turns = [m for m in messages if m["role"] != "system"]
    if model.provider == "anthropic":
        body: dict[str, Any] = {"messages": turns}
        if system:
            body["system"] = system
        return anthropic_count(body)
    return openai_count({"input": messages})


texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1).filter(
    lambda t: t.strip() == t and t.strip()
)
turns = st.lists(
    st.tuples(st.sampled_from(["system", "user", "assistant"]), texts), min_size=1, max_size=8
)


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
@settings(max_examples=25, deadline=None)
@given(listed=turns)
def test_the_sum_is_never_below_the_endpoints_count_of_the_whole_request(
    provider: FakeProvider, kind: str, listed: list[tuple[str, str]]
) -> None:
    reset_provider_counts()  # hypothesis draws inside one test: forget the last example
    provider.calls.clear()
    model = get_model(CLAUDE) if kind == "anthropic" else openai_model()
    messages = [{"role": r, "content": t} for r, t in listed]
    with provider_counts(ProviderCounts(provider.url, api_key="k")):
        counted = count_messages(messages, model=model)
    real = whole_count(model, messages)
    assert counted >= real
    # and close to it: the probe turn, the slack, and a turn header per merged turn
    assert counted <= real + 3 + (TURN_SLACK + 3) * len(messages) + 3
    assert provider.calls, "the endpoint was asked"


def test_a_conversation_that_grew_by_one_message_costs_one_call(fake: FakeProvider) -> None:
    config = ProviderCounts(fake.url, api_key="sk-ant-1", tenant="alice")
    msgs = chat(6)
    with provider_counts(config):
        first = count_messages(msgs, model=CLAUDE)
        asked = len(fake.calls)
        assert count_messages(msgs, model=CLAUDE) == first
        assert len(fake.calls) == asked  # all cached
        grown = [*msgs, {"role": "user", "content": "one more question"}]
        count_messages(grown, model=CLAUDE)
    assert len(fake.calls) == asked + 1
    path, body, headers = fake.calls[-1]
    assert path == "/v1/messages/count_tokens" and body["model"] == CLAUDE
    assert headers["x-api-key"] == "sk-ant-1" and headers["anthropic-version"]
    # the cache holds counts under keys that name the tenant, never a message's text
    texts = {m["content"] for m in grown}
    for key in STORE.keys():  # noqa: SIM118 (a list, not a dict)
        assert key[0] == "alice"
        assert not any(part in texts for part in key if isinstance(part, str))


def test_counts_are_kept_per_tenant(fake: FakeProvider) -> None:
    msgs = chat(4)
    with provider_counts(ProviderCounts(fake.url, tenant="alice")):
        alice = count_messages(msgs, model=CLAUDE)
    asked = len(fake.calls)
    with provider_counts(ProviderCounts(fake.url, tenant="bob")):
        bob = count_messages(msgs, model=CLAUDE)
    assert bob == alice
    assert len(fake.calls) == 2 * asked  # bob's counts were asked again, not read from alice's


def test_the_openai_endpoint_counts_responses_input(fake: FakeProvider) -> None:
    model = openai_model()
    msgs = chat(3)
    with provider_counts(ProviderCounts(fake.url, api_key="sk-oa")):
        counted = count_messages(msgs, model=model)
    assert counted >= whole_count(model, msgs)
    paths = {path for path, _, _ in fake.calls}
    assert paths == {"/v1/responses/input_tokens"}
    assert fake.calls[0][2]["authorization"] == "Bearer sk-oa"


def test_an_exact_local_counter_asks_nothing(fake: FakeProvider) -> None:
    with provider_counts(ProviderCounts(fake.url)):
        counter = get_counter("gpt-4o")
        counter.count(chat(3))
    assert not isinstance(counter, ProviderCounter) and counter.exact
    assert fake.calls == []


def test_outside_the_block_nothing_is_asked(fake: FakeProvider) -> None:
    assert not isinstance(get_counter(CLAUDE), ProviderCounter)
    count_messages(chat(3), model=CLAUDE)
    assert fake.calls == []


@pytest.mark.parametrize("mode", ["error", "slow"])
def test_a_failing_endpoint_leaves_the_estimate(
    fake: FakeProvider, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    fake.mode = mode
    msgs = chat(8)
    estimate = count_messages(msgs, model=CLAUDE)
    config = ProviderCounts(fake.url, timeout=0.2, retry_after=60)
    with caplog.at_level(logging.WARNING, logger="tokenflex"), provider_counts(config):
        counter = get_counter(CLAUDE)
        assert counter.count(msgs) == estimate
        notes = counter.notes()
        # left alone after the failure: the next request asks nothing either
        asked = len(fake.calls)
        assert count_messages(chat(4, start=20), model=CLAUDE) > 0
    assert asked == 1 and len(fake.calls) == 1
    assert any(
        "count endpoint" in r.getMessage() and "estimate" in r.getMessage() for r in caplog.records
    )
    assert any("their counts are the estimate" in n for n in notes), notes


def test_fit_keeps_more_with_provider_counts_and_the_plan_says_so(fake: FakeProvider) -> None:
    msgs = chat(60)
    plain = tokenflex.fit(msgs, model=CLAUDE, max_input_tokens=1500, max_tokens=500)
    with provider_counts(ProviderCounts(fake.url, tenant="t")):
        plan = tokenflex.fit(msgs, model=CLAUDE, max_input_tokens=1500, max_tokens=500)
    assert len(plan.messages) > len(plain.messages)  # the estimate overcounts Claude
    assert plan.input_tokens >= whole_count(get_model(CLAUDE), plan.messages)
    assert plan.input_tokens <= 1500
    assert any("counted by the provider's count endpoint" in w for w in plan.warnings)
    assert not any("provider's count endpoint" in w for w in plain.warnings)


def test_the_proxy_counts_through_the_upstream_with_count_provider(fake: FakeProvider) -> None:
    from test_server import ServerThread

    from tokenflex.server import ServerConfig, create_app

    config = ServerConfig.load(
        upstream=fake.url, discover=False, cut_note=False, calibrate=False, count="provider"
    )
    msgs = chat(6)
    with ServerThread(create_app(config)) as proxy, httpx.Client(trust_env=False) as client:

        def send(messages: list[dict[str, Any]]) -> httpx.Response:
            return client.post(
                f"{proxy.url}/v1/chat/completions",
                json={"model": CLAUDE, "messages": messages, "max_tokens": 100},
                headers={"Authorization": "Bearer sk-client"},
                timeout=20,
            )

        assert send(msgs).status_code == 200
        counted = [c for c in fake.calls if c[0] == "/v1/messages/count_tokens"]
        assert counted and all(c[2]["x-api-key"] == "sk-client" for c in counted)
        asked = len(counted)
        assert send([*msgs, {"role": "user", "content": "and one more"}]).status_code == 200
    counted = [c for c in fake.calls if c[0] == "/v1/messages/count_tokens"]
    assert len(counted) == asked + 1  # the new message only
    sent = [c for c in fake.calls if c[0] == "/v1/chat/completions"]
    assert len(sent) == 2 and sent[0][1]["messages"] == msgs  # it fits: sent unchanged


@pytest.mark.parametrize(
    ("path", "body"),
    [
        pytest.param("messages/count_tokens", "messages", id="anthropic-count_tokens"),
        pytest.param("responses/input_tokens", "input", id="responses-input_tokens"),
    ],
)
def test_the_proxys_count_routes_answer_the_providers_count(
    fake: FakeProvider, path: str, body: str
) -> None:
    from test_server import ServerThread

    from tokenflex.server import ServerConfig, create_app

    msgs = chat(6)[1:]  # a system prompt is a field of its own in both formats
    local = get_counter(CLAUDE).count(msgs)  # the estimate: a bound, far over the fake's count
    with provider_counts(ProviderCounts(fake.url, tenant="reference")):
        expected = get_counter(CLAUDE).count(msgs)  # the library's count with the endpoint
    assert expected < local
    fake.calls.clear()

    def ask(count: str) -> int:
        config = ServerConfig.load(
            upstream=fake.url, discover=False, cut_note=False, calibrate=False, count=count
        )
        with ServerThread(create_app(config)) as proxy, httpx.Client(trust_env=False) as client:
            r = client.post(
                f"{proxy.url}/v1/{path}",
                json={"model": CLAUDE, body: msgs},
                headers={"Authorization": "Bearer sk-client"},
                timeout=20,
            )
        assert r.status_code == 200, r.text
        n = r.json()["input_tokens"]
        assert isinstance(n, int)
        return n

    assert ask("estimate") == local and not fake.calls  # the default asks nothing
    assert ask("provider") == expected  # the provider's count, as a fit counts it
    counted = [c for c in fake.calls if c[0] == "/v1/messages/count_tokens"]
    assert counted and all(c[2]["x-api-key"] == "sk-client" for c in counted)
    # the sum is never below the endpoint's own count of the whole request
    assert expected >= whole_count(get_model(CLAUDE), msgs)
    # a failing endpoint: the estimate, as when fitting
    reset_provider_counts()
    fake.mode = "error"
    assert ask("provider") == local
