"""Anthropic Messages: ``system`` + ``messages`` of content blocks, to internal and back.

One Anthropic message is one internal message, so what the engine keeps or drops is a
whole message, returned exactly as given (``cache_control``, thinking signatures and ids
untouched):

- a ``user`` message holding ``tool_result`` blocks becomes a ``tool`` message, so it is
  grouped with the ``assistant`` message whose ``tool_use`` it answers and a cut history
  never opens with it (the API rejects a tool_result without its tool_use);
- an ``assistant`` message's ``tool_use`` blocks become ``tool_calls`` (name + the input's
  JSON), and its ``thinking`` / ``redacted_thinking`` blocks stay in the same message as
  the tool_use they belong to, as the API requires;
- blocks are counted from what they hold: text; images by the Anthropic formula from
  their own header (base64) or its maximum (URL); documents as files (PDF pages,
  estimated) or their text; tool results as their content; thinking as its text,
  redacted thinking as its data (conservative); any other block as its JSON.

The top-level ``system`` (a string or text blocks) is one pinned system message; system
text the plan adds (a summary, packed documents) is appended to it as text blocks.
:func:`anthropic_to_chat` / :func:`chat_to_anthropic` convert between whole requests
(``plan.request(api=...)``): tool results become ``tool`` messages and back, consecutive
same-role messages are merged, thinking is not carried into chat.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..message.checks import BadMessage
from ..message.objects import compact_json, part_types, plain_message, sdk_module, untyped_message
from .base import EARLIER_LEFT_OUT, RequestFormat, ToolCall
from .body import (
    Fields,
    RequestParts,
    bad,
    check_fields,
    check_items,
    check_model,
    check_stream,
    check_system,
    check_tools,
    fields_for,
    known_kind,
    positive_int,
    type_name,
    unknown_type,
    vouch,
)
from .native import Converted, one_per_item

__all__ = [
    "ANTHROPIC",
    "EARLIER_LEFT_OUT",
    "Anthropic",
    "anthropic_to_chat",
    "anthropic_to_internal",
    "blocks_pass",
    "chat_to_anthropic",
    "system_text",
    "with_system",
]

_ROLES = ("user", "assistant")


_dumps = compact_json


def _source_part(source: Any, kind: str) -> dict[str, Any]:
    """A chat part for an image or document ``source``."""
    if not isinstance(source, Mapping):
        return {"type": "text", "text": _dumps(source)}
    stype = source.get("type")
    if stype == "base64":
        url = f"data:{source.get('media_type', '')};base64,{source.get('data', '')}"
        if kind == "image":
            return {"type": "image_url", "image_url": {"url": url}}
        return {"type": "file", "file": {"file_data": url}}
    if stype == "text":
        return {"type": "text", "text": str(source.get("data", ""))}
    if stype == "content":
        return {"type": "text", "text": _dumps(source.get("content"))}
    ref = str(source.get("url") or source.get("file_id") or _dumps(source))
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": ref}}
    return {"type": "file", "file": {"file_id": ref}}


def _block_parts(block: Any, j: int, path: str = "content") -> list[dict[str, Any]]:
    """Chat parts that count what one content block holds (tool_use excluded)."""
    if isinstance(block, str):
        return [{"type": "text", "text": block}]
    if type(block) is not dict and not isinstance(block, Mapping):  # (a dict: no ABC check)
        raise BadMessage(
            f"has {path}[{j}] of type {type(block).__name__}",
            "Each content block is a dict like {'type': 'text', 'text': '...'}",
        )
    btype = block.get("type")
    if btype == "text":
        text = block.get("text")
        if not isinstance(text, str):
            raise BadMessage(
                f"has a text block without a string 'text' in {path}[{j}]",
                "Give it {'type': 'text', 'text': '...'}",
            )
        return [{"type": "text", "text": text}]
    if btype in ("image", "document"):
        parts = [_source_part(block.get("source"), btype)]
        for key in ("title", "context"):
            if isinstance(block.get(key), str):
                parts.append({"type": "text", "text": block[key]})
        return parts
    if btype == "tool_result":
        parts = [{"type": "text", "text": str(block.get("tool_use_id", ""))}]
        inner = block.get("content")
        if isinstance(inner, list):
            for k, b in enumerate(inner):
                parts += _block_parts(b, k, f"{path}[{j}].content")
        elif inner is not None:
            parts.append({"type": "text", "text": str(inner)})
        return parts
    if btype == "thinking":
        return [{"type": "text", "text": str(block.get("thinking", ""))}]
    if btype == "redacted_thinking":
        return [{"type": "text", "text": str(block.get("data", ""))}]
    if not isinstance(btype, str):
        raise BadMessage(
            f"has {path}[{j}] without a 'type'",
            "Content blocks are text, image, document, tool_use, tool_result, thinking",
        )
    return [{"type": "text", "text": _dumps(dict(block))}]  # server tools etc.: its JSON


def _call(block: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": str(block.get("id", "")),
        "type": "function",
        "function": {"name": str(block.get("name", "")), "arguments": _dumps(block.get("input"))},
    }


def _internal(msg: Any) -> dict[str, Any]:
    """The chat dict that counts one Anthropic message (raises BadMessage)."""
    if type(msg) is not dict and not isinstance(msg, Mapping):  # (a dict: no ABC check)
        raise BadMessage(
            f"is a {type(msg).__name__}, not a dict",
            "Pass each message as {'role': 'user', 'content': '...' or [blocks]}",
        )
    role = msg.get("role")
    if role not in _ROLES:
        raise BadMessage(
            f"has role {role!r}",
            "Anthropic messages are 'user' or 'assistant'; pass the system prompt as system=",
        )
    content = msg.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise BadMessage(
            f"has content of type {type(content).__name__}",
            "Content must be a string or a list of blocks like {'type': 'text', 'text': '...'}",
        )
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    results = False
    for j, block in enumerate(content):
        kind = block.get("type") if type(block) is dict or isinstance(block, Mapping) else None
        if kind == "tool_use":
            calls.append(_call(block))
            continue
        if kind == "text" and type(text := block.get("text")) is str:
            parts.append({"type": "text", "text": text})  # (_block_parts' own, inline)
            continue
        results = results or kind == "tool_result"
        parts += _block_parts(block, j)
    out: dict[str, Any] = {"role": "tool" if results and role == "user" else role}
    out["content"] = parts
    if calls and role == "assistant":
        out["tool_calls"] = calls
    return out


def system_text(system: Any) -> dict[str, Any]:
    """The internal system message for a top-level ``system`` (string or text blocks)."""
    if isinstance(system, str):
        return {"role": "system", "content": system}
    if not isinstance(system, list):
        raise BadMessage(
            f"system is of type {type(system).__name__}",
            "Pass system= as a string or a list of {'type': 'text', 'text': ...} blocks",
        )
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(system):
        parts += _block_parts(block, j, "system")
    return {"role": "system", "content": parts}


def anthropic_to_internal(messages: Sequence[Any], system: Any = None) -> Converted:
    """Anthropic ``messages`` (and ``system``) as internal messages.

    Raises:
        BadMessage: a message or block that is not Anthropic-shaped (names its index).
    """
    return one_per_item(
        "anthropic", messages, system, convert=_internal, system_message=system_text
    )


def with_system(system: Any, extra: Sequence[str]) -> Any:
    """``system`` with the plan's added system text (summary, documents) appended."""
    if not extra:
        return system
    blocks: list[Any] = []
    if isinstance(system, str) and system:
        blocks.append({"type": "text", "text": system})
    elif isinstance(system, list):
        blocks += system
    return blocks + [{"type": "text", "text": t} for t in extra]


