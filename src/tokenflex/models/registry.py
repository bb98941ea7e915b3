"""What a model can hold (:class:`Model`: context window, output limit, tokenizer, chat
format, prices), and the registry that finds one by name.

The embedded registry (``data/models.toml``) covers widely used models and the current
major families. Users add or override models from code (:func:`register_model`) or from a
TOML file named by ``TOKENFLEX_MODELS_FILE``. Lookup order, and why:

1. exact name;
2. alias (``gpt-4o-latest``);
3. a provider prefix is stripped (``openai/gpt-4o``, ``ollama/llama3.2:3b``);
4. dated or suffixed versions fall back to their base (``gpt-4o-2024-08-06``,
   ``claude-3-5-sonnet-20241022``): new dated model versions should not need a release;
5. Ollama-style tags fall back to the base tag (``llama3.2:3b-instruct-q4_K_M`` →
   ``llama3.2:3b``, ``qwen2.5:latest`` → ``qwen2.5``);
6. a family pattern (``[[family]]`` tables: ``claude-*``, ``gpt-5*``, ``gemini-*`` …): a
   name newer than the registry takes the numbers of its family's most conservative
   current member (window, output and input limits, tokenizer, chat format; no prices),
   with a warning that names the family. Providers ship models faster than releases: a
   ``claude-sonnet-5`` squeezed into 8,192 tokens loses far more than one fitted to the
   Claude family's 200,000.

Names that match nothing get a conservative default (8,192 window, estimator) and a
logged warning. ``strict=True`` raises :class:`~tokenflex.errors.UnknownModelError` for
both a family guess and the default: strict means "only numbers the registry holds for
this name".
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import importlib.resources
import logging
import os
import re
import threading
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, UnknownModelError

__all__ = [
    "CHAT_FORMATS",
    "DEFAULT_CONTEXT_WINDOW",
    "Family",
    "Model",
    "close_names",
    "family_for",
    "find_model",
    "get_model",
    "list_models",
    "load_models_file",
    "register_model",
    "registry_generation",
    "reset_registry",
    "unknown_model_warning",
]

log = logging.getLogger("tokenflex")

DEFAULT_CONTEXT_WINDOW = 8_192
CHAT_FORMATS = ("openai", "openai-0301", "template", "mistral", "generic")


@dataclass(frozen=True)
class Model:
    """One model's limits and counting rules."""

    name: str
    """Canonical name, as in the registry."""
    context_window: int
    """Total tokens the model accepts: input + output."""
    max_output_tokens: int | None = None
    """Most tokens the model will generate in one response (None: only the window limits)."""
    tokenizer: str = "estimate"
    """Tokenizer name for :func:`tokenflex.tokenizers.get_tokenizer`."""
    chat_format: str = "generic"
    """How messages become tokens: ``openai`` (cookbook rules), ``openai-0301``,
    ``template`` (render ``chat_template`` with the tokenizer), ``mistral`` (mistral-common's
    encoder, with a ``mistral:`` tokenizer) or ``generic`` (conservative per-message
    overhead)."""
    exact_tokenizer: str | None = None
    """An exact tokenizer counted with instead of ``tokenizer`` when it loads here (its
    extra is installed): ``mistral:tekken`` needs mistral-common and brings chat format
    ``mistral``. Otherwise ``tokenizer`` (an estimate) counts. See :meth:`counting`."""
    input_price: float | None = None
    """USD per million input tokens."""
    output_price: float | None = None
    """USD per million output tokens."""
    max_input_tokens: int | None = None
    """Most input tokens the API accepts, where it caps input below the window (gpt-5:
    272,000 of 400,000); None: only the window limits."""
    cache_read_price: float | None = None
    """USD per million input tokens read from the provider's prompt cache."""
    cache_write_price: float | None = None
    """USD per million input tokens written to the provider's prompt cache (None: writes
    cost the ordinary input price)."""
    cache_min_tokens: int | None = None
    """Shortest prefix the provider caches (None: unknown)."""
    cache_ttl_s: int | None = None
    """How long a cached prefix lives without a hit, in seconds (None: unknown)."""
    source_url: str = ""
    """Where the figures of this entry were taken from."""
    provider: str = ""
    aliases: tuple[str, ...] = ()
    family: str = ""
    """Model family for cookbook constants (``gpt-4o``, ``gpt-4``, ...)."""
    chat_template: str | None = None
    """A Jinja chat template (``chat_format='template'``)."""
    bos_token: str = ""
    eos_token: str = ""
    alternating_roles: bool = False
    """The model's chat template refuses two turns of one role in a row (Mistral Nemo:
    "roles must alternate"): a cut pins the first exchange whole, so the history after
    it opens with a user turn. A template model (``chat_format='template'``) whose
    template refuses ``user, user`` is taken as alternating without it."""
    source: str = "registry"
    """Where this entry came from: registry, a TOML file, code, a server, a GGUF file, or
    ``default`` for an unknown model."""
    known: bool = True
    """False when the registry does not list the name: the conservative default, or a
    family's numbers (see ``inherited_from``)."""
    inherited_from: str = ""
    """For a name the registry does not list that matches a family pattern: the family
    and the member whose numbers it took (``"claude (claude-opus-5)"``); empty
    otherwise."""

    def __post_init__(self) -> None:
        if self.context_window <= 0:
            raise ConfigError(
                f"Model {self.name!r}: context_window must be positive, got "
                f"{self.context_window!r}."
            )
        if self.max_output_tokens is not None and self.max_output_tokens <= 0:
            raise ConfigError(
                f"Model {self.name!r}: max_output_tokens must be positive or None, got "
                f"{self.max_output_tokens!r}."
            )
        if self.max_input_tokens is not None and not (
            0 < self.max_input_tokens <= self.context_window
        ):
            raise ConfigError(
                f"Model {self.name!r}: max_input_tokens must be between 1 and the "
                f"context_window ({self.context_window}), got {self.max_input_tokens!r}."
            )
        if self.chat_format not in CHAT_FORMATS:
            raise ConfigError(
                f"Model {self.name!r}: chat_format {self.chat_format!r} is not one of "
                f"{CHAT_FORMATS}."
            )

    def counting(self) -> Model:
        """The model as it counts here: with ``exact_tokenizer`` (and the chat format it
        implies) when that tokenizer loads, else itself.

        >>> m = Model("m", 32_768, tokenizer="estimate:tekken", exact_tokenizer="mistral:tekken")
        >>> m.counting().tokenizer  # with tokenflex[mistral] installed
        'mistral:tekken'
        """
        if not self.exact_tokenizer:
            return self
        from ..tokenizers import tokenizer_available

        if not tokenizer_available(self.exact_tokenizer):
            log.debug(
                "%s: %s does not load here; counting with %s",
                self.name,
                self.exact_tokenizer,
                self.tokenizer,
            )
            return self
        fmt = "mistral" if self.exact_tokenizer.startswith("mistral:") else self.chat_format
        return self.replace(tokenizer=self.exact_tokenizer, chat_format=fmt, exact_tokenizer=None)

    def replace(self, **changes: Any) -> Model:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class Family:
    """Names the registry does not list yet that belong to a known family (``claude-*``).

    A matching name takes the numbers of ``like``, the family's most conservative current
    member, so a model released after this registry is not squeezed into the 8,192-token
    default; its prices are not guessed."""

    name: str
    """The family (``claude``, ``gpt-5``)."""
    patterns: tuple[str, ...]
    """Shell patterns (``fnmatch``) over the lower-cased name, provider prefix removed."""
    like: str
    """The registry model whose limits and counting a matching name takes."""
    source: str = "registry"
    """The data file that declared the family."""

    def describe(self) -> str:
        """``claude (claude-opus-5)``: the family and the member it lends numbers of."""
        return f"{self.name} ({self.like})"


