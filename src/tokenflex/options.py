"""Every knob of fitting, its default and its valid values, in one place.

The public surface groups the knobs by what they configure, as httpx groups a client's
with ``Timeout`` and ``Limits``: :class:`History`, :class:`Documents`,
:class:`Summarize`, :class:`Shrink`, :class:`CacheStable` and :class:`Fallback`, each a
small frozen dataclass that checks its own fields (:data:`GROUPS` lists them; the
settings and the proxy config read the same group and field names from it). The flat
names (``clear_tool_results=True``) stay accepted as keyword arguments.

:class:`FitOptions` is the one flat record the engine reads; the groups build it
(:func:`gather`). ``fit()``, :class:`~tokenflex.Prompt`,
:class:`~tokenflex.Conversation`, the CLI, the settings and the proxy all take their
defaults from it. :meth:`FitOptions.from_kwargs` builds one from keyword arguments: an
unknown name is rejected with its closest match, and an invalid value is reported under
its own name with the values it may take.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from .budget import MIN_OUTPUT_TOKENS, SAFETY_MARGIN, Policy
from .errors import InvalidInputError

if TYPE_CHECKING:
    from .documents import Chunk
    from .history import HistorySource
    from .summarize import Summarizer
    from .summarize.background import BackgroundSummaries

__all__ = [
    "AUTO_MARK_MAX",
    "DEFAULT_MAX_TOKENS",
    "GROUPS",
    "LOW_WATER",
    "SHRINK_STEPS",
    "CacheStable",
    "Documents",
    "Fallback",
    "FitOptions",
    "Gathered",
    "History",
    "OptionGroup",
    "Shrink",
    "Summarize",
    "gather",
    "given_groups",
    "plain_options",
]

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


SHRINK_STEPS = ("clear", "truncate", "reasoning")
"""The names of the shrink ladder's steps (:data:`tokenflex.engine.ladder.LADDER`, which
a test keeps equal), for ``shrink_steps`` / ``Shrink(steps=...)``."""


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
    shrink_steps: tuple[str, ...] | None = None
    """The shrink ladder's steps by name, in the order they are taken (``"clear"``,
    ``"truncate"``, ``"reasoning"``: :data:`tokenflex.engine.ladder.LADDER`); a step
    named here is on whatever its own option says. None: the default ladder, each step
    on by its option (``clear_tool_results``, ``truncate_tool_results``,
    ``drop_reasoning``); ``()``: no step, whole turns are dropped at once."""
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
        for name in ("fallback_models", "keep_tools", "shrink_steps"):
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
    "shrink_steps": (
        lambda v: (
            v is None
            or (
                isinstance(v, tuple) and all(x in SHRINK_STEPS for x in v) and len(set(v)) == len(v)
            )
        ),
        "None or a list of distinct step names: " + ", ".join(map(repr, SHRINK_STEPS)),
    ),
    "cut_note": (lambda v: isinstance(v, bool), "True or False"),
}


@functools.lru_cache(maxsize=64)
def _plain(max_tokens: int | None) -> FitOptions:
    return FitOptions(max_tokens=max_tokens)


_SCALARS = frozenset({int, float, str, bool, type(None)})


@functools.lru_cache(maxsize=64)
def _flat(max_tokens: int | None, items: tuple[tuple[str, type, Any], ...]) -> FitOptions:
    return FitOptions.from_kwargs({"max_tokens": max_tokens, **{k: v for k, _, v in items}})


def flat_options(max_tokens: Any, options: Mapping[str, Any]) -> FitOptions | None:
    """The options of a call that gives only flat :class:`FitOptions` names with scalar
    values (a loop passing the same keywords every turn), checked once per set of values
    and types (the last 64 kept); None where a value is of another kind or a name carries
    an object (:func:`gather` and :meth:`FitOptions.from_kwargs` read those).

    Raises:
        InvalidInputError: a bad name or value (as :meth:`FitOptions.from_kwargs`).
    """
    if max_tokens is not None and type(max_tokens) is not int:
        return None
    items = []
    for name, value in options.items():
        kind = type(value)
        if kind not in _SCALARS or name in _PLAIN:
            return None
        items.append((name, kind, value))
    return _flat(max_tokens, tuple(items))


def plain_options(max_tokens: Any) -> FitOptions | None:
    """The options of a call that gives none but ``max_tokens`` (a chat loop's call,
    every turn), checked once per value; None when ``max_tokens`` is not a plain int or
    None (:meth:`FitOptions.from_kwargs` reports it)."""
    if max_tokens is None or type(max_tokens) is int:
        return _plain(max_tokens)
    return None


# -- option groups ------------------------------------------------------------------------

_G = TypeVar("_G", bound="OptionGroup")


class OptionGroup:
    """The options of one concern, given as one argument (``shrink=Shrink(...)``).

    A group remembers which fields it was given: only those are set, the others keep the
    entry point's defaults (a :class:`~tokenflex.Conversation`'s own, for one), and a
    flat name given beside its group for the same field is an error naming both.
    ``dataclasses.replace`` gives every field (it passes them all); equality compares
    the values only.
    """

    keyword: ClassVar[str]
    """The argument that takes the group (``shrink``), also its TOML table and the
    ``TOKENFLEX_<KEYWORD>__<FIELD>`` env prefix."""
    flat: ClassVar[Mapping[str, str]]
    """Each field that sets a :class:`FitOptions` field: group field -> FitOptions name."""
    payload: ClassVar[Mapping[str, str]] = {}
    """Fields that carry an object, not a setting (a summarizer, the chunks): group field
    -> the plain keyword that also takes it."""
    given: frozenset[str] = frozenset()
    """The fields given when the group was made."""

    def options(self) -> dict[str, Any]:
        """The FitOptions values of the fields given (the flat call it stands for)."""
        return {flat: getattr(self, f) for f, flat in self.flat.items() if f in self.given}

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{f.name}={getattr(self, f.name)!r}"
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if f.name in self.given
        )
        return f"{type(self).__name__}({shown})"


def _records_given(cls: type[_G]) -> type[_G]:
    """``cls`` (a frozen dataclass) remembering the fields its caller gave."""
    init = cls.__init__
    names = [f.name for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]

    @functools.wraps(init)
    def __init__(self: _G, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        object.__setattr__(self, "given", frozenset(names[: len(args)]) | frozenset(kwargs))

    cls.__init__ = __init__  # type: ignore[method-assign,assignment]
    return cls


def _check_fields(group: OptionGroup, tuples: Collection[str] = ()) -> None:
    """Check each field of ``group`` as its FitOptions field is checked; the error names
    the group, the field and the value (``Shrink(keep_tool_results=-1)``)."""
    name = type(group).__name__
    for field, flat in group.flat.items():
        value = getattr(group, field)
        if field in tuples and value is not None and not isinstance(value, str | bytes):
            with contextlib.suppress(TypeError):  # reported by the check below
                value = tuple(value)
                object.__setattr__(group, field, value)
        check, valid = _CHECKS[flat]
        if flat == "cache_stable" or check(value):
            continue
        what = valid if isinstance(valid, str) else valid()
        raise InvalidInputError(
            f"{name}({field}={value!r}) is not valid: {field} must be {what}. "
            f"Fix the value or leave {field} out for its default ({_default(flat)!r})."
        )


def _default(flat: str) -> Any:
    return FitOptions.__dataclass_fields__[flat].default


def _sequence(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


@_records_given
@dataclass(frozen=True, repr=False)
class History(OptionGroup):
    """How much of the conversation's history is kept, and how it is read.

    >>> History(share=0.5, pin=0)
    History(share=0.5, pin=0)
    """

    keyword: ClassVar[str] = "history"
    flat: ClassVar[Mapping[str, str]] = {
        "share": "history_share",
        "min_messages": "min_messages",
        "max_messages": "max_messages",
        "pin": "pin",
        "page_size": "page_size",
        "cut_note": "cut_note",
    }
    payload: ClassVar[Mapping[str, str]] = {"source": "history"}

    source: HistorySource | None = None
    """A lazy source of older messages, newest first (fit() only; see
    :mod:`tokenflex.history`)."""
    share: float = FitOptions.history_share
    """Soft target share of the room history may fill once it must be cut (1.0: all)."""
    min_messages: int = FitOptions.min_messages
    """Keep at least this many history groups if the window allows."""
    max_messages: int | None = FitOptions.max_messages
    """Keep at most this many history groups."""
    pin: int = FitOptions.pin
    """User messages at the opening of the history that are always sent (0: none)."""
    page_size: int = FitOptions.page_size
    """Page size when reading a lazy ``source``."""
    cut_note: bool = FitOptions.cut_note
    """Where history was cut, send a short system note saying so (counted)."""

    def __post_init__(self) -> None:
        _check_fields(self)


@_records_given
@dataclass(frozen=True, repr=False)
class Documents(OptionGroup):
    """Retrieved chunks and how they are packed and rendered.

    >>> Documents(cap=2000, policy="optimal").options()
    {'documents_cap': 2000, 'documents_policy': 'optimal'}
    """

    keyword: ClassVar[str] = "documents"
    flat: ClassVar[Mapping[str, str]] = {
        "cap": "documents_cap",
        "policy": "documents_policy",
        "format": "documents_format",
        "safety_buffer": "documents_safety_buffer",
    }
    payload: ClassVar[Mapping[str, str]] = {"chunks": "documents"}

    chunks: Sequence[Chunk] | None = None
    """The :class:`~tokenflex.Chunk` s, best first or scored."""
    cap: int | None = FitOptions.documents_cap
    """Most tokens the documents may take; None: half of what the required input leaves."""
    policy: str = FitOptions.documents_policy
    """``skip``, ``stop`` or ``optimal`` (see :attr:`FitOptions.documents_policy`)."""
    format: str = FitOptions.documents_format
    """``markdown`` or ``xml``."""
    safety_buffer: int = FitOptions.documents_safety_buffer
    """Tokens kept free inside the documents budget."""

    def __post_init__(self) -> None:
        if self.chunks is not None and not _sequence(self.chunks):
            raise InvalidInputError(
                f"Documents(chunks={self.chunks!r:.80}) is not valid: chunks must be a list "
                "of tokenflex.Chunk. Pass Documents([Chunk(...), ...])."
            )
        _check_fields(self)


@_records_given
@dataclass(frozen=True, repr=False)
class Summarize(OptionGroup):
    """Summarize old history instead of dropping it.

    >>> Summarize(keep_recent=4, max_tokens=256).options()
    {'keep_recent': 4, 'summary_max_tokens': 256}
    """

    keyword: ClassVar[str] = "summarize"
    flat: ClassVar[Mapping[str, str]] = {
        "keep_recent": "keep_recent",
        "max_tokens": "summary_max_tokens",
        "facts": "summary_facts",
    }
    payload: ClassVar[Mapping[str, str]] = {
        "summarizer": "summarizer",
        "background": "background_summaries",
    }

    summarizer: Summarizer | None = None
    """The :class:`~tokenflex.Summarizer` called when history does not fit."""
    keep_recent: int = FitOptions.keep_recent
    """Messages kept verbatim when summarizing."""
    max_tokens: int = FitOptions.summary_max_tokens
    """Longest summary asked of the summarizer (at most a quarter of the window)."""
    facts: bool = FitOptions.summary_facts
    """Carry the span's facts the summary missed forward (see
    :attr:`FitOptions.summary_facts`)."""
    background: BackgroundSummaries | None = None
    """Make long summaries in the background (fit() with a ``state`` store only; see
    :func:`tokenflex.fit`)."""

    def __post_init__(self) -> None:
        s = self.summarizer
        if s is not None and not callable(getattr(s, "summarize", None)):
            raise InvalidInputError(
                f"Summarize(summarizer={s!r:.80}) is not valid: summarizer must have a "
                "summarize(messages, previous_summary=, max_tokens=) method "
                "(tokenflex.Summarizer). Pass tokenflex.ExtractiveSummarizer() or a "
                "tokenflex.ChatSummarizer."
            )
        _check_fields(self)


@_records_given
@dataclass(frozen=True, repr=False)
class Shrink(OptionGroup):
    """The shrink ladder: what is shrunk in old history before whole turns are dropped.

    >>> Shrink(clear_tool_results=True, keep_tools=["read_file"]).keep_tools
    ('read_file',)
    """

    keyword: ClassVar[str] = "shrink"
    flat: ClassVar[Mapping[str, str]] = {
        "clear_tool_results": "clear_tool_results",
        "keep_tool_results": "keep_tool_results",
        "keep_tools": "keep_tools",
        "drop_reasoning": "drop_reasoning",
        "truncate_tool_results": "truncate_tool_results",
        "steps": "shrink_steps",
    }

    clear_tool_results: bool = FitOptions.clear_tool_results
    """Replace old tool results with a short placeholder (the call and its id stay)."""
    keep_tool_results: int = FitOptions.keep_tool_results
    """The newest tool results that are never cleared."""
    keep_tools: Sequence[str] = FitOptions.keep_tools
    """Names of the tools whose results are never cleared, however old."""
    drop_reasoning: bool = FitOptions.drop_reasoning
    """Drop old reasoning (``reasoning_content``, thinking parts) from history."""
    truncate_tool_results: bool = FitOptions.truncate_tool_results
    """Truncate a tool result longer than a quarter of the input room (head and tail
    kept) instead of refusing the request."""
    steps: Sequence[str] | None = FitOptions.shrink_steps
    """The ladder's steps by name, in order (``"clear"``, ``"truncate"``,
    ``"reasoning"``); a step named is on. None: each step on by its own option."""

    def __post_init__(self) -> None:
        _check_fields(self, tuples=("keep_tools", "steps"))


@_records_given
@dataclass(frozen=True, repr=False)
class CacheStable(OptionGroup):
    """Keep the prefix sent stable across a conversation's turns so provider prompt
    caches hit (``cache=True`` is ``cache=CacheStable()``; ``cache=False`` turns it off).

    >>> CacheStable(low_water=0.5).options()
    {'cache_stable': True, 'low_water': 0.5}
    """

    keyword: ClassVar[str] = "cache"
    flat: ClassVar[Mapping[str, str]] = {"low_water": "low_water"}

    low_water: float | str = FitOptions.low_water
    """Share of the history's room a cut goes down to; ``"auto"``: by expected cost
    (see :attr:`FitOptions.low_water`)."""

    def __post_init__(self) -> None:
        _check_fields(self)

    def options(self) -> dict[str, Any]:
        return {"cache_stable": True, **super().options()}


@_records_given
@dataclass(frozen=True, repr=False)
class Fallback(OptionGroup):
    """Models tried, cheapest first, when the request does not fit the primary.

    >>> Fallback(["gpt-4o-mini", "gpt-4o"], input_share=0.9).options()
    {'fallback_models': ('gpt-4o-mini', 'gpt-4o'), 'fallback_input_share': 0.9}
    """

    keyword: ClassVar[str] = "fallback"
    flat: ClassVar[Mapping[str, str]] = {
        "models": "fallback_models",
        "input_share": "fallback_input_share",
    }

    models: Sequence[str] = FitOptions.fallback_models
    """Model names, tried in order."""
    input_share: float | None = FitOptions.fallback_input_share
    """Switch early: above this share of the primary's window (e.g. 0.9)."""

    def __post_init__(self) -> None:
        _check_fields(self, tuples=("models",))


