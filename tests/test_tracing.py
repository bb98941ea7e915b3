"""Traces (issue 27, item 2): a span per library fit and per proxied request, recorded by
the OpenTelemetry SDK's in-memory exporter, with the GenAI semantic-convention attributes
and ``tokenflex.*`` ones; nothing imported or made when no provider is configured.

The SDK's global tracer provider can be set once per process: the fixture sets it the
first time and every test reads the spans it made (cleared before each test).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_server import ServerThread
from test_server_metrics import KEY, Upstream, conversation, discover

import tokenflex
from tokenflex.server import ServerConfig, create_app

EXPORTER = InMemorySpanExporter()


class Gate(SimpleSpanProcessor):
    """Exports only while a test of this file runs: the provider stays set for the rest
    of the session, but other tests' spans are not kept."""

    open = False

    def on_end(self, span: ReadableSpan) -> None:
        if Gate.open:
            super().on_end(span)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(Gate(EXPORTER))
        trace.set_tracer_provider(provider)
    EXPORTER.clear()
    Gate.open = True
    yield EXPORTER
    Gate.open = False
    EXPORTER.clear()


def named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_no_provider_imports_nothing_and_makes_no_span() -> None:
    code = (
        "import sys, tokenflex\n"
        "plan = tokenflex.fit([{'role': 'user', 'content': 'hi'}], model='gpt-4o')\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("use_async", [False, True], ids=["fit", "afit"])
def test_a_fit_makes_one_span_with_the_plan(spans: InMemorySpanExporter, use_async: bool) -> None:
    messages = conversation(21, 60)
    options: dict[str, Any] = {"model": "gpt-4o", "max_tokens": 200, "max_input_tokens": 600}
    if use_async:
        import asyncio

        plan = asyncio.run(tokenflex.afit(messages, **options))
    else:
        plan = tokenflex.fit(messages, **options)
    (span,) = named(spans, "fit ")
    a = attributes(span)
    assert span.name == "fit gpt-4o"
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.request.model"] == "gpt-4o"
    assert a["gen_ai.provider.name"] == plan.model.provider
    assert a["gen_ai.usage.input_tokens"] == plan.input_tokens
    assert a["gen_ai.request.max_tokens"] == plan.max_tokens == 200
    assert a["tokenflex.context_window"] == plan.context_window == 128_000
    assert a["tokenflex.dropped"] == len(plan.dropped) > 0
    assert a["tokenflex.fitted"] is True
    assert span.end_time is not None and span.start_time is not None
    assert span.start_time <= span.end_time

    spans.clear()
    short = tokenflex.fit([{"role": "user", "content": "hi"}], model="gpt-4o", max_tokens=10)
    (span,) = named(spans, "fit ")
    assert attributes(span)["tokenflex.fitted"] is False
    assert attributes(span)["tokenflex.dropped"] == len(short.dropped) == 0


@pytest.fixture(scope="module")
def proxy() -> Iterator[ServerThread]:
    fake = Upstream()
    with ServerThread(fake.app()) as upstream:
        config = ServerConfig.load(upstream=upstream.url, proxy_key=KEY, calibrate=False)
        with ServerThread(create_app(config, discover=discover)) as p:
            yield p


def test_a_proxied_request_is_one_server_span_with_the_fit_inside(
    spans: InMemorySpanExporter, proxy: ServerThread
) -> None:
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    headers = {"x-tokenflex-key": KEY, "traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}
    body = {"model": "tiny", "messages": conversation(22, 40), "max_tokens": 100}
    with httpx.Client(timeout=60, trust_env=False) as client:
        r = client.post(f"{proxy.url}/v1/chat/completions", json=body, headers=headers)
    assert r.status_code == 200, r.text
    (request,) = named(spans, "chat ")
    (fit,) = named(spans, "fit ")
    a = attributes(request)
    assert request.name == "chat tiny"
    assert request.kind == trace.SpanKind.SERVER
    assert format(request.context.trace_id, "032x") == trace_id  # the caller's trace
    assert fit.parent is not None and fit.parent.span_id == request.context.span_id
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.request.model"] == "tiny"
    assert a["gen_ai.request.max_tokens"] == int(r.headers["x-tokenflex-max-tokens"])
    assert a["gen_ai.usage.input_tokens"] == 321  # what the upstream reported
    assert a["tokenflex.input_tokens"] == int(r.headers["x-tokenflex-input-tokens"])
    assert a["tokenflex.context_window"] == int(r.headers["x-tokenflex-context-window"])
    assert a["tokenflex.dropped"] == int(r.headers["x-tokenflex-dropped"]) > 0
    assert a["tokenflex.fitted"] is True
    assert a["tokenflex.outcome"] == "fitted"
    assert a["http.response.status_code"] == 200


@pytest.mark.parametrize(
    "path,body",
    [
        pytest.param(
            "/v1/messages",
            {"model": "tiny", "messages": conversation(23, 2), "max_tokens": 50},
            id="anthropic",
        ),
        pytest.param(
            "/v1/responses",
            {"model": "tiny", "input": conversation(24, 2), "max_output_tokens": 50},
            id="responses",
        ),
    ],
)
def test_each_api_is_traced_and_a_refusal_says_why(
    spans: InMemorySpanExporter, proxy: ServerThread, path: str, body: dict[str, Any]
) -> None:
    with httpx.Client(timeout=60, trust_env=False, headers={"x-tokenflex-key": KEY}) as client:
        ok = client.post(f"{proxy.url}{path}", json=body)
        too_long = {**body, "model": "tiny"}
        key = "messages" if "messages" in body else "input"
        too_long[key] = [{"role": "user", "content": "valve " * 3000}]
        refused = client.post(f"{proxy.url}{path}", json=too_long)
    assert ok.status_code == 200, ok.text
    assert refused.status_code == 400
    first, second = named(spans, "chat ")
    a = attributes(first)
    assert a["tokenflex.outcome"] == "unchanged" and a["tokenflex.fitted"] is False
    assert a["tokenflex.input_tokens"] == int(ok.headers["x-tokenflex-input-tokens"])
    assert a["gen_ai.usage.input_tokens"] == 321
    b = attributes(second)
    assert b["tokenflex.outcome"] == "refused"
    assert b["http.response.status_code"] == 400
    assert b["error.type"] == "context_length_exceeded"
    assert "tokenflex.input_tokens" not in b  # no plan was made
