"""Which Model a request's ``model`` name means: asked of the upstream once, then cached.

The upstream knows its real window (vLLM ``max_model_len``, llama.cpp ``n_ctx``, Ollama
``num_ctx``), so it is asked first, once per model name, with a timeout; concurrent
requests for the same name share one question. When it cannot say (or discovery is off)
the registry answers. A failed discovery is retried after ``RETRY_SECONDS``, so an
upstream that was down at the first request is asked again later. Config tables
(``[models.NAME]``) patch the result.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from ..errors import UnknownModelError, UpstreamError
from ..models import Model, get_model
from ..models.discovery import Refusal
from .config import ServerConfig
from .errors import ProxyError

__all__ = ["Discover", "ModelResolver", "default_discover", "display_name"]

log = logging.getLogger("tokenflex")

Discover = Callable[[str, "str | None", "str | None"], Awaitable["Model | None"]]
"""``discover(base_url, model_name, api_key) -> Model | None``: the upstream's view of a
model (``model_name=None``: whatever it serves first). Raises ``UpstreamError`` with
``status_code=404`` when the upstream does not serve that name."""

RETRY_SECONDS = 30.0
MAX_LEARNED = 256
"""Model names whose window an upstream's refusal taught (least recently used forgotten)."""
LEARNED_WINDOW_RANGE = (256, 10_000_000)
"""Windows a refusal may teach: below, a refusal is not believed; above, the registry's
largest window (Llama 4 Scout) is passed."""
# Model names come from clients: bound what we remember by count and by bytes, and keep
# only a few names that neither the upstream nor the registry knows.
MAX_CACHED = 256
MAX_CACHED_BYTES = 64 * 1024
MAX_CACHED_UNKNOWN = 16
LOGGED_NAME_CHARS = 80


def display_name(name: str, limit: int = LOGGED_NAME_CHARS) -> str:
    """``name`` for a log line: cut after ``limit`` characters, saying how long it was.

    >>> display_name("gpt-4o")
    'gpt-4o'
    >>> display_name("x" * 100, limit=5)
    'xxxxx…(100 chars)'
    """
    return name if len(name) <= limit else f"{name[:limit]}…({len(name):,} chars)"


def default_discover(timeout: float) -> Discover:
    """:func:`tokenflex.models.discovery.adiscover_model` with a per-request ``timeout``."""

    async def discover(base_url: str, name: str | None, api_key: str | None) -> Model | None:
        from ..models.discovery import adiscover_model

        return await adiscover_model(base_url, model=name, api_key=api_key, timeout=timeout)

    return discover


