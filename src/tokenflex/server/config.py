"""Proxy settings: a TOML file, ``TOKENFLEX_SERVE_*`` env vars and command-line flags.

Precedence, highest first: arguments to :meth:`ServerConfig.load` (the CLI flags), env
vars, the TOML file, defaults. The upstream is fixed here and never taken from a request.

A config file::

    upstream = "http://127.0.0.1:8080"      # llama.cpp / vLLM / Ollama / OpenAI
    port = 8787
    proxy_key = "change-me"                 # clients send it (see docs/proxy.md)
    max_body_bytes = 4_194_304

    [fit]                                   # defaults for every chat request
    safety_margin = 64

    [models."llama-3.1-8b"]                 # per model: Model fields patch the model,
    context_window = 8192                   # everything else is a fit() option
    min_output_tokens = 256

    [routes.summarize]                      # per route: /summarize/v1/chat/completions
    summarize = true

    [routes.trial]                          # forwarded as sent, the plan only reported
    mode = "observe"

    [fit.shrink]                            # an option group (tokenflex.Shrink): its fields
    clear_tool_results = true               # are the flat options they set

Option tables merge in the order ``[fit]`` < ``[models.NAME]`` < ``[routes.NAME]``, field
by field. An option table takes fit()'s option groups under their own names
(``[fit.shrink]``, ``[models."x".history]``, ``cache = {low_water = 0.4}``,
``fallback = {models = ["gpt-4o-mini"]}``) or their flat names (``clear_tool_results``).
Three keys are the proxy's own, not fit() options: ``default_max_tokens`` (the request
for output when the client asks for none), ``max_tokens_field`` (``max_tokens`` or
``max_completion_tokens``, the field added in that case) and ``add_max_tokens`` (false to
leave such requests without a limit; a request that fits as sent is forwarded as it came,
with no limit added, whatever this says). ``mode`` (``"fit"`` or ``"observe"``) is set for
the whole proxy at the top level and per route in ``[routes.NAME]`` (nowhere else).
"""

from __future__ import annotations

import contextvars
import dataclasses
import os
import re
import tomllib
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from ..errors import ConfigError
from ..models import Model
from ..options import GROUPS
from ..settings import group_values

__all__ = ["MODEL_FIELDS", "MODES", "PROXY_OPTIONS", "ROUTE_OPTIONS", "ServerConfig"]

MODEL_FIELDS = frozenset(
    {"context_window", "max_output_tokens", "tokenizer", "chat_format", "chat_template"}
)
"""Keys of a ``[models.NAME]`` / ``[routes.NAME]`` table that patch the resolved Model."""

PROXY_OPTIONS = frozenset({"default_max_tokens", "max_tokens_field", "add_max_tokens"})
"""Keys the proxy consumes itself; every other option key goes to ``tokenflex.afit``."""

ROUTE_OPTIONS = frozenset({"mode"})
"""Proxy keys a ``[routes.NAME]`` table may set but ``[fit]`` and ``[models.NAME]`` may not:
they choose what a route does, not how one model is fitted."""

MODES = ("fit", "observe")
"""``mode`` values: ``fit`` forwards the fitted body; ``observe`` forwards the client's body
byte for byte and only reports the plan (``x-tokenflex-would-*`` headers)."""

_ROUTE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_RESERVED_ROUTES = frozenset({"v1", "tokenflex"})
_file_data: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "tokenflex_serve_file", default=None
)


