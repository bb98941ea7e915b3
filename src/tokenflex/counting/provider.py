"""Exact counts from the provider's own count endpoint, for models with no tokenizer here.

Anthropic publishes no tokenizer, so Claude models count with a bound that overcounts
(``estimate:all:1.6`` for Opus 4.7 and later: about 1.5x on prose). An operator who wants
their real counts turns on :class:`ProviderCounts`: inside :func:`provider_counts`,
:func:`~tokenflex.counting.get_counter` wraps the model's counter in a
:class:`ProviderCounter` that asks the provider:

=========  =====================================  ==============================
provider   endpoint                               answer
=========  =====================================  ==============================
anthropic  ``POST /v1/messages/count_tokens``     ``{"input_tokens": N}``
openai     ``POST /v1/responses/input_tokens``    ``{"input_tokens": N}``
=========  =====================================  ==============================

Both count whole requests; the solver needs what each message costs. The rule (so that
the sum over a request is never below the endpoint's count of that request):

- the request's base is the count of a one-message probe request (``[user "."]``), the
  probe's own turn included;
- a plain text message (``{"role", "content": str}``, or a list of one text part)
  costs what it adds to a probe request whose last turn has another role
  (``count(probe + [m]) - count(probe)``: a turn of its own, never merged into the
  probe's), plus :data:`TURN_SLACK` tokens for the framing its place in the real
  request may add; a system (or developer) message is measured as Anthropic's
  top-level ``system`` / a Responses ``system`` item;
- anything else (tool calls and results, images, files, extra fields) and the tool
  schemas keep the model's estimate, which is a bound on its own.

A model counted exactly here (OpenAI's encodings under the cookbook rules) keeps its local
count: it is the provider's, without a call.

A measured count is cached per tenant, endpoint, model and message fingerprint (the
role, and the content's ``hash()`` and length: counts only, never text; bounded), so a
conversation that grew by one message costs one count call. When the endpoint fails or
passes ``timeout``, the message keeps its estimate, the failure is logged, the endpoint
is left alone for ``retry_after`` seconds, and the plan's warnings say which counts were
estimated.

>>> from tokenflex.counting import ProviderCounts, provider_counts
>>> with provider_counts(ProviderCounts("https://api.anthropic.com", api_key="sk-...")):
...     plan = tokenflex.fit(messages, model="claude-opus-4-7")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .._types import Message, Tool
from .messages import MessageCounter

if TYPE_CHECKING:
    import httpx  # imported on first count call: `import tokenflex` stays light

__all__ = [
    "ENDPOINTS",
    "TURN_SLACK",
    "CountStore",
    "ProviderCounter",
    "ProviderCounts",
    "active_provider_counts",
    "provider_counts",
    "provider_kind",
    "reset_provider_counts",
    "with_provider_counts",
    "wrap",
]

log = logging.getLogger("tokenflex")

ProviderKind = Literal["anthropic", "openai"]

ENDPOINTS: dict[ProviderKind, str] = {
    "anthropic": "/v1/messages/count_tokens",
    "openai": "/v1/responses/input_tokens",
}
"""The count endpoint of each provider, below its API root."""

TURN_SLACK = 4
"""Tokens added to a message's measured count: what its turn's framing may cost in the
real request beyond the probe's (a turn header where the probe's neighbour merged)."""

ANTHROPIC_VERSION = "2023-06-01"
_SYSTEM_ROLES = ("system", "developer")
_TURN_ROLES = ("user", "assistant")
_PROBE = "."


@dataclass(frozen=True)
class ProviderCounts:
    """Where exact counts come from, and for whom.

    >>> ProviderCounts("https://api.anthropic.com/v1").root
    'https://api.anthropic.com'
    """

    url: str
    """The provider's API base URL, with or without ``/v1``."""
    api_key: str | None = field(default=None, repr=False)
    """Sent as ``x-api-key`` (Anthropic) and ``Authorization: Bearer`` (OpenAI)."""
    tenant: str = ""
    """Whose counts these are (the proxy: the client's credential hash): every cached
    count's key names it, so no client reads another's."""
    timeout: float = 5.0
    """Seconds one count call may take before the estimate is used instead."""
    retry_after: float = 30.0
    """Seconds the endpoint is left alone after a failure (estimates meanwhile)."""
    client: httpx.Client | None = field(default=None, compare=False, repr=False)
    """An httpx client to use (owned by the caller); None: a shared one."""

    @property
    def root(self) -> str:
        """The API root, without ``/v1`` and the trailing slash."""
        root = self.url.strip().rstrip("/")
        return root[: -len("/v1")] if root.endswith("/v1") else root


