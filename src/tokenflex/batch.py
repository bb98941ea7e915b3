"""Batch fitting: one line of a batch input file in, the same line with its body fitted out.

The library side of ``tokenflex batch``: a line is read, fitted and written here, with no
I/O, so a local process pool and a Dask cluster run the very same function
(:func:`fit_lines`) and only the driver differs. Three line shapes are read:

- an OpenAI Batch API request: ``{"custom_id", "method", "url", "body"}``; the ``url``
  (``/v1/chat/completions``, ``/v1/responses``, ``/v1/messages``) says the body's format;
- an Anthropic Message Batches request: ``{"custom_id", "params"}`` (a Messages body);
- a conversation: a list of messages, or a bare request body of any registered format
  (chat, Responses, Anthropic Messages, Gemini, told apart by :func:`read_body`; the
  shapes are read off :mod:`tokenflex.formats.registry`).

Do no harm: a body that fits comes back as the very text it came in. A fitted body is
the caller's own with only its conversation (the format's ``items_key``), its system
(``system_key``) and its output limit replaced, like the proxy's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidInputError, TokenflexError
from .formats.anthropic import ANTHROPIC
from .formats.base import RequestFormat
from .formats.detect import detect_format
from .formats.registry import default_format, formats, get_format

__all__ = [
    "BODY_SHAPES",
    "LINE_SHAPES",
    "BodyShape",
    "LineResult",
    "LineShape",
    "RequestBody",
    "body_shapes",
    "fit_body",
    "fit_line",
    "fit_lines",
    "read_body",
]


@dataclass(frozen=True, slots=True)
class BodyShape:
    """Where one API's request body keeps the parts fitting reads and replaces (read
    off its :class:`~tokenflex.formats.base.RequestFormat`)."""

    format: str
    """The library's format name (``chat``, ``anthropic``, ``responses``, ``gemini``...)."""
    items_key: str
    """The conversation: ``messages``, ``input``, ``contents``."""
    system_key: str | None
    """The top-level system prompt (None: chat keeps it in a message)."""
    limit_keys: tuple[str, ...]
    """The top-level output-limit fields, the preferred one first (empty: the limit is
    nested, as Gemini's ``generationConfig.maxOutputTokens``; the format reads and sets
    it)."""

    @classmethod
    def of(cls, fmt: RequestFormat) -> BodyShape:
        return cls(fmt.name, fmt.items_key, fmt.system_key, fmt.limit_fields())


def body_shapes() -> dict[str, BodyShape]:
    """The request bodies :func:`read_body` reads, by format: one per registered format
    (a format registered by a plug-in included)."""
    return {f.name: BodyShape.of(f) for f in formats()}


BODY_SHAPES: dict[str, BodyShape] = body_shapes()
"""The request bodies of the built-in formats, by name (see :func:`body_shapes`)."""


@dataclass(frozen=True, slots=True)
class RequestBody:
    """A client's request body, split into what fitting needs."""

    shape: BodyShape
    """The body's API."""
    messages: list[Any]
    """The conversation (Anthropic ``messages``, Responses ``input`` items, chat messages)."""
    system: Any
    """Anthropic's ``system`` or the Responses ``instructions`` (None for chat)."""
    tools: list[Any] | None
    """The tool definitions, when given."""
    max_tokens: int | None
    """The output the client asked for: the smallest limit field it set."""
    model: str | None
    """The body's ``model``."""
    body: Mapping[str, Any] = field(repr=False)
    """The whole body, as given."""

    @property
    def format(self) -> str:
        return self.shape.format


def _format_of(body: Mapping[str, Any]) -> str:
    """The format whose conversation field the body has, when only one has it
    (Responses' ``input``, Gemini's ``contents``); among those that share it
    (``messages``), the one whose top-level system the body has (Anthropic's ``system``);
    otherwise the messages say."""
    present = [f for f in formats() if f.items_key in body]
    if len(present) == 1:
        return present[0].name
    told = [f for f in present if f.system_key is not None and f.system_key in body]
    if len(told) == 1:
        return told[0].name
    default = default_format()
    messages = body.get(default.items_key)
    if isinstance(messages, list) and messages:
        try:
            return detect_format(messages)
        except TokenflexError:
            return default.name  # the fit names what is wrong with the messages
    return default.name


