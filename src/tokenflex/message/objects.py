"""Which plain dict a message object stands for: SDK, pydantic and LangChain messages.

Callers hold objects, not dicts: ``messages.append(resp.choices[0].message)`` (the openai
SDK's ``ChatCompletionMessage``), ``{"role": "assistant", "content": resp.content}`` (the
anthropic SDK's content blocks), ``resp.output`` items of the Responses API, LangChain
``HumanMessage`` / ``AIMessage`` / ``ToolMessage`` lists. None of those libraries is
imported here: objects are recognised by what they have.

- a pydantic model (``model_dump``): ``model_dump(exclude_none=True, mode="json")``, also
  inside dicts and lists (content blocks in a dict message); an anthropic SDK ``Message``
  (a whole response appended to the history) keeps only its ``role`` and ``content``;
- a LangChain message (``type``, ``content`` and ``additional_kwargs``): the OpenAI chat
  message LangChain's own OpenAI adapter would send (roles from ``type``, ``tool_calls``
  with JSON ``arguments``, ``tool_call_id``, ``name``).

Back out, fit() returns each kept message as the object the caller gave (a LangChain
list stays a LangChain list); ``plan.request()`` always builds plain JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import InvalidInputError
from ..tokenizers.base import native
from .checks import BadMessage

__all__ = [
    "compact_json",
    "is_json",
    "is_langchain",
    "json_ready",
    "part_types",
    "plain",
    "plain_message",
    "read_is_json",
    "sdk_module",
    "tools_json_ready",
    "untyped_message",
]

_LANGCHAIN_ROLES = {
    "human": "user",
    "ai": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "function",
    "developer": "developer",
}


def is_langchain(obj: Any) -> bool:
    """Whether ``obj`` looks like a LangChain ``BaseMessage``."""
    return (
        not isinstance(obj, Mapping)
        and isinstance(getattr(obj, "type", None), str)
        and hasattr(obj, "content")
        and isinstance(getattr(obj, "additional_kwargs", None), dict)
    )


def sdk_module(obj: Any) -> str | None:
    """The module of an SDK's pydantic message object (None: a dict or anything else),
    which says its API (``anthropic.types...``, ``openai.types.responses...``)."""
    if isinstance(obj, Mapping) or not callable(getattr(obj, "model_dump", None)):
        return None
    return type(obj).__module__


def untyped_message(item: Mapping[str, Any]) -> bool:
    """Whether a dict is a role message rather than a typed item (a Responses
    ``function_call`` or ``"type": "message"`` item): what chat and Anthropic messages are."""
    itype = item.get("type")
    return not ((isinstance(itype, str) and "role" not in item) or itype == "message")


def part_types(item: Mapping[str, Any], key: str = "content") -> list[str]:
    """The ``type`` of each part of a message's content list (parts without a string
    type are left for the format's own checks to name)."""
    content = item.get(key)
    out: list[str] = []
    for part in content if isinstance(content, list) else ():
        ptype = part.get("type") if isinstance(part, Mapping) else getattr(part, "type", None)
        if isinstance(ptype, str):
            out.append(ptype)
    return out


_ATOMS = frozenset({str, int, float, bool, type(None)})


def _compact_encoder() -> Callable[[Any], str]:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)`` as
    one function: the json module's C encoder made once (``json.dumps`` with options makes
    an encoder, and the C one, on every call), or the encoder's own method where the C
    one is missing or its signature is not this Python's. The C encoder keeps no
    circular-reference marks: where it runs out of depth, the encoder's own method says
    why (``ValueError`` for a value that contains itself, ``RecursionError`` for one
    nested too deep), as ``json.dumps`` does."""
    fallback = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return fallback
    try:
        native = make(None, str, json.encoder.encode_basestring, None, ":", ",", False, False, True)
        probe: Any = {"a": [1, 2.5, None, True, "é"]}
        if "".join(native(probe, 0)) != fallback(probe):
            return fallback
    except TypeError:
        return fallback

    def encode(value: Any) -> str:
        try:
            return "".join(native(value, 0))
        except RecursionError:
            return fallback(value)  # (raises: a cycle, or nesting past the limit)

    return encode


compact_json = _compact_encoder()
"""The compact JSON text counted for a structured value (a tool call's arguments, a block
counted as its JSON): ``json.dumps(value, ensure_ascii=False, separators=(",", ":"),
default=str)``, by an encoder made once.

