"""Request parsing, before anything is counted or forwarded.

The JSON itself is checked here (no NaN, no lone surrogates, bounded nesting); each
format checks its own body (:meth:`tokenflex.formats.base.RequestFormat.parse`). Each
problem becomes a :class:`ProxyError` (HTTP 400) that names the offending field
(``param``) and says what is allowed. Deeper content checks (image parts, tool calls)
are left to the counter, whose ``InvalidMessagesError`` also becomes a 400.
"""

from __future__ import annotations

import bisect
import gc
import json
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

try:  # the [server] extra; without it the stdlib parser alone (same answers, slower)
    import orjson
except ImportError:  # pragma: no cover - the server extra installs it
    orjson = None  # type: ignore[assignment]

from ..formats.base import RequestFormat
from ..formats.body import BodyError, check_model, check_tools, goes_on
from ..formats.chat import KNOWN_ROLES, check_messages
from ..tokenizers.base import native
from .errors import ProxyError

__all__ = [
    "KNOWN_ROLES",
    "ChatRequest",
    "ParsedBodies",
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
_OUTLINE: Callable[[bytes, bytes, int, int, int], Any] | None = native("json_outline")
_COMMON_PREFIX: Callable[[bytes, bytes], int] | None = native("common_prefix")


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
    raw: bytes = b""
    """The body's bytes as the proxy keeps them: the very bytes object of the same body
    its owner sent before, while that one is kept (:class:`ParsedBodies`), else the
    bytes parsed; b"": not given. A body sent again (a retry, one of n samples) is then
    held once, not once per request, by whatever keeps it (the plan store)."""

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
    value = _loads_orjson(raw)
    return value if value is _UNPARSED else _orjson_walk(value, MAX_DEPTH)


def _loads_orjson(raw: bytes) -> Any:
    """``orjson.loads(raw)``, the collector off meanwhile; ``_UNPARSED`` when orjson
    refuses it."""
    assert orjson is not None
    collecting = gc.isenabled()
    if collecting:
        gc.disable()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _UNPARSED
    finally:
        if collecting:
            gc.enable()


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


Outline = tuple[int, int, int, list[int]]
"""A body's :func:`json_outline <tokenflex.tokenizers.base.native>`: its top-level
members, where its items' array opens and closes, and where each item ends."""


@dataclass(slots=True, eq=False)
class _Parsed:
    """A body parsed before: its bytes, the items of the array under ``key`` (a list of
    its own; the items are the objects handed out), and its outline (made when a later
    body is first compared with it)."""

    raw: bytes
    key: bytes
    items: list[Any] | None
    """None: a body seen once, kept as its bytes alone (no parsed objects to hold until
    its conversation shows it goes on)."""
    outline: Outline | None = None
    checked: str = ""
    """The format whose parse passed :attr:`items` (set once it did; "": none yet): a
    later body that reuses them need not check them again as that format."""


class Turn(NamedTuple):
    """A body parsed by :meth:`ParsedBodies.read_turn`."""

    value: Any
    """The JSON document."""
    going: bool
    """The body goes on from one its owner sent before (see :meth:`ParsedBodies.parse_turn`)."""
    entry: _Parsed | None
    """Where the body is kept (None: it is not): marked once a format's parse passed it
    (:meth:`passed`)."""
    reused: tuple[str, int]
    """The format that passed the body reused and how many of its leading items this one
    holds, the very objects (``("", 0)``: none)."""

    def passed(self, format: str) -> None:
        """Note that ``format``'s parse passed this body's items (a later body that reuses
        them skips their checks as that format: :attr:`reused`)."""
        if self.entry is not None:
            self.entry.checked = format


class ParsedBodies:
    """Request bodies parsed lately, by owner, so the next turn of a conversation (the
    bytes of the last one, something added) parses only what it added.

    An agent sends its whole conversation every turn. The items of the array under the
    format's items key (chat's ``messages``, Responses' ``input``) that lie in the bytes
    the body shares with one parsed before, from its first byte, are the objects that
    parse made: equal bytes, equal values. The rest is parsed by orjson: the body without
    that array (its other members, counted against the members the outline found, so a
    key written twice is parsed whole) and the items after the shared ones, walked for
    depth and widened integers as :func:`parse_json` walks a body. Anything else (a body
    that is not such an object, a refusal, a float a parser could read otherwise, no C
    part) is parsed whole by :func:`parse_json`, whose answer and 400s the reuse never
    changes: every byte of a reused body is either in the shared bytes, which parsed
    before, or in what is parsed now.

    The parsed items are shared by the requests that reuse them, so nothing may change
    them in place (the proxy never does: it fits copies). Bounded: ``max_bytes`` of
    bodies in all (a body over a quarter of it, or under ``min_bytes``, is parsed and not
    kept), ``per_owner`` bodies an owner (the client's credentials, so a body parsed for
    one client is never compared with another's), oldest first out."""

    def __init__(self, max_bytes: int, *, per_owner: int = 4, min_bytes: int = 2048) -> None:
        self.max_bytes = max_bytes
        self.per_owner = per_owner
        self.min_bytes = min_bytes
        self.reused = 0
        """Bodies parsed in part (some items reused)."""
        self._owners: OrderedDict[str, list[_Parsed]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def held(self) -> tuple[int, int]:
        """Bodies kept and their bytes."""
        with self._lock:
            return sum(len(v) for v in self._owners.values()), self._bytes

    def parse(self, raw: bytes, key: str, owner: str) -> Any:
        """The JSON document in ``raw`` (as :func:`parse_json` parses it, a 400 when it
        is not one), the items under ``key`` reused from a body ``owner`` sent before
        where the two share their bytes."""
        return self.parse_turn(raw, key, owner)[0]

    def parse_turn(self, raw: bytes, key: str, owner: str) -> tuple[Any, bool]:
        """:meth:`parse`, and whether ``raw`` goes on from a body ``owner`` sent before
        (:meth:`read_turn`'s first two fields)."""
        turn = self.read_turn(raw, key, owner)
        return turn.value, turn.going

    def read_turn(self, raw: bytes, key: str, owner: str) -> Turn:
        """:meth:`parse`, and whether ``raw`` goes on from a body ``owner`` sent before:
        their bytes shared over all of that body's items but the last few (a
        conversation's next turn, or the same one again; an agent may send its last
        items again otherwise, moving its cache breakpoint). A body that does not go on
        from one is kept as its bytes alone; the parsed objects of one that does are kept
        for the next turn to reuse (objects kept for a turn that never comes would only
        burden the garbage collector)."""
        if (
            _OUTLINE is None
            or _COMMON_PREFIX is None
            or orjson is None
            or not self.min_bytes <= len(raw) <= self.max_bytes // 4
        ):
            return Turn(parse_json(raw), False, None, _NONE_REUSED)
        name = key.encode()
        with self._lock:
            seen = [p for p in self._owners.get(owner, ()) if p.key == name]
        best, shared = None, 0
        for p in reversed(seen):  # the newest first
            n = _COMMON_PREFIX(p.raw, raw)
            if n > shared:
                best, shared = p, n
        # (a body that shares less than half of the other's bytes is not worth reading the
        # other's outline for: its items, if it goes on from it, are a small part of it)
        outline = self._outline(best) if best is not None and 2 * shared >= len(best.raw) else None
        going = outline is not None and _goes_on(outline[3], shared)
        made = None
        if best is not None and best.items is not None and outline is not None:
            made = self._reuse(best, outline, raw, shared, name)
        reused = _NONE_REUSED
        if made is not None:
            value, items, mine, repeated = made
            assert best is not None
            if best.checked:  # (the leading items are best's objects, as its parse passed)
                reused = (best.checked, repeated)
        else:
            value, mine = parse_json(raw), None
            found = value.get(key) if type(value) is dict else None
            if type(found) is not list:
                return Turn(value, False, None, _NONE_REUSED)
            items = found
        if best is not None and going and shared == len(raw) == len(best.raw):
            if best.items is None:  # the same bytes again: kept parsed from now on
                best.items = list(items)
            return Turn(value, True, best, reused)
        kept = _Parsed(raw, name, list(items) if going else None, mine)
        self._keep(owner, kept, best if going else None)
        return Turn(value, going, kept, reused)

    def _outline(self, p: _Parsed) -> Outline | None:
        """``p``'s outline (made once; None: it has none as its items were parsed)."""
        assert _OUTLINE is not None
        if p.outline is None:
            outline = _OUTLINE(p.raw, p.key, -1, 0, 0)
            if outline is None or (p.items is not None and len(outline[3]) != len(p.items)):
                return None
            p.outline = outline  # (a race makes the same one)
        return p.outline

    def _reuse(
        self, prev: _Parsed, outline: Outline, raw: bytes, shared: int, name: bytes
    ) -> tuple[dict[str, Any], list[Any], Outline, int] | None:
        """``raw`` parsed with the items of ``prev`` that lie in their first ``shared``
        bytes, its items, its outline and how many of ``prev``'s items lead them; None:
        parse it whole."""
        assert _OUTLINE is not None and orjson is not None and prev.items is not None
        _, opened, _, ends = outline
        # the items that end within the shared bytes (one that ends where they end is the
        # same item: the outline reads a delimiter after it, so "12" did not go on as "123")
        j = bisect.bisect_right(ends, shared)
        if not j:
            return None  # (nothing to reuse: parsed whole)
        now = _OUTLINE(raw, name, opened, ends[j - 1], j)
        if now is None:
            return None
        members, _, closed, added = now
        top = _fast_parse(raw[: opened + 1] + raw[closed:])
        if type(top) is not dict or len(top) != members or top.get(name.decode()) != []:
            return None  # refused, a float to read again, or the key written twice
        items = prev.items[:j]
        if added:
            rest = raw[ends[j - 1] : closed].lstrip(b" \t\n\r")[1:]  # (past the comma)
            tail = _loads_orjson(b"[" + rest + b"]")
            if type(tail) is not list or len(tail) != len(added):
                return None
            if _orjson_walk(tail, MAX_DEPTH - 1) is not tail:  # (one level up in the body)
                return None
            items += tail
        top[name.decode()] = items
        self.reused += 1
        return top, items, (members, opened, closed, ends[:j] + added), j

    def _keep(self, owner: str, parsed: _Parsed, prev: _Parsed | None) -> None:
        """Keep ``parsed`` for ``owner``, in place of ``prev`` (the body it continues,
        or the one it was compared with); the oldest out past the bounds."""
        with self._lock:
            kept = self._owners.pop(owner, [])
            if prev is not None and prev in kept:  # (by identity)
                kept.remove(prev)
                self._bytes -= len(prev.raw)
            kept.append(parsed)
            self._bytes += len(parsed.raw)
            while len(kept) > self.per_owner:
                self._bytes -= len(kept.pop(0).raw)
            self._owners[owner] = kept  # the newest owner last
            while self._bytes > self.max_bytes and self._owners:
                oldest = next(iter(self._owners))
                entries = self._owners[oldest]
                self._bytes -= len(entries.pop(0).raw)
                if not entries:
                    del self._owners[oldest]


_NONE_REUSED = ("", 0)
"""A body that reuses no items a format's parse passed."""

_LAST_FEW = 4
"""Items at the end of a body that the next turn may send otherwise and still go on."""


def _goes_on(ends: list[int], shared: int) -> bool:
    """Whether ``shared`` bytes of a body whose items end at ``ends`` hold all of them but
    the last :data:`_LAST_FEW` (and one at least)."""
    return bool(ends) and shared >= ends[max(0, len(ends) - 1 - _LAST_FEW)]


def parse_request(
    fmt: RequestFormat,
    raw: bytes,
    model: str | None = None,
    *,
    bodies: ParsedBodies | None = None,
    owner: str = "",
) -> ChatRequest:
    """Parse and check a body of ``fmt``'s route (:meth:`RequestFormat.parse`); a 400
    :class:`ProxyError` naming the field when it is bad. ``model``: the model named by
    the route (Gemini's path), for APIs that put it there. ``bodies``: the bodies
    ``owner`` sent lately, whose parsed items this one reuses where it repeats them."""
    turn = (
        Turn(parse_json(raw), False, None, _NONE_REUSED)
        if bodies is None
        else bodies.read_turn(raw, fmt.items_key, owner)
    )
    going = turn.going
    body = _check_object(turn.value)
    by, repeated = turn.reused
    try:  # (the items a body repeats from one this format passed are not checked again)
        if repeated and by == fmt.name and fmt.takes_checked:
            parts = fmt.parse(body, model=model, checked=repeated)
        else:  # (a plug-in format's parse may not take ``checked``)
            parts = fmt.parse(body, model=model)
    except BodyError as exc:
        raise _bad(exc.message, exc.param, exc.code) from None
    turn.passed(fmt.name)
    if going:  # the next turn is expected: fit() keeps its read of this one for it
        goes_on(parts.items)
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
        raw=turn.entry.raw if turn.entry is not None else raw,
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
