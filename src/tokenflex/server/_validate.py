"""Request parsing and shape checks, before anything is counted or forwarded.

Each problem becomes a :class:`ProxyError` (HTTP 400, OpenAI error shape) that names the
offending field (``param``) and says what is allowed. Deeper content checks (image parts,
tool calls) are left to the counter, whose ``InvalidMessagesError`` also becomes a 400.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..counting.checks import IMAGE_PARTS, TEXT_PARTS, BadMessage, bad_part, validated_role
from .errors import ProxyError

__all__ = [
    "KNOWN_ROLES",
    "ChatRequest",
    "parse_anthropic",
    "parse_chat",
    "parse_count",
    "parse_json",
    "parse_responses",
]

KNOWN_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
MAX_DEPTH = 128
"""Deepest nesting of arrays and objects a body may have: the counters and converters
recurse into content, and a 10 KB body nested 900 deep must be a 400, not a 500."""
_SURROGATE = re.compile("[\ud800-\udfff]")
# What in a body's bytes can decode to a lone surrogate: a \uD800-\uDFFF escape (JSON has
# no \U escape), or the surrogate's own UTF-8 bytes (json.loads decodes bytes with
# "surrogatepass"): ED A0-BF.
_SURROGATE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]").search
_KNOWN_ROLE_SET = frozenset(KNOWN_ROLES)


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


def parse_json(raw: bytes) -> Any:
    """The JSON document in ``raw``; a 400 ``invalid_json`` error when it is not one.

    Stricter than :func:`json.loads`: ``NaN``, ``Infinity`` and numbers too large for a
    float, and strings holding a lone UTF-16 surrogate (``"\\ud800"``, which no UTF-8
    encoder can send on), are refused.
    """
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
        raise _bad(
            f"The request body nests arrays and objects more than {MAX_DEPTH} deep. "
            "Send a flatter body (chat content is at most a few levels deep).",
            None,
            "invalid_json",
        )
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


def _positive_int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(
            f"{key} must be a positive integer, got {_type_name(value)} {value!r}.",
            key,
            "invalid_type",
        )
    if value <= 0:
        raise _bad(f"{key} must be a positive integer, got {value!r}.", key)
    return value


def _check_messages(value: Any, *, key: str = "messages") -> list[dict[str, Any]]:
    if value is None:
        raise _bad(
            f"'{key}' is required: a list of chat messages.", key, "missing_required_parameter"
        )
    if not isinstance(value, list):
        raise _bad(
            f"'{key}' must be a list of chat messages, got {_type_name(value)}.",
            key,
            "invalid_type",
        )
    if not value:
        raise _bad(f"'{key}' must contain at least one message, got [].", key, "empty_array")
    roles = _KNOWN_ROLE_SET
    for i, msg in enumerate(value):
        if type(msg) is dict and len(msg) == 2:
            role, content = msg.get("role"), msg.get("content")
            if type(content) is str and type(role) is str and role in roles:
                continue  # {"role": a chat role, "content": text}: nothing more to check
        param = f"{key}[{i}]"
        if not isinstance(msg, dict):
            raise _bad(
                f"{param} must be an object with 'role' and 'content', got {_type_name(msg)}.",
                param,
                "invalid_type",
            )
        role = msg.get("role")
        if not isinstance(role, str):
            raise _bad(
                f"{param}.role must be a string, one of {', '.join(KNOWN_ROLES)}; got "
                f"{_type_name(role)}.",
                f"{param}.role",
                "invalid_type" if role is not None else "missing_required_parameter",
            )
        if role not in KNOWN_ROLES:
            raise _bad(
                f"{param}.role {role!r} is not a chat role; use one of {', '.join(KNOWN_ROLES)}.",
                f"{param}.role",
            )
        content = msg.get("content")
        if content is not None and not isinstance(content, str | list):
            raise _bad(
                f"{param}.content must be a string, a list of content parts or null, got "
                f"{_type_name(content)}.",
                f"{param}.content",
                "invalid_type",
            )
        try:
            _check_message(msg)
        except BadMessage as exc:
            raise _bad(f"{exc.at(i)}", param) from None
    return value


def _check_message(msg: dict[str, Any]) -> None:
    """What the counters would find wrong with ``msg``, found before fitting: a message
    that fit() drops is never counted, yet it is stored with the plan and must be valid."""
    validated_role(msg)
    content = msg.get("content")
    if isinstance(content, list):
        for j, part in enumerate(content):
            ptype = part.get("type") if isinstance(part, Mapping) else None
            if not isinstance(ptype, str):  # a list or object "type" is no type
                ok = False
            elif ptype in TEXT_PARTS:
                ok = isinstance(part.get(TEXT_PARTS[ptype]), str)
            elif ptype in IMAGE_PARTS:
                image = part.get("image_url")
                url = image.get("url") if isinstance(image, Mapping) else image
                ok = isinstance(url, str)
            else:
                ok = False
            if not ok:
                raise bad_part(j, part)
    calls = msg.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list):
            raise BadMessage(
                f"has tool_calls of type {type(calls).__name__}", "tool_calls must be a list"
            )
        for call in calls:
            if not isinstance(call, Mapping):
                raise BadMessage(
                    f"has a tool call of type {type(call).__name__}",
                    "Each tool call is {'id': ..., 'type': 'function', 'function': "
                    "{'name': ..., 'arguments': '{...}'}}",
                )
    for key in ("name", "tool_call_id"):
        if msg.get(key) is not None and not isinstance(msg[key], str):
            raise BadMessage(
                f"has {key} of type {type(msg[key]).__name__}", f"{key} must be a string"
            )


def _check_model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if model is None:
        raise _bad(
            "'model' is required: the model name as a string.",
            "model",
            "missing_required_parameter",
        )
    if not isinstance(model, str) or not model.strip():
        raise _bad(
            f"'model' must be a non-empty string, got {_type_name(model)} {model!r}.",
            "model",
            "invalid_type",
        )
    return model


def _check_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise _bad(
            f"The request body must be a JSON object, got {_type_name(body)}.", None, "invalid_type"
        )
    return body


def parse_chat(raw: bytes) -> ChatRequest:
    """Parse and check a ``/v1/chat/completions`` body; ProxyError (400) when it is bad."""
    body = _check_object(parse_json(raw))
    model = _check_model(body)
    messages = _check_messages(body.get("messages"))
    max_tokens = _positive_int(body, "max_tokens")
    max_completion_tokens = _positive_int(body, "max_completion_tokens")
    tools = body.get("tools")
    if tools is not None and (
        not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)
    ):
        raise _bad("'tools' must be a list of tool objects.", "tools", "invalid_type")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _bad(f"'stream' must be true or false, got {stream!r}.", "stream", "invalid_type")
    return ChatRequest(
        body=body,
        model=model,
        messages=messages,
        max_tokens=max_tokens,
        max_completion_tokens=max_completion_tokens,
        tools=tools or None,
        stream=stream,
    )


def _check_stream(body: dict[str, Any]) -> bool:
    stream = body.get("stream", False)
    if stream is None:
        return False
    if not isinstance(stream, bool):
        raise _bad(f"'stream' must be true or false, got {stream!r}.", "stream", "invalid_type")
    return stream


def _check_tools(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    tools = body.get("tools")
    if tools is not None and (
        not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)
    ):
        raise _bad("'tools' must be a list of tool objects.", "tools", "invalid_type")
    return tools or None


def _check_system(body: dict[str, Any], key: str) -> Any:
    value = body.get(key)
    if value is not None and not isinstance(value, str | list):
        raise _bad(
            f"'{key}' must be a string or a list of content blocks, got {_type_name(value)}.",
            key,
            "invalid_type",
        )
    return value


def _check_items(value: Any, key: str, roles: tuple[str, ...] | None) -> list[Any]:
    """A non-empty list of objects (with a ``role`` in ``roles`` and string or list
    ``content`` when ``roles`` is given); the format's converter checks the rest."""
    if value is None:
        raise _bad(f"'{key}' is required: a list of messages.", key, "missing_required_parameter")
    if not isinstance(value, list):
        raise _bad(
            f"'{key}' must be a list of messages, got {_type_name(value)}.", key, "invalid_type"
        )
    if not value:
        raise _bad(f"'{key}' must contain at least one message, got [].", key, "empty_array")
    for i, item in enumerate(value):
        param = f"{key}[{i}]"
        if not isinstance(item, dict):
            raise _bad(f"{param} must be an object, got {_type_name(item)}.", param, "invalid_type")
        if roles is None:
            continue
        role = item.get("role")
        if role not in roles:
            raise _bad(
                f"{param}.role must be one of {', '.join(roles)}; got {role!r}.",
                f"{param}.role",
                "invalid_type" if not isinstance(role, str) else "invalid_value",
            )
        if not isinstance(item.get("content"), str | list):
            raise _bad(
                f"{param}.content must be a string or a list of content blocks, got "
                f"{_type_name(item.get('content'))}.",
                f"{param}.content",
                "invalid_type",
            )
    return value