class ServerConfig(BaseSettings):
    """Everything ``tokenflex serve`` needs; see the module docstring for the sources."""

    model_config = SettingsConfigDict(
        env_prefix="TOKENFLEX_SERVE_", extra="forbid", frozen=True, validate_default=True
    )

    upstream: str = Field(description="Base URL of the upstream server, e.g. http://127.0.0.1:8080")
    host: str = "127.0.0.1"
    port: int = Field(8787, ge=0, le=65535)
    proxy_key: SecretStr | None = None
    """When set, every request must carry it (``x-tokenflex-key`` or ``Authorization``)."""
    upstream_api_key: SecretStr | None = None
    """Sent upstream as ``Authorization: Bearer`` when the client sends no key of its own."""
    max_body_bytes: int = Field(4 * 1024 * 1024, gt=0)
    connect_timeout: float = Field(5.0, gt=0)
    read_timeout: float = Field(300.0, gt=0)
    """Longest wait for the next byte from the upstream (generation can be slow)."""
    write_timeout: float = Field(30.0, gt=0)
    pool_timeout: float = Field(30.0, gt=0)
    max_connections: int = Field(200, gt=0)
    """Most simultaneous connections to the upstream."""
    max_keepalive: int = Field(8, ge=0)
    """Idle connections kept open for reuse."""
    discover: bool = True
    """Ask the upstream for each model's real window (once per model, then cached)."""
    discovery_timeout: float = Field(3.0, gt=0)
    calibrate: bool = True
    """Raise a model's count factor when the upstream's ``usage.prompt_tokens`` exceeds the
    plan's prediction (:mod:`tokenflex.calibration`); off for upstreams whose usage counts
    more than the request (injected system prompts)."""
    count: Literal["estimate", "provider"] = "estimate"
    """``provider``: count Anthropic and OpenAI models that have no exact tokenizer here
    through the upstream's count endpoint (``/v1/messages/count_tokens``,
    ``/v1/responses/input_tokens``), cached per client and message, with the estimate
    where the endpoint fails (:mod:`tokenflex.counting.provider`)."""
    strict_models: bool = False
    """Answer 404 ``model_not_found`` for models neither the upstream nor the registry knows
    (a name that only matches a family pattern included)."""
    models_file: str | None = None
    """A models file loaded into the registry at startup: TOML ``[[model]]`` /
    ``[[family]]`` tables, or LiteLLM's ``model_prices_and_context_window.json``."""
    unknown_models: Literal["pass", "fit"] = "pass"
    """A model name that neither the upstream, the registry (entries and family patterns)
    nor a ``[models.NAME]`` table knows: ``pass`` forwards the request as sent, unfitted
    (``x-tokenflex-fitted: no; reason=unknown-model``), so the upstream decides; ``fit``
    fits it into the conservative 8,192-token default."""
    store_plans: bool = True
    """Keep recent plans for ``GET /tokenflex/plans/{id}``; false: no plan id header, 404."""
    plans_max: int = Field(1000, ge=0)
    plans_max_bytes: int = Field(64 * 1024 * 1024, ge=0)
    """Bytes the plan store keeps (request bodies and plans, as bytes, never live objects)."""
    parsed_bodies_max_bytes: int = Field(16 * 1024 * 1024, ge=0)
    """Bytes of recent request bodies kept, by client, so the next turn of a conversation
    (the same bytes, something added) parses only what it added; 0: every body is parsed
    whole. A body over a quarter of it is not kept. A body is kept parsed once a later
    one goes on from it; its objects take 1.5-3.4x its bytes again (plain chat to an
    agent's blocks)."""
    metrics: bool = True
    """Serve ``GET /metrics`` (Prometheus text format, behind ``proxy_key`` when set)."""
    ui: bool = True
    """Serve ``GET /tokenflex/ui``: a page of the caller's recent plans (needs
    ``store_plans``)."""
    cors_origins: list[str] = Field(default_factory=list)
    """Browser origins allowed to call the proxy (CORS); upstream CORS headers are never relayed."""
    allowed_hosts: list[str] | None = None
    """``Host`` header values accepted (``*.example.com`` patterns); None: any (DNS rebinding!)."""
    passthrough_paths: list[str] | None = None
    """Paths forwarded as they are (shell patterns, ``/v1/files/*``); None: every path."""
    worker_threads: int = Field(4, gt=0, le=256)
    """Threads that count and fit large requests off the event loop."""
    state_store: str = "memory://"
    """Where sessions keep their cuts and summaries between requests: ``memory://`` (this
    process), ``sqlite:///path/file.db`` (one machine) or ``redis://host:port/db`` (shared
    by several proxy replicas)."""
    state_timeout: float = Field(1.0, gt=0, le=60)
    """Deadline of one state store call (seconds); a store that fails or passes it is
    left alone for a few seconds and requests are fitted without it
    (``x-tokenflex-state: unavailable``)."""
    state_ttl: float = Field(24 * 3600.0, gt=0)
    """Longest time a SQLite or Redis state key lives (seconds)."""
    state_max_value_bytes: int = Field(1024 * 1024, gt=0)
    """Largest value a Redis state store keeps (bytes); a conversation's larger state is
    not kept."""
    cache_stable: bool = True
    """Fit cache-stable (hold the history cut while it fits, summaries made once per roll);
    false: keep as much history as fits on every request. ``[fit]`` tables may override."""
    cut_note: bool = True
    """Tell the model where history was cut ("12 earlier messages omitted"), counted."""
    recall: bool = True
    """Keep what a plan leaves out (tenant-bound, 24 h) under recall ids the cut note and
    placeholders name, add the counted ``tokenflex_recall`` tool when something was left
    out, and answer the model's calls to it on non-streamed requests (see docs/recall.md)."""
    mode: Literal["fit", "observe"] = "fit"
    """``observe``: forward every chat request byte for byte, compute and keep its plan and
    report it in ``x-tokenflex-would-*`` headers (a trial on live traffic, zero risk).
    ``[routes.NAME]`` tables may set ``mode`` for one route."""
    background_max_inflight: int = Field(1, gt=0, le=64)
    """Background summary jobs running at once (each may make several summarizer calls)."""
    background_when_idle: bool = True
    """Start a background summary job, and each of its summarizer calls, only while no
    client request is in flight through the proxy to the summarizer's server (when it is
    the upstream)."""
    background_queue: int = Field(8, gt=0, le=10_000)
    """Background summary jobs held (waiting and running); beyond it a job is dropped and
    logged (``reason=queue-full``): a later request of the conversation asks again."""
    background_max_wait: float = Field(600.0, gt=0)
    """Longest a background job waits for its turn; then it is dropped (``reason=deadline``)."""
    fit: dict[str, Any] = Field(default_factory=dict)
    models: dict[str, dict[str, Any]] = Field(default_factory=dict)
    routes: dict[str, dict[str, Any]] = Field(default_factory=dict)

    # -- load and time limits (server/limits.py, server/_upstream.py) --
    upstream_timeout: float = Field(600.0, gt=0)
    """Longest one upstream exchange may take in all (headers, body or stream): 504."""
    max_response_bytes: int = Field(32 * 1024 * 1024, gt=0)
    """Largest upstream body the proxy buffers (non-stream answers): 502 beyond it."""
    header_timeout: float = Field(10.0, gt=0)
    """A connection must deliver a request's headers within this (slowloris)."""
    body_timeout: float = Field(30.0, gt=0)
    """A request's whole body must arrive within this after its headers: 408."""
    max_inflight: int = Field(64, gt=0)
    """Requests handled at once; more wait in the queue."""
    max_queue: int = Field(64, ge=0)
    """Requests waiting for a slot; beyond it, 503 with Retry-After."""
    queue_timeout: float = Field(5.0, gt=0)
    """Longest wait in the queue before a 503."""
    max_inflight_per_client: int | None = Field(None, ge=0)
    """Requests one set of credentials (its ``Authorization`` / API key headers) may have
    in flight at once, streams included; beyond it, 429 with Retry-After. None: half of
    ``max_inflight`` (one client cannot hold every slot); 0: no per-client limit.
    Requests without credentials are not limited per client."""
    large_body_bytes: int = Field(1024 * 1024, gt=0)
    """Requests with a body this large or larger are counted and fitted
    ``large_body_workers`` at a time; the next waits up to ``queue_timeout`` (then 503)."""
    large_body_workers: int = Field(1, gt=0, le=256)
    """Large requests (``large_body_bytes``) counted and fitted at once."""
    forwarded_for: Literal["drop", "set", "append"] = "drop"
    """The ``X-Forwarded-For`` header sent upstream: ``drop`` (none; the client's is never
    forwarded), ``set`` (the client's address, as the proxy sees it) or ``append`` (the
    client's header, then its address: behind a trusted load balancer)."""

    @field_validator("upstream")
    @classmethod
    def _check_upstream(cls, value: str) -> str:
        url = value.strip().rstrip("/")
        if not re.match(r"^https?://[^/\s]+", url):
            raise ValueError(f"upstream must be an http(s) URL, got {value!r}")
        # Clients call /v1/...; the same path is forwarded, so a trailing /v1 is dropped.
        return url[: -len("/v1")] if url.endswith("/v1") else url

    @field_validator("passthrough_paths")
    @classmethod
    def _check_paths(cls, value: list[str] | None) -> list[str] | None:
        for p in value or []:
            if not p.startswith("/"):
                raise ValueError(f"passthrough_paths entries start with '/', got {p!r}")
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _check_hosts(cls, value: list[str] | None) -> list[str] | None:
        for h in value or []:
            if not h.strip() or "/" in h or h != h.strip():
                raise ValueError(
                    f"allowed_hosts entries are host names like 'proxy.local' or "
                    f"'*.example.com' (no scheme, no path), got {h!r}"
                )
        return value

    @field_validator("cors_origins")
    @classmethod
    def _check_origins(cls, value: list[str]) -> list[str]:
        for o in value:
            if o != "*" and not re.match(r"^https?://[^/\s]+$", o):
                raise ValueError(
                    f"cors_origins entries are origins like 'https://app.example.com' (no "
                    f"path, no trailing '/') or '*', got {o!r}"
                )
        return value

    @field_validator("routes")
    @classmethod
    def _check_routes(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name in value:
            if not _ROUTE_NAME.match(name) or name in _RESERVED_ROUTES:
                raise ValueError(
                    f"route name {name!r} must be letters, digits, '_', '-' or '.', and not "
                    f"one of {sorted(_RESERVED_ROUTES)}"
                )
        return value

    @field_validator("fit")
    @classmethod
    def _check_fit(cls, value: dict[str, Any]) -> dict[str, Any]:
        value = flat_groups(value)
        _check_table(value)
        return value

    @field_validator("models", "routes")
    @classmethod
    def _check_tables(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        value = {name: flat_groups(table) for name, table in value.items()}
        for table in value.values():
            _check_table(table)
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        file_settings = InitSettingsSource(settings_cls, _file_data.get() or {})
        return (init_settings, env_settings, file_settings)

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None, **overrides: Any) -> ServerConfig:
        """Read the config: ``overrides`` > ``TOKENFLEX_SERVE_*`` env vars > ``path`` > defaults.

        ``None`` overrides are ignored, so CLI flags that were not given do not mask the
        file or the environment. Raises ConfigError with every problem listed.

        >>> ServerConfig.load(upstream="http://127.0.0.1:8080/v1").upstream
        'http://127.0.0.1:8080'
        """
        data: dict[str, Any] = {}
        source = "arguments and TOKENFLEX_SERVE_* env vars"
        if path is not None:
            source = f"{os.fspath(path)!r}, arguments and TOKENFLEX_SERVE_* env vars"
            try:
                with open(path, "rb") as f:
                    data = tomllib.load(f)
            except OSError as exc:
                raise ConfigError(
                    f"Cannot read proxy config {os.fspath(path)!r}: {exc.strerror}."
                ) from exc
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(
                    f"Proxy config {os.fspath(path)!r} is not valid TOML: {exc}."
                ) from exc
        token = _file_data.set(data)
        try:
            return cls(**{k: v for k, v in overrides.items() if v is not None})
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'config'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ConfigError(
                f"Invalid proxy settings from {source}: {problems}. See docs/proxy.md for the keys."
            ) from exc
        finally:
            _file_data.reset(token)

    def mode_for(self, route: str | None) -> str:
        """``fit`` or ``observe`` for a request through ``route`` (None: ``/v1``)."""
        if route is None:
            return self.mode
        return str(self.routes.get(route, {}).get("mode", self.mode))

    def options_for(self, model: str, route: str | None = None) -> dict[str, Any]:
        """The merged option table for one request: ``[fit]`` < model < route."""
        merged = dict(self.fit)
        merged.update(self.models.get(model, {}))
        if route is not None:
            merged.update(self.routes.get(route, {}))
        return merged


def flat_groups(table: dict[str, Any]) -> dict[str, Any]:
    """An option table with its group tables (``[fit.shrink]``, ``cache = true``, see
    :data:`tokenflex.options.GROUPS`) read as the flat fit() options they set; a group
    field given beside its flat name is an error naming both. A ``summarize`` table
    turns summarizing on (``summarize = true``) with its fields."""
    out = dict(table)
    for group in GROUPS:
        value = out.get(group.keyword)
        if value is None or (group.keyword == "summarize" and not isinstance(value, dict)):
            continue  # summarize = true / false: the proxy's own switch (checked there)
        values = group_values(group, value, group.keyword)
        flat = {group.flat[f]: (f, v) for f, v in values.items()}
        if group.keyword == "cache":
            flat["cache_stable"] = (group.keyword, value is not False)
        for name, (field, _v) in flat.items():
            if name in out:
                raise ValueError(
                    f"{name} and {group.keyword}.{field} set the same option; give one"
                )
        del out[group.keyword]
        out.update((name, v) for name, (_f, v) in flat.items())
        if group.keyword == "summarize":
            out["summarize"] = True
    return out


def _check_table(table: dict[str, Any]) -> None:
    field = table.get("max_tokens_field", "max_tokens")
    if field not in ("max_tokens", "max_completion_tokens"):
        raise ValueError(
            f"max_tokens_field must be 'max_tokens' or 'max_completion_tokens', got {field!r}"
        )
    default = table.get("default_max_tokens")
    if default is not None and (
        isinstance(default, bool) or not isinstance(default, int) or default <= 0
    ):
        raise ValueError(f"default_max_tokens must be a positive integer, got {default!r}")
    add = table.get("add_max_tokens", True)
    if not isinstance(add, bool):
        raise ValueError(f"add_max_tokens must be true or false, got {add!r}")
    mode = table.get("mode", "fit")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")


def split_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Split merged options into (Model field patches, proxy options, fit() options)."""
    model_patch = {k: v for k, v in options.items() if k in MODEL_FIELDS}
    own = PROXY_OPTIONS | ROUTE_OPTIONS
    proxy = {k: v for k, v in options.items() if k in own}
    fit = {k: v for k, v in options.items() if k not in MODEL_FIELDS and k not in own}
    return model_patch, proxy, fit


def patch_model(model: Model, patch: dict[str, Any]) -> Model:
    """``model`` with config overrides applied; ConfigError when a value is invalid."""
    if not patch:
        return model
    try:
        return dataclasses.replace(model, **patch, source=f"{model.source} + proxy config")
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"Proxy config for model {model.name!r}: {exc}") from exc


SUMMARY_OPTIONS = frozenset({"summarize", "summarizer"})
"""Keys that choose a summarizer (built by the proxy, passed to fit() as ``summarizer=``)."""

_CHAT_KEYS = frozenset(
    {"base_url", "model", "api_key", "temperature", "timeout", "context_window", "system_prompt"}
)
"""Keys of a ``summarizer = {...}`` table: ChatSummarizer arguments."""


def check_summary_options(where: str, options: dict[str, Any]) -> None:
    """ConfigError when ``summarize`` / ``summarizer`` in one table are not usable."""
    enabled = options.get("summarize")
    if enabled is not None and not isinstance(enabled, bool):
        raise ConfigError(
            f"Proxy config {where}: summarize must be true or false, got {enabled!r}."
        )
    spec = options.get("summarizer")
    if spec is None or spec in ("upstream", "extractive"):
        return
    if not isinstance(spec, dict):
        raise ConfigError(
            f"Proxy config {where}: summarizer must be 'upstream', 'extractive' or a table "
            f"with base_url and model, got {spec!r}."
        )
    unknown = sorted(set(spec) - _CHAT_KEYS)
    missing = sorted({"base_url", "model"} - set(spec))
    if unknown or missing:
        raise ConfigError(
            f"Proxy config {where}: summarizer table "
            + (f"has unknown keys {unknown}" if unknown else f"needs {missing}")
            + f"; allowed: {sorted(_CHAT_KEYS)}."
        )


def check_fit_options(config: ServerConfig) -> None:
    """Fail at startup, not per request, when an option table names an unknown option
    or a value fit() would reject."""
    from ..errors import InvalidInputError
    from ..options import FitOptions

    fit_names = {f.name for f in dataclasses.fields(FitOptions)} - {"max_tokens", "extra"}
    allowed = fit_names | MODEL_FIELDS | PROXY_OPTIONS | SUMMARY_OPTIONS
    tables = [("[fit]", config.fit)]
    tables += [(f"[models.{name!r}]", t) for name, t in config.models.items()]
    tables += [(f"[routes.{name}]", t) for name, t in config.routes.items()]
    for where, table in tables:
        route_only = sorted(ROUTE_OPTIONS & set(table))
        if route_only and not where.startswith("[routes."):
            raise ConfigError(
                f"Proxy config {where}: {route_only} may be set only at the top level (the "
                "whole proxy) or in a [routes.NAME] table (one route)."
            )
        here = allowed | (ROUTE_OPTIONS if where.startswith("[routes.") else frozenset())
        unknown = sorted(set(table) - here)
        if unknown:
            hint = " ('max_tokens' comes from each request; use default_max_tokens)"
            raise ConfigError(
                f"Proxy config {where}: unknown option(s) {unknown}"
                f"{hint if 'max_tokens' in unknown else ''}. Allowed: {sorted(here)}."
            )
        check_summary_options(where, table)
        merged = config.fit | table
        values = {k: v for k, v in merged.items() if k in fit_names}
        try:
            FitOptions.from_kwargs(values, where=f"proxy config {where}")
        except (InvalidInputError, TypeError) as exc:
            raise ConfigError(f"Proxy config {where}: {exc}") from exc


def check_models(config: ServerConfig) -> None:
    """Fail at startup, with one line, when a configured model cannot be counted.

    Every ``[models.NAME]`` table (and ``[fit]`` / ``[routes.NAME]`` model patches, applied
    to an unknown model's default) is applied as a request would apply it, its counter is
    built and one message counted: a bad tokenizer, a ``chat_format = "template"`` without
    a template, a missing GGUF file all stop ``tokenflex serve`` here instead of failing
    every request. Tokenizers on a server (``server:URL``) are only built: the server may
    come up later.
    """
    from ..counting import get_counter
    from ..errors import TokenflexError

    names: list[str | None] = list(config.models)
    patched_anywhere = any(MODEL_FIELDS & set(t) for t in [config.fit, *config.routes.values()])
    if patched_anywhere:
        names.append(None)  # the patches also apply to models the config does not name
    sample = [{"role": "user", "content": "tokenflex startup check"}]
    for name in names:
        for route in [None, *config.routes]:
            where = f"model {name!r}" if name is not None else "any model"
            where += f" on route {route!r}" if route is not None else ""
            patch, _, _ = split_options(config.options_for(name or "", route))
            try:
                base = _configured(name)
                model = patch_model(base, patch)
                if model.tokenizer.startswith("server:"):
                    continue
                get_counter(model).count(sample)
            except TokenflexError as exc:
                raise ConfigError(f"Proxy config, {where}: {exc}") from None


def _configured(name: str | None) -> Model:
    """The registry's model for a configured name, or (quietly: the config names it, so
    no "unknown model" warning) the default an unknown name gets."""
    from ..errors import UnknownModelError
    from ..models import get_model

    if name is not None:
        try:
            return get_model(name, strict=True)
        except UnknownModelError:
            pass
    return Model(
        name=name or "(any model)",
        context_window=8192,
        tokenizer="estimate:all",
        chat_format="generic",
        source="proxy startup check",
        known=False,
    )