_FIELDS = {f.name for f in dataclasses.fields(Model)}
_FAMILY_FIELDS = {"name", "patterns", "like"}
# Borrowed by a [[model]] entry with `like = "…"` and by a family guess: limits and
# counting, never prices (another model's price is not this one's).
_LIKE_FIELDS = (
    "context_window",
    "max_output_tokens",
    "max_input_tokens",
    "tokenizer",
    "chat_format",
    "exact_tokenizer",
    "family",
    "chat_template",
    "bos_token",
    "eos_token",
    "alternating_roles",
    "cache_min_tokens",
    "cache_ttl_s",
)
_lock = threading.RLock()
_registry: dict[str, Model] = {}
_families: list[Family] = []
"""Tried in order, first match wins: a file's families come before the embedded ones, and
within a file a narrower pattern is listed before a wider one (``gpt-5*-chat*`` before
``gpt-5*``)."""
_aliases: dict[str, str] = {}
_sources: dict[str, str] = {}
_loaded = False
_loaded_env_file: str | None = None
_generation = 0
"""Bumped on every registry change so caches keyed by model name (counters) can notice."""


def _model_from_mapping(
    data: Mapping[str, Any], source: str, earlier: Mapping[str, Model] | None = None
) -> Model:
    like = data.get("like")
    if like is not None:
        # `like = "claude-opus-4-7"`: the numbers of another entry (of this file, else the
        # registry), for a model whose own figures are not published yet.
        base = (earlier or {}).get(like) or _resolve(str(like))
        if base is None:
            raise ConfigError(
                f"Model entry {data.get('name')!r} in {source}: like = {like!r} names no "
                "model defined before it or in the registry."
            )
        values = {f: getattr(base, f) for f in _LIKE_FIELDS}
        values.update({k: v for k, v in data.items() if k != "like"})
        data = values
    unknown = set(data) - _FIELDS
    if unknown:
        raise ConfigError(
            f"Model entry {data.get('name')!r} in {source}: unknown keys {sorted(unknown)}; "
            f"allowed: {sorted(_FIELDS)}."
        )
    if "name" not in data or "context_window" not in data:
        raise ConfigError(f"Model entry in {source} needs at least 'name' and 'context_window'.")
    values = dict(data)
    values["aliases"] = tuple(values.get("aliases", ()))
    values.setdefault("source", source)
    try:
        return Model(**values)
    except TypeError as exc:
        raise ConfigError(f"Model entry {data.get('name')!r} in {source}: {exc}") from exc


