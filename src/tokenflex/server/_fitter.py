"""The fitting step of a chat request: which model, fit() with the config's options, and
the fitted body that goes upstream.

The request's ``model`` name is resolved once (discovery, then the registry) and patched
by the config tables that apply (``[fit]`` < ``[models.NAME]`` < ``[routes.NAME]``); the
remaining options go to :func:`tokenflex.fit` (:func:`tokenflex.afit` where a summarizer
is awaited). Fitting that waits on a tokenize endpoint, or that counts a large body, runs
in a worker thread so the event loop stays free; a small one runs on the loop. Library
errors become OpenAI-shaped :class:`ProxyError` answers (:func:`library_error`).

Observe mode (``mode = "observe"``) makes the same plan without sending it:
:meth:`Fitter.observe` returns an :class:`Observation` (the plan, or fit mode's refusal)
whose :meth:`~Observation.headers` report it as ``x-tokenflex-would-*``; the client's
body goes upstream as it came.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio.to_thread

from ..calibration import Calibration
from ..counting.provider import ProviderCounts, with_provider_counts
from ..errors import (
    ConfigError,
    ContextOverflowError,
    InvalidInputError,
    InvalidMessagesError,
    TokenflexError,
    TokenizerUnavailableError,
    UnknownModelError,
    UpstreamError,
)
from ..fit import afit as _afit
from ..formats.registry import get_format
from ..models import Model
from ..models.discovery import refusal
from ..recall import resolved_round, with_recall_tool
from ..redact import redact
from ..state import MemoryStore, TenantStore, open_store
from ..state.guard import GuardedStore, StoreHealth
from ..summarize.background import Activity, BackgroundSummaries
from ..tokenizers.base import CountingBudgetExceeded, count_scope
from ..tracing import plan_changed
from ._models import ModelResolver
from ._summarizer import Wrap, build_summarizer, calls_upstream
from ._validate import ChatRequest, dump_json
from .config import ServerConfig, patch_model, split_options
from .errors import ProxyError

_FIT = sys.modules[_afit.__module__]
"""The module :func:`tokenflex.fit` lives in (the package's ``fit`` is the function)."""

__all__ = [
    "RETRY_AFTER_SECONDS",
    "STATE_UNAVAILABLE",
    "Fitter",
    "Observation",
    "Unfitted",
    "cache_headers",
    "inline_bytes",
    "library_error",
    "off_loop",
    "plan_headers",
    "stateless",
    "tenant_name",
    "tokenizer_panic",
]

T = TypeVar("T")
RETRY_AFTER_SECONDS = 5

INLINE_BYTES = 256 * 1024
"""The largest body of a native format (Anthropic Messages, Responses) worked on the
event loop (its fit converts every item: ~10 µs of Python each): a larger one goes to a
worker thread, where the interpreter hands the loop a turn every switch interval."""
INLINE_CHAT_BYTES = 2 * 1024 * 1024
"""The largest chat body worked on the event loop: a chat message costs a fit whose texts
are counted ~1 µs, so 2 MiB of chat is about one switch interval (5 ms) of work, the
least a worker thread would hand the loop back, and it would cost more there: the
hand-off, and the same fit ~1.3-1.6 times slower on a core whose caches lack the request."""
INLINE_NEW_CHARS = 256 * 1024
"""Characters of new text (not counted before) a fit on the event loop may tokenize:
past them it stops and is made again in a worker thread, where the tokenizer lets the
loop serve the other requests meanwhile (tiktoken's releases the GIL)."""
_MAX_LOADED = 1024  # tokenizer names remembered as loaded (Fitter._loaded)
_MAX_TOKEN_FIELDS = ("max_tokens", "max_completion_tokens")


def library_error(exc: TokenflexError) -> ProxyError:
    """The HTTP answer for a tokenflex error raised while fitting or counting.

    The request's own problems are 4xx; a tokenizer that cannot be reached or an
    upstream that fails while fitting (summaries, tokenize endpoints) is a 503 or 502
    that says so, never a 500 "configuration problem". Messages are redacted.
    """
    message = redact(str(exc))
    if isinstance(exc, ContextOverflowError):
        message = proxy_advice(message)
        return ProxyError(400, message, param="messages", code="context_length_exceeded")
    if isinstance(exc, UnknownModelError):
        return ProxyError(404, message, param="model", code="model_not_found")
    if isinstance(exc, InvalidMessagesError):
        return ProxyError(400, message, param="messages", code="invalid_value")
    if isinstance(exc, InvalidInputError):
        return ProxyError(400, message, code="invalid_value")
    if isinstance(exc, TokenizerUnavailableError):
        return ProxyError(
            503,
            f"The tokenizer for this model is not available right now: {message} Retry "
            "later, or configure a local tokenizer for the model ([models.NAME] tokenizer).",
            type="server_error",
            code="tokenizer_unavailable",
            headers={"retry-after": str(RETRY_AFTER_SECONDS)},
        )
    if isinstance(exc, UpstreamError):
        status = 504 if "timed out" in message.lower() or "timeout" in message.lower() else 502
        return ProxyError(status, message, type="upstream_error", code="upstream_error")
    kind = "configuration" if isinstance(exc, ConfigError) else "fit"
    return ProxyError(
        500, f"tokenflex proxy {kind} problem: {message}", type="server_error", code="proxy_error"
    )


_LIBRARY_FIXES = (" Shorten ", " Lower ", " To keep more:", " Use message items")
PROXY_ADVICE = (
    "Shorten what is always sent (the system prompt, the newest message or tool result) "
    "or ask for less output (max_tokens); the proxy's operator can add fallback_models, "
    "lower min_output_tokens or set the model's window in the proxy config ([fit], "
    '[models."NAME"] or [routes.NAME]).'
)


def proxy_advice(message: str) -> str:
    """A library overflow message with its fix (library options: ``fallback_models=[...]``,
    mark a section optional) replaced by what a proxy client and its operator can do."""
    cut = min((i for i in map(message.find, _LIBRARY_FIXES) if i >= 0), default=len(message))
    return f"{message[:cut]} {PROXY_ADVICE}"


def tokenizer_panic(exc: BaseException) -> ProxyError | None:
    """The 400 for a tokenizer that crashed on the input (tiktoken raises pyo3's
    ``PanicException``, a BaseException, on about a million repeated spaces); None for
    any other exception."""
    if type(exc).__name__ != "PanicException":
        return None
    return ProxyError(
        400,
        "The tokenizer failed on this input (it crashed on a very long run of one "
        "character, such as a million spaces). Shorten or collapse that run and retry.",
        param="messages",
        code="tokenizer_failed",
    )


async def off_loop(limiter: anyio.CapacityLimiter, func: Callable[[], T]) -> T:
    """``func()`` in a worker thread (at most ``limiter`` at once), so the event loop
    keeps serving; tokenflex errors become HTTP answers, tokenizer panics a 400."""
    try:
        return await anyio.to_thread.run_sync(func, limiter=limiter)
    except TokenflexError as exc:
        raise library_error(exc) from None
    except BaseException as exc:
        panic = tokenizer_panic(exc)
        if panic is None:
            raise
        raise panic from None


def inline_bytes(format: str) -> int:
    """The largest body in ``format`` (a wire format's name) whose fit, plan and
    calibration run on the event loop (:data:`INLINE_CHAT_BYTES` for chat,
    :data:`INLINE_BYTES` for the others)."""
    return INLINE_CHAT_BYTES if get_format(format).internal else INLINE_BYTES


def fit_inline(job: Callable[[], T]) -> T | None:
    """``job()`` here, unless it would tokenize more than :data:`INLINE_NEW_CHARS` of new
    text: then None, and the counts it made are kept for the caller's next try (they are
    the request's, held by its count scope until it is answered)."""
    with count_scope(INLINE_NEW_CHARS) as scope:
        try:
            return job()
        except CountingBudgetExceeded:
            scope.commit()
            return None


STATE_UNAVAILABLE = (
    "The state store was unavailable: this request was fitted without the conversation's "
    "held cut or stored summaries (the proxy log says why)."
)


def stateless(plan: Any) -> Any:
    """``plan``, marked as fitted without its state store (:data:`STATE_UNAVAILABLE`)."""
    return dataclasses.replace(
        plan,
        warnings=(*plan.warnings, STATE_UNAVAILABLE),
        extras={**plan.extras, "state": "unavailable"},
    )


@functools.lru_cache(maxsize=4096)  # (each request's: its credentials' hash and route)
def tenant_name(owner: str, route: str | None) -> str:
    """The tenant of ``owner``'s state on ``route``: ``json.dumps([owner, route])``."""
    return json.dumps([owner, route])


def plan_headers(plan: Any, plan_id: str) -> dict[str, str]:
    """The ``x-tokenflex-*`` summary of a plan (no plan id header when it was not kept)."""
    return (
        {
            "x-tokenflex-input-tokens": str(plan.input_tokens),
            "x-tokenflex-max-tokens": str(plan.max_tokens),
            "x-tokenflex-context-window": str(plan.context_window),
            "x-tokenflex-dropped": str(len(plan.dropped)),
            "x-tokenflex-summary": "yes" if plan.summary is not None else "no",
            # "no" when any part of the input count is an estimate (plan.exact)
            "x-tokenflex-exact": "yes" if plan.exact else "no",
        }
        | cache_headers(plan)
        | ({"x-tokenflex-plan-id": plan_id} if plan_id else {})
        | ({"x-tokenflex-state": "unavailable"} if plan.extras.get("state") else {})
    )


def cache_headers(plan: Any) -> dict[str, str]:
    """The prefix a plan shares with the previous plan of its conversation, the tokens a
    provider is predicted to read from its cache, and the predicted input cost in USD
    (each left out when unknown: no previous plan, no price)."""
    out: dict[str, str] = {}
    if plan.prefix_tokens is not None:
        out["x-tokenflex-prefix-tokens"] = str(plan.prefix_tokens)
    if plan.cached_tokens is not None:
        out["x-tokenflex-cached-tokens"] = str(plan.cached_tokens)
    cost = plan.cache_cost
    if cost is not None and cost.input_usd is not None:
        out["x-tokenflex-cache-cost"] = f"{cost.input_usd:.6g}"
    return out


@dataclass(frozen=True)
class Unfitted:
    """A request forwarded as the client sent it, and why."""

    reason: str
    """``unknown-model``: no one knows the model's window (``unknown_models = "pass"``)."""

    def headers(self) -> dict[str, str]:
        """The response header that says so."""
        return {"x-tokenflex-fitted": f"no; reason={self.reason}"}


@dataclass(frozen=True, slots=True)
class Observation:
    """What fit mode would have done with a request that observe mode forwards as sent."""

    request: ChatRequest | None
    """The parsed request (None: the body did not parse, and fit mode would refuse it)."""
    plan: Any = None
    """The plan fit mode would have sent (None when it would have refused the request)."""
    refusal: ProxyError | None = None
    """Fit mode's answer instead of forwarding: a 400 ``context_length_exceeded`` for a
    conversation that cannot be fitted, or any other error parsing or fitting raised."""
    passed: str | None = None
    """Why fit mode, too, would forward the request as sent (:class:`Unfitted`)."""

    @property
    def changes(self) -> bool:
        """Whether fit mode would have changed the request: messages dropped, cleared or
        summarized, another model, or a lower output limit than the client asked for (a
        limit added where the client asked for none does not count)."""
        plan, req = self.plan, self.request
        return plan is not None and req is not None and plan_changed(plan, req.requested_output)

    def headers(self, plan_id: str) -> dict[str, str]:
        """The ``x-tokenflex-would-*`` headers: each ``x-tokenflex-*`` plan header fit mode
        would send, renamed, plus ``would-fit``, ``would-change``, ``would-cleared`` (tool
        results replaced by a placeholder, counted in ``would-dropped`` too) and, for a
        refusal, ``would-refuse: STATUS CODE``. The plan id keeps its own name: the plan
        is kept (``GET /tokenflex/plans/{id}``)."""
        out = {"x-tokenflex-mode": "observe"}
        if self.passed is not None:
            return out | Unfitted(self.passed).headers()
        if self.plan is None:
            exc = self.refusal
            out["x-tokenflex-would-fit"] = "no"
            if exc is not None:
                out["x-tokenflex-would-refuse"] = f"{exc.status_code} {exc.code or exc.type}"
            return out
        out["x-tokenflex-would-fit"] = "yes"
        out["x-tokenflex-would-change"] = "yes" if self.changes else "no"
        for name, value in plan_headers(self.plan, "").items():
            out[name.replace("x-tokenflex-", "x-tokenflex-would-", 1)] = value
        out["x-tokenflex-would-cleared"] = str(self.plan.dropped.by_reason().get("cleared", 0))
        if plan_id:
            out["x-tokenflex-plan-id"] = plan_id
        return out

    def log_fields(self) -> str:
        """The plan (or refusal) for the proxy's one log line per request."""
        if self.plan is None:
            code = self.refusal.code if self.refusal is not None else None
            return f"would_fit=no refuse={code or '-'}"
        plan = self.plan
        return (
            f"would_fit=yes change={'yes' if self.changes else 'no'} "
            f"window={plan.context_window} input={plan.input_tokens} "
            f"max_tokens={plan.max_tokens} (asked {plan.requested_max_tokens}) "
            f"dropped={len(plan.dropped)} summary={'yes' if plan.summary is not None else 'no'}"
        )


class Fitter:
    """Fits chat requests with the config's options and builds the bodies to forward."""

    def __init__(
        self, config: ServerConfig, models: ModelResolver, calibration: Calibration | None = None
    ) -> None:
        self.config = config
        self.models = models
        self.limiter = anyio.CapacityLimiter(config.worker_threads)
        """Bounds the worker threads that count and fit (``worker_threads``)."""
        self.calibration = calibration
        self.store = open_store(
            config.state_store,
            timeout_s=config.state_timeout,
            ttl_s=config.state_ttl,
            max_value_bytes=config.state_max_value_bytes,
        )
        """Cuts and summaries kept between requests (``state_store``), each under its
        tenant's keys (the client's credentials and the route)."""
        self.store_health = StoreHealth(redact(config.state_store))
        """Whether the store works now: when it fails, requests are fitted without it."""
        self.store_blocks = not isinstance(self.store, MemoryStore)
        """Store calls do I/O: every fit runs in a worker thread."""
        self._memory = None if self.store_blocks else self.store
        """The memory store, read and written by fits as it is: it does no I/O and does
        not fail, so no guard (nor the metrics' error count) stands between (~7 calls
        a request)."""
        self.background = BackgroundSummaries(
            max_jobs=config.background_queue,
            workers=config.background_max_inflight,
            when_idle=config.background_when_idle,
            max_wait_s=config.background_max_wait,
        )
        """Summaries that need more than one summarizer call, made off the request."""
        self.activity = Activity(redact(config.upstream))
        """Client requests in flight through the proxy to the upstream (counted by the
        app's middleware): background summaries made by the upstream wait for it."""
        self.summarizer_transports: Wrap | None = None
        """Wraps the transports of the summarizers that call a server (the metrics)."""
        self._loaded: set[str] = set()
        """Tokenizers a fit loaded before: a small fit with them runs on the event loop
        (a first one loads its tokenizer in a worker thread, through afit)."""

    async def model_for(
        self, name: str, route: str | None, api_key: str | None = None
    ) -> tuple[Model, dict[str, Any], dict[str, Any]]:
        """The model a request's ``model`` name means, with the config's patches applied.

        Args:
            name: The ``model`` the client asked for.
            route: The ``[routes.NAME]`` table the request came through (None: ``/v1``).
            api_key: The client's bearer token, for asking the upstream about the model.

        Returns:
            The patched model, the proxy's own options and the fit() options.
        """
        model = await self.models.resolve(name, api_key)
        patch, proxy_options, fit_options = split_options(self.config.options_for(name, route))
        model = self.models.with_learned(name, patch_model(model, patch))
        return model, proxy_options, fit_options

    def learn_window(self, name: str, status: int, body: bytes, plan: Any) -> int | None:
        """The window to refit ``name`` into when the upstream refused the request sent
        for ``plan`` (None: passed through unfitted) as too long; None when ``body`` is
        no such refusal or teaches nothing (:meth:`ModelResolver.learn`)."""
        refused = refusal(status, body)
        if refused is None:
            return None
        return self.models.learn(name, refused, plan.context_window if plan is not None else None)

    async def observe(
        self,
        parse: Callable[[bytes], ChatRequest],
        raw: bytes,
        route: str | None,
        api_key: str | None,
        *,
        owner: str,
    ) -> Observation:
        """The plan fit mode would make for the body ``raw`` (observe mode); what fit mode
        would refuse is returned as the observation's ``refusal``, never raised.

        The plan is made as :meth:`fit` makes it (off the event loop when large) but
        without a summarizer: observing makes no summarizer call, so the plan shows the
        cut with dropping where fit mode might have summarized.
        """
        try:
            req = parse(raw)
        except ProxyError as exc:
            return Observation(None, refusal=exc)
        try:
            plan = await self.fit(req, route, len(raw), api_key, owner=owner, summarize=False)
        except ProxyError as exc:
            return Observation(req, refusal=exc)
        if isinstance(plan, Unfitted):
            return Observation(req, passed=plan.reason)
        return Observation(req, plan)

    async def fit(
        self,
        req: ChatRequest,
        route: str | None,
        size: int,
        api_key: str | None,
        *,
        owner: str,
        summarize: bool = True,
    ) -> Any:
        """The plan for one chat request, or :class:`Unfitted` when it goes as sent.

        Args:
            req: The parsed request.
            route: The ``[routes.NAME]`` table the request came through (None: ``/v1``).
            size: The request body's bytes (large bodies are fitted in a worker thread).
            api_key: The client's bearer token (model discovery, upstream summarizer).
            owner: The client's credentials (:func:`~tokenflex.server.plans.credential_hash`,
                as for its plans): with the route, the tenant of the state this fit reads
                and writes (held cuts, the prefix shared with the previous plan,
                summaries), so no client sees or moves another's.
            summarize: False: no summarizer, whatever the options say (observe mode).

        Raises:
            ProxyError: fit() raised a tokenflex error (see :func:`library_error`).
        """
        # (read from the module on each call, where tests replace fit; an import statement
        # here cost ~2 µs a request)
        fit, afit = _FIT.fit, _FIT.afit

        model, proxy_options, fit_options = await self.model_for(req.model, route, api_key)
        if model.source == "default" and self.config.unknown_models == "pass":
            return Unfitted("unknown-model")  # a guessed 8K window would cut, not protect
        if self.calibration is not None:  # plan with the count factor learned from the wire
            model = self.calibration.apply(model, self.config.upstream)
        requested = req.requested_output or proxy_options.get("default_max_tokens")
        background: Any = self.background
        if calls_upstream(fit_options, self.config):  # its jobs wait for the upstream
            background = self.background.bound(self.activity)
        summarizer = build_summarizer(
            fit_options,
            config=self.config,
            model=model,
            request_model=req.model,
            api_key=api_key,
            transports=self.summarizer_transports,
        )
        if not summarize:
            summarizer = None
        guard: GuardedStore | None = None
        store: Any = self._memory
        if store is None:  # (a store that does I/O: fitted without it when it fails)
            store = guard = GuardedStore(self.store, self.store_health)
        kwargs: dict[str, Any] = dict(
            model=model,
            max_tokens=requested,
            tools=req.tools,
            cache_stable=self.config.cache_stable,
            cut_note=self.config.cut_note,
            state=TenantStore(store, tenant_name(owner, route)),
            recall=self.config.recall,  # observe mode: the plan fit mode would send
        )
        if summarizer is not None:  # (without one, its options are scalars: read once)
            kwargs.update(summarizer=summarizer, background_summaries=background)
        fmt, messages = get_format(req.format), req.messages
        if fmt.via_chat:  # sent upstream as chat: fitted as chat, counted as it is sent
            messages = fmt.to_chat(req.messages, req.system)
        elif not fmt.internal:  # Anthropic Messages or Responses: fitted in that format
            kwargs.update(format=req.format, system=req.system)
        kwargs.update(fit_options)
        job: Callable[[], Any] = functools.partial(fit, messages, **kwargs)
        if self.config.count == "provider":  # counts asked of the upstream, per client
            job = with_provider_counts(self.count_config(api_key, owner), job)
        if (
            model.tokenizer.startswith("server:")
            or size > inline_bytes(req.format)
            or self.store_blocks
            or self.config.count == "provider"
        ):
            # Counting that waits on a tokenize or count endpoint, a lot of work, or a
            # state store that does I/O: keep the event loop free for the other requests.
            plan = await off_loop(self.limiter, job)
            return stateless(plan) if guard is not None and guard.failed else plan
        try:
            if summarizer is None and model.tokenizer in self._loaded:
                # Nothing to await and nothing that waits (no summarizer, no tokenizer
                # server, a memory store, a body of little work, a tokenizer loaded
                # before): fit here. afit would run each of its steps in a worker thread,
                # and on a busy machine the hand-offs cost more than the fit (issue 24:
                # about twice the fit's CPU at 10 messages); CPU-bound work in a thread
                # holds the GIL all the same. A request with much new text to tokenize
                # (a conversation first seen) is fitted in a worker thread after all.
                plan = fit_inline(job)
                if plan is None:
                    plan = await off_loop(self.limiter, job)
            else:
                plan = await afit(messages, **kwargs)
                if len(self._loaded) >= _MAX_LOADED:
                    self._loaded.clear()
                self._loaded.add(model.tokenizer)
        except TokenflexError as exc:
            raise library_error(exc) from None
        except BaseException as exc:
            panic = tokenizer_panic(exc)
            if panic is None:
                raise
            raise panic from None
        return stateless(plan) if guard is not None and guard.failed else plan

    def count_config(self, api_key: str | None, owner: str) -> ProviderCounts:
        """Where the counts of ``owner``'s requests come from with ``count = "provider"``:
        the upstream's count endpoint, asked with the client's key (else the config's)."""
        key = api_key
        if key is None and self.config.upstream_api_key is not None:
            key = self.config.upstream_api_key.get_secret_value()
        return ProviderCounts(self.config.upstream, api_key=key, tenant=owner)

    def tenant(self, owner: str, route: str | None) -> TenantStore:
        """The state of one client (its credentials) on one route."""
        return TenantStore(GuardedStore(self.store, self.store_health), tenant_name(owner, route))

    def recall_round(
        self, req: ChatRequest, plan: Any, answer: bytes, owner: str, route: str | None
    ) -> ChatRequest | None:
        """``req`` with the upstream's ``tokenflex_recall`` call and its results appended
        (:func:`tokenflex.recall.resolved_round`), to be fitted and sent again; None when
        the answer calls no tool, another tool, or the plan offered none."""
        if plan is None or req.stream or not plan.extras.get("recall"):
            return None
        try:
            data = json.loads(answer)
        except ValueError:
            return None
        items = resolved_round(req.format, data, self.tenant(owner, route))
        if items is None:
            return None
        return dataclasses.replace(req, messages=[*req.messages, *items])

    def fitted_body(self, req: ChatRequest, plan: Any, route: str | None) -> bytes:
        """The JSON body to forward: the client's, with the plan's messages and limit.

        The model is replaced only when the plan fell back to another one. Every output
        limit field the client sent is set to the plan's ``max_tokens``; when it sent none,
        ``max_tokens_field`` is added unless the options say ``add_max_tokens = false``.
        """
        body = dict(req.body)
        body["messages"] = plan.messages
        with_recall_tool(body, plan)
        if plan.fallback_from is not None:
            body["model"] = plan.model.name
        fields = [f for f in _MAX_TOKEN_FIELDS if body.get(f) is not None]
        if not fields:
            _, proxy_options, _ = split_options(self.config.options_for(req.model, route))
            if proxy_options.get("add_max_tokens", True):
                fields = [proxy_options.get("max_tokens_field", "max_tokens")]
        for f in fields:
            body[f] = plan.max_tokens
        return dump_json(body)
