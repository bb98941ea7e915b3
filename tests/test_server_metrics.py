"""``GET /metrics`` (issue 27, item 1): real requests through the proxy to a loopback
upstream (and the real llama.cpp server), then the exposition read back with
prometheus_client's own text parser.

Each figure is checked against an independent reference: the ``x-tokenflex-*`` headers
the proxy answered each request with, and the usage the upstream itself sent.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from typing import Any

import anyio.to_thread
import httpx
import pytest
from llama_server import LlamaCppServer
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from test_server import ServerThread

from tokenflex.models import Model
from tokenflex.server import ServerConfig, create_app

KEY = "pk-metrics"
TINY = Model(
    name="tiny", context_window=1024, tokenizer="o200k_base", chat_format="openai", source="fake"
)
INVENTED = "my-invented-model-9f3a"
REPORTED = 321  # the usage the upstream reports for every answer
WORDS = ["valve", "pressure", "kernel", "harvest", "signal", "river"]


async def discover(base_url: str, name: str | None, api_key: str | None) -> Model | None:
    """The upstream serves 'tiny' (1,024 tokens); other names: the registry."""
    return TINY if name == "tiny" else None


class Upstream:
    """Answers every API with its usage; ``user: fail`` gets a 500; ``user: hold`` waits
    for :attr:`release`."""

    def __init__(self) -> None:
        self.holding = threading.Event()
        self.release = threading.Event()

    def app(self) -> Starlette:
        async def answer(request: Request) -> Response:
            body = json.loads(await request.body())
            if body.get("user") == "fail" or request.url.path.startswith("/broken"):
                return JSONResponse({"error": {"message": "boom", "type": "server"}}, 500)
            if body.get("user") == "hold":
                self.holding.set()
                await anyio.to_thread.run_sync(self.release.wait)
            path = request.url.path
            if path.endswith("/messages"):
                usage = {"input_tokens": REPORTED - 21, "cache_read_input_tokens": 21}
                return JSONResponse({"type": "message", "content": [], "usage": usage})
            if path.endswith("/responses"):
                return JSONResponse({"object": "response", "usage": {"input_tokens": REPORTED}})
            message = {"role": "assistant", "content": "A short summary."}
            return JSONResponse(
                {
                    "object": "chat.completion",
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": REPORTED, "completion_tokens": 3},
                }
            )

        async def other(request: Request) -> Response:
            return JSONResponse({"object": "list", "data": []})

        return Starlette(
            routes=[
                Route("/{rest:path}", answer, methods=["POST"]),
                Route("/{rest:path}", other, methods=["GET"]),
            ]
        )


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[Upstream, ServerThread]]:
    fake = Upstream()
    with ServerThread(fake.app()) as server:
        yield fake, server


def proxy_for(server: ServerThread, **settings: Any) -> ServerThread:
    config = ServerConfig.load(
        upstream=server.url, proxy_key=KEY, cut_note=False, calibrate=False, **settings
    )
    return ServerThread(create_app(config, discover=discover))


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=60, trust_env=False, headers={"x-tokenflex-key": KEY}) as c:
        yield c


def conversation(seed: int, turns: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    msgs = [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"{i}: " + " ".join(rng.choice(WORDS) for _ in range(40)),
        }
        for i in range(turns)
    ]
    return [*msgs, {"role": "user", "content": f"seed {seed}: and now?"}]


def scrape(client: httpx.Client, proxy: ServerThread) -> dict[tuple[str, frozenset[Any]], float]:
    """Every sample of ``GET /metrics``, parsed by prometheus_client: {(name, labels): value}."""
    r = client.get(f"{proxy.url}/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def value(samples: dict[tuple[str, frozenset[Any]], float], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def test_requests_tokens_and_drops_are_counted_with_bounded_labels(
    upstream: tuple[Upstream, ServerThread], client: httpx.Client
) -> None:
    _, server = upstream
    with proxy_for(server, routes={"team": {}, "trial": {"mode": "observe"}}) as proxy:
        r = client.get(f"{proxy.url}/metrics", headers={"x-tokenflex-key": "wrong"})
        assert r.status_code == 401  # protected like the other /tokenflex routes
        before = scrape(client, proxy)
        assert value(before, "tokenflex_requests_total") == 0

        url = f"{proxy.url}/v1/chat/completions"
        answers = [
            client.post(url, json={"model": "tiny", "messages": conversation(1, 40)}),  # fitted
            client.post(url, json={"model": "tiny", "messages": conversation(2, 1)}),  # unchanged
            client.post(
                f"{proxy.url}/team/v1/messages",
                json={"model": "tiny", "messages": conversation(3, 40), "max_tokens": 100},
            ),
            client.post(
                f"{proxy.url}/v1/responses",
                json={"model": "gpt-4o", "input": conversation(4, 2), "max_output_tokens": 50},
            ),
        ]
        for a in answers:
            assert a.status_code == 200, a.text
        invented = client.post(url, json={"model": INVENTED, "messages": conversation(5, 2)})
        assert invented.headers["x-tokenflex-fitted"].startswith("no")  # passed through
        too_long = [{"role": "user", "content": "valve " * 3000}]
        refused = client.post(url, json={"model": "tiny", "messages": too_long})
        assert refused.status_code == 400
        failed = client.post(
            url, json={"model": "tiny", "messages": conversation(6, 1)} | {"user": "fail"}
        )
        assert failed.status_code == 500
        assert client.get(f"{proxy.url}/v1/files").status_code == 200  # passed through
        observed = client.post(
            f"{proxy.url}/trial/v1/chat/completions",
            json={"model": "tiny", "messages": conversation(1, 40)},
        )
        assert observed.headers["x-tokenflex-would-change"] == "yes"

        after = scrape(client, proxy)
        kept = [
            client.get(f"{proxy.url}/tokenflex/plans/{a.headers['x-tokenflex-plan-id']}").json()
            for a in [*answers, failed, observed]
        ]

    def requests(**labels: str) -> float:
        return value(after, "tokenflex_requests_total", **labels)

    assert requests(route="default", api="chat", outcome="fitted") == 1
    assert requests(route="default", api="chat", outcome="unchanged") == 1
    assert requests(route="team", api="anthropic", outcome="fitted") == 1
    assert requests(route="default", api="responses", outcome="unchanged") == 1
    assert requests(api="chat", outcome="passed_through") == 1
    assert requests(api="chat", outcome="refused") == 1
    assert requests(api="chat", outcome="upstream_error") == 1
    assert requests(api="passthrough", outcome="passed_through") == 1
    assert requests(route="trial", api="chat", outcome="observed") == 1
    assert requests() == 9

    # no series is named after a model a client invents; tiny is no registry model
    labels = {v for (_, ls) in after for _, v in ls}
    assert INVENTED not in labels
    assert value(after, "tokenflex_input_tokens_planned_total", model="gpt-4o") == int(
        answers[3].headers["x-tokenflex-input-tokens"]
    )
    tiny = [answers[0], answers[1], answers[2], failed]
    assert value(after, "tokenflex_input_tokens_planned_total", model="other") == sum(
        int(a.headers["x-tokenflex-input-tokens"]) for a in tiny
    ) + int(observed.headers["x-tokenflex-would-input-tokens"])
    # what the upstream reported, for the answers that carried usage (Anthropic's cached
    # input added back), against the planned tokens of the same requests
    assert value(after, "tokenflex_input_tokens_reported_total") == 5 * REPORTED
    assert value(after, "tokenflex_input_tokens_planned_with_usage_total") == sum(
        int(a.headers["x-tokenflex-input-tokens"]) for a in answers
    ) + int(observed.headers["x-tokenflex-would-input-tokens"])
    dropped = sum(int(a.headers["x-tokenflex-dropped"]) for a in answers)
    dropped += int(observed.headers["x-tokenflex-would-dropped"])
    assert dropped > 0
    assert value(after, "tokenflex_messages_removed_total") == dropped
    assert value(after, "tokenflex_messages_removed_total", reason="budget") > 0
    # each dropped item's tokens, as the stored plans list them
    assert value(after, "tokenflex_tokens_removed_total") == sum(
        d["tokens"] for plan in kept for d in plan["dropped"]
    )
    assert value(after, "tokenflex_tokens_removed_total", model="other") > 0
    # one fit per plan made (the refused request never got one)
    assert value(after, "tokenflex_fit_seconds_count") == 6
    assert value(after, "tokenflex_fit_seconds_bucket", le="+Inf") == 6
    assert value(after, "tokenflex_state_store_errors_total") == 0


def test_the_cached_prefix_of_a_growing_conversation_is_counted(
    upstream: tuple[Upstream, ServerThread], client: httpx.Client
) -> None:
    _, server = upstream
    with proxy_for(server) as proxy:
        url = f"{proxy.url}/v1/chat/completions"
        messages = conversation(7, 3)
        first = client.post(url, json={"model": "gpt-4o", "messages": messages})
        messages = [*messages, {"role": "assistant", "content": "ok"}, *conversation(8, 0)]
        second = client.post(url, json={"model": "gpt-4o", "messages": messages})
        samples = scrape(client, proxy)
    assert "x-tokenflex-prefix-tokens" not in first.headers
    assert value(samples, "tokenflex_prefix_tokens_total", model="gpt-4o") == int(
        second.headers["x-tokenflex-prefix-tokens"]
    )
    assert value(samples, "tokenflex_cached_prefix_tokens_total", model="gpt-4o") == int(
        second.headers["x-tokenflex-cached-tokens"]
    )


def test_summarizer_calls_failures_and_summaries_are_counted(
    upstream: tuple[Upstream, ServerThread], client: httpx.Client
) -> None:
    _, server = upstream
    # a small input budget in a large window: the summary takes one call, made now
    broken = {"base_url": f"{server.url}/broken/v1", "model": "x"}
    routes = {
        "summ": {"summarize": True, "max_input_tokens": 500},
        "broken": {"summarizer": broken, "max_input_tokens": 500},
    }
    with proxy_for(server, routes=routes) as proxy:
        for route, seed in (("summ", 9), ("broken", 10)):
            body = {"model": "gpt-4o", "messages": conversation(seed, 40), "max_tokens": 100}
            r = client.post(f"{proxy.url}/{route}/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text
        samples = scrape(client, proxy)
    calls = value(samples, "tokenflex_summarizer_calls_total")
    failures = value(samples, "tokenflex_summarizer_failures_total")
    assert calls >= 2
    assert failures >= 1
    assert calls - failures >= 1
    assert value(samples, "tokenflex_summaries_total", model="gpt-4o") == 1
    assert value(samples, "tokenflex_tokens_summarized_total", model="gpt-4o") > 0
    assert value(samples, "tokenflex_messages_removed_total", reason="summarized") > 0


def test_state_store_errors_are_counted(
    upstream: tuple[Upstream, ServerThread], client: httpx.Client
) -> None:
    _, server = upstream
    with proxy_for(server, state_store="redis://127.0.0.1:9/0") as proxy:  # nothing listens
        body = {"model": "tiny", "messages": conversation(11, 3)}
        r = client.post(f"{proxy.url}/v1/chat/completions", json=body)
        samples = scrape(client, proxy)
    assert value(samples, "tokenflex_state_store_errors_total", operation="get") >= 1
    outcome = "error" if r.status_code == 500 else "unchanged"  # a store error fails the fit
    assert value(samples, "tokenflex_requests_total", outcome=outcome) == 1


def test_requests_shed_at_capacity_are_counted(
    upstream: tuple[Upstream, ServerThread], client: httpx.Client
) -> None:
    fake, server = upstream
    fake.holding.clear()
    fake.release.clear()
    with proxy_for(server, max_inflight=1, max_queue=0, max_inflight_per_client=0) as proxy:
        url = f"{proxy.url}/v1/chat/completions"
        held: list[httpx.Response] = []
        body = {"model": "tiny", "messages": conversation(12, 1), "user": "hold"}
        worker = threading.Thread(target=lambda: held.append(client.post(url, json=body)))
        worker.start()
        try:
            assert fake.holding.wait(30)
            shed = client.post(url, json={"model": "tiny", "messages": conversation(13, 1)})
        finally:
            fake.release.set()
            worker.join(30)
        assert shed.status_code == 503
        assert held[0].status_code == 200
        samples = scrape(client, proxy)
    assert value(samples, "tokenflex_requests_total", api="chat", outcome="shed") == 1
    assert value(samples, "tokenflex_requests_total", outcome="unchanged") == 1


def test_calibration_factors_are_exposed(
    upstream: tuple[Upstream, ServerThread], client: httpx.Client
) -> None:
    _, server = upstream
    config = ServerConfig.load(upstream=server.url, proxy_key=KEY, cut_note=False)
    with ServerThread(create_app(config, discover=discover)) as proxy:
        # the upstream reports 321 input tokens for a short chat: an undercount (one bounded step)
        url = f"{proxy.url}/v1/chat/completions"
        r = client.post(url, json={"model": "gpt-4o", "messages": conversation(14, 2)})
        assert "x-tokenflex-calibration" in r.headers
        factor = client.get(f"{proxy.url}/tokenflex/calibration").json()["models"]["gpt-4o"]
        samples = scrape(client, proxy)
    assert factor["factor"] > 1
    assert value(samples, "tokenflex_calibration_factor", model="gpt-4o") == factor["factor"]


def test_metrics_can_be_turned_off(
    upstream: tuple[Upstream, ServerThread], client: httpx.Client
) -> None:
    _, server = upstream
    with proxy_for(server, metrics=False) as proxy:
        r = client.get(f"{proxy.url}/metrics")
    assert r.json() == {"object": "list", "data": []}  # the upstream's own path


@pytest.mark.server
def test_reported_tokens_of_the_real_llama_server(
    llama_cpp_server: LlamaCppServer, client: httpx.Client
) -> None:
    config = ServerConfig.load(
        upstream=llama_cpp_server.base_url, proxy_key=KEY, discovery_timeout=60
    )
    with ServerThread(create_app(config)) as proxy:
        body = {
            "model": llama_cpp_server.model,
            "messages": [{"role": "user", "content": "Say hi."}],
            "max_tokens": 4,
            "temperature": 0,
        }
        r = client.post(f"{proxy.url}/v1/chat/completions", json=body, timeout=300)
        assert r.status_code == 200, r.text
        samples = scrape(client, proxy)
    assert value(samples, "tokenflex_requests_total", outcome="unchanged") == 1
    assert (
        value(samples, "tokenflex_input_tokens_reported_total")
        == (r.json()["usage"]["prompt_tokens"])
    )
    assert value(samples, "tokenflex_input_tokens_planned_total") == int(
        r.headers["x-tokenflex-input-tokens"]
    )