def read_body(body: Any, *, format: str | None = None, where: str = "the body") -> RequestBody:
    """Split a request body of any of :data:`BODY_SHAPES` (``format`` given, or told from
    the body), or a bare list of messages (a chat-shaped conversation).

    Raises:
        InvalidInputError: the body is not an object with a list of messages, or a field
            has the wrong type. The message names ``where``.

    >>> body = read_body({"model": "claude-sonnet-4", "system": "Be brief.", "max_tokens": 99,
    ...                   "messages": [{"role": "user", "content": "Hi"}]})
    >>> body.format, body.system, body.max_tokens
    ('anthropic', 'Be brief.', 99)
    """
    shapes = body_shapes()
    if isinstance(body, list):  # a bare conversation, in whichever format its items are
        told = shapes[format or _format_of({default_format().items_key: body})]
        return RequestBody(told, body, None, None, None, None, {told.items_key: body})
    if not isinstance(body, Mapping):
        raise InvalidInputError(
            f"{where} is a JSON {type(body).__name__}; expected a request body "
            '({"messages": [...]} or {"input": [...]}) or a list of messages.'
        )
    fmt = format or _format_of(body)
    shape = shapes.get(fmt)
    if shape is None:
        raise InvalidInputError(f"format={fmt!r} is not one of {', '.join(shapes)}.")
    told_fmt = get_format(fmt)
    items = told_fmt.items_of(body)
    if not isinstance(items, list):
        raise InvalidInputError(
            f"{where} has no list of messages in {shape.items_key!r} (a {shape.format} "
            f"body); got {type(items).__name__}. Expected {{{shape.items_key!r}: [...]}}."
        )
    limits = []
    fields = [(key, body.get(key)) for key in shape.limit_keys]
    if not shape.limit_keys:  # nested: the format reads it
        fields = [(told_fmt.limit_key, told_fmt.limit_of(body))]
    for key, value in fields:
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInputError(f"{where}: {key!r} must be a positive integer, got {value!r}.")
        limits.append(value)
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise InvalidInputError(f"{where}: 'tools' must be a list, got {type(tools).__name__}.")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidInputError(f"{where}: 'model' must be a string, got {model!r}.")
    system = body.get(shape.system_key) if shape.system_key else None
    return RequestBody(
        shape, items, system, tools or None, min(limits) if limits else None, model, body
    )


def _unchanged(req: RequestBody, plan: Any) -> bool:
    """The plan sends the body as it came (:meth:`~tokenflex.Plan.sends_as_given`)."""
    limits: Any = (req.body.get(k) for k in req.shape.limit_keys)
    if not req.shape.limit_keys:
        limits = [get_format(req.format).limit_of(req.body)]
    return bool(plan.sends_as_given(req.messages, req.system, limits))


def fit_body(
    req: RequestBody, *, model: str | None = None, **options: Any
) -> tuple[dict[str, Any] | None, Any]:
    """Fit a request body: ``(fitted body, plan)``, the body None when it goes out as it
    came (do no harm).

    The fitted body is the caller's with the plan's conversation, system and output limit
    (every limit field the client set; the preferred one when it set none); the model is
    replaced only when the plan fell back to another one. ``model`` overrides the body's.

    Raises:
        TokenflexError: no model, messages the format's converter refuses, a request that
            cannot fit.
    """
    from .fit import fit

    name = model or req.model
    if not name:
        raise InvalidInputError('No model: pass --model (or put "model" in the body).')
    plan = fit(
        req.messages,
        model=name,
        max_tokens=req.max_tokens,
        tools=req.tools,
        format=req.format,
        system=req.system,
        **options,
    )
    if _unchanged(req, plan):
        return None, plan
    shape = req.shape
    out = dict(req.body)
    if plan.fallback_from is not None:
        out["model"] = plan.model.name
    out[shape.items_key] = plan.messages
    if shape.system_key and plan.system is not None:
        out[shape.system_key] = plan.system
    fmt = get_format(req.format)
    if not shape.limit_keys:  # nested: the format sets it
        fmt.set_limit(out, plan.max_tokens)
        return out, plan
    set_limits = [k for k in shape.limit_keys if k in req.body]
    for key in set_limits or [fmt.limit_field(plan.model.name)]:
        out[key] = plan.max_tokens
    return out, plan