# -- native blocks and items: as strict as chat ------------------------------------------
# Each known type names the fields it must have and their JSON types; a block or item of
# a type not listed (nor matching a suffix of a family the APIs keep growing) is refused,
# as chat refuses an unknown content part. Adding a type is one line.

_STR, _OBJ, _TEXT = (str,), (dict,), (str, list)
Fields = dict[str, tuple[type, ...]]

ANTHROPIC_BLOCKS: dict[str, Fields] = {
    "text": {"text": _STR},
    "image": {"source": _OBJ},
    "document": {"source": _OBJ},
    "search_result": {"source": _STR, "title": _STR, "content": (list,)},
    "tool_use": {"id": _STR, "name": _STR, "input": _OBJ},
    "tool_result": {"tool_use_id": _STR},
    "thinking": {"thinking": _STR},
    "redacted_thinking": {"data": _STR},
    "server_tool_use": {"id": _STR, "name": _STR},
    "mcp_tool_use": {"id": _STR, "name": _STR},
    "container_upload": {"file_id": _STR},
}
"""Anthropic content block types and their required fields."""
_ANTHROPIC_SUFFIXES: dict[str, Fields] = {"_tool_result": {"tool_use_id": _STR}}
"""Server tool results (``web_search_tool_result``, ``mcp_tool_result``...)."""

