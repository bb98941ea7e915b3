"""Request parsing, before anything is counted or forwarded.

The JSON itself is checked here (no NaN, no lone surrogates, bounded nesting); each
format checks its own body (:meth:`tokenflex.formats.base.RequestFormat.parse`). Each
problem becomes a :class:`ProxyError` (HTTP 400) that names the offending field
(``param``) and says what is allowed. Deeper content checks (image parts, tool calls)
are left to the counter, whose ``InvalidMessagesError`` also becomes a 400.
"""

from __future__ import annotations

import gc
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

try:  # the [server] extra; without it the stdlib parser alone (same answers, slower)
    import orjson
except ImportError:  # pragma: no cover - the server extra installs it
    orjson = None  # type: ignore[assignment]

from ..formats.base import RequestFormat
from ..formats.body import BodyError, check_model, check_tools
from ..formats.chat import KNOWN_ROLES, check_messages
from ..tokenizers.base import native
from .errors import ProxyError

__all__ = [
    "KNOWN_ROLES",
    "ChatRequest",
    "dump_json",
    "parse_count",
    "parse_json",
    "parse_request",
]

MAX_DEPTH = 128
"""Deepest nesting of arrays and objects a body may have: the counters and converters
recurse into content, and a 10 KB body nested 900 deep must be a 400, not a 500."""
_SURROGATE = re.compile("[\ud800-\udfff]")
# What in a body's bytes can decode to a lone surrogate: a \uD800-\uDFFF escape (JSON has
# no \U escape), or the surrogate's own UTF-8 bytes (json.loads decodes bytes with
# "surrogatepass"): ED A0-BF.
_SURROGATE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]").search
# orjson reads an integer past 64 bits as a float, json.loads as an int: a float this
# large in orjson's answer may be such an integer (or a float literal as large: rare), and
# sends the body to the stdlib parser, so every body parses to the same value whichever
# parser reads it. (Read off the parsed value in the depth walk: cheaper than scanning
# every byte of the body for a run of 19 digits.)
_WIDE = 2.0**63
_WALKED = frozenset({dict, list, float})
_JSON_SCAN: Callable[[Any, int, float], int] | None = native("json_scan")


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """The parts of a chat completion request the proxy reads."""

    body: dict[str, Any]
    """The whole request body, as the client sent it."""
    model: str
    """The requested model name."""
    messages: list[dict[str, Any]]
    """The conversation, oldest first."""
    max_tokens: int | None
    """The client's ``max_tokens`` (None when absent)."""
    max_completion_tokens: int | None
    """The client's ``max_completion_tokens`` (None when absent)."""
    tools: list[dict[str, Any]] | None
    """Tool definitions, when given."""
    stream: bool
    """Whether the client asked for server-sent events."""
    format: str = "chat"
    """The wire format: ``chat``, ``anthropic`` (Messages) or ``responses``; ``messages``
    holds that format's items (Anthropic ``messages``, Responses ``input``)."""
    system: Any = None
    """Anthropic's top-level ``system`` or the Responses ``instructions`` (None for chat)."""

    @property
    def requested_output(self) -> int | None:
        """The output the client asked for: the smaller of the two fields it set."""
        given = [v for v in (self.max_tokens, self.max_completion_tokens) if v is not None]
        return min(given) if given else None


def _bad(message: str, param: str | None, code: str = "invalid_value") -> ProxyError:
    return ProxyError(400, message, param=param, code=code)


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


class _NotFinite(ValueError):
    pass