def _add(model: Model, *, source: str, replace: bool) -> None:
    global _generation
    if model.name in _registry and not replace:
        raise ConfigError(
            f"Model {model.name!r} is defined twice: by {_sources[model.name]} and by "
            f"{source}. Pass replace=True (code) to override on purpose."
        )
    if not replace:
        # An alias that shadows another model (or another model's alias) would make a
        # lookup depend on load order: a data error, named with both sources.
        for alias in model.aliases:
            owner = alias if alias in _registry else _aliases.get(alias)
            if owner is not None and owner != model.name:
                raise ConfigError(
                    f"Alias {alias!r} of model {model.name!r} ({source}) is already taken by "
                    f"model {owner!r} ({_sources.get(owner, '?')}). Remove one of them."
                )
    _registry[model.name] = model
    _sources[model.name] = source
    for alias in model.aliases:
        _aliases[alias] = model.name
    _generation += 1


def _load_toml(text: str, source: str, *, replace: bool) -> list[Model]:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source} is not valid TOML: {exc}") from exc
    entries = doc.get("model", [])
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: expected [[model]] tables, got {type(entries).__name__}.")
    entries = [*entries, *_named_tables(doc.get("models"), source)]
    if not entries and not doc.get("family"):
        raise ConfigError(
            f"{source} defines no models: expected [[model]] tables (name, context_window, "
            '...) or [models."NAME"] tables, as in the proxy config. See docs/models.md.'
        )
    models: list[Model] = []
    built: dict[str, Model] = {}  # for `like = "…"` naming an earlier entry of this file
    for e in entries:
        models.append(_model_from_mapping(e, source, built))
        built[models[-1].name] = models[-1]
    families = [_family_from_mapping(f, source) for f in doc.get("family", [])]
    for m in models:
        _add(m, source=source, replace=replace)
    for family in families:
        if _resolve(family.like) is None:
            raise ConfigError(
                f"Family {family.name!r} in {source}: like = {family.like!r} is not a "
                "registered model."
            )
    _families[:0] = families  # a file's families are tried before the embedded ones
    return models