RESPONSES_ITEMS: dict[str, Fields] = {
    "message": {"role": _STR, "content": _TEXT},
    "function_call": {"call_id": _STR, "name": _STR, "arguments": _STR},
    "function_call_output": {"call_id": _STR, "output": _TEXT},
    "custom_tool_call": {"call_id": _STR, "name": _STR, "input": _STR},
    "custom_tool_call_output": {"call_id": _STR, "output": _TEXT},
    "reasoning": {"summary": (list,)},
    "mcp_list_tools": {"server_label": _STR},
    "mcp_approval_request": {"id": _STR},
    "mcp_approval_response": {"approval_request_id": _STR},
}
"""Responses input item types and their required fields."""
_RESPONSES_SUFFIXES: dict[str, Fields] = {"_call_output": {}, "_call": {}}
"""Built-in tool calls and their outputs (``web_search_call``, ``computer_call_output``)."""

RESPONSES_PARTS = frozenset(
    {
        "input_text",
        "output_text",
        "text",
        "refusal",
        "input_image",
        "input_file",
        "input_audio",
        "summary_text",
        "reasoning_text",
    }
)
"""Content part types of a Responses message item."""


def _fields_for(
    kind: Any, known: Mapping[str, Fields], suffixes: Mapping[str, Fields]
) -> Fields | None:
    if not isinstance(kind, str):
        return None
    if kind in known:
        return known[kind]
    return next((f for end, f in suffixes.items() if kind.endswith(end)), None)


def _check_fields(value: dict[str, Any], fields: Fields, param: str, what: str) -> None:
    for name, types in fields.items():
        got = value.get(name)
        if not isinstance(got, types):
            allowed = " or ".join("an object" if t is dict else f"a {t.__name__}" for t in types)
            raise _bad(
                f"{param} ({what}) needs '{name}' as {allowed}, got {_type_name(got)}.",
                f"{param}.{name}",
                "missing_required_parameter" if got is None else "invalid_type",
            )


def _unknown(kind: Any, param: str, known: Mapping[str, Fields]) -> ProxyError:
    shown = repr(kind) if isinstance(kind, str) else f"of JSON type {_type_name(kind)}"
    return _bad(
        f"{param} has type {shown[:80]}, which this proxy cannot count; use one of "
        f"{', '.join(known)}.",
        f"{param}.type",
        "invalid_type",
    )


def _check_blocks(blocks: list[Any], param: str) -> None:
    for j, block in enumerate(blocks):
        at = f"{param}[{j}]"
        if not isinstance(block, dict):
            raise _bad(f"{at} must be a content block object, got {_type_name(block)}.", at)
        kind = block.get("type")
        fields = _fields_for(kind, ANTHROPIC_BLOCKS, _ANTHROPIC_SUFFIXES)
        if fields is None:
            raise _unknown(kind, at, ANTHROPIC_BLOCKS)
        _check_fields(block, fields, at, f"a {kind} block")
        inner = block.get("content")
        if kind == "tool_result" and inner is not None:
            if not isinstance(inner, str | list):
                raise _bad(
                    f"{at}.content must be a string or a list of blocks, got {_type_name(inner)}.",
                    f"{at}.content",
                    "invalid_type",
                )
            if isinstance(inner, list):
                _check_blocks(inner, f"{at}.content")


def _check_anthropic(messages: list[Any], system: Any) -> None:
    if isinstance(system, list):
        _check_blocks(system, "system")
    for i, msg in enumerate(messages):
        if isinstance(msg["content"], list):
            _check_blocks(msg["content"], f"messages[{i}].content")