# -- whole requests, between APIs -----------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, Mapping) and "text" in p
        )
    return "" if content is None else str(content)


def _chat_part(block: Mapping[str, Any]) -> dict[str, Any] | None:
    btype = block.get("type")
    if btype == "text":
        return {"type": "text", "text": block.get("text", "")}
    if btype in ("image", "document"):
        return _source_part(block.get("source"), btype)
    return None  # thinking is not carried into chat; tool blocks are handled apart


def anthropic_to_chat(messages: Sequence[Any], system: Any = None) -> list[dict[str, Any]]:
    """A whole Anthropic conversation as OpenAI chat messages."""
    out: list[dict[str, Any]] = []
    if system is not None:
        out.append({"role": "system", "content": _text_of(system)})
    for m in messages:
        m = plain_message(m)
        content = m.get("content")
        if isinstance(content, str):
            out.append({"role": m["role"], "content": content})
            continue
        parts: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        for block in content or []:
            if isinstance(block, str):  # read as a text block, as it was counted
                block = {"type": "text", "text": block}
            btype = block.get("type")
            if btype == "tool_use":
                calls.append(_call(block))
            elif btype == "tool_result":
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": str(block.get("tool_use_id", "")),
                        "content": _text_of(block.get("content")),
                    }
                )
            else:
                part = _chat_part(block)
                if part is not None:
                    parts.append(part)
        if m["role"] == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": _text_of(parts) or None}
            if calls:
                msg["tool_calls"] = calls
            if msg["content"] is not None or calls:
                out.append(msg)
        elif parts:
            simple = all(p["type"] == "text" for p in parts)
            out.append({"role": "user", "content": _text_of(parts) if simple else parts})
    return out


