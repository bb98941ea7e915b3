"""FitOptions: every knob of fitting, its default and its valid values, in one place.

``fit()``, :class:`~tokenflex.Prompt`, :class:`~tokenflex.Conversation`, the CLI, the
settings and the proxy all take their defaults from here. :meth:`FitOptions.from_kwargs`
builds one from keyword arguments: an unknown name is rejected with its closest match,
and an invalid value is reported under its own name with the values it may take.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from .budget import MIN_OUTPUT_TOKENS, SAFETY_MARGIN, Policy
from .errors import InvalidInputError

__all__ = ["AUTO_MARK_MAX", "DEFAULT_MAX_TOKENS", "LOW_WATER", "FitOptions"]

DEFAULT_MAX_TOKENS = 4000
"""The output :class:`~tokenflex.settings.Settings` requests by default
(``MAX_OUTPUT_TOKENS``); fit() without ``max_tokens`` does not use it (see
:attr:`FitOptions.max_tokens`)."""
LOW_WATER = 0.6
"""The share of the history's room a cache-stable cut goes down to when ``low_water`` is
``"auto"`` and the model has no cache prices."""
AUTO_MARK_MAX = 0.35
"""The most of the history's room ``low_water="auto"`` keeps once the cache prices are
known. A session's cost rises with every token the mark keeps; on bench-cache's agent and
chat sessions (8K and 32K windows) a mark above this one cost more, in one of them, than a
compactor that summarizes from 70% of the window down to 40%. Under it, the mark by
expected cost (:func:`tokenflex.cost.stable_mark`) decides how much deeper to cut (a
fast-growing conversation in a small room)."""


@dataclass(frozen=True)
class FitOptions:
    """Every knob of :func:`tokenflex.fit`, with defaults that keep a chat usable."""

    max_tokens: int | None = None
    """Output request. None: keep the input (down to the output floor) and let the
    output take what is left, up to the model's max output."""
    policy: Policy = "reserve"
    """``reserve``: keep the requested output, trim input. ``flex``: keep input, let the
    output shrink to the floor."""
    min_output_tokens: int = MIN_OUTPUT_TOKENS
    """The output floor (never above the request)."""
    safety_margin: int = SAFETY_MARGIN
    """Tokens kept free in the window for counting error and formatting."""
    history_share: float = 0.8
    """Soft target share of the room history may fill; 1.0 fills it all. It applies
    with ``max_tokens``; without one, history may fill the room down to the output
    floor (cap it with ``max_input_tokens`` or ``max_messages``)."""
    min_messages: int = 0
    """Keep at least this many history groups if the window allows (a tool call with its
    results is one group)."""
    max_messages: int | None = None
    """Keep at most this many history groups."""
    max_input_tokens: int | None = None
    """Cap on input tokens (MAX_INPUT_TOKENS); crossing it trims or summarizes."""
    keep_recent: int = 6
    """Messages kept verbatim when summarizing (KEEP_RECENT_MESSAGES)."""
    summary_max_tokens: int = 512
    """Longest summary asked of the summarizer (at most a quarter of the window)."""
    summary_facts: bool = True
    """Check a new summary for the facts of the span it covers (numbers with units,
    dates, paths, identifiers, names, the user's instructions) and carry the missing
    ones forward on a ``Carried forward:`` line within ``summary_max_tokens``
    (:mod:`tokenflex.summarize.facts`); ``plan.summary`` reports what was kept."""
    documents_cap: int | None = None
    """Most tokens the documents may take; None: half of what the required input leaves."""
    documents_format: str = "markdown"
    """How chunks are rendered: ``markdown`` or ``xml``."""
    documents_policy: str = "skip"
    """How chunks are packed: ``skip`` (a chunk that does not fit is skipped), ``stop``
    (packing stops at the first one) or ``optimal`` (the best set by score)."""
    documents_safety_buffer: int = 64
    """Tokens kept free inside the documents budget."""
    fallback_models: tuple[str, ...] = ()
    """Models tried, cheapest first, when the request does not fit the primary."""
    fallback_input_share: float | None = None
    """Switch early: use a fallback model when the required input is above
    this share of the primary's window (e.g. 0.9), not only when it cannot fit."""
    strict: bool = False
    """Unknown model names raise instead of getting the conservative default."""
    page_size: int = 50
    """Page size when reading a lazy history source."""
    cache_stable: bool = False
    """Keep the prefix sent stable across the turns of a session so provider prompt
    caches hit: when history must be cut, cut down to ``low_water`` of its room and hold
    that cut while it fits (on by default in :class:`~tokenflex.Conversation`)."""
    low_water: float | str = "auto"
    """Share of the history's room a cache-stable cut goes down to; ``"auto"``: by
    expected cost where the model's cache prices are known and the conversation has
    grown at least once (:func:`tokenflex.cost.stable_mark`), else
    :data:`LOW_WATER`."""
    clear_tool_results: bool = False
    """Before dropping turns, replace old tool results with a short placeholder (the
    call and its id stay)."""
    keep_tool_results: int = 3
    """The newest tool results in history that are never cleared."""
    keep_tools: tuple[str, ...] = ()
    """Names of the tools whose results ``clear_tool_results`` never clears, however old
    (``("read_file",)``: a file the model read stays readable)."""
    drop_reasoning: bool = False
    """Before dropping turns, drop old reasoning (``reasoning_content``, thinking parts)
    from history."""
    pin: int = 1
    """User messages at the opening of the history that are always sent, with what lies
    between them: the task of an agent loop (one user task, then tool rounds), the
    question a chat began with. 0 pins none. A pinned opening that cannot fit with the
    newest round is sent as history for that request (the oldest, so the first to be
    dropped and listed) rather than the request refused."""
    truncate_tool_results: bool = True
    """A tool result longer than a quarter of the input room is truncated (head and
    tail kept, with a counted marker) instead of refusing the request, when it is in
    the newest tool round and the request cannot be served otherwise, and as a step of
    the shrink ladder (with ``clear_tool_results`` or ``drop_reasoning``)."""
    cut_note: bool = False
    """Tell the model: where history was cut, send a short system note ("12 earlier
    messages omitted to fit the context window"), counted like any message."""

    def __post_init__(self) -> None:
        for name, (check, valid) in _CHECKS.items():
            value = getattr(self, name)
            if not check(value):
                what = valid if isinstance(valid, str) else valid()
                raise InvalidInputError(f"{name}={value!r} is not valid: {name} must be {what}.")

    @classmethod
    def from_kwargs(
        cls,
        options: Mapping[str, Any],
        *,
        where: str = "fit()",
        allowed: Collection[str] | None = None,
    ) -> FitOptions:
        """Options from keyword arguments, every name and value checked.

        Args:
            options: Option names and values.
            where: The call the options were given to, for the error message.
            allowed: The option names this call takes (default: all of them).

        Raises:
            InvalidInputError: an unknown name (with its closest match) or an invalid
                value (named, with the values it may take).

        >>> FitOptions.from_kwargs({"documents_policy": "best"})
        Traceback (most recent call last):
        ...
        tokenflex.errors.InvalidInputError: documents_policy='best' is not valid: documents_policy must be one of 'skip', 'stop', 'optimal'.
        """  # noqa: E501
        # The fast path: the same keywords, values and types as a call before (a chat
        # loop's every call) give the same checked, frozen options.
        key: Any = None
        if allowed is None and cls is FitOptions:
            key = tuple((k, type(v), v) for k, v in options.items())
            try:
                made = _MADE.get(key)
            except TypeError:  # an unhashable value: checked as below
                key = made = None
            if made is not None:
                return made
        names = [f.name for f in dataclasses.fields(cls)]
        takes = names if allowed is None else [n for n in names if n in allowed]
        bad = [k for k in options if k not in takes]
        if bad:
            hints = []
            for k in bad:
                close = difflib.get_close_matches(k, takes, n=1)
                if close:
                    hints.append(f"{k!r} (did you mean {close[0]!r}?)")
                elif k in names:
                    hints.append(f"{k!r} (not an option of {where})")
                else:
                    hints.append(repr(k))
            raise InvalidInputError(
                f"Unknown {where} option {', '.join(hints)}. Options: {', '.join(takes)}."
            )
        values = dict(options)
        for name in ("fallback_models", "keep_tools"):
            listed = values.get(name)
            if listed is not None and not isinstance(listed, str | bytes):
                with contextlib.suppress(TypeError):  # reported by the check below
                    values[name] = tuple(listed)
        made = cls(**values)
        if key is not None:
            if len(_MADE) >= _MADE_SIZE:
                _MADE.clear()
            _MADE[key] = made
        return made