class ModelResolver:
    """Resolves request model names to Models, asking the upstream at most once per name."""

    def __init__(self, config: ServerConfig, discover: Discover | None = None) -> None:
        self.config = config
        self.discover = discover or default_discover(config.discovery_timeout)
        self._cache: OrderedDict[str, tuple[Model, float]] = OrderedDict()
        self._bytes = 0  # characters of the cached names
        self._unknown = 0  # cached names no one knows
        self._pending: dict[str, asyncio.Future[tuple[Model, float]]] = {}
        self._served: asyncio.Future[Model | None] | None = None
        self._learned: OrderedDict[str, int] = OrderedDict()

    @property
    def cached(self) -> dict[str, Model]:
        """The names remembered now, with their models (a copy)."""
        return {name: model for name, (model, _) in self._cache.items()}

    async def resolve(self, name: str, api_key: str | None = None) -> Model:
        """The Model for ``name`` (before config patches); ``api_key`` is used to ask the
        upstream when no ``upstream_api_key`` is configured.

        Raises:
            ProxyError: 404 ``model_not_found`` when ``strict_models`` is on and neither
                the upstream nor the registry knows the name.
        """
        hit = self._cache.get(name)
        if hit is not None and hit[1] > time.monotonic():
            self._cache.move_to_end(name)
            return hit[0]
        pending = self._pending.get(name)
        if pending is None:
            pending = asyncio.ensure_future(self._lookup(name, api_key))
            self._pending[name] = pending
            pending.add_done_callback(lambda _f: self._pending.pop(name, None))
        model, expires = await asyncio.shield(pending)
        self._remember(name, model, expires)
        return model

    def learn(self, name: str, refused: Refusal, window_used: int | None) -> int | None:
        """Remember the window the upstream stated when it refused a request for ``name``
        as too long; the window requests for ``name`` get from now on, or None when the
        refusal teaches nothing.

        Args:
            name: The request's ``model``.
            refused: What the refusal said (:func:`tokenflex.models.discovery.refusal`).
            window_used: The window the refused request was fitted into (None: it was
                passed through unfitted).

        A refusal only lowers (or, for a name nobody knew, sets) a window, within
        ``LEARNED_WINDOW_RANGE``; one whose own numbers disagree (the request it says it
        got is not over the window), or that states a window not below the one the
        request was fitted into (then the count was off, not the window), teaches nothing.
        """
        low, high = LEARNED_WINDOW_RANGE
        window = refused.window
        if not low <= window <= high or (refused.asked is not None and refused.asked <= window):
            log.warning(
                "Model %r: the upstream's refusal states a %s-token window (request: %s); "
                "not believed.",
                display_name(name),
                f"{window:,}",
                f"{refused.asked:,}" if refused.asked is not None else "?",
            )
            return None
        if window_used is not None and window >= window_used:
            return None
        known = self._learned.get(name)
        window = min(window, known) if known is not None else window
        self._learned[name] = window
        self._learned.move_to_end(name)
        while len(self._learned) > MAX_LEARNED:
            self._learned.popitem(last=False)
        log.warning(
            "Model %r: %s refused a request as too long (%s wording); its window is %s "
            "tokens from now on (was %s).",
            display_name(name),
            self.config.upstream,
            refused.wording,
            f"{window:,}",
            f"{window_used:,}" if window_used is not None else "unfitted",
        )
        return window

    def with_learned(self, name: str, model: Model) -> Model:
        """``model`` with the window a refusal taught for ``name``: lower only, except for
        a name nobody knew (the default), whose window it sets."""
        window = self._learned.get(name)
        if window is None:
            return model
        if model.source != "default" and window >= model.context_window:
            return model
        cap = model.max_input_tokens
        return model.replace(
            context_window=window,
            max_input_tokens=min(cap, window) if cap is not None else None,
            known=True,
            source=f"{model.source} + the window in {self.config.upstream}'s refusal",
        )

    def _remember(self, name: str, model: Model, expires: float) -> None:
        """Cache a resolved name, within the count, byte and unknown-name bounds."""
        if name in self._cache:
            self._cache.move_to_end(name)
        elif len(name) > MAX_CACHED_BYTES // 16:
            return  # a name this long is not worth a sixteenth of the cache
        elif not model.known and self._unknown >= MAX_CACHED_UNKNOWN:
            return
        else:
            self._bytes += len(name)
            self._unknown += not model.known
        self._cache[name] = (model, expires)
        while len(self._cache) > MAX_CACHED or self._bytes > MAX_CACHED_BYTES:
            old, (old_model, _) = self._cache.popitem(last=False)
            self._bytes -= len(old)
            self._unknown -= not old_model.known

    async def _lookup(self, name: str, api_key: str | None) -> tuple[Model, float]:
        c = self.config
        if not c.discover:
            return self._from_registry(name), float("inf")
        if c.upstream_api_key is not None:
            api_key = c.upstream_api_key.get_secret_value()
        base = f"{c.upstream}/v1"
        try:
            try:
                found = await asyncio.wait_for(
                    self.discover(base, name, api_key), timeout=c.discovery_timeout
                )
            except UpstreamError as exc:
                if exc.status_code != 404:
                    raise
                if c.strict_models and name not in c.models:
                    raise ProxyError(404, str(exc), param="model", code="model_not_found") from None
                # llama.cpp-style servers answer to any name but list only their own model
                found = self._unlisted(name, await self._served_model(base, api_key))
        except ProxyError:
            raise
        except Exception as exc:  # any failure: the registry answers, retried later
            log.warning(
                "Cannot discover %r from %s (%s: %s); using the registry for %.0f s.",
                display_name(name),
                c.upstream,
                type(exc).__name__,
                exc,
                RETRY_SECONDS,
            )
            return self._from_registry(name), time.monotonic() + RETRY_SECONDS
        if found is None:
            return self._from_registry(name), float("inf")
        log.info(
            "Model %r: %s-token window from the upstream %s (tokenizer %s).",
            display_name(name),
            f"{found.context_window:,}",
            c.upstream,
            found.tokenizer,
        )
        return found, float("inf")

    async def _served_model(self, base: str, api_key: str | None) -> Model | None:
        """The model the upstream serves by default, asked once for all unlisted names
        (a llama-cpp-python window probe costs a fraction of a second)."""
        f = self._served
        if f is None or (f.done() and (f.cancelled() or f.exception() is not None)):
            f = asyncio.ensure_future(
                asyncio.wait_for(
                    self.discover(base, None, api_key), timeout=self.config.discovery_timeout
                )
            )
            self._served = f
        return await asyncio.shield(f)

    def _unlisted(self, name: str, served: Model | None) -> Model | None:
        """The model for a name the upstream does not list, given the model it does serve.

        A llama.cpp-style server runs its one model whatever the name, so its window is
        the truth; but a gateway may serve the name without listing it. When the registry
        knows the name with a smaller window, that window wins: never risk an overflow.
        """
        if served is None:
            return None
        known = get_model(name)
        if known.known and known.context_window < served.context_window:
            log.info(
                "Model %r is not listed by %s; using the registry's %s-token window, smaller "
                "than the %s tokens of the model it lists (%r).",
                display_name(name),
                self.config.upstream,
                f"{known.context_window:,}",
                f"{served.context_window:,}",
                served.name,
            )
            return known
        return served

    def _from_registry(self, name: str) -> Model:
        strict = self.config.strict_models and name not in self.config.models
        try:
            return get_model(name, strict=strict)
        except UnknownModelError as exc:
            raise ProxyError(404, str(exc), param="model", code="model_not_found") from None