_PATCHED_FIELDS = tuple(f for f in _FIELDS if f not in ("name", "aliases", "source"))


def _named_tables(tables: Any, source: str) -> list[dict[str, Any]]:
    """``[models."NAME"]`` tables (the proxy config's style) as ``[[model]]`` entries: a
    table for a name the registry holds patches that model (its other fields kept), another needs
    its own ``context_window``. A key that is not a model field (a fit option, which
    only the proxy config takes) is an error naming the allowed keys."""
    if tables is None:
        return []
    if not isinstance(tables, dict) or not all(isinstance(t, dict) for t in tables.values()):
        raise ConfigError(f'{source}: [models."NAME"] must be tables of model fields.')
    entries = []
    for name, table in tables.items():
        base = None if "like" in table else _resolve(name)
        patched = {} if base is None else {f: getattr(base, f) for f in _PATCHED_FIELDS}
        entries.append({**patched, **table, "name": name})
    return entries


def _family_from_mapping(data: Any, source: str) -> Family:
    if not isinstance(data, dict) or set(data) != _FAMILY_FIELDS:
        raise ConfigError(
            f"Family entry in {source} needs exactly the keys {sorted(_FAMILY_FIELDS)}, got "
            f"{sorted(data) if isinstance(data, dict) else data!r}."
        )
    patterns = data["patterns"]
    if (
        not isinstance(patterns, list)
        or not patterns
        or not all(isinstance(p, str) and p.strip() for p in patterns)
    ):
        raise ConfigError(
            f"Family {data['name']!r} in {source}: patterns must be a list of name patterns "
            f"such as ['claude-*'], got {patterns!r}."
        )
    return Family(
        name=str(data["name"]),
        patterns=tuple(p.lower() for p in patterns),
        like=str(data["like"]),
        source=source,
    )


def _ensure_embedded() -> None:
    global _loaded
    if not _loaded:
        text = (
            importlib.resources.files("tokenflex")
            .joinpath("data")
            .joinpath("models.toml")
            .read_text()
        )
        _load_toml(text, "tokenflex registry", replace=False)
        _loaded = True


def _ensure_loaded() -> None:
    global _loaded_env_file
    _ensure_embedded()
    env_file = os.environ.get("TOKENFLEX_MODELS_FILE")
    if env_file and env_file != _loaded_env_file:
        _loaded_env_file = env_file  # first: reading the file looks names up
        try:
            load_models_file(env_file)
        except BaseException:
            _loaded_env_file = None
            raise


FILE_READERS: dict[str, Callable[[str | os.PathLike[str]], list[Model]]] = {}
"""Models-file readers by file suffix (``".json"``: LiteLLM's price file, registered by
:mod:`tokenflex.models.litellm`); any other suffix is read as TOML."""


def load_models_file(path: str | os.PathLike[str]) -> list[Model]:
    """Add or override models from a TOML file of ``[[model]]`` (and ``[[family]]``)
    tables, or from a LiteLLM ``model_prices_and_context_window.json`` file (a name
    ending in ``.json``; see :mod:`tokenflex.models.litellm`).

    Entries in the file override registry entries of the same name.
    """
    reader = FILE_READERS.get(os.path.splitext(os.fspath(path))[1].lower())
    if reader is not None:
        with _lock:
            _ensure_embedded()
            models = reader(path)
            for m in models:
                _add(m, source=m.source, replace=True)
            return models
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError(f"Cannot read models file {os.fspath(path)!r}: {exc.strerror}.") from exc
    with _lock:
        _ensure_embedded()  # first: the file overrides it, and `like` may name its models
        return _load_toml(text, os.fspath(path), replace=True)


def register_model(model: Model | None = None, /, *, replace: bool = True, **fields: Any) -> Model:
    """Add a model (or override one) from code.

    >>> import tokenflex
    >>> m = tokenflex.register_model(name="my-llm", context_window=32_768,
    ...                              tokenizer="cl100k_base", chat_format="openai")
    >>> tokenflex.get_model("my-llm").context_window
    32768
    """
    with _lock:
        _ensure_loaded()
        if model is None:
            fields.setdefault("source", "register_model()")
            model = _model_from_mapping(fields, "register_model()")
        elif model.source == "registry":
            # A Model built in user code keeps the dataclass default; say where it came from.
            model = model.replace(source="register_model()")
        _add(model, source=model.source, replace=replace)
        return model