def _check_anthropic_tools(tools: list[dict[str, Any]] | None) -> None:
    for i, tool in enumerate(tools or []):
        custom = tool.get("type") in (None, "custom") or "input_schema" in tool
        if custom and (not isinstance(tool.get("name"), str) or not tool["name"]):
            raise _bad(
                f"tools[{i}] needs a 'name' (a non-empty string): Anthropic tools are "
                "{'name': ..., 'description': ..., 'input_schema': {...}}.",
                f"tools[{i}].name",
                "missing_required_parameter",
            )
        schema = tool.get("input_schema")
        if schema is not None and not isinstance(schema, dict):
            raise _bad(
                f"tools[{i}].input_schema must be a JSON schema object, got {_type_name(schema)}.",
                f"tools[{i}].input_schema",
                "invalid_type",
            )


def _check_responses(items: list[Any]) -> None:
    for i, item in enumerate(items):
        at = f"input[{i}]"
        kind = item.get("type", "message")
        if kind == "item_reference":
            raise _bad(
                f"{at} is an item_reference: its content is stored by the upstream, so this "
                "proxy cannot count it and could not fit the request honestly. Send the "
                "item itself, or previous_response_id (not counted, see docs/proxy.md).",
                f"{at}.type",
                "unsupported_value",
            )
        fields = _fields_for(kind, RESPONSES_ITEMS, _RESPONSES_SUFFIXES)
        if fields is None:
            raise _unknown(kind, at, RESPONSES_ITEMS)
        _check_fields(item, fields, at, f"a {kind} item")
        if kind == "message":
            if item["role"] not in ("user", "assistant", "system", "developer"):
                raise _bad(
                    f"{at}.role must be user, assistant, system or developer; got "
                    f"{item['role'][:40]!r}.",
                    f"{at}.role",
                )
            _check_parts(item["content"], f"{at}.content")
        elif kind.endswith("_output") and isinstance(item.get("output"), list):
            _check_parts(item["output"], f"{at}.output")


def _check_parts(parts: Any, param: str) -> None:
    if not isinstance(parts, list):
        return
    for j, part in enumerate(parts):
        at = f"{param}[{j}]"
        if not isinstance(part, dict):
            raise _bad(f"{at} must be a content part object, got {_type_name(part)}.", at)
        kind = part.get("type")
        if not isinstance(kind, str) or kind not in RESPONSES_PARTS:
            shown = repr(kind)[:80] if isinstance(kind, str) else _type_name(kind)
            raise _bad(
                f"{at} has type {shown}, which this proxy cannot count; use one of "
                f"{', '.join(sorted(RESPONSES_PARTS))}.",
                f"{at}.type",
                "invalid_type",
            )


def parse_anthropic(raw: bytes) -> ChatRequest:
    """Parse and check an Anthropic ``/v1/messages`` (or ``count_tokens``) body:
    ``model``, ``messages``, ``system``, ``max_tokens``, ``tools``, ``stream``; every
    content block is of a known type with its required fields (:data:`ANTHROPIC_BLOCKS`)."""
    body = _check_object(parse_json(raw))
    model = _check_model(body)
    messages = _check_items(body.get("messages"), "messages", ("user", "assistant"))
    system = _check_system(body, "system")
    _check_anthropic(messages, system)
    tools = _check_tools(body)
    _check_anthropic_tools(tools)
    return ChatRequest(
        body=body,
        model=model,
        messages=messages,
        max_tokens=_positive_int(body, "max_tokens"),
        max_completion_tokens=None,
        tools=tools,
        stream=_check_stream(body),
        format="anthropic",
        system=system,
    )


def parse_responses(raw: bytes) -> ChatRequest:
    """Parse and check an OpenAI ``/v1/responses`` (or ``input_tokens``) body: ``model``,
    ``input`` (a string is one user message), ``instructions``, ``max_output_tokens``,
    ``tools``, ``stream``; every item is of a known type with its required fields
    (:data:`RESPONSES_ITEMS`). Other fields (``previous_response_id``, ``store``) go
    through."""
    body = _check_object(parse_json(raw))
    model = _check_model(body)
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    checked = _check_items(items, "input", None)
    _check_responses(checked)
    return ChatRequest(
        body=body,
        model=model,
        messages=checked,
        max_tokens=_positive_int(body, "max_output_tokens"),
        max_completion_tokens=None,
        tools=_check_tools(body),
        stream=_check_stream(body),
        format="responses",
        system=_check_system(body, "instructions"),
    )


def parse_count(raw: bytes) -> tuple[str, list[dict[str, Any]] | None, str | None, Any]:
    """Parse a count body ``{"model", "messages" | "text", "tools"?}``.

    Returns (model, messages or None, text or None, tools or None).
    """
    body = _check_object(parse_json(raw))
    model = _check_model(body)
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
    messages = _check_messages(body.get("messages")) if has_messages else None
    return model, messages, text, _check_tools(body)
