"""What the proxy did, for Prometheus: ``GET /metrics`` in the text exposition format.

Every proxy app owns a :class:`ProxyMetrics` with its own ``CollectorRegistry`` (never the
process-wide default one), so several apps in one process, and the tests, never share a
series. Each proxied request is one :class:`RequestRecord`: the endpoint fills it in as
it goes (the plan, the upstream's answer) and :meth:`RequestRecord.finish` adds it to the
counters once, and ends its trace span (:mod:`tokenflex.tracing`). Recording is counters
and histograms only: no serialization, nothing read twice, no pass over the messages.

Label values are bounded: ``route`` is a configured route (or ``default``), ``api`` one
of the proxy's wire formats, ``outcome`` one of :data:`OUTCOMES`, ``reason`` one the
library gives, and ``model`` a name the registry or the config knows, else ``other``: a
model name a client invents never creates a series.

The metrics (all prefixed ``tokenflex_``) are listed in docs/operating.md.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import httpx
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

from ..calibration import Calibration
from ..formats.registry import formats, get_format
from ..models import find_model
from ..tracing import RequestSpan, request_span
from .config import ServerConfig
from .errors import ProxyError
from .plans import LAZY_DROPPED

__all__ = [
    "CONTENT_TYPE",
    "OUTCOMES",
    "CountedStore",
    "ProxyMetrics",
    "RequestRecord",
    "exc_kind",
    "reported_input_tokens",
]

Handler = Callable[[Request, "str | None"], Awaitable[Response]]

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The ``Content-Type`` of ``GET /metrics``."""

OUTCOMES = (
    "fitted",
    "unchanged",
    "passed_through",
    "observed",
    "refused",
    "shed",
    "upstream_error",
    "error",
)
"""What happened to a request: ``fitted`` (the plan changed it: messages dropped, cleared
or summarized, another model, a lower output limit), ``unchanged`` (it fit as sent),
``passed_through`` (forwarded as sent: an unknown model, or a path the proxy does not
fit), ``observed`` (observe mode), ``refused`` (the proxy answered 4xx itself: too long,
invalid), ``shed`` (503 at capacity), ``upstream_error`` (the upstream answered an error
or could not be reached), ``error`` (the proxy's own 500)."""

FIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
"""Seconds: a fit of a short chat takes under a millisecond, a summary seconds."""
MAX_MODEL_LABELS = 1024  # names remembered with their label; beyond, looked up again
_OTHER = "other"
_DEFAULT_ROUTE = "default"
# the usage block closes a chat, Anthropic or Responses answer: read only the tail
_USAGE_TAIL = 4096
_USAGE_FIELD = re.compile(
    rb'"(prompt_tokens|input_tokens|cache_read_input_tokens|cache_creation_input_tokens)"'
    rb"\s*:\s*(\d+)"
)


def reported_input_tokens(body: bytes, api: str) -> int | None:
    """The input tokens an upstream's JSON answer reports in its ``usage`` (None: none).

    Only the last few KB are read: ``usage`` comes last in chat, Anthropic and Responses
    answers, and a field name inside message text is escaped (``\\"``), so it cannot
    match. Anthropic counts cached input apart; it is added back.

    >>> reported_input_tokens(b'{"choices": [], "usage": {"prompt_tokens": 12}}', "chat")
    12
    >>> reported_input_tokens(
    ...     b'{"usage": {"input_tokens": 5, "cache_read_input_tokens": 90}}', "anthropic")
    95
    >>> reported_input_tokens(b'{"content": "\\\\"prompt_tokens\\\\": 3"}', "chat") is None
    True
    """
    fields = {m[1]: int(m[2]) for m in _USAGE_FIELD.finditer(body[-_USAGE_TAIL:])}
    return get_format(api).reported_input(fields)