GROUPS: tuple[type[OptionGroup], ...] = (
    History,
    Documents,
    Summarize,
    Shrink,
    CacheStable,
    Fallback,
)
"""The option groups, by keyword: fit()'s arguments, the settings' and the proxy
config's tables read their names from here (one registry of names)."""


def given_groups(
    history: Any, documents: Any, summarize: Any, shrink: Any, cache: Any, fallback: Any
) -> dict[str, Any] | None:
    """A call's option groups by keyword, in :data:`GROUPS`' order (what :func:`gather`
    reads); None where the call gave none (a chat loop's call: no dict built)."""
    if (
        history is None
        and documents is None
        and summarize is None
        and shrink is None
        and cache is None
        and fallback is None
    ):
        return None
    return {
        "history": history,
        "documents": documents,
        "summarize": summarize,
        "shrink": shrink,
        "cache": cache,
        "fallback": fallback,
    }


_PLAIN = frozenset(plain for g in GROUPS for plain in g.payload.values())
"""The plain keywords that carry a group's object (``summarizer=``,
``background_summaries=``; ``history=`` and ``documents=`` take the group or the object
itself)."""


@dataclass(frozen=True)
class Gathered:
    """A call's options, its groups and flat names merged: the flat values (the
    :class:`FitOptions` names) and the objects the groups carry."""

    options: dict[str, Any]
    history: HistorySource | None = None
    chunks: Sequence[Chunk] | None = None
    summarizer: Summarizer | None = None
    background: BackgroundSummaries | None = None


