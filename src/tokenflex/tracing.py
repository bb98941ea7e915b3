"""OpenTelemetry traces (the ``otel`` extra): a span per :func:`tokenflex.fit` and per
request the proxy forwards, when the application has configured a tracer provider.

Tracing costs nothing when it is off: this module never imports OpenTelemetry. It looks
for ``opentelemetry.trace`` among the modules already imported, and uses it only when
the global tracer provider is a real one (``trace.set_tracer_provider(...)``, or
``opentelemetry-instrument``), not the API's default no-op proxy.

Spans carry the OpenTelemetry GenAI semantic-convention attributes
(``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.request.max_tokens``,
``gen_ai.usage.input_tokens``, ``gen_ai.provider.name``) and ``tokenflex.*`` ones: the
window, the input the plan counted, what was dropped, cleared and summarized, the
prefix shared with the previous plan and the part predicted cached, and whether the
request was changed (``tokenflex.fitted``). A library fit's span is made when the plan is
ready, timed by the plan's ``elapsed_ms``; a fit that raises makes none (the proxy's
request span records refusals).

>>> import tokenflex
>>> plan = tokenflex.fit([{"role": "user", "content": "Hi"}], model="gpt-4o", max_tokens=50)
>>> attributes = plan_attributes(plan)
>>> attributes["gen_ai.usage.input_tokens"] == plan.input_tokens, attributes["tokenflex.fitted"]
(True, False)
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = [
    "RequestSpan",
    "active_tracer",
    "plan_attributes",
    "plan_changed",
    "request_span",
    "trace_fit",
]

SCOPE = "tokenflex"
"""The instrumentation scope of every span tokenflex makes."""
MAX_ATTRIBUTE_CHARS = 200  # a client's model name is cut there

P = TypeVar("P")
_cache: tuple[Any, Any] | None = None  # (provider, its tokenflex tracer)
_lock = threading.Lock()


def active_tracer() -> Any | None:
    """The tracer of the configured global provider; None when OpenTelemetry is not
    imported or no provider is configured (then nothing is traced, at no cost)."""
    global _cache
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    cached = _cache
    if cached is not None and cached[0] is provider:
        return cached[1]
    version = getattr(sys.modules.get(__package__ or ""), "__version__", None)
    with _lock:
        tracer = provider.get_tracer(SCOPE, version)
        _cache = (provider, tracer)
    return tracer


def plan_changed(plan: Any, asked: int | None) -> bool:
    """Whether ``plan`` changed the request it was made for: items dropped, cleared or
    summarized, another model, or less output than the ``asked`` limit (None: the
    request set none, and a limit added to it is no change)."""
    return bool(
        len(plan.dropped)
        or plan.summary is not None
        or plan.fallback_from is not None
        or (asked is not None and plan.max_tokens < asked)
    )


def plan_attributes(plan: Any, *, fitted: bool | None = None) -> dict[str, Any]:
    """A plan's span attributes (GenAI conventions plus ``tokenflex.*``).

    Every figure is one the plan holds already: nothing is counted again."""
    reasons = plan.dropped.by_reason()
    out: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": _cut(plan.fallback_from or plan.model.name),
        "gen_ai.request.max_tokens": plan.max_tokens,
        "gen_ai.usage.input_tokens": plan.input_tokens,
        "tokenflex.model": _cut(plan.model.name),
        "tokenflex.context_window": plan.context_window,
        "tokenflex.input_tokens": plan.input_tokens,
        "tokenflex.max_tokens": plan.max_tokens,
        "tokenflex.requested_max_tokens": plan.requested_max_tokens,
        "tokenflex.dropped": len(plan.dropped),
        "tokenflex.cleared": reasons.get("cleared", 0),
        "tokenflex.summarized": reasons.get("summarized", 0),
        "tokenflex.summary": plan.summary is not None,
        "tokenflex.exact": bool(plan.exact),
        "tokenflex.format": plan.format,
        "tokenflex.fitted": (
            plan_changed(plan, plan.requested_max_tokens) if fitted is None else fitted
        ),
    }
    if plan.model.provider:
        out["gen_ai.provider.name"] = plan.model.provider
    if plan.prefix_tokens is not None:
        out["tokenflex.prefix_tokens"] = plan.prefix_tokens
    if plan.cached_tokens is not None:
        out["tokenflex.cached_prefix_tokens"] = plan.cached_tokens
    if plan.fallback_from is not None:
        out["tokenflex.fallback_from"] = _cut(plan.fallback_from)
    return out


def trace_fit(plan: P) -> P:
    """Record the span of the fit that made ``plan`` (when tracing is on); ``plan``."""
    tracer = active_tracer()
    if tracer is None:
        return plan
    made: Any = plan
    end = time.time_ns()
    span = tracer.start_span(
        f"fit {_cut(made.model.name)}",
        start_time=end - int(made.elapsed_ms * 1_000_000),
        attributes=plan_attributes(made),
    )
    span.end(end_time=end)
    return plan


class RequestSpan:
    """The span of one request through the proxy: started when the request arrives (the
    current span while it is handled, so a library fit's span is its child), ended by
    :meth:`end` with what happened."""

    __slots__ = ("_token", "span")

    def __init__(self, span: Any, token: Any) -> None:
        self.span = span
        self._token = token

    def requested(self, model: str) -> None:
        """The model the client asked for (the span's name says it too)."""
        self.span.update_name(f"chat {_cut(model)}")
        self.span.set_attribute("gen_ai.request.model", _cut(model))

    def end(
        self, status: int, outcome: str, plan: Any, reported: int | None, error: str = ""
    ) -> None:
        """Set the outcome, the plan's attributes and the upstream's usage; end the span."""
        from opentelemetry import context, trace

        span = self.span
        if plan is not None:
            attributes = plan_attributes(plan, fitted=outcome == "fitted")
            attributes.pop("gen_ai.request.model")  # the client's name, set on arrival
            span.set_attributes(attributes)
        if reported is not None:
            span.set_attribute("gen_ai.usage.input_tokens", reported)
        span.set_attribute("tokenflex.outcome", outcome)
        if status:
            span.set_attribute("http.response.status_code", status)
        if status >= 400 or error:
            span.set_attribute("error.type", error or str(status))
        if status >= 500 or outcome == "upstream_error":
            span.set_status(trace.Status(trace.StatusCode.ERROR, error or f"HTTP {status}"))
        span.end()
        context.detach(self._token)


def request_span(api: str, headers: Mapping[str, str]) -> RequestSpan | None:
    """A started span for a request in ``api`` (its parent from a ``traceparent``
    header); None when tracing is off."""
    tracer = active_tracer()
    if tracer is None:
        return None
    from opentelemetry import context, propagate, trace

    span = tracer.start_span(
        "chat",
        context=propagate.extract(headers),
        kind=trace.SpanKind.SERVER,
        attributes={"gen_ai.operation.name": "chat", "tokenflex.api": api},
    )
    token = context.attach(trace.set_span_in_context(span))
    return RequestSpan(span, token)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_ATTRIBUTE_CHARS else text[:MAX_ATTRIBUTE_CHARS] + "…"
