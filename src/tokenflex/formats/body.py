"""A request body as a client sends it, checked before anything is counted or forwarded.

Each format reads its own body (:meth:`~tokenflex.formats.base.RequestFormat.parse`)
with the helpers here; every problem is a :class:`BodyError` that names the offending
field (``param``, as ``messages[2].content[0].type``), a machine code and what is
allowed. The proxy answers it as a 400 in the route's error shape.

The native blocks and items of each format are checked as strictly as chat's parts: each
known type names the fields it must have and their JSON types (:data:`Fields` tables in
the format modules); a type not listed (nor matching a suffix of a family the APIs keep
growing) is refused. Adding a type is one line.

A format whose parse checks its items at least as strictly as fit()'s own shape check
(:func:`tokenflex.roundtrip.check_prepared`, for every model) records the list it
checked with :func:`vouch`; fit() then skips that check for this list object, as long
as it holds the same items (:func:`vouched`). fit() has no option to skip the check: a
list a caller built (an equal copy included), or a vouched list given other items
since, is checked as always; a vouched list is read once (what fit() remembers of a
long list keeps it). (A test,
``tests/test_parse_checks.py``, holds each format's parse to that promise.)
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInputError
from ..tokenizers.base import native

__all__ = [
    "BodyError",
    "Fields",
    "RequestParts",
    "bad",
    "check_fields",
    "check_items",
    "check_model",
    "check_stream",
    "check_system",
    "check_tools",
    "fields_for",
    "goes_on",
    "known_kind",
    "positive_int",
    "type_name",
    "unknown_type",
    "vouch",
    "vouched",
]

Fields = dict[str, tuple[type, ...]]
"""A block or item type's required fields and the JSON types each may have."""


class BodyError(InvalidInputError):
    """A request body field that is missing or wrong (a 400 in the proxy).

    Attributes:
        param: The field, as ``messages[2].content[0].type`` (None: the whole body).
        code: ``missing_required_parameter``, ``invalid_type``, ``invalid_value``...
    """

    def __init__(self, message: str, param: str | None, code: str = "invalid_value") -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


@dataclass(frozen=True, slots=True)
class RequestParts:
    """What fitting reads from a checked body."""

    model: str
    """The requested model name."""
    items: list[Any]
    """The conversation in the format's own items, oldest first."""
    system: Any = None
    """The top-level system prompt (None: none, or chat's, which is a message)."""
    max_tokens: int | None = None
    """The output limit the client set (None when absent)."""
    max_completion_tokens: int | None = None
    """Chat's second output-limit field (None when absent)."""
    tools: list[dict[str, Any]] | None = None
    """Tool definitions, when given."""
    stream: bool = False
    """Whether the client asked for server-sent events."""


def bad(message: str, param: str | None, code: str = "invalid_value") -> BodyError:
    """The error for one bad field."""
    return BodyError(message, param, code)


def type_name(value: Any) -> str:
    """A JSON value's type as a client reads it (``null`` for None)."""
    return "null" if value is None else type(value).__name__


def positive_int(body: Mapping[str, Any], key: str, where: str | None = None) -> int | None:
    """``body[key]`` as a positive integer (None when absent); ``where`` names it."""
    value = body.get(key)
    name = where or key
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(
            f"{name} must be a positive integer, got {type_name(value)} {value!r}.",
            name,
            "invalid_type",
        )
    if value <= 0:
        raise bad(f"{name} must be a positive integer, got {value!r}.", name)
    return value


def check_model(body: Mapping[str, Any]) -> str:
    """The body's ``model``: a non-empty string."""
    model = body.get("model")
    if model is None:
        raise bad(
            "'model' is required: the model name as a string.",
            "model",
            "missing_required_parameter",
        )
    if not isinstance(model, str) or not model.strip():
        raise bad(
            f"'model' must be a non-empty string, got {type_name(model)} {model!r}.",
            "model",
            "invalid_type",
        )
    return model


def check_stream(body: Mapping[str, Any]) -> bool:
    """The body's ``stream`` flag (absent or null: false)."""
    stream = body.get("stream", False)
    if stream is None:
        return False
    if not isinstance(stream, bool):
        raise bad(f"'stream' must be true or false, got {stream!r}.", "stream", "invalid_type")
    return stream


def check_tools(body: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The body's ``tools``: a list of objects (None when absent or empty)."""
    tools = body.get("tools")
    if tools is not None and (
        not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)
    ):
        raise bad("'tools' must be a list of tool objects.", "tools", "invalid_type")
    return tools or None


def check_system(body: Mapping[str, Any], key: str) -> Any:
    """A top-level system field: a string or a list of content blocks."""
    value = body.get(key)
    if value is not None and not isinstance(value, str | list):
        raise bad(
            f"'{key}' must be a string or a list of content blocks, got {type_name(value)}.",
            key,
            "invalid_type",
        )
    return value