_AS_GROUP: dict[str, Callable[[Any], OptionGroup]] = {
    "history": lambda v: History(v),
    "documents": lambda v: Documents(v),
    "summarize": lambda v: Summarize(v),
    "cache": lambda v: CacheStable() if v else _CacheOff(),
    "fallback": lambda v: Fallback(v),
}
"""The plain form each keyword takes beside its group (``documents=[chunks]``,
``summarize=summarizer``, ``cache=True``, ``fallback=["gpt-4o-mini"]``)."""


class _CacheOff(OptionGroup):
    """``cache=False``."""

    keyword: ClassVar[str] = "cache"
    flat: ClassVar[Mapping[str, str]] = {}
    given = frozenset({"cache_stable"})

    def options(self) -> dict[str, Any]:
        return {"cache_stable": False}


def _as_group(keyword: str, value: Any, where: str) -> OptionGroup:
    group = next(g for g in GROUPS if g.keyword == keyword)
    if isinstance(value, group):
        return value
    if (
        isinstance(value, OptionGroup)
        or keyword not in _AS_GROUP
        or (keyword == "cache" and not isinstance(value, bool))
    ):
        raise InvalidInputError(
            f"{where}: {keyword}={value!r:.80} is not valid: {keyword} takes "
            f"tokenflex.{group.__name__}(...)"
            + (" or True / False." if keyword == "cache" else " or its plain form.")
        )
    if keyword == "fallback" and isinstance(value, str):
        raise InvalidInputError(
            f"{where}: fallback={value!r} is not valid: pass a list of model names "
            f"(fallback=[{value!r}]) or tokenflex.Fallback([...])."
        )
    return _AS_GROUP[keyword](value)