def _constant(name: str) -> Any:
    raise _NotFinite(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(f"{text[:40]} is out of the range of a JSON number")
    return value


def _surrogate_at(value: Any, where: str = "body") -> str | None:
    """Where the first string holding a lone UTF-16 surrogate is (None: nowhere)."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return at
        elif isinstance(item, dict):
            for k, v in item.items():
                if _SURROGATE.search(k):
                    return f"{at} (a key)"
                stack.append((v, f"{at}.{k}" if at != "body" else k))
        elif isinstance(item, list):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(item))
    return None


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays and objects in ``value`` (parsed JSON: plain dicts and lists) nest
    more than ``limit`` deep (a walk level by level: no recursion to overflow, one
    comprehension per level)."""
    if limit < 1:
        return True
    level = [value] if type(value) in (dict, list) else []
    for _ in range(limit - 1):
        level = [
            v
            for item in level
            for v in (item.values() if type(item) is dict else item)
            if type(v) is dict or type(v) is list
        ]
        if not level:
            return False
    return any(
        type(v) is dict or type(v) is list
        for item in level
        for v in (item.values() if type(item) is dict else item)
    )


_UNPARSED = object()
_TOO_DEEP = object()


def _orjson_walk(value: Any, limit: int) -> object:
    """What the depth walk finds in orjson's answer: ``_TOO_DEEP`` (containers nest more
    than ``limit`` deep, as :func:`_deeper_than` tells), ``_UNPARSED`` (a float of 2**63
    or more, which may be an integer orjson widened: the stdlib parser must read the
    body), else ``value``. In C where the package was built with a C compiler (it finds
    what :func:`read_walk` finds), else :func:`read_walk`."""
    if _JSON_SCAN is None:
        return read_walk(value, limit)
    found = _JSON_SCAN(value, limit, _WIDE)
    return value if not found else _UNPARSED if found == 2 else _TOO_DEEP


def read_walk(value: Any, limit: int) -> object:
    """:func:`_orjson_walk` in Python: one walk, level by level, visits every value once
    (a wide float found on a level before the level that is too deep wins)."""
    if type(value) is float:
        return _UNPARSED if abs(value) >= _WIDE else value
    level: list[Any] = [value] if type(value) is dict or type(value) is list else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return _TOO_DEEP
        level = [
            v
            for item in level
            for v in (item.values() if type(item) is dict else item)
            if type(v) in _WALKED
        ]
        floats = [v for v in level if type(v) is float]
        if floats:
            if any(abs(v) >= _WIDE for v in floats):
                return _UNPARSED
            level = [v for v in level if type(v) is not float]
    return value


def _fast_parse(raw: bytes) -> Any:
    """``raw`` parsed by orjson (several times faster than :func:`json.loads` on a large
    body) and walked for depth; ``_TOO_DEEP``; or ``_UNPARSED`` when orjson is missing,
    refuses the body or might read it differently (a float past 2**63: maybe an integer
    past 64 bits). orjson refuses everything :func:`parse_json` refuses (NaN, Infinity,
    out-of-range floats, lone surrogates escaped or raw, invalid UTF-8, nesting past
    1,024) and more (a UTF-8 BOM, UTF-16): every refusal goes to the stdlib path, which
    gives the error message (or accepts what only orjson refuses), so the answers and the
    400s stay the same whichever parser reads the body."""
    if orjson is None:
        return _UNPARSED
    # Every object a parse makes is part of the value it returns: none can be garbage,
    # so the collections a large body's thousands of dicts and lists would set off
    # (each walking what was parsed so far) are put off until the parse is done (an
    # agent's 2,000-item body: 1.8 -> 1.2 ms).
    collecting = gc.isenabled()
    if collecting:
        gc.disable()
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _UNPARSED
    finally:
        if collecting:
            gc.enable()
    return _orjson_walk(value, MAX_DEPTH)


def dump_json(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON (non-ASCII as is), the bytes the proxy forwards.

    orjson when it can (several times faster than :func:`json.dumps` on a large body);
    what it refuses (an integer past 64 bits) goes through :func:`json.dumps`. The two
    may spell a float differently (``1e16`` / ``1e+16``): the same number either way.
    """
    if orjson is not None:
        try:
            return orjson.dumps(value)
        except orjson.JSONEncodeError:
            pass
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _too_deep() -> ProxyError:
    return _bad(
        f"The request body nests arrays and objects more than {MAX_DEPTH} deep. "
        "Send a flatter body (chat content is at most a few levels deep).",
        None,
        "invalid_json",
    )


def parse_json(raw: bytes) -> Any:
    """The JSON document in ``raw``; a 400 ``invalid_json`` error when it is not one.

    Stricter than :func:`json.loads`: ``NaN``, ``Infinity`` and numbers too large for a
    float, and strings holding a lone UTF-16 surrogate (``"\\ud800"``, which no UTF-8
    encoder can send on), are refused.
    """
    value = _fast_parse(raw)
    if value is _TOO_DEEP:
        raise _too_deep()
    if value is not _UNPARSED:
        return value
    try:
        value = json.loads(raw, parse_constant=_constant, parse_float=_finite)
    except _NotFinite as exc:
        raise _bad(
            f"The request body is not valid JSON: {exc} (NaN and Infinity are not JSON). "
            "Send finite numbers.",
            None,
            "invalid_json",
        ) from None
    except (ValueError, RecursionError) as exc:
        # ValueError covers JSONDecodeError and undecodable bytes; RecursionError deep nesting.
        detail = str(exc) if isinstance(exc, ValueError) else "nested too deeply"
        raise _bad(
            f"The request body is not valid JSON ({detail}). Send a JSON object with "
            "'model' and 'messages'.",
            None,
            "invalid_json",
        ) from None
    # (the walk visits the containers only: cheaper than counting the body's brackets)
    if _deeper_than(value, MAX_DEPTH):
        raise _too_deep()
    # in UTF-8 only a surrogate's escape, or its own bytes, can make a lone surrogate
    # (json.loads reads UTF-16 and UTF-32 too: such a body is walked)
    wide = raw.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in raw[:4]
    if wide or ((b"\\u" in raw or b"\xed" in raw) and _SURROGATE_BYTES(raw)):
        at = _surrogate_at(value)
        if at is not None:
            raise _bad(
                f"{at} holds a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape), "
                "which is not text. Send valid Unicode: pair the surrogate or remove it.",
                None if at == "body" else at,
                "invalid_json",
            )
    return value


def parse_request(fmt: RequestFormat, raw: bytes, model: str | None = None) -> ChatRequest:
    """Parse and check a body of ``fmt``'s route (:meth:`RequestFormat.parse`); a 400
    :class:`ProxyError` naming the field when it is bad. ``model``: the model named by
    the route (Gemini's path), for APIs that put it there."""
    body = _check_object(parse_json(raw))
    try:
        parts = fmt.parse(body, model=model)
    except BodyError as exc:
        raise _bad(exc.message, exc.param, exc.code) from None
    return ChatRequest(
        body=body,
        model=parts.model,
        messages=parts.items,
        max_tokens=parts.max_tokens,
        max_completion_tokens=parts.max_completion_tokens,
        tools=parts.tools,
        stream=parts.stream,
        format=fmt.name,
        system=parts.system,
    )


def _check_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise _bad(
            f"The request body must be a JSON object, got {_type_name(body)}.", None, "invalid_type"
        )
    return body


def parse_count(raw: bytes) -> tuple[str, list[dict[str, Any]] | None, str | None, Any]:
    """Parse a count body ``{"model", "messages" | "text", "tools"?}``.

    Returns (model, messages or None, text or None, tools or None).
    """
    body = _check_object(parse_json(raw))
    try:
        model = check_model(body)
    except BodyError as exc:
        raise _bad(exc.message, exc.param, exc.code) from None
    has_messages = body.get("messages") is not None
    text = body.get("text")
    if has_messages == (text is not None):
        raise _bad(
            "Send exactly one of 'messages' (a list of chat messages) or 'text' (a string).",
            "messages",
            "missing_required_parameter" if not has_messages else "invalid_value",
        )
    if text is not None and not isinstance(text, str):
        raise _bad(f"'text' must be a string, got {_type_name(text)}.", "text", "invalid_type")
    try:
        messages = check_messages(body.get("messages")) if has_messages else None
        tools = check_tools(body)
    except BodyError as exc:
        raise _bad(exc.message, exc.param, exc.code) from None
    return model, messages, text, tools