@dataclass(frozen=True, slots=True)
class LineShape:
    """One kind of batch line: where its body sits and which format that body is."""

    name: str
    matches: Callable[[Any], bool]
    """Whether a parsed line is of this kind."""
    body_key: str | None
    """The key holding the body (None: the line is the body)."""
    format_of: Callable[[Any], str | None]
    """The body's format from the line (None: told from the body)."""


def _url_format(line: Any) -> str | None:
    """The format whose proxy route is the line's ``url`` (``/v1/chat/completions``,
    ``/v1/responses``, ``/v1/messages``)."""
    url = line.get("url")
    if not isinstance(url, str):
        return None
    path = url.split("?", 1)[0].rstrip("/")
    return next((f.name for f in formats() if f.path == path), None)


LINE_SHAPES: list[LineShape] = [
    LineShape("openai-batch", lambda d: isinstance(d, dict) and "body" in d, "body", _url_format),
    LineShape(
        "anthropic-batch",
        lambda d: isinstance(d, dict) and "params" in d,
        "params",
        lambda d: ANTHROPIC.name,
    ),
    LineShape("conversation", lambda d: True, None, lambda d: None),
]
"""The batch line kinds, tried in order (the last takes any line)."""


@dataclass(frozen=True, slots=True)
class LineResult:
    """What became of one input line."""

    number: int
    """The line's number in the input file (1-based)."""
    status: str
    """``fitted``, ``unchanged`` or ``failed``."""
    text: str
    """The output line (no newline): the input's own text when unchanged; for a failed
    line, its record for the errors file."""
    custom_id: str | None = None
    """The line's ``custom_id``, when it has one."""
    tokens_dropped: int = 0
    """Input tokens the fit took out (dropped, cleared or summarized away)."""


def fit_line(
    number: int, text: str, *, model: str | None, options: Mapping[str, Any]
) -> LineResult:
    """Fit one batch line (see the module docstring). Never raises for a bad line: a line
    that is not JSON, not a request, or cannot fit comes back ``failed``, its ``text`` a
    JSON record ``{"line", "custom_id", "error", "input"}`` for the errors file.

    >>> line = '{"custom_id": "a", "params": {"model": "claude-sonnet-4", "max_tokens": 10, '
    >>> line += '"messages": [{"role": "user", "content": "Hi"}]}}'
    >>> result = fit_line(1, line, model=None, options={})
    >>> result.status, result.text == line
    ('unchanged', True)
    """
    custom_id = None
    try:
        data = json.loads(text)
        if isinstance(data, dict) and isinstance(data.get("custom_id"), str):
            custom_id = data["custom_id"]
        shape = next(s for s in LINE_SHAPES if s.matches(data))
        body = data[shape.body_key] if shape.body_key else data
        req = read_body(body, format=shape.format_of(data), where=f"line {number}")
        fitted, plan = fit_body(req, model=model, **options)
    except Exception as exc:  # a bad line never stops the run (a bug shows as its type)
        reason = str(exc) if isinstance(exc, TokenflexError) else f"{type(exc).__name__}: {exc}"
        record = {"line": number, "custom_id": custom_id, "error": reason, "input": text}
        return LineResult(number, "failed", json.dumps(record, ensure_ascii=False), custom_id)
    if fitted is None:
        return LineResult(number, "unchanged", text, custom_id)
    if shape.body_key is None:
        out: Any = fitted[req.shape.items_key] if isinstance(body, list) else fitted
    else:
        out = {**data, shape.body_key: fitted}
    dropped = max(0, plan.full_input_tokens - plan.input_tokens)
    return LineResult(
        number,
        "fitted",
        json.dumps(out, ensure_ascii=False, separators=(",", ":")),
        custom_id,
        dropped,
    )


def fit_lines(
    lines: Sequence[tuple[int, str]], model: str | None, options: Mapping[str, Any]
) -> list[LineResult]:
    """Fit a chunk of ``(number, text)`` lines, in order: the unit of work a local worker
    process or a Dask task runs (a module-level function, so both can pickle it)."""
    return [fit_line(n, t, model=model, options=options) for n, t in lines]
