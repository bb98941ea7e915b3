"""Settings from code, environment variables and a ``.env`` file.

Every field reads ``TOKENFLEX_<FIELD>`` (``TOKENFLEX_MAX_INPUT_TOKENS=12000``) from the
environment or from a ``.env`` file in the working directory. Precedence, highest first:
per-call overrides (``get_settings(max_output_tokens=2000)``), environment, ``.env``,
defaults. pydantic-settings does the parsing and validation.

The option groups (:data:`tokenflex.options.GROUPS`) are read under their own names:
``TOKENFLEX_SHRINK__CLEAR_TOOL_RESULTS=true``, ``TOKENFLEX_HISTORY__SHARE=0.5``,
``TOKENFLEX_CACHE=true`` or ``TOKENFLEX_CACHE__LOW_WATER=0.4``, or
``get_settings(shrink={"clear_tool_results": True})``. Three fields older than the groups
stay as the names of their group fields: ``history_share`` (``history.share``),
``keep_recent_messages`` (``summarize.keep_recent``) and ``summary_max_tokens``
(``summarize.max_tokens``); giving both names is an error.

>>> from tokenflex.settings import get_settings
>>> s = get_settings(keep_recent_messages=4)
>>> s.keep_recent_messages, s.max_output_tokens
(4, 4000)
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from .errors import ConfigError, InvalidInputError
from .options import DEFAULT_MAX_TOKENS, GROUPS, FitOptions, OptionGroup

if TYPE_CHECKING:
    from .summarize import ChatSummarizer, ExtractiveSummarizer

__all__ = ["Settings", "get_settings"]


_DEFAULTS = FitOptions()  # every default has one home: FitOptions

FLAT_NAMES: dict[tuple[str, str], str] = {
    ("history", "share"): "history_share",
    ("summarize", "keep_recent"): "keep_recent_messages",
    ("summarize", "max_tokens"): "summary_max_tokens",
}
"""Group fields that settings older than the groups name flat: (group, field) -> the
setting that holds the value."""

_HINTS = typing.get_type_hints(FitOptions)


def group_values(group: type[OptionGroup], table: Any, where: str) -> dict[str, Any]:
    """A table of one group's settings (env strings, TOML or Python values) as checked
    values by group field; ValueError naming ``where`` and the field when one is not
    valid. Strings are read as JSON first (``true``, ``0.5``, ``["read_file"]``), then as
    the field's type; the group's own check says what is valid."""
    if isinstance(table, bool) and group.keyword == "cache":
        table = {} if table else None
    if table is None:
        return {}
    if not isinstance(table, Mapping):
        raise ValueError(f"{where} must be a table of {group.__name__} fields, got {table!r}")
    unknown = sorted(set(table) - set(group.flat))
    if unknown:
        hints = [
            repr(k)
            + (
                f" (did you mean {c[0]!r}?)"
                if (c := difflib.get_close_matches(k, group.flat, 1))
                else ""
            )
            for k in unknown
        ]
        raise ValueError(
            f"{where} has unknown field(s) {', '.join(hints)}; fields: {sorted(group.flat)}"
        )
    values: dict[str, Any] = {}
    for field, raw in table.items():
        value = raw
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = json.loads(value)
        # (a value of the wrong type stays as given: the group's check names it)
        with contextlib.suppress(ValidationError):
            value = TypeAdapter(_HINTS[group.flat[field]]).validate_python(value)
        values[field] = value
    try:
        made = group(**values)
    except InvalidInputError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return {f: getattr(made, f) for f in values}


class Settings(BaseSettings):
    """tokenflex's settings (env prefix ``TOKENFLEX_``, ``.env`` file support). Frozen."""

    model_config = SettingsConfigDict(
        env_prefix="TOKENFLEX_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",  # a shared .env holds other programs' variables too
        frozen=True,
        populate_by_name=True,
        validate_default=True,
        env_nested_delimiter="__",
    )

    max_input_tokens: int | None = Field(default=None, gt=0)
    """Cap on input tokens (MAX_INPUT_TOKENS); crossing it summarizes or trims.
    None: derived from the model's window."""
    max_output_tokens: int = Field(default=DEFAULT_MAX_TOKENS, gt=0)
    """The output to request (MAX_OUTPUT_TOKENS), negotiated down when needed."""
    keep_recent_messages: int = Field(default=_DEFAULTS.keep_recent, ge=0)
    """Messages kept verbatim when summarizing (KEEP_RECENT_MESSAGES)."""
    min_output_tokens: int = Field(default=_DEFAULTS.min_output_tokens, ge=0)
    """The output floor: input shrinks before the output goes below this."""
    safety_margin: int = Field(default=_DEFAULTS.safety_margin, ge=0)
    """Tokens left free for counting differences."""
    history_share: float = Field(default=_DEFAULTS.history_share, gt=0, le=1)
    """Share of the room history may fill (80% by default)."""
    summary_max_tokens: int = Field(default=_DEFAULTS.summary_max_tokens, gt=0)
    """Budget of a summary of old history."""
    tokenizer: str | None = Field(
        default=None,
        validation_alias=AliasChoices(
            "tokenizer", "encoding", "TOKENFLEX_TOKENIZER", "TOKENFLEX_ENCODING"
        ),
    )
    """Tokenizer override (``o200k_base``, ``cl100k_base``, ``gguf:PATH``...), like
    TIKTOKEN_ENCODING. Also read as ``TOKENFLEX_ENCODING``. None: the model's own."""
    summarizer_base_url: str | None = None
    """OpenAI base URL of the summarizing model (``http://localhost:8000/v1``). None:
    the offline extractive summarizer."""
    summarizer_model: str | None = None
    """Model name for the summarizer."""
    summarizer_api_key: SecretStr | None = None
    """API key for the summarizer (kept out of reprs and logs)."""
    summarizer_timeout: float = Field(default=30.0, gt=0)
    """Seconds before a summary request counts as failed (then fit() drops instead)."""
    summarizer_temperature: float = Field(default=0.1, ge=0, le=2)
    """Low for factual summaries (0.1 by default)."""
    history: dict[str, Any] = Field(default_factory=dict)
    """:class:`~tokenflex.History` fields (``TOKENFLEX_HISTORY__PIN=0``); ``share`` is
    :attr:`history_share`."""
    documents: dict[str, Any] = Field(default_factory=dict)
    """:class:`~tokenflex.Documents` fields (``TOKENFLEX_DOCUMENTS__CAP=2000``)."""
    summarize: dict[str, Any] = Field(default_factory=dict)
    """:class:`~tokenflex.Summarize` fields (``TOKENFLEX_SUMMARIZE__FACTS=false``);
    ``keep_recent`` and ``max_tokens`` are :attr:`keep_recent_messages` and
    :attr:`summary_max_tokens`."""
    shrink: dict[str, Any] = Field(default_factory=dict)
    """:class:`~tokenflex.Shrink` fields (``TOKENFLEX_SHRINK__CLEAR_TOOL_RESULTS=true``)."""
    cache: bool | dict[str, Any] | None = None
    """Cache-stable fits: ``TOKENFLEX_CACHE=true``, or :class:`~tokenflex.CacheStable`
    fields (``TOKENFLEX_CACHE__LOW_WATER=0.4``, which turns it on). None: the entry
    point's default."""
    fallback: dict[str, Any] = Field(default_factory=dict)
    """:class:`~tokenflex.Fallback` fields (``TOKENFLEX_FALLBACK__MODELS='["gpt-4o-mini"]'``)."""

    @model_validator(mode="before")
    @classmethod
    def _flat_names(cls, data: Any) -> Any:
        """A group field that has an older flat setting is kept there (one value, one
        place); both given is an error naming both."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for (keyword, field), flat in FLAT_NAMES.items():
            table = data.get(keyword)
            if not isinstance(table, Mapping) or field not in table:
                continue
            if data.get(flat) is not None:
                raise ValueError(
                    f"{keyword}.{field} and {flat} are the same setting; give one "
                    f"(TOKENFLEX_{keyword.upper()}__{field.upper()} or "
                    f"TOKENFLEX_{flat.upper()})"
                )
            data[keyword] = {k: v for k, v in table.items() if k != field}
            data[flat] = table[field]
        return data

    @field_validator("history", "documents", "summarize", "shrink", "cache", "fallback")
    @classmethod
    def _group(cls, value: Any, info: Any) -> Any:
        group = next(g for g in GROUPS if g.keyword == info.field_name)
        if isinstance(value, bool) or value is None:
            return value
        return group_values(group, value, info.field_name)

    def fit_options(self) -> dict[str, Any]:
        """These settings as :func:`tokenflex.fit` keyword arguments.

        >>> get_settings(max_input_tokens=12000).fit_options()["max_input_tokens"]
        12000
        """
        options = {
            "max_tokens": self.max_output_tokens,
            "max_input_tokens": self.max_input_tokens,
            "keep_recent": self.keep_recent_messages,
            "min_output_tokens": self.min_output_tokens,
            "safety_margin": self.safety_margin,
            "history_share": self.history_share,
            "summary_max_tokens": self.summary_max_tokens,
        }
        for group in GROUPS:
            table = getattr(self, group.keyword)
            if table is False:
                options["cache_stable"] = False
                continue
            if table is True or (group.keyword == "cache" and isinstance(table, dict)):
                options["cache_stable"] = True
            options.update((group.flat[f], v) for f, v in (table or {}).items())
        return options

    def summarizer(self) -> ChatSummarizer | ExtractiveSummarizer:
        """The summarizer these settings describe: a :class:`ChatSummarizer` when
        ``summarizer_base_url`` and ``summarizer_model`` are set, else the offline
        :class:`ExtractiveSummarizer`."""
        from .summarize import ChatSummarizer, ExtractiveSummarizer

        if self.summarizer_base_url and self.summarizer_model:
            key = self.summarizer_api_key
            return ChatSummarizer(
                self.summarizer_base_url,
                self.summarizer_model,
                key.get_secret_value() if key is not None else None,
                temperature=self.summarizer_temperature,
                timeout=self.summarizer_timeout,
            )
        if self.summarizer_base_url or self.summarizer_model:
            raise ConfigError(
                "Set both TOKENFLEX_SUMMARIZER_BASE_URL and TOKENFLEX_SUMMARIZER_MODEL for "
                f"a model summarizer (got base_url={self.summarizer_base_url!r}, "
                f"model={self.summarizer_model!r}), or neither for the offline one."
            )
        return ExtractiveSummarizer(self.tokenizer)


_NAMES = frozenset(Settings.model_fields) | {"encoding"}


def get_settings(*, env_file: str | os.PathLike[str] | None = ".env", **overrides: Any) -> Settings:
    """Settings from defaults, ``env_file``, the environment and ``overrides`` (highest).

    Args:
        env_file: The dotenv file to read (relative to the working directory); None reads
            none. A missing file is fine.
        **overrides: Field values for this call; ``None`` values are ignored so callers
            can pass optional arguments straight through.

    Raises:
        ConfigError: an unknown setting name, or a value that does not validate (the
            message names the variable and the rule).
    """
    unknown = sorted(set(overrides) - _NAMES)
    if unknown:
        hints = [
            f"{k!r}"
            + (
                f" (did you mean {c[0]!r}?)"
                if (c := difflib.get_close_matches(k, _NAMES, 1))
                else ""
            )
            for k in unknown
        ]
        raise ConfigError(f"Unknown setting {', '.join(hints)}. Settings: {sorted(_NAMES)}.")
    values = {k: v for k, v in overrides.items() if v is not None}
    env_path = Path(env_file) if env_file is not None else None
    try:
        return Settings(_env_file=env_path, **values)  # type: ignore[call-arg]
    except ValidationError as exc:
        problems = "; ".join(_problem(e) for e in exc.errors())
        raise ConfigError(
            f"Invalid tokenflex settings: {problems}. Fix the value (environment variable "
            f"TOKENFLEX_<NAME>, {env_path or 'no .env file'}, or the argument)."
        ) from exc


def _problem(error: Any) -> str:
    msg = str(error["msg"]).rstrip(".")
    where = ".".join(map(str, error["loc"]))
    if not where:  # a rule across settings: its message names them (the input may hold keys)
        return msg.removeprefix("Value error, ")
    value = "'**********'" if "api_key" in where else repr(error.get("input"))
    return f"{where}={value}: {msg}"