_MADE: dict[Any, FitOptions] = {}
"""Options made from keywords (:meth:`FitOptions.from_kwargs`'s fast path)."""
_MADE_SIZE = 64


def _int(low: int, *, none: bool = False) -> Callable[[Any], bool]:
    def check(v: Any) -> bool:
        if v is None:
            return none
        return isinstance(v, int) and not isinstance(v, bool) and v >= low

    return check


def _share(*, none: bool = False) -> Callable[[Any], bool]:
    def check(v: Any) -> bool:
        if v is None:
            return none
        return isinstance(v, int | float) and not isinstance(v, bool) and 0 < v <= 1

    return check


def _one_of(values: Collection[str]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, str) and v in values


def _documents_choices(kind: str) -> tuple[str, ...]:
    from .documents import packing  # the documents package owns its choices

    return packing.POLICIES if kind == "policy" else packing.FORMATS


def _quoted(values: Collection[str]) -> str:
    return "one of " + ", ".join(repr(v) for v in values)


_CHECKS: dict[str, tuple[Callable[[Any], bool], str | Callable[[], str]]] = {
    "max_tokens": (_int(1, none=True), "a positive int or None"),
    "policy": (_one_of(("reserve", "flex")), _quoted(("reserve", "flex"))),
    "min_output_tokens": (_int(0), "an int >= 0"),
    "safety_margin": (_int(0), "an int >= 0"),
    "history_share": (_share(), "a number in (0, 1]"),
    "min_messages": (_int(0), "an int >= 0"),
    "max_messages": (_int(0, none=True), "an int >= 0 or None"),
    "max_input_tokens": (_int(1, none=True), "a positive int or None"),
    "keep_recent": (_int(0), "an int >= 0"),
    "summary_max_tokens": (_int(1), "a positive int"),
    "summary_facts": (lambda v: isinstance(v, bool), "True or False"),
    "documents_cap": (_int(0, none=True), "an int >= 0 or None"),
    "documents_format": (
        lambda v: v in _documents_choices("format"),
        lambda: _quoted(_documents_choices("format")),
    ),
    "documents_policy": (
        lambda v: v in _documents_choices("policy"),
        lambda: _quoted(_documents_choices("policy")),
    ),
    "documents_safety_buffer": (_int(0), "an int >= 0"),
    "fallback_models": (
        lambda v: isinstance(v, tuple) and all(isinstance(x, str) and x for x in v),
        "a list of model names",
    ),
    "fallback_input_share": (_share(none=True), "a number in (0, 1] or None"),
    "strict": (lambda v: isinstance(v, bool), "True or False"),
    "page_size": (_int(1), "a positive int"),
    "cache_stable": (lambda v: isinstance(v, bool), "True or False"),
    "low_water": (lambda v: v == "auto" or _share()(v), '"auto" or a number in (0, 1]'),
    "clear_tool_results": (lambda v: isinstance(v, bool), "True or False"),
    "keep_tool_results": (_int(0), "an int >= 0"),
    "keep_tools": (
        lambda v: isinstance(v, tuple) and all(isinstance(x, str) and x for x in v),
        "a list of tool names",
    ),
    "drop_reasoning": (lambda v: isinstance(v, bool), "True or False"),
    "pin": (_int(0), "an int >= 0"),
    "truncate_tool_results": (lambda v: isinstance(v, bool), "True or False"),
    "cut_note": (lambda v: isinstance(v, bool), "True or False"),
}