_DATED = re.compile(
    r"(-\d{4}-\d{2}-\d{2}|-\d{8}|-\d{4}|-\d{3}|@\d{8}|-v\d+(?::\d+)?"
    r"|-preview-\d{2}-\d{2}|-latest|-preview|-exp)$"
)
# Cloud catalogues put the vendor before a dot: "anthropic.claude-3-5-sonnet-20241022-v2:0",
# "us.meta.llama3-1-70b-instruct-v1:0".
_VENDOR_DOT = re.compile(
    r"^(?:[a-z]{2}\.)?(?:anthropic|meta|mistral|openai|deepseek|qwen|google|xai)\.(?=.)"
)


def _resolve(name: str) -> Model | None:
    if name in _registry:
        return _registry[name]
    if name in _aliases:
        return _registry[_aliases[name]]
    lowered = name.lower()
    if lowered != name:
        found = _resolve(lowered)
        if found:
            return found
    # Provider prefixes (openai/gpt-4o, ollama/llama3.2:3b, models/gemini-2.5-pro).
    if "/" in name:
        return _resolve(name.rsplit("/", 1)[1])
    vendor = _VENDOR_DOT.match(name)
    if vendor:
        return _resolve(name[vendor.end() :])
    # Dated versions: strip one date-like or channel suffix and retry.
    stripped = _DATED.sub("", name)
    if stripped != name and stripped:
        return _resolve(stripped)
    # Ollama tags: drop one "-part" at a time so the longest registered tag wins:
    # qwen3:30b-a3b-q4_K_M -> qwen3:30b-a3b; llama3.2:3b-instruct-q4_K_M -> llama3.2:3b.
    if ":" in name:
        base, _, tag = name.partition(":")
        if "-" in tag:
            return _resolve(f"{base}:{tag.rsplit('-', 1)[0]}")
        if tag == "latest":
            return _resolve(base)
        return _registry.get(base) or (_registry[_aliases[base]] if base in _aliases else None)
    return None


def get_model(name: str | Model, *, strict: bool = False) -> Model:
    """The model registered under ``name`` (see the module docstring for the lookup order).

    >>> import tokenflex
    >>> tokenflex.get_model("gpt-4o-2024-08-06").context_window
    128000
    >>> tokenflex.get_model("llama3.2:3b").context_window
    128000
    """
    if isinstance(name, Model):
        return name
    if not isinstance(name, str) or not name.strip():
        raise UnknownModelError(str(name))
    found, family = _lookup(name)
    if found is not None and family is None:
        return found
    if strict:
        with _lock:
            known = list(_registry) + list(_aliases)
        raise UnknownModelError(name, known, family=family.describe() if family else "")
    log.warning("%s", unknown_model_warning(name))
    if found is not None:
        return found
    return Model(
        name=name,
        context_window=DEFAULT_CONTEXT_WINDOW,
        tokenizer="estimate:all",  # bounds every family measured
        chat_format="generic",
        source="default",
        known=False,
    )


def _lookup(name: str) -> tuple[Model | None, Family | None]:
    """The entry ``name`` resolves to (family None), else its family's guess and the
    family (the guess None when the family's member is not registered)."""
    with _lock:
        _ensure_loaded()
        found = _resolve(name.strip())
        if found is not None:
            return found, None
        family = family_for(name)
        return (_family_guess(name, family) if family is not None else None), family


def _family_guess(name: str, family: Family) -> Model | None:
    """``name`` with the numbers of ``family``'s member (None if that is not registered)."""
    like = _resolve(family.like)
    if like is None:
        return None
    return Model(
        name=name,
        **{f: getattr(like, f) for f in _LIKE_FIELDS},
        provider=like.provider,
        source=f"family {family.name}: numbers of {family.like}",
        known=False,
        inherited_from=family.describe(),
    )


