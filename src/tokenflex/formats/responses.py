"""OpenAI Responses ``input`` items, to internal messages and back.

Items are grouped into the units the API needs kept together, each one internal message:

- a message item (``{"role", "content"}``, with or without ``"type": "message"``) from the
  user, system or developer is one unit;
- the assistant's side of a turn, a run of ``reasoning``, assistant ``message`` and
  ``function_call`` (or other ``*_call``) items, is one assistant unit with ``tool_calls``:
  a reasoning item stays with the call it led to, parallel calls stay together;
- each ``function_call_output`` (``*_call_output``) is a ``tool`` unit, grouped by the
  engine with the assistant unit before it, so outputs are never kept without their call.

Counting reads text parts, images (``input_image``), files (``input_file``, estimated),
reasoning summaries and encrypted reasoning (as text: conservative), call names and
arguments; other items count as their JSON. Request-level fields (``instructions``,
``previous_response_id``, ``store``...) are not items: ``instructions`` is the pinned
system text, the rest passes through untouched (``plan.request(api="responses", ...)``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..message.checks import BadMessage
from ..message.objects import compact_json, part_types, plain_message, sdk_module, untyped_message
from .base import RequestFormat, ToolCall
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
from .native import Converted, NativeMessage

__all__ = [
    "RESPONSES",
    "Responses",
    "chat_to_responses",
    "items_pass",
    "responses_to_chat",
    "responses_to_internal",
]

_MESSAGE_ROLES = ("user", "assistant", "system", "developer")
_ASSISTANT_ITEMS = ("reasoning", "function_call")


_dumps = compact_json


def _kind(item: Mapping[str, Any]) -> str:
    """``message``, ``reasoning``, ``call``, ``output`` or ``other``."""
    itype = item.get("type")
    if itype is None or itype == "message":
        return "message"
    if itype == "reasoning":
        return "reasoning"
    if not isinstance(itype, str):
        return "other"
    if itype.endswith("_call_output") or itype.endswith("_output"):
        return "output"
    if itype.endswith("_call"):
        return "call"
    return "other"


def _part(part: Any, j: int, path: str) -> dict[str, Any]:
    if isinstance(part, str):
        return {"type": "text", "text": part}
    if not isinstance(part, Mapping):
        raise BadMessage(
            f"has {path}[{j}] of type {type(part).__name__}",
            "Each content part is a dict like {'type': 'input_text', 'text': '...'}",
        )
    ptype = part.get("type")
    if ptype in ("input_text", "output_text", "text", "summary_text", "reasoning_text"):
        text = part.get("text")
        if not isinstance(text, str):
            raise BadMessage(
                f"has a {ptype!r} part without a string 'text' in {path}[{j}]",
                f"Give {path}[{j}] a string 'text'",
            )
        return {"type": "text", "text": text}
    if ptype == "refusal":
        return {"type": "text", "text": str(part.get("refusal", ""))}
    if ptype in ("input_image", "image_url"):
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else image
        ref = url if isinstance(url, str) else f"file:{part.get('file_id', '')}"
        detail = part.get("detail") or "auto"
        return {"type": "image_url", "image_url": {"url": ref, "detail": detail}}
    if ptype in ("input_file", "file"):
        f: Mapping[str, Any] = part.get("file") or part if ptype == "file" else part
        file: dict[str, Any] = {}
        if isinstance(f.get("file_data"), str):
            file["file_data"] = f["file_data"]
        else:
            file["file_id"] = str(f.get("file_id") or f.get("file_url") or "")
        if isinstance(f.get("filename"), str):
            file["filename"] = f["filename"]
        return {"type": "file", "file": file}
    if ptype == "input_audio":
        return dict(part)
    return {"type": "text", "text": _dumps(dict(part))}


def _parts(content: Any, path: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise BadMessage(
            f"has {path} of type {type(content).__name__}",
            f"{path.capitalize()} must be a string or a list of parts",
        )
    return [_part(p, j, path) for j, p in enumerate(content)]


def _call(item: Mapping[str, Any]) -> dict[str, Any]:
    if item.get("type") == "function_call":
        args = item.get("arguments", "")
        return {
            "id": str(item.get("call_id", "")),
            "type": "function",
            "function": {
                "name": str(item.get("name", "")),
                "arguments": args if isinstance(args, str) else _dumps(args),
            },
        }
    return {"id": str(item.get("call_id", "")), "type": "custom", "item": dict(item)}


def _assistant(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for item in items:
        kind = _kind(item)
        if kind == "message":
            parts += _parts(item.get("content", ""), "content")
        elif kind == "reasoning":
            for key in ("summary", "content"):
                if isinstance(item.get(key), list):
                    parts += _parts(item[key], key)
            if isinstance(item.get("encrypted_content"), str):
                parts.append({"type": "text", "text": item["encrypted_content"]})
        else:
            calls.append(_call(item))
    out: dict[str, Any] = {"role": "assistant", "content": parts}
    if calls:
        out["tool_calls"] = calls
    return out


def _check(item: Any) -> Mapping[str, Any]:
    if not isinstance(item, Mapping):
        raise BadMessage(
            f"is a {type(item).__name__}, not a dict",
            "Pass each input item as a dict: {'role': 'user', 'content': '...'} or "
            "{'type': 'function_call_output', 'call_id': ..., 'output': ...}",
        )
    if _kind(item) == "message" and item.get("role") not in _MESSAGE_ROLES:
        raise BadMessage(
            f"has role {item.get('role')!r}", f"Use one of {', '.join(_MESSAGE_ROLES)}"
        )
    return item


def _output_chat(data: Mapping[str, Any]) -> dict[str, Any]:
    """The chat dict of a ``function_call_output`` item."""
    output = data.get("output", "")
    return {
        "role": "tool",
        "tool_call_id": str(data.get("call_id", "")),
        "content": _parts(output if isinstance(output, list) else str(output), "output"),
    }


def _rebuilt_output(items: Sequence[Any]) -> dict[str, Any]:
    """The chat dict of a shrunk copy of a ``function_call_output`` item."""
    return _output_chat(_check(plain_message(items[0])))


def responses_to_internal(items: Sequence[Any], instructions: Any = None) -> Converted:
    """Responses ``input`` items (and ``instructions``) as internal messages.

    Raises:
        BadMessage: an item that is not Responses-shaped (names its index).
    """
    out: list[dict[str, Any]] = []
    if instructions is not None:
        if not isinstance(instructions, str):
            raise BadMessage(
                f"instructions is of type {type(instructions).__name__}",
                "Pass system= (the Responses instructions) as a string",
            )
        out.append(NativeMessage({"role": "system", "content": instructions}, (), -1))
    pending: list[tuple[int, Any, Mapping[str, Any]]] = []

    def flush() -> None:
        if pending:
            start = pending[0][0]
            try:
                chat = _assistant([d for _, _, d in pending])
            except BadMessage as exc:
                raise exc.at(start) from None
            out.append(NativeMessage(chat, [m for _, m, _ in pending], start))
            pending.clear()

    for i, m in enumerate(items):
        try:
            data = _check(plain_message(m))
            kind = _kind(data)
            assistant_side = kind in ("reasoning", "call") or (
                kind == "message" and data.get("role") == "assistant"
            )
            if assistant_side:
                pending.append((i, m, data))
                continue
            flush()
            if kind == "message":
                chat: dict[str, Any] = {
                    "role": data["role"],
                    "content": _parts(data.get("content", ""), "content"),
                }
            elif kind == "output":
                out.append(NativeMessage(_output_chat(data), [m], i, _rebuilt_output))
                continue
            else:
                chat = {"role": "user", "content": [{"type": "text", "text": _dumps(dict(data))}]}
            out.append(NativeMessage(chat, [m], i))
        except BadMessage as exc:
            raise exc.at(i) from None
    flush()
    return Converted("responses", out, system=instructions, count=len(items))


# -- whole requests, between APIs -----------------------------------------------------


def _text(parts: Any) -> str:
    if isinstance(parts, str):
        return parts
    return "".join(
        str(p.get("text", p.get("refusal", ""))) for p in parts or [] if isinstance(p, Mapping)
    )


def responses_to_chat(items: Sequence[Any], instructions: Any = None) -> list[dict[str, Any]]:
    """Responses input items as OpenAI chat messages (reasoning is not carried)."""
    out: list[dict[str, Any]] = []
    if instructions:
        out.append({"role": "system", "content": str(instructions)})
    for m in items:
        item = plain_message(m)
        kind = _kind(item)
        if kind == "message":
            content = item.get("content", "")
            parts = _parts(content, "content")
            simple = all(p["type"] == "text" for p in parts)
            role = item["role"]
            if role == "assistant" and out and out[-1]["role"] == "assistant":
                # consecutive assistant items are one assistant turn, as they were counted
                prev = out[-1]
                text = (prev["content"] or "") + _text(parts)
                prev["content"] = text or None
                continue
            text_only = simple or role == "assistant"
            out.append({"role": role, "content": _text(parts) if text_only else parts})
        elif kind == "call":
            call = _call(item)
            if out and out[-1]["role"] == "assistant" and "tool_calls" in out[-1]:
                out[-1]["tool_calls"].append(call)
            elif out and out[-1]["role"] == "assistant":
                out[-1]["tool_calls"] = [call]
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "output":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": str(item.get("call_id", "")),
                    "content": _text(_parts(item.get("output", ""), "output"))
                    if isinstance(item.get("output"), list)
                    else str(item.get("output", "")),
                }
            )
    return out


def _input_parts(content: Any, role: str) -> Any:
    if isinstance(content, str) or content is None:
        return content or ""
    if role == "assistant":  # input parts are the user's; an earlier answer is its text
        return _text(content)
    text = "input_text"
    out: list[dict[str, Any]] = []
    for p in content:
        ptype = p.get("type")
        if ptype in ("text", "input_text", "output_text"):
            out.append({"type": text, "text": p.get("text", "")})
        elif ptype == "refusal":
            out.append({"type": "refusal", "refusal": p.get("refusal", "")})
        elif ptype == "image_url":
            image = p.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else image
            detail = image.get("detail", "auto") if isinstance(image, Mapping) else "auto"
            out.append({"type": "input_image", "image_url": url, "detail": detail})
        elif ptype == "file":
            out.append({"type": "input_file", **(p.get("file") or {})})
        else:
            out.append(dict(p))
    return out


def chat_to_responses(messages: Sequence[Any]) -> tuple[str | None, list[dict[str, Any]]]:
    """``(instructions, input)`` of a Responses request for OpenAI chat messages: leading
    system messages become ``instructions``; tool calls and results become
    ``function_call`` / ``function_call_output`` items."""
    instructions: list[str] = []
    out: list[dict[str, Any]] = []
    for m in messages:
        m = plain_message(m)
        role = m.get("role")
        if role in ("system", "developer") and not out:
            instructions.append(_text(m.get("content")))
            continue
        if role in ("tool", "function"):
            out.append(
                {
                    "type": "function_call_output",
                    "call_id": str(m.get("tool_call_id") or m.get("name") or ""),
                    "output": _text(m.get("content")),
                }
            )
            continue
        content = m.get("content")
        if content:
            out.append({"role": role, "content": _input_parts(content, str(role))})
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            out.append(
                {
                    "type": "function_call",
                    "call_id": str(call.get("id", "")),
                    "name": str(fn.get("name", "")),
                    "arguments": fn.get("arguments") or "{}",
                }
            )
    return ("\n\n".join(instructions) if instructions else None), out


# -- the format object ------------------------------------------------------------------

_PARTS = frozenset({"input_text", "input_image", "input_file", "output_text"})
"""Content part types only Responses items have (what detection reads)."""


_STR, _TEXT = (str,), (str, list)

ITEMS: dict[str, Fields] = {
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
"""Responses input item types and their required fields (what a body may hold)."""
_ITEM_SUFFIXES: dict[str, Fields] = {"_call_output": {}, "_call": {}}
"""Built-in tool calls and their outputs (``web_search_call``, ``computer_call_output``)."""

PARTS = frozenset(
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


def items_pass(items: list[Any]) -> bool:
    """Whether :func:`_check_items` passes ``items``, read without naming anything (the
    check that names a bad item runs only where this says no); no for anything it is
    unsure of (a subclass, a built-in tool's item type): the check decides those."""
    for item in items:
        kind = known_kind(item, ITEMS, "message")
        if kind is None:
            return False
        if kind == "message":
            if item["role"] not in _MESSAGE_ROLES or not _parts_pass(item["content"]):
                return False
        elif kind.endswith("_output") and not _parts_pass(item.get("output")):
            return False
    return True


def _parts_pass(parts: Any) -> bool:
    """Whether :func:`_check_parts` passes ``parts`` (no for a list subclass: it decides)."""
    if type(parts) is not list:
        return not isinstance(parts, list)  # not parts: nothing to check
    return all(type(p) is dict and type(p.get("type")) is str and p["type"] in PARTS for p in parts)


def _check_items(items: list[Any]) -> None:
    for i, item in enumerate(items):
        at = f"input[{i}]"
        kind = item.get("type", "message")
        if kind == "item_reference":
            raise bad(
                f"{at} is an item_reference: its content is stored by the upstream, so this "
                "proxy cannot count it and could not fit the request honestly. Send the "
                "item itself, or previous_response_id (not counted, see docs/proxy.md).",
                f"{at}.type",
                "unsupported_value",
            )
        fields = fields_for(kind, ITEMS, _ITEM_SUFFIXES)
        if fields is None:
            raise unknown_type(kind, at, ITEMS)
        check_fields(item, fields, at, f"a {kind} item")
        if kind == "message":
            if item["role"] not in _MESSAGE_ROLES:
                raise bad(
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
            raise bad(f"{at} must be a content part object, got {type_name(part)}.", at)
        kind = part.get("type")
        if not isinstance(kind, str) or kind not in PARTS:
            shown = repr(kind)[:80] if isinstance(kind, str) else type_name(kind)
            raise bad(
                f"{at} has type {shown}, which this proxy cannot count; use one of "
                f"{', '.join(sorted(PARTS))}.",
                f"{at}.type",
                "invalid_type",
            )


class Responses(RequestFormat):
    """OpenAI Responses: ``instructions`` + ``input`` items."""

    name = "responses"
    takes_checked = True
    path = "/v1/responses"
    count_path = "/v1/responses/input_tokens"
    items_key = "input"
    system_key = "instructions"
    limit_key = "max_output_tokens"
    text_items = True

    def marks(self, item: Any) -> bool:
        module = sdk_module(item)
        if module is not None:
            return ".responses" in module and not module.startswith("anthropic")
        if not isinstance(item, Mapping):
            return False
        return not untyped_message(item) or not _PARTS.isdisjoint(part_types(item))

    def parse(
        self, body: Mapping[str, Any], *, model: str | None = None, checked: int = 0
    ) -> RequestParts:
        """``model``, ``input`` (a string is one user message), ``instructions``,
        ``max_output_tokens``, ``tools``, ``stream``; every item is of a known type with
        its required fields (:data:`ITEMS`). Other fields (``previous_response_id``,
        ``store``) go through."""
        name = check_model(body)
        items = self.items_of(body)
        given = check_items(items, "input", None, checked=checked)
        if not items_pass(given[checked:] if checked else given):  # (each on its own)
            _check_items(given)
        parts = RequestParts(
            name,
            given,
            max_tokens=positive_int(body, "max_output_tokens"),
            tools=check_tools(body),
            stream=check_stream(body),
            system=check_system(body, "instructions"),
        )
        vouch(given, self.name)  # every item of a known type, with its fields
        return parts

    def to_internal(
        self, items: Sequence[Any], system: Any = None, *, keep_reasoning: bool = False
    ) -> Converted:
        return responses_to_internal(items, system)

    def to_chat(self, items: Sequence[Any], system: Any = None) -> list[dict[str, Any]]:
        return responses_to_chat(items, system)

    def from_chat(self, messages: Sequence[Any]) -> tuple[Any, list[Any]]:
        return chat_to_responses(messages)

    def tool(self, function: Mapping[str, Any]) -> dict[str, Any]:
        # ``strict`` defaults to true on the API, which rejects most schemas written for
        # chat: a converted tool says false unless it was strict
        entry = {
            "type": "function",
            "name": function["name"],
            "parameters": function.get("parameters") or {"type": "object", "properties": {}},
            "strict": function.get("strict") is True,
        }
        if function.get("description"):
            entry["description"] = function["description"]
        return entry

    def tool_functions(self, tool: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        if tool.get("type") != "function" or not isinstance(tool.get("name"), str):
            return None
        fn: dict[str, Any] = {"name": tool["name"]}
        if tool.get("description"):
            fn["description"] = tool["description"]
        if tool.get("parameters") is not None:
            fn["parameters"] = tool["parameters"]
        if tool.get("strict") is True:
            fn["strict"] = True
        return [fn]

    def tool_calls(self, response: Mapping[str, Any]) -> list[ToolCall]:
        return [
            (item.get("call_id"), item.get("name"), item.get("arguments"))
            for item in response.get("output") or ()
            if isinstance(item, Mapping) and item.get("type") == "function_call"
        ]

    def tool_round(
        self, response: Mapping[str, Any], results: Sequence[tuple[str, str]]
    ) -> list[Any]:
        made = [
            dict(item)
            for item in response.get("output") or ()
            if isinstance(item, Mapping) and item.get("type") in ("function_call", "reasoning")
        ]
        return made + [
            {"type": "function_call_output", "call_id": c, "output": text} for c, text in results
        ]

    def count_answer(self, tokens: int) -> dict[str, Any]:
        return {"object": "response.input_tokens", "input_tokens": tokens}

    def stream_error(
        self, status: int, message: str, *, type: str, code: str | None, param: str | None
    ) -> bytes:
        # the Responses API's own ``error`` event, never followed by response.completed
        body = {
            "type": "error",
            "code": code,
            "message": message,
            "param": param,
            "sequence_number": 0,  # the upstream's numbering is not tracked: passed through
        }
        return b"event: error\ndata: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


RESPONSES = Responses()
"""The OpenAI Responses format."""