>>> compact_json({"path": "é.py", "n": [1, 2]})
'{"path":"é.py","n":[1,2]}'
"""


def is_json(value: Any) -> bool:
    """Whether ``value`` is plain JSON data as it stands: dicts with str keys, lists and
    JSON scalars, exact types only, at most 64 levels below it (a quick walk, in C where
    the package was built with a C compiler; False: ask :func:`json.dumps`).

    >>> is_json({"a": [1, 2.5, None, True, {"b": "c"}]}), is_json({1: "a"}), is_json((1,))
    (True, False, False)
    """
    return _IS_JSON(value)


def read_is_json(value: Any, depth: int = 0) -> bool:
    """:func:`is_json` read in Python (what the C walk answers, and where it is missing)."""
    t = type(value)
    if t in _ATOMS:
        return True
    if depth > 64:
        return False
    if t is dict:
        return all(type(k) is str for k in value) and all(
            type(v) in _ATOMS or read_is_json(v, depth + 1) for v in value.values()
        )
    if t is list:
        return all(type(v) in _ATOMS or read_is_json(v, depth + 1) for v in value)
    return False


_NATIVE_IS_JSON: Callable[[Any], bool] | None = native("is_json")
_IS_JSON = _NATIVE_IS_JSON or read_is_json


def json_ready(item: Any) -> None:
    """Raise :class:`~tokenflex.message.checks.BadMessage` when ``item`` (sent as given:
    a message, a native item, a tool, Anthropic's ``system``) is not JSON once its
    pydantic models are dumped: a value json.dumps refuses, a circular reference, one
    nested past the recursion limit. Plain JSON data answers from the quick walk."""
    if is_json(item):
        return
    try:
        json.dumps(plain(item))
    except (TypeError, ValueError, RecursionError) as exc:
        raise BadMessage(
            f"has a value that cannot be sent as JSON ({type(exc).__name__}: {exc})",
            "Use str keys, JSON values and no circular references in message fields",
        ) from None


def tools_json_ready(tools: Any) -> None:
    """Raise :class:`~tokenflex.errors.InvalidInputError` naming the first tool schema of
    ``tools`` that cannot be sent as JSON (:func:`json_ready`); what is not a mapping is
    left to counting, which names what a tool should be."""
    for i, tool in enumerate(tools if isinstance(tools, list | tuple) else ()):
        if not isinstance(tool, Mapping):
            continue
        try:
            json_ready(tool)
        except BadMessage as exc:
            raise InvalidInputError(
                f"tools[{i}] {exc.problem}. Use str keys and JSON values in tool definitions."
            ) from None


def plain(value: Any) -> Any:
    """``value`` with every pydantic model inside it dumped to JSON-ready data (plain
    data comes back as the same object)."""
    t = type(value)
    if t in _ATOMS:
        return value
    if (t is dict or t is list) and _NATIVE_IS_JSON is not None and _NATIVE_IS_JSON(value):
        return value  # plain data all through, seen in one C walk
    if t is dict:  # the common case, without the ABC checks below
        out: dict[Any, Any] | None = None
        for k, v in value.items():
            if type(v) in _ATOMS:
                continue
            p = plain(v)
            if p is not v:
                if out is None:
                    out = dict(value)
                out[k] = p
        return value if out is None else out
    if t is list:
        seq: list[Any] | None = None
        for i, v in enumerate(value):
            if type(v) in _ATOMS:
                continue
            p = plain(v)
            if p is not v:
                if seq is None:
                    seq = list(value)
                seq[i] = p
        return value if seq is None else seq
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, Mapping):
        items = {k: plain(v) for k, v in value.items()}
        if type(value) is dict and all(items[k] is v for k, v in value.items()):
            return value
        return items
    if isinstance(value, list | tuple):
        seq = [plain(v) for v in value]
        if type(value) is list and all(a is b for a, b in zip(seq, value, strict=True)):
            return value
        return seq
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(exclude_none=True, mode="json")
    return value


def _langchain(obj: Any) -> dict[str, Any]:
    kind = obj.type
    role = getattr(obj, "role", None) if kind == "chat" else _LANGCHAIN_ROLES.get(kind)
    if not isinstance(role, str):
        raise BadMessage(
            f"is a LangChain message of type {kind!r}",
            "Use HumanMessage, AIMessage, SystemMessage or ToolMessage",
        )
    out: dict[str, Any] = {"role": role, "content": plain(obj.content)}
    calls = getattr(obj, "tool_calls", None)
    if role == "assistant" and calls:
        out["tool_calls"] = [
            {
                "id": c.get("id") or "",
                "type": "function",
                "function": {
                    "name": c.get("name", ""),
                    "arguments": json.dumps(c.get("args") or {}, ensure_ascii=False),
                },
            }
            for c in calls
        ]
        if not out["content"]:
            out["content"] = None
    if role == "tool":
        out["tool_call_id"] = getattr(obj, "tool_call_id", "")
    name = getattr(obj, "name", None)
    if isinstance(name, str) and name:
        out["name"] = name
    reasoning = obj.additional_kwargs.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        out["reasoning_content"] = reasoning
    return out


def plain_message(obj: Any) -> Any:
    """The plain dict for one message object (dicts come back as they are when they hold
    nothing but plain data).

    Raises:
        BadMessage: a LangChain message of a type with no chat role.
    """
    if type(obj) is dict:
        content = obj.get("content")
        if content is None or type(content) is str:
            return obj
        return plain(obj)
    if isinstance(obj, Mapping):
        return plain(obj)
    if is_langchain(obj):
        return _langchain(obj)
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        data = dump(exclude_none=True, mode="json")
        if (
            type(obj).__module__.startswith("anthropic")
            and isinstance(data, dict)
            and data.get("type") == "message"
        ):
            # A whole anthropic Message (the response): the request takes role + content.
            return {"role": data.get("role"), "content": data.get("content")}
        return data
    return obj  # not a message: the format's checks name it