def check_items(
    value: Any,
    key: str,
    roles: tuple[str, ...] | None,
    content: str = "content",
    *,
    checked: int = 0,
) -> list[Any]:
    """A non-empty list of objects (with a ``role`` in ``roles`` and string or list
    ``content`` when ``roles`` is given); the format's converter checks the rest.
    ``checked``: its leading items passed this check before (the same objects)."""
    if (
        type(value) is list
        and value
        and _items_pass(value[checked:] if checked else value, roles, content)
    ):
        return value  # (no item's path named: the check below names the bad one)
    if value is None:
        raise bad(f"'{key}' is required: a list of messages.", key, "missing_required_parameter")
    if not isinstance(value, list):
        raise bad(
            f"'{key}' must be a list of messages, got {type_name(value)}.", key, "invalid_type"
        )
    if not value:
        raise bad(f"'{key}' must contain at least one message, got [].", key, "empty_array")
    for i, item in enumerate(value):
        param = f"{key}[{i}]"
        if not isinstance(item, dict):
            raise bad(f"{param} must be an object, got {type_name(item)}.", param, "invalid_type")
        if roles is None:
            continue
        role = item.get("role")
        if role not in roles:
            raise bad(
                f"{param}.role must be one of {', '.join(roles)}; got {role!r}.",
                f"{param}.role",
                "invalid_type" if not isinstance(role, str) else "invalid_value",
            )
        allowed = (str, list) if content == "content" else (list,)
        if not isinstance(item.get(content), allowed):
            what = "a string or a list of content blocks" if content == "content" else "a list"
            raise bad(
                f"{param}.{content} must be {what}, got {type_name(item.get(content))}.",
                f"{param}.{content}",
                "invalid_type",
            )
    return value


def _items_pass(items: list[Any], roles: tuple[str, ...] | None, content: str) -> bool:
    """Whether :func:`check_items` passes every one of ``items`` (no for anything it is
    unsure of: the check decides)."""
    if roles is None:
        return all(type(item) is dict for item in items)
    allowed = (str, list) if content == "content" else (list,)
    for item in items:
        if (
            type(item) is not dict
            or item.get("role") not in roles
            or not isinstance(item.get(content), allowed)
        ):
            return False
    return True


def known_kind(value: Any, known: Mapping[str, Fields], default: str | None = None) -> str | None:
    """The type of ``value`` (its ``type``, else ``default``) when it is a dict of a type
    in ``known`` holding each of that type's required fields (what :func:`check_fields`
    asks of it); None otherwise, or where unsure (a subclass, a type read by suffix): the
    check that names what is wrong decides those. For a format's quick pass over a body,
    which builds no path string for a good item."""
    if type(value) is not dict:
        return None
    kind = value.get("type", default)
    fields = known.get(kind) if type(kind) is str else None
    if fields is None:
        return None
    for name, types in fields.items():
        if not isinstance(value.get(name), types):
            return None
    return kind


def fields_for(
    kind: Any, known: Mapping[str, Fields], suffixes: Mapping[str, Fields]
) -> Fields | None:
    """The required fields of a block or item type (None: not a known type)."""
    if not isinstance(kind, str):
        return None
    if kind in known:
        return known[kind]
    return next((f for end, f in suffixes.items() if kind.endswith(end)), None)


def check_fields(value: Mapping[str, Any], fields: Fields, param: str, what: str) -> None:
    """Each of ``fields`` is in ``value`` with one of its JSON types."""
    for name, types in fields.items():
        got = value.get(name)
        if not isinstance(got, types):
            allowed = " or ".join("an object" if t is dict else f"a {t.__name__}" for t in types)
            raise bad(
                f"{param} ({what}) needs '{name}' as {allowed}, got {type_name(got)}.",
                f"{param}.{name}",
                "missing_required_parameter" if got is None else "invalid_type",
            )


def unknown_type(kind: Any, param: str, known: Mapping[str, Any]) -> BodyError:
    """The error for a block or item of a type this proxy cannot count."""
    shown = repr(kind) if isinstance(kind, str) else f"of JSON type {type_name(kind)}"
    return bad(
        f"{param} has type {shown[:80]}, which this proxy cannot count; use one of "
        f"{', '.join(known)}.",
        f"{param}.type",
        "invalid_type",
    )


_VOUCHED_MAX = 16
"""Lists remembered as checked (a list parsed and never fitted, such as a count
route's, is forgotten once 16 newer ones are recorded)."""
_vouched: dict[int, tuple[list[Any], list[Any], str, bool]] = {}
_vouched_lock = threading.Lock()
_SAME_RUN: Callable[[list[Any], int, list[Any], int], int] | None = native("same_run")


def vouch(items: list[Any], format: str) -> None:
    """Record that every item of ``items`` passed ``format``'s parse, whose checks refuse
    everything fit()'s shape check refuses (for a format's ``parse`` only, after its
    checks passed). The list and its items are kept until :func:`vouched` reads them."""
    with _vouched_lock:
        _vouched.pop(id(items), None)
        while len(_vouched) >= _VOUCHED_MAX:
            del _vouched[next(iter(_vouched))]
        _vouched[id(items)] = (items, list(items), format, False)


def goes_on(items: list[Any]) -> None:
    """Record that the vouched list ``items`` is a turn of a conversation whose next turn
    is expected (its body went on from one its client sent before): fit() keeps its read
    for that turn (:func:`tokenflex.roundtrip.read_through`)."""
    with _vouched_lock:
        entry = _vouched.get(id(items))
        if entry is not None and entry[0] is items:
            _vouched[id(items)] = (*entry[:3], True)


def vouched(items: Sequence[Any]) -> tuple[str, bool] | None:
    """The format a parse checked ``items`` as, if it did and the list holds the same
    item objects still (None: check it), and whether the list :func:`goes_on`; forgets
    the list either way. A C-speed pass."""
    with _vouched_lock:
        entry = _vouched.pop(id(items), None)
    if entry is None or entry[0] is not items:
        return None
    given, seen, format, going = entry
    if len(given) != len(seen):
        return None
    if _SAME_RUN is not None and type(given) is list:
        same = _SAME_RUN(given, 0, seen, 0) == len(seen)  # (in C)
    else:
        same = all(map(operator.is_, given, seen))
    return (format, going) if same else None