class CountStore:
    """Counts measured by an endpoint, by key (tenant, endpoint, model, role, content
    fingerprint): at most ``max_entries``, least recently used first out. It never holds
    text: a key carries the content's ``hash()`` and length."""

    def __init__(self, max_entries: int = 200_000) -> None:
        self.max_entries = max_entries
        self._counts: OrderedDict[tuple[Any, ...], int] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> int | None:
        with self._lock:
            n = self._counts.get(key)
            if n is not None:
                self._counts.move_to_end(key)
            return n

    def put(self, key: tuple[Any, ...], n: int) -> None:
        with self._lock:
            self._counts[key] = n
            self._counts.move_to_end(key)
            while len(self._counts) > self.max_entries:
                self._counts.popitem(last=False)

    def __len__(self) -> int:
        return len(self._counts)

    def keys(self) -> list[tuple[Any, ...]]:
        """The keys held, oldest first (what a cached count is stored under)."""
        with self._lock:
            return list(self._counts)

    def clear(self) -> None:
        with self._lock:
            self._counts.clear()


STORE = CountStore()
"""The process's measured counts (shared by every counter; keys name their tenant)."""

_active: contextvars.ContextVar[ProviderCounts | None] = contextvars.ContextVar(
    "tokenflex_provider_counts", default=None
)
_down_until: dict[tuple[str, str], float] = {}
"""(tenant, endpoint URL) -> when it may be asked again: one client's refused key never
turns the endpoint off for another."""
_client_lock = threading.Lock()
_shared_client: httpx.Client | None = None


@contextlib.contextmanager
def provider_counts(config: ProviderCounts) -> Iterator[ProviderCounts]:
    """Count Anthropic and OpenAI models through their count endpoint in this block
    (this thread or task only; see the module docstring)."""
    token = _active.set(config)
    try:
        yield config
    finally:
        _active.reset(token)


def active_provider_counts() -> ProviderCounts | None:
    """The :class:`ProviderCounts` of the enclosing :func:`provider_counts`, if any."""
    return _active.get()


T = TypeVar("T")


def with_provider_counts(config: ProviderCounts, func: Callable[[], T]) -> Callable[[], T]:
    """``func`` to be run inside ``provider_counts(config)`` (in a worker thread)."""

    def run() -> T:
        with provider_counts(config):
            return func()

    return run


def provider_kind(provider: str) -> ProviderKind | None:
    """The count endpoint a model of ``provider`` has, or None."""
    return provider if provider in ("anthropic", "openai") else None  # type: ignore[return-value]


class EndpointError(Exception):
    """A count call failed (the message says how); the estimate is used."""


def _client(config: ProviderCounts) -> httpx.Client:
    global _shared_client
    if config.client is not None:
        return config.client
    import httpx

    with _client_lock:
        if _shared_client is None:
            _shared_client = httpx.Client()
        return _shared_client


def _plain_text(content: Any) -> Any:
    """``content`` as one text when it is one: a string, or a list of one text part."""
    if type(content) is list and len(content) == 1:
        part = content[0]
        if type(part) is dict and len(part) == 2 and part.get("type") == "text":
            return part.get("text")
    return content