def _blocks(content: Any) -> list[dict[str, Any]]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    out: list[dict[str, Any]] = []
    for p in content:
        ptype = p.get("type")
        if ptype in ("text", "input_text", "output_text"):
            out.append({"type": "text", "text": p.get("text", "")})
        elif ptype == "refusal":
            out.append({"type": "text", "text": p.get("refusal", "")})
        elif ptype in ("image_url", "input_image"):
            image = p.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else image
            url = str(url)
            if url.startswith("data:") and ";base64," in url:
                media, data = url[5:].split(";base64,", 1)
                src: dict[str, Any] = {"type": "base64", "media_type": media, "data": data}
            else:
                src = {"type": "url", "url": url}
            out.append({"type": "image", "source": src})
        elif ptype == "file":
            f = p.get("file") or {}
            data = str(f.get("file_data", ""))
            if data.startswith("data:") and ";base64," in data:
                media, payload = data[5:].split(";base64,", 1)
                out.append(
                    {
                        "type": "document",
                        "source": {"type": "base64", "media_type": media, "data": payload},
                    }
                )
            else:
                out.append(
                    {
                        "type": "document",
                        "source": {"type": "file", "file_id": f.get("file_id", "")},
                    }
                )
        else:
            out.append({"type": "text", "text": _dumps(p)})
    return out