def gather(
    where: str,
    options: Mapping[str, Any],
    groups: Mapping[str, Any],
    *,
    takes: Collection[str] = ("history", "documents", "summarizer", "background_summaries"),
    allowed: Collection[str] | None = None,
) -> Gathered:
    """Merge a call's groups (keyword -> group, plain form or None) and its flat options
    (FitOptions names, and the plain keywords of :data:`_PLAIN` such as ``summarizer``).

    Args:
        where: The call, for the error message (``"fit()"``).
        options: The flat keyword arguments.
        groups: The group keywords given (None: not given).
        takes: The objects this call takes (history source, chunks, summarizer,
            background summaries), by their plain keyword.
        allowed: The FitOptions names this call takes (default: all).

    Raises:
        InvalidInputError: a group of the wrong type, a bad value (named with its group),
            a flat name given beside its group for the same field (both named), or an
            object this call does not take.
    """
    flat = dict(options)
    carried: dict[str, Any] = {}
    for name in [k for k in flat if k in _PLAIN]:
        if name not in takes:
            continue  # FitOptions.from_kwargs names it with what this call takes
        carried[name] = flat.pop(name)
    merged: dict[str, Any] = {}
    for keyword, value in groups.items():
        if value is None:
            continue
        group = _as_group(keyword, value, where)
        gname = type(group).__name__
        values = group.options()
        for name in values:
            field = next((f for f, n in group.flat.items() if n == name), None)
            shown = f"{keyword}={value!r}" if field is None else f"{gname}({field}=...)"
            if allowed is not None and name not in allowed:
                raise InvalidInputError(
                    f"{where} does not take {shown}: {name} is not an option of {where}. "
                    f"Leave it out (options: {', '.join(allowed)})."
                )
            if name in flat:
                raise InvalidInputError(
                    f"{where}: {name}={flat[name]!r} and {shown} both set {name}. Give "
                    f"one: the flat name or the {keyword}= group."
                )
        merged.update(values)
        for field, plain in group.payload.items():
            obj = getattr(group, field)
            if obj is None:
                continue
            if plain in carried:
                raise InvalidInputError(
                    f"{where}: {plain}= and {gname}({field}=...) both give the {field}. Give one."
                )
            if plain not in takes:
                raise InvalidInputError(
                    f"{where} does not take {gname}({field}=...): "
                    + (
                        "it reads its own messages; pass the history's options only."
                        if field == "source"
                        else f"leave {field} out here."
                    )
                )
            carried[plain] = obj
    merged.update(flat)
    return Gathered(
        merged,
        history=carried.get("history"),
        chunks=carried.get("documents"),
        summarizer=carried.get("summarizer"),
        background=carried.get("background_summaries"),
    )