class ProviderCounter(MessageCounter):
    """The model's counter, with plain text messages counted by the provider's endpoint.

    Attributes:
        inner: The model's own counter (the estimate kept for everything else).
        measured: Messages this counter counted from the endpoint (calls or cache).
        estimated: Messages it counted with the estimate.
        calls: Count calls it made.
        failure: Why the endpoint was not used, when it was not (None: it was).
    """

    def __init__(self, inner: MessageCounter, config: ProviderCounts, kind: ProviderKind) -> None:
        super().__init__(inner.model, inner.tokenizer, exact=False)
        self.inner, self.config, self.kind = inner, config, kind
        self.url = config.root + ENDPOINTS[kind]
        self.measured = self.estimated = self.calls = 0
        self.failure: str | None = None
        self._scope = (config.tenant, self.url, inner.model.name)
        self._down = (config.tenant, self.url)

    def __repr__(self) -> str:
        return f"<ProviderCounter {self.model.name} {self.url} over {self.inner!r}>"

    # the endpoint -------------------------------------------------------------------

    def _body(self, system: str | None, turns: Sequence[tuple[str, str]]) -> dict[str, Any]:
        if self.kind == "anthropic":
            body: dict[str, Any] = {
                "model": self.model.name,
                "messages": [{"role": r, "content": c} for r, c in turns],
            }
            if system is not None:
                body["system"] = system
            return body
        items = [{"role": r, "content": c} for r, c in turns]
        if system is not None:
            items.insert(0, {"role": "system", "content": system})
        return {"model": self.model.name, "input": items}

    def _headers(self) -> dict[str, str]:
        key = self.config.api_key
        if self.kind == "anthropic":
            headers = {"anthropic-version": ANTHROPIC_VERSION}
            if key:
                headers["x-api-key"] = key
            return headers
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _ask(self, system: str | None, turns: Sequence[tuple[str, str]]) -> int:
        """The endpoint's count of one request (raises :class:`EndpointError`)."""
        if self.failure is not None or time.monotonic() < _down_until.get(self._down, 0.0):
            self.failure = self.failure or "it failed recently"
            raise EndpointError(self.failure)
        self.calls += 1
        import httpx

        try:
            r = _client(self.config).post(
                self.url,
                json=self._body(system, turns),
                headers=self._headers(),
                timeout=self.config.timeout,
            )
            if r.status_code != 200:
                raise EndpointError(f"HTTP {r.status_code}: {r.text[:200]!r}")
            n = r.json()["input_tokens"]
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise EndpointError(f"input_tokens={n!r} is not a count")
            return n
        except (httpx.HTTPError, ValueError, KeyError, TypeError, EndpointError) as exc:
            what = f"{type(exc).__name__}: {exc}" if not isinstance(exc, EndpointError) else exc
            self.failure = f"{self.url} failed ({what})"
            _down_until[self._down] = time.monotonic() + self.config.retry_after
            log.warning(
                "tokenflex: the count endpoint %s failed (%s); %s is counted with its "
                "estimate, and the endpoint is left alone for %.0f s.",
                self.url,
                what,
                self.model.name,
                self.config.retry_after,
            )
            raise EndpointError(self.failure) from None

    def _cached(self, key: tuple[Any, ...], measure: Callable[[], int]) -> int:
        n = STORE.get(key)
        if n is None:
            n = measure()
            STORE.put(key, n)
        return n

    def _probe(self) -> int:
        """The count of the probe request ``[user "."]``: the base of every request."""
        return self._cached((*self._scope, "probe"), lambda: self._ask(None, [("user", _PROBE)]))

    def _measure(self, role: str, content: str) -> int:
        if role in _SYSTEM_ROLES:
            return self._ask(content, [("user", _PROBE)]) - self._probe()
        # a turn of its own: the probe's last turn has the other role
        if role == "assistant":
            return self._ask(None, [("user", _PROBE), (role, content)]) - self._probe()
        probe = [("user", _PROBE), ("assistant", _PROBE)]
        before = self._cached((*self._scope, "probe-ua"), lambda: self._ask(None, probe))
        return self._ask(None, [*probe, (role, content)]) - before

    # MessageCounter ---------------------------------------------------------------

    def message(self, msg: Message) -> int:
        # a dict subclass too: Anthropic and Responses input arrive as chat-shaped
        # NativeMessage dicts (a Responses text as a list of one text part)
        if isinstance(msg, dict) and len(msg) == 2:
            role, content = msg.get("role"), _plain_text(msg.get("content"))
            if (
                type(role) is str
                and type(content) is str
                and (role in _TURN_ROLES or role in _SYSTEM_ROLES)
            ):
                # Anthropic refuses a last assistant turn that ends in whitespace (and
                # empty texts): measured without it, which TURN_SLACK covers
                text = content.rstrip() if role == "assistant" else content
                key = (*self._scope, role, hash(content), len(content))
                try:
                    if not text.strip():
                        raise EndpointError("an empty text is not measured")
                    n = self._cached(key, lambda: max(0, self._measure(role, text)))
                except EndpointError:
                    pass
                else:
                    self.measured += 1
                    return n + TURN_SLACK
        self.estimated += 1
        return self.inner.message(msg)

    def base(self, tools: Sequence[Tool] | None = None) -> int:
        try:
            return self._probe() + self.inner.tools(tools)
        except EndpointError:
            return self.inner.base(tools)

    def tools(self, tools: Sequence[Tool] | None) -> int:
        return self.inner.tools(tools)

    def text(self, text: str) -> int:
        return self.inner.text(text)

    def message_exact(self, msg: Message) -> bool:
        return False

    def notes(self) -> list[str]:
        notes = self.inner.notes()
        name = self.model.name
        if self.measured:
            notes.append(
                f"{name}: {self.measured:,} messages counted by the provider's count "
                f"endpoint ({self.url}, {self.calls:,} calls; +{TURN_SLACK} tokens each "
                f"for turn framing), {self.estimated:,} with the estimate."
            )
        if self.failure is not None:
            notes.append(
                f"{name}: the count endpoint was not used for {self.estimated:,} messages "
                f"({self.failure}): their counts are the estimate."
            )
        return notes


def wrap(counter: MessageCounter) -> MessageCounter:
    """``counter`` counted through the active provider endpoint, where one is active
    and the model's provider has one; else ``counter`` itself."""
    config = _active.get()
    if config is None or counter.exact:  # an exact local count is the provider's, free
        return counter
    kind = provider_kind(counter.model.provider)
    if kind is None:
        return counter
    return ProviderCounter(counter, config, kind)


def reset_provider_counts() -> None:
    """Forget every measured count and endpoint failure."""
    STORE.clear()
    _down_until.clear()