class ProxyMetrics:
    """The proxy's Prometheus metrics, in a registry of their own."""

    def __init__(self, config: ServerConfig, calibration: Calibration | None = None) -> None:
        self.config = config
        self.registry = CollectorRegistry(auto_describe=True)
        self._labels: dict[str, str] = {}
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        reg = self.registry
        self.requests = Counter(
            "tokenflex_requests",
            "Requests by route, API and outcome.",
            ["route", "api", "outcome"],
            registry=reg,
        )
        self.planned = Counter(
            "tokenflex_input_tokens_planned",
            "Input tokens of the plans sent upstream (the proxy's count).",
            ["model"],
            registry=reg,
        )
        self.reported = Counter(
            "tokenflex_input_tokens_reported",
            "Input tokens the upstream reported in its answers' usage (buffered answers).",
            ["model"],
            registry=reg,
        )
        self.planned_reported = Counter(
            "tokenflex_input_tokens_planned_with_usage",
            "Planned input tokens of the requests whose answers reported usage: "
            "reported / this is how far the count is off.",
            ["model"],
            registry=reg,
        )
        self.messages_removed = Counter(
            "tokenflex_messages_removed",
            "Messages (and items) left out of fitted requests, by reason (budget, cleared, "
            "summarized, ...).",
            ["model", "reason"],
            registry=reg,
        )
        self.tokens_removed = Counter(
            "tokenflex_tokens_removed",
            "Tokens of the items left out, all reasons (plans the proxy keeps: their JSON "
            "sums these already).",
            ["model"],
            registry=reg,
        )
        self.summarized = Counter(
            "tokenflex_tokens_summarized",
            "Tokens a summary saved: the summarized messages less the summary.",
            ["model"],
            registry=reg,
        )
        self.summaries = Counter(
            "tokenflex_summaries", "Plans that carry a summary.", ["model"], registry=reg
        )
        self.prefix = Counter(
            "tokenflex_prefix_tokens",
            "Tokens each plan shares with the previous plan of its conversation.",
            ["model"],
            registry=reg,
        )
        self.cached = Counter(
            "tokenflex_cached_prefix_tokens",
            "Of those, tokens a provider is predicted to read from its prompt cache.",
            ["model"],
            registry=reg,
        )
        self.fit_seconds = Histogram(
            "tokenflex_fit_seconds",
            "Time from the request's arrival to its plan (reading, parsing and fitting).",
            ["api"],
            buckets=FIT_BUCKETS,
            registry=reg,
        )
        self.summarizer_calls = Counter(
            "tokenflex_summarizer_calls",
            "HTTP calls the proxy's summarizers made (upstream or a configured server).",
            registry=reg,
        )
        self.summarizer_failures = Counter(
            "tokenflex_summarizer_failures",
            "Summarizer calls that failed (error status, timeout, unreachable): the fit "
            "dropped instead.",
            registry=reg,
        )
        self.state_errors = Counter(
            "tokenflex_state_store_errors",
            "Errors raised by the state store (cuts and summaries kept between requests).",
            ["operation"],
            registry=reg,
        )
        if calibration is not None:
            reg.register(CalibrationCollector(calibration, self.model_label))

    # -- labels --------------------------------------------------------------------------
    def child(self, metric: Any, *values: str) -> Any:
        """``metric.labels(*values)``, kept: a request's dozen series cost dict lookups,
        not prometheus_client's validation and lock each time. Bounded as the labels are."""
        key = (id(metric), values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found

    def model_label(self, name: str) -> str:
        """``name`` when the config or the registry knows it (the registry's own name for
        an alias or a dated version), else ``other``."""
        label = self._labels.get(name)
        if label is None:
            found = None if name in self.config.models else find_model(name)
            if found is None:
                label = name if name in self.config.models else _OTHER
            else:
                label = found.name if found.known else _OTHER
            if len(self._labels) >= MAX_MODEL_LABELS:
                self._labels.clear()
            self._labels[name] = label
        return label

    def route_label(self, route: str | None) -> str:
        """A configured route's name; ``default`` for ``/v1``."""
        return _DEFAULT_ROUTE if route is None else route

    # -- recording -----------------------------------------------------------------------
    def record(
        self, api: str, route: str | None, headers: Mapping[str, str] | None = None
    ) -> RequestRecord:
        """The record of one proxied request (its span starts now when tracing is on)."""
        span = request_span(api, headers or {}) if headers is not None else None
        return RequestRecord(self, api, self.route_label(route), span)

    def shed(self, path: str) -> None:
        """A request answered 503 at capacity, before any endpoint saw it."""
        route, api = self.classify(path)
        self.requests.labels(route, api, "shed").inc()

    def classify(self, path: str) -> tuple[str, str]:
        """The route and API labels of a request path (for requests no endpoint saw)."""
        first, _, rest = path.lstrip("/").partition("/")
        route = _DEFAULT_ROUTE
        if first in self.config.routes:
            route, path = first, "/" + rest
        for fmt in formats():
            if path == fmt.path:
                return route, fmt.name
        return route, "passthrough"

    def counted(self, handler: Handler) -> Handler:
        """``handler`` (the pass-through endpoint) with each request counted."""

        async def run(request: Request, route: str | None) -> Response:
            record = self.record("passthrough", route)
            try:
                response = await handler(request, route)
            except ProxyError as exc:
                record.finish(exc.status_code, error=exc_kind(exc))
                raise
            record.answered(response.status_code, None)
            record.finish(response.status_code)
            return response

        return run

    def store(self, store: Any) -> CountedStore:
        """``store`` with its errors counted."""
        return CountedStore(store, self.state_errors)

    def summarizer_transports(
        self, sync: httpx.BaseTransport, async_: httpx.AsyncBaseTransport
    ) -> tuple[httpx.BaseTransport, httpx.AsyncBaseTransport]:
        """A summarizer's transports, its calls and failures counted."""
        calls, failures = self.summarizer_calls, self.summarizer_failures
        return CountedTransport(sync, calls, failures), CountedAsyncTransport(
            async_, calls, failures
        )

    def exposition(self) -> bytes:
        """The text exposition of every metric, for ``GET /metrics``."""
        return generate_latest(self.registry)


def exc_kind(exc: ProxyError) -> str:
    """What the metrics and the span call a ProxyError: ``upstream_error`` for an
    upstream's failure, else its code."""
    return exc.type if exc.type == "upstream_error" else (exc.code or exc.type)


class RequestRecord:
    """What happened to one proxied request; added to the metrics once, by :meth:`finish`."""

    __slots__ = ("api", "metrics", "model", "outcome", "plan", "reported", "route", "span")

    def __init__(
        self, metrics: ProxyMetrics, api: str, route: str, span: RequestSpan | None
    ) -> None:
        self.metrics = metrics
        self.api = api
        self.route = route
        self.span = span
        self.plan: Any = None
        self.model = ""
        self.outcome: str | None = None
        self.reported: int | None = None

    def requested(self, model: str) -> None:
        """The model the client asked for (named on the span)."""
        if self.span is not None:
            self.span.requested(model)

    def planned(self, plan: Any, seconds: float, changed: bool) -> None:
        """The plan made for the request, ``seconds`` after it arrived."""
        self.plan = plan
        self.outcome = "fitted" if changed else "unchanged"
        self.metrics.child(self.metrics.fit_seconds, self.api).observe(seconds)

    def answered(self, status: int, body: bytes | None) -> None:
        """The upstream's status and (buffered answers) body."""
        if status >= 400:
            self.outcome = "upstream_error"
        elif body is not None and self.plan is not None:
            self.reported = reported_input_tokens(body, self.api)

    def finish(self, status: int, *, error: str = "", observed: bool = False) -> None:
        """Count the request by its outcome (:data:`OUTCOMES`) and end its span.

        Args:
            status: The answer's status (0: none, the handler raised).
            error: The kind of error the proxy answered (``upstream_error``, a code).
            observed: The request went through observe mode.
        """
        if error == "upstream_error" or status in (502, 504) or self.outcome == "upstream_error":
            outcome = "upstream_error"
        elif status == 0 or status >= 500:
            outcome = "error"
        elif status >= 400:
            outcome = "refused"
        elif observed:
            outcome = "observed"
        else:
            outcome = self.outcome or "passed_through"
        m = self.metrics
        m.child(m.requests, self.route, self.api, outcome).inc()
        plan = self.plan
        if plan is not None:
            model = m.model_label(plan.model.name)
            m.child(m.planned, model).inc(plan.input_tokens)
            if self.reported is not None:
                m.child(m.reported, model).inc(self.reported)
                m.child(m.planned_reported, model).inc(plan.input_tokens)
            for reason, n in plan.dropped.by_reason().items():
                m.child(m.messages_removed, model, reason).inc(n)
            # the dropped items' tokens: summed for a few (the counts the fit made), or
            # where the plan's JSON summed them; a long cut's are counted only when asked
            if plan.dropped and (
                len(plan.dropped) <= LAZY_DROPPED or "full_input_tokens" in vars(plan)
            ):
                summary = plan.summary.tokens if plan.summary is not None else 0
                removed = plan.full_input_tokens - plan.input_tokens + summary
                m.child(m.tokens_removed, model).inc(removed)
            if plan.summary is not None:
                m.child(m.summaries, model).inc()
                m.child(m.summarized, model).inc(max(plan.summary.saved_tokens, 0))
            if plan.prefix_tokens:
                m.child(m.prefix, model).inc(plan.prefix_tokens)
            if plan.cached_tokens:
                m.child(m.cached, model).inc(plan.cached_tokens)
        if self.span is not None:
            self.span.end(status, outcome, plan, self.reported, error)


class CalibrationCollector(Collector):
    """``tokenflex_calibration_factor{model}``, read from the calibration at scrape time
    (models that share the label ``other`` show the largest factor among them)."""

    def __init__(self, calibration: Calibration, label: Any) -> None:
        self.calibration = calibration
        self.label = label

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "tokenflex_calibration_factor",
            "What the proxy multiplies a model's counts by, learned from upstream usage "
            "(1: never under).",
            labels=["model"],
        )
        factors: dict[str, float] = {}
        for key, figures in self.calibration.snapshot().items():
            label = self.label(key.partition("@")[0])  # "model@upstream": the model's label
            factors[label] = max(factors.get(label, 0.0), float(figures["factor"]))
        for label, factor in sorted(factors.items()):
            family.add_metric([label], factor)
        yield family

    def describe(self) -> Iterable[Metric]:
        return []