def chat_to_anthropic(messages: Sequence[Any]) -> tuple[Any, list[dict[str, Any]]]:
    """``(system, messages)`` of an Anthropic request for OpenAI chat messages: system
    messages joined into ``system``, tool messages as ``tool_result`` blocks of a user
    message, consecutive same-role messages merged (the API wants them alternating).

    The API wants the user's turn first: messages that open with the assistant's (a plan
    whose history was cut at a tool round) get :data:`EARLIER_LEFT_OUT` as a user turn
    before them.

    >>> chat_to_anthropic([{"role": "assistant", "content": "Done."}])[1][0]["content"]
    [{'type': 'text', 'text': '(Earlier turns of this conversation were left out.)'}]
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for m in messages:
        m = plain_message(m)
        role = m.get("role")
        if role in ("system", "developer"):
            system.append(_text_of(m.get("content")))
            continue
        if role in ("tool", "function"):
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": str(m.get("tool_call_id") or m.get("name") or ""),
                "content": _text_of(m.get("content")),
            }
            role, blocks = "user", [block]
        else:
            blocks = _blocks(m.get("content"))
            for call in m.get("tool_calls") or []:
                fn = call.get("function") or {}
                args = fn.get("arguments") or "{}"
                try:
                    value = json.loads(args) if isinstance(args, str) else args
                except ValueError:
                    value = {"arguments": args}
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": str(call.get("id", "")),
                        "name": str(fn.get("name", "")),
                        "input": value if isinstance(value, dict) else {"value": value},
                    }
                )
        if out and out[-1]["role"] == role:
            out[-1]["content"] += blocks
        elif blocks:
            out.append({"role": role, "content": blocks})
    if out and out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": [{"type": "text", "text": EARLIER_LEFT_OUT}]})
    return ("\n\n".join(system) if system else None), out


# -- the format object ------------------------------------------------------------------

_BLOCKS = frozenset(
    {"tool_use", "tool_result", "thinking", "redacted_thinking", "image", "document"}
    | {"server_tool_use", "web_search_tool_result", "search_result"}
)
"""Content block types only Anthropic messages have (what detection reads)."""
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


_STR, _OBJ = (str,), (dict,)

BLOCKS: dict[str, Fields] = {
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
"""Anthropic content block types and their required fields (what a body may hold)."""
_BLOCK_SUFFIXES: dict[str, Fields] = {"_tool_result": {"tool_use_id": _STR}}
"""Server tool results (``web_search_tool_result``, ``mcp_tool_result``...)."""


def blocks_pass(blocks: list[Any]) -> bool:
    """Whether :func:`_check_blocks` passes ``blocks``, read without naming anything: the
    check that names a bad block (its path, what it lacks) runs only where this says no,
    so an agent's thousands of good blocks cost no path strings. No for anything it is
    unsure of (a subclass, a server tool's result type): the check decides those."""
    for block in blocks:
        kind = known_kind(block, BLOCKS)
        if kind is None:
            return False
        if kind == "tool_result":
            inner = block.get("content")
            if type(inner) is list:
                if not blocks_pass(inner):
                    return False
            elif inner is not None and type(inner) is not str:
                return False
    return True


def _check_blocks(blocks: list[Any], param: str) -> None:
    for j, block in enumerate(blocks):
        at = f"{param}[{j}]"
        if not isinstance(block, dict):
            raise bad(f"{at} must be a content block object, got {type_name(block)}.", at)
        kind = block.get("type")
        fields = fields_for(kind, BLOCKS, _BLOCK_SUFFIXES)
        if fields is None:
            raise unknown_type(kind, at, BLOCKS)
        check_fields(block, fields, at, f"a {kind} block")
        inner = block.get("content")
        if kind == "tool_result" and inner is not None:
            if not isinstance(inner, str | list):
                raise bad(
                    f"{at}.content must be a string or a list of blocks, got {type_name(inner)}.",
                    f"{at}.content",
                    "invalid_type",
                )
            if isinstance(inner, list):
                _check_blocks(inner, f"{at}.content")


def _check_tools(tools: list[dict[str, Any]] | None) -> None:
    for i, tool in enumerate(tools or []):
        custom = tool.get("type") in (None, "custom") or "input_schema" in tool
        if custom and (not isinstance(tool.get("name"), str) or not tool["name"]):
            raise bad(
                f"tools[{i}] needs a 'name' (a non-empty string): Anthropic tools are "
                "{'name': ..., 'description': ..., 'input_schema': {...}}.",
                f"tools[{i}].name",
                "missing_required_parameter",
            )
        schema = tool.get("input_schema")
        if schema is not None and not isinstance(schema, dict):
            raise bad(
                f"tools[{i}].input_schema must be a JSON schema object, got {type_name(schema)}.",
                f"tools[{i}].input_schema",
                "invalid_type",
            )


class Anthropic(RequestFormat):
    """Anthropic Messages: ``system`` + ``messages`` of content blocks."""

    name = "anthropic"
    takes_checked = True
    bare_system = True  # fit(system=...) with plain messages: Anthropic's top-level system
    path = "/v1/messages"
    user_first = True
    count_path = "/v1/messages/count_tokens"
    system_key = "system"
    limit_required = True

    def marks(self, item: Any) -> bool:
        module = sdk_module(item)
        if module is not None:
            return module.startswith("anthropic")
        if not isinstance(item, Mapping) or not untyped_message(item):
            return False
        return not _BLOCKS.isdisjoint(part_types(item))

    def marks_system(self, system: Any) -> bool:
        return isinstance(system, list)

    def parse(
        self, body: Mapping[str, Any], *, model: str | None = None, checked: int = 0
    ) -> RequestParts:
        """``model``, ``messages``, ``system``, ``max_tokens``, ``tools``, ``stream``;
        every content block is of a known type with its required fields (:data:`BLOCKS`);
        the ``checked`` leading messages passed before, block by block, and are not read."""
        name = check_model(body)
        messages = check_items(body.get("messages"), "messages", _ROLES, checked=checked)
        system = check_system(body, "system")
        if isinstance(system, list) and not blocks_pass(system):
            _check_blocks(system, "system")
        for i in range(min(checked, len(messages)), len(messages)):  # (each on its own)
            content = messages[i]["content"]
            if isinstance(content, list) and not blocks_pass(content):
                _check_blocks(content, f"messages[{i}].content")
        tools = check_tools(body)
        _check_tools(tools)
        parts = RequestParts(
            name,
            messages,
            system,
            max_tokens=positive_int(body, "max_tokens"),
            tools=tools,
            stream=check_stream(body),
        )
        vouch(messages, self.name)  # every block of a known type, with its fields
        return parts

    def to_internal(
        self, items: Sequence[Any], system: Any = None, *, keep_reasoning: bool = False
    ) -> Converted:
        return anthropic_to_internal(items, system)

    def added(self, message: Mapping[str, Any]) -> Any:
        return None  # appended to the top-level system as text blocks

    def with_system(self, system: Any, extra: Sequence[str]) -> Any:
        return with_system(system, extra)

    def to_chat(self, items: Sequence[Any], system: Any = None) -> list[dict[str, Any]]:
        return anthropic_to_chat(items, system)

    def from_chat(self, messages: Sequence[Any]) -> tuple[Any, list[Any]]:
        return chat_to_anthropic(messages)

    def tool(self, function: Mapping[str, Any]) -> dict[str, Any]:
        entry = {
            "name": function["name"],
            "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
        }
        if function.get("description"):
            entry["description"] = function["description"]
        return entry

    def tool_functions(self, tool: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        if "input_schema" not in tool and ("type" in tool or not isinstance(tool.get("name"), str)):
            return None
        fn: dict[str, Any] = {"name": tool.get("name")}
        if tool.get("description"):
            fn["description"] = tool["description"]
        if tool.get("input_schema") is not None:
            fn["parameters"] = tool["input_schema"]
        return [fn]

    def tool_calls(self, response: Mapping[str, Any]) -> list[ToolCall]:
        return [
            (block.get("id"), block.get("name"), block.get("input"))
            for block in response.get("content") or ()
            if isinstance(block, Mapping) and block.get("type") == "tool_use"
        ]

    def tool_round(
        self, response: Mapping[str, Any], results: Sequence[tuple[str, str]]
    ) -> list[Any]:
        return [
            {"role": "assistant", "content": response["content"]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": c, "content": text}
                    for c, text in results
                ],
            },
        ]

    def reported_input(self, fields: Mapping[bytes, int]) -> int | None:
        # Anthropic counts cached input apart (cache_read_/cache_creation_input_tokens)
        if b"input_tokens" not in fields:
            return None
        return sum(fields.values()) - fields.get(b"prompt_tokens", 0)

    def error_json(
        self, status: int, message: str, *, type: str, code: str | None, param: str | None
    ) -> dict[str, Any]:
        kind = _ERROR_TYPES.get(status)
        if kind is None:
            kind = "api_error" if status >= 500 else "invalid_request_error"
        return {"type": "error", "error": {"type": kind, "message": message}}

    def stream_error(
        self, status: int, message: str, *, type: str, code: str | None, param: str | None
    ) -> bytes:
        # the anthropic SDK raises on ``event: error``; an OpenAI-shaped event it skips
        body = self.error_json(status, message, type=type, code=code, param=param)
        return b"event: error\ndata: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


ANTHROPIC = Anthropic()
"""The Anthropic Messages format."""