def find_model(name: str) -> Model | None:
    """What :func:`get_model` gives ``name`` — an entry, or a family's numbers — without
    logging; None where it would give the conservative default.

    >>> find_model("claude-sonnet-4-5").name, find_model("claude-haiku-9").inherited_from
    ('claude-sonnet-4-5', 'claude (claude-opus-5)')
    >>> find_model("my-private-llm") is None
    True
    """
    if not isinstance(name, str) or not name.strip():
        return None
    return _lookup(name)[0]


def _family_key(name: str) -> str:
    """The part of a name family patterns are matched against: lower-cased, without a
    provider prefix (``openrouter/anthropic/…``) or a cloud vendor (``anthropic.…``)."""
    key = name.strip().lower().rsplit("/", 1)[-1]
    vendor = _VENDOR_DOT.match(key)
    return key[vendor.end() :] if vendor else key


def family_for(name: str) -> Family | None:
    """The family whose pattern ``name`` matches (first in order), or None. Only asked
    for names the registry does not resolve (:func:`get_model`).

    >>> family_for("claude-sonnet-5").name
    'claude'
    >>> family_for("my-private-llm") is None
    True
    """
    key = _family_key(name)
    with _lock:
        _ensure_loaded()
        for family in _families:
            if any(fnmatch.fnmatchcase(key, p) for p in family.patterns):
                return family
    return None


def close_names(name: str, n: int = 3) -> list[str]:
    """Registered names and aliases closest to ``name`` (for "did you mean ...?").

    >>> close_names("gtp-4")[0]
    'gpt-4'
    """
    if not isinstance(name, str) or not name.strip():
        return []
    with _lock:
        _ensure_loaded()
        known = [*_registry, *_aliases]
    by_lower = {k.lower(): k for k in known}
    # Lowercased on both sides: "GTP-4O" is as close to "gpt-4o" as "gtp-4o" is.
    close = difflib.get_close_matches(name.strip().lower()[:200], list(by_lower), n=n, cutoff=0.6)
    return [by_lower[c] for c in close]


def unknown_model_warning(name: str) -> str:
    """What a plan (and the log) says about a model name the registry does not know:
    the family whose numbers it takes, or the conservative default."""
    shown = name if len(name) <= 80 else name[:77] + "..."
    family = family_for(name)
    with _lock:
        like = _resolve(family.like) if family is not None else None
    if family is not None and like is not None:
        return (
            f"Model {shown!r} is not in the registry; it matches the {family.name!r} family "
            f"and takes the numbers of {family.like} ({like.context_window:,}-token window, "
            f"tokenizer {like.tokenizer}; no prices). Register it (tokenflex.register_model "
            "or TOKENFLEX_MODELS_FILE) for its own limits, or pass strict=True to raise "
            "instead."
        )
    close = close_names(name)
    names = ", ".join(close[:-1]) + " or " + close[-1] if len(close) > 1 else "".join(close)
    hint = f" Did you mean {names}?" if close else ""
    return (
        f"Unknown model {shown!r}: using a conservative {DEFAULT_CONTEXT_WINDOW:,}-token "
        f"window and the estimator.{hint} Register it (tokenflex.register_model or "
        "TOKENFLEX_MODELS_FILE) for exact limits, or pass strict=True to raise instead."
    )


def list_models(query: str = "") -> list[Model]:
    """Registered models whose name, alias or provider contains ``query``, sorted by name."""
    q = query.lower()
    with _lock:
        _ensure_loaded()
        models = list(_registry.values())
    return sorted(
        (
            m
            for m in models
            if not q
            or q in m.name.lower()
            or q in m.provider.lower()
            or any(q in a.lower() for a in m.aliases)
        ),
        key=lambda m: m.name,
    )


def registry_generation() -> int:
    """A number that changes whenever the registry does (for caches keyed by name)."""
    return _generation


def reset_registry() -> None:
    """Forget code/file overrides and reload the embedded registry on next use.

    Tests call it after each test, so models one test registers do not leak into the next.
    """
    global _loaded, _loaded_env_file, _generation
    with _lock:
        _generation += 1
        _registry.clear()
        _aliases.clear()
        _sources.clear()
        _families.clear()
        _loaded = False
        _loaded_env_file = None