class CountedStore:
    """A state store whose errors are counted (and raised as before)."""

    def __init__(self, store: Any, errors: Counter) -> None:
        self.inner = store
        self.errors = errors

    def get(self, key: str) -> bytes | None:
        try:
            found: bytes | None = self.inner.get(key)
        except Exception:
            self.errors.labels("get").inc()
            raise
        return found

    def set(self, key: str, value: bytes, *, ttl_s: float | None = None) -> None:
        try:
            self.inner.set(key, value, ttl_s=ttl_s)
        except Exception:
            self.errors.labels("set").inc()
            raise

    def delete(self, key: str) -> None:
        try:
            self.inner.delete(key)
        except Exception:
            self.errors.labels("delete").inc()
            raise

    def __getattr__(self, name: str) -> Any:  # close(), and what a store adds
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"CountedStore({self.inner!r})"


class CountedTransport(httpx.BaseTransport):
    """A sync transport whose requests and failures (exception or status >= 400) count."""

    def __init__(self, inner: httpx.BaseTransport, calls: Counter, failures: Counter) -> None:
        self.inner, self.calls, self.failures = inner, calls, failures

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.calls.inc()
        try:
            response = self.inner.handle_request(request)
        except Exception:
            self.failures.inc()
            raise
        if response.status_code >= 400:
            self.failures.inc()
        return response

    def close(self) -> None:
        self.inner.close()


class CountedAsyncTransport(httpx.AsyncBaseTransport):
    """The async twin of :class:`CountedTransport`."""

    def __init__(self, inner: httpx.AsyncBaseTransport, calls: Counter, failures: Counter) -> None:
        self.inner, self.calls, self.failures = inner, calls, failures

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.calls.inc()
        try:
            response = await self.inner.handle_async_request(request)
        except Exception:
            self.failures.inc()
            raise
        if response.status_code >= 400:
            self.failures.inc()
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()
