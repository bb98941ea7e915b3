"""Google Gemini ``generateContent``: ``systemInstruction`` + ``contents`` of ``parts``.

A request is ``{"contents": [{"role": "user" | "model", "parts": [...]}],
"systemInstruction": {"parts": [{"text": ...}]}, "tools": [{"functionDeclarations":
[...]}], "generationConfig": {"maxOutputTokens": n}}`` (camelCase, as the REST API and
the google-genai SDK send it). A part is one of ``text`` (``thought: true`` for the
model's thinking), ``inlineData`` (``mimeType`` + base64 ``data``), ``fileData``
(``mimeType`` + ``fileUri``), ``functionCall`` (``name``, ``args``, optional ``id``) or
``functionResponse`` (``name``, ``response``, optional ``id``); ``thoughtSignature`` and
other fields of a part ride along untouched.

One content is one internal message, so what the engine keeps or drops is a whole turn,
returned exactly as given:

- a ``model`` turn is an ``assistant`` message; its ``functionCall`` parts are its
  ``tool_calls`` (name + the args' JSON);
- a ``user`` turn holding ``functionResponse`` parts is a ``tool`` message, grouped with
  the model turn whose calls it answers, so a cut history never opens with it;
- parts are counted from what they hold: text; an image (``inlineData`` ``image/*``) from
  its own header, by URL (``fileData``) at the model's maximum; other inline data as a
  file (PDF pages estimated); a function response as its name and JSON.

The top-level ``systemInstruction`` is one pinned system message; system text the plan
adds (a summary, packed documents) is appended to it as text parts.

The proxy serves ``POST /v1beta/models/{model}:generateContent`` (and
``:streamGenerateContent``, ``:countTokens``) in front of an OpenAI-compatible upstream:
the request is converted to chat and fitted as chat, so what is counted is what the
upstream reads, and the answer is converted back (see docs/formats.md).
"""

from __future__ import annotations

import json
import mimetypes
from collections.abc import Mapping, Sequence
from typing import Any

from ..message.checks import BadMessage
from ..message.objects import compact_json, plain_message
from .base import EARLIER_LEFT_OUT, RequestFormat, ToolCall
from .body import (
    RequestParts,
    bad,
    check_items,
    check_model,
    positive_int,
    type_name,
)
from .native import Converted, one_per_item

__all__ = [
    "GEMINI",
    "PART_KINDS",
    "Gemini",
    "chat_to_gemini",
    "gemini_to_chat",
    "gemini_to_internal",
]

ROLES = ("user", "model")
PART_KINDS = (
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
)
"""The data a part holds: exactly one of these keys (``thought``, ``thoughtSignature``
and ``videoMetadata`` may ride along)."""


_dumps = compact_json


def part_kind(part: Any, where: str) -> str:
    """Which of :data:`PART_KINDS` a part is (raises BadMessage naming ``where``)."""
    if not isinstance(part, Mapping):
        raise BadMessage(
            f"has {where} of type {type(part).__name__}",
            "Each part is an object like {'text': '...'} or {'functionCall': {...}}",
        )
    kinds = [k for k in PART_KINDS if k in part]
    if len(kinds) != 1:
        shown = ", ".join(map(str, part))[:120] or "no keys"
        raise BadMessage(
            f"has {where} with {'none' if not kinds else ' and '.join(kinds)} of the part "
            f"kinds (its keys: {shown})",
            f"Give each part exactly one of {', '.join(PART_KINDS)}",
        )
    kind = kinds[0]
    value = part[kind]
    if kind == "text" and not isinstance(value, str):
        raise BadMessage(f"has {where}.text of type {type(value).__name__}", "Text is a string")
    if kind != "text" and not isinstance(value, Mapping):
        raise BadMessage(
            f"has {where}.{kind} of type {type(value).__name__}", f"{kind} is an object"
        )
    if kind in ("functionCall", "functionResponse") and not isinstance(value.get("name"), str):
        raise BadMessage(f"has {where}.{kind} without a string 'name'", "Name the function")
    if kind == "inlineData" and not (
        isinstance(value.get("data"), str) and isinstance(value.get("mimeType"), str)
    ):
        raise BadMessage(
            f"has {where}.inlineData without string 'mimeType' and 'data'",
            "Give inlineData {'mimeType': 'image/png', 'data': '<base64>'}",
        )
    if kind == "fileData" and not isinstance(value.get("fileUri"), str):
        raise BadMessage(f"has {where}.fileData without a string 'fileUri'", "Give its fileUri")
    return kind


def _chat_part(kind: str, value: Any) -> dict[str, Any]:
    """The chat part that counts one part's data (calls excluded)."""
    if kind == "text":
        return {"type": "text", "text": value}
    if kind in ("inlineData", "fileData"):
        mime = str(value.get("mimeType", ""))
        if kind == "inlineData":
            url = f"data:{mime};base64,{value['data']}"
        else:
            url = str(value["fileUri"])
        if mime.startswith("image/"):
            return {"type": "image_url", "image_url": {"url": url}}
        if kind == "inlineData":
            return {"type": "file", "file": {"file_data": url}}
        return {"type": "file", "file": {"file_id": url}}
    if kind == "functionResponse":
        return {"type": "text", "text": f"{value['name']}: {_dumps(value.get('response'))}"}
    return {"type": "text", "text": _dumps(dict(value))}  # executable code and its result


def _call(value: Mapping[str, Any], fallback: str) -> dict[str, Any]:
    return {
        "id": str(value.get("id") or fallback),
        "type": "function",
        "function": {"name": str(value["name"]), "arguments": _dumps(value.get("args") or {})},
    }


def _internal(content: Any) -> dict[str, Any]:
    """The chat dict that counts one Gemini content (raises BadMessage)."""
    if not isinstance(content, Mapping):
        raise BadMessage(
            f"is a {type(content).__name__}, not an object",
            "Pass each content as {'role': 'user', 'parts': [{'text': '...'}]}",
        )
    role = content.get("role")
    if role not in ROLES:
        raise BadMessage(
            f"has role {role!r}",
            "Gemini contents are 'user' or 'model'; pass the system prompt as "
            "systemInstruction (system=)",
        )
    parts = content.get("parts")
    if not isinstance(parts, list):
        raise BadMessage(
            f"has parts of type {type(parts).__name__}",
            "Give each content a list of parts like [{'text': '...'}]",
        )
    chat: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    answers = False
    for j, part in enumerate(parts):
        kind = part_kind(part, f"parts[{j}]")
        if kind == "functionCall":
            calls.append(_call(part[kind], part[kind]["name"]))
            continue
        answers = answers or kind == "functionResponse"
        chat.append(_chat_part(kind, part[kind]))
    out: dict[str, Any] = {
        "role": "assistant" if role == "model" else ("tool" if answers else "user"),
        "content": chat,
    }
    if calls:
        out["tool_calls"] = calls
    return out


def system_text(system: Any) -> dict[str, Any]:
    """The internal system message for a ``systemInstruction`` (a content, or a string)."""
    if isinstance(system, str):
        return {"role": "system", "content": system}
    parts = system.get("parts") if isinstance(system, Mapping) else None
    if not isinstance(parts, list):
        raise BadMessage(
            f"systemInstruction is {type(system).__name__} without a list of parts",
            "Pass system= as {'parts': [{'text': '...'}]} or a string",
        )
    chat: list[dict[str, Any]] = []
    for j, part in enumerate(parts):
        kind = part_kind(part, f"systemInstruction.parts[{j}]")
        chat.append(_chat_part(kind, part[kind]))
    return {"role": "system", "content": chat}


def gemini_to_internal(contents: Sequence[Any], system: Any = None) -> Converted:
    """Gemini ``contents`` (and ``systemInstruction``) as internal messages.

    Raises:
        BadMessage: a content or part that is not Gemini-shaped (names its index).
    """
    return one_per_item("gemini", contents, system, convert=_internal, system_message=system_text)


def with_system(system: Any, extra: Sequence[str]) -> Any:
    """``systemInstruction`` with the plan's added system text appended as text parts."""
    if not extra:
        return system
    added = [{"text": t} for t in extra]
    if isinstance(system, str):
        return {"parts": [{"text": system}, *added]}
    if isinstance(system, Mapping):
        return {**system, "parts": [*(system.get("parts") or ()), *added]}
    return {"parts": added}


# -- whole requests, between APIs -----------------------------------------------------


def _text(parts: Any) -> str:
    return "".join(
        str(p["text"])
        for p in parts or ()
        if isinstance(p, Mapping) and isinstance(p.get("text"), str) and not p.get("thought")
    )


def gemini_to_chat(contents: Sequence[Any], system: Any = None) -> list[dict[str, Any]]:
    """A whole Gemini conversation as OpenAI chat messages (thought parts are not
    carried). A call without an ``id`` gets one; a response without one answers the
    oldest open call of its name."""
    out: list[dict[str, Any]] = []
    if system is not None:
        text = system if isinstance(system, str) else _text(plain_message(system).get("parts"))
        out.append({"role": "system", "content": text})
    open_calls: dict[str, list[str]] = {}
    for i, m in enumerate(contents):
        content = plain_message(m)
        parts: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        for j, part in enumerate(content.get("parts") or ()):
            kind = part_kind(part, f"contents[{i}].parts[{j}]")
            value = part[kind]
            if kind == "functionCall":
                call = _call(value, f"call_{i}_{j}")
                open_calls.setdefault(value["name"], []).append(call["id"])
                calls.append(call)
            elif kind == "functionResponse":
                pending = open_calls.get(value["name"]) or []
                cid = value.get("id") or (pending[0] if pending else value["name"])
                if cid in pending:
                    pending.remove(cid)
                out.append({"role": "tool", "tool_call_id": str(cid), "content": _result(value)})
            elif not part.get("thought"):
                parts.append(_chat_part(kind, value))
        if content.get("role") == "model":
            said = "".join(p.get("text", "") for p in parts if p["type"] == "text")
            msg: dict[str, Any] = {"role": "assistant", "content": said or None}
            if calls:
                msg["tool_calls"] = calls
            if said or calls:
                out.append(msg)
        elif parts:
            simple = all(p["type"] == "text" for p in parts)
            joined = "".join(p["text"] for p in parts) if simple else ""
            out.append({"role": "user", "content": joined if simple else parts})
    return out


def _result(answer: Mapping[str, Any]) -> str:
    """A function response's text: ``{"result": text}`` (what :func:`chat_to_gemini`
    writes) is that text, any other response its JSON."""
    response = answer.get("response")
    if isinstance(response, Mapping) and list(response) == ["result"]:
        result = response["result"]
        if isinstance(result, str):
            return result
    return response if isinstance(response, str) else _dumps(response)


def _parts(content: Any) -> list[dict[str, Any]]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"text": content}]
    out: list[dict[str, Any]] = []
    for p in content:
        ptype = p.get("type")
        if ptype in ("text", "input_text", "output_text"):
            out.append({"text": p.get("text", "")})
        elif ptype == "refusal":
            out.append({"text": p.get("refusal", "")})
        elif ptype in ("image_url", "input_image"):
            image = p.get("image_url")
            out.append(_data(str(image.get("url") if isinstance(image, Mapping) else image)))
        elif ptype == "file":
            f = p.get("file") or {}
            out.append(_data(str(f.get("file_data") or f.get("file_id") or "")))
        else:
            out.append({"text": _dumps(p)})
    return out


def _data(url: str) -> dict[str, Any]:
    """A part for a data URL (inline) or a URL (by reference)."""
    if url.startswith("data:") and ";base64," in url:
        mime, data = url[5:].split(";base64,", 1)
        return {"inlineData": {"mimeType": mime, "data": data}}
    mime = mimetypes.guess_type(url)[0] or "application/octet-stream"
    return {"fileData": {"mimeType": mime, "fileUri": url}}


def chat_to_gemini(messages: Sequence[Any]) -> tuple[Any, list[dict[str, Any]]]:
    """``(systemInstruction, contents)`` of a Gemini request for OpenAI chat messages:
    system messages joined into ``systemInstruction``, tool calls as ``functionCall``
    parts and tool messages as ``functionResponse`` parts (``{"result": text}``) of a user
    turn, consecutive same-role turns merged. Contents that would open with the model's
    turn get :data:`~tokenflex.formats.base.EARLIER_LEFT_OUT` as a user turn first."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # tool call id -> function name
    for m in messages:
        m = plain_message(m)
        role = m.get("role")
        if role in ("system", "developer"):
            content = m.get("content")
            system.append(content if isinstance(content, str) else _text(_parts(content)))
            continue
        if role in ("tool", "function"):
            cid = str(m.get("tool_call_id") or m.get("name") or "")
            content = m.get("content")
            text = content if isinstance(content, str) else _text(_parts(content))
            answer: dict[str, Any] = {"name": names.get(cid, cid)}
            if cid in names:
                answer["id"] = cid
            answer["response"] = {"result": text}
            turn, parts = "user", [{"functionResponse": answer}]
        else:
            turn = "model" if role == "assistant" else "user"
            parts = _parts(m.get("content"))
            for call in m.get("tool_calls") or ():
                fn = call.get("function") or {}
                args = fn.get("arguments") or "{}"
                try:
                    value = json.loads(args) if isinstance(args, str) else args
                except ValueError:
                    value = {"arguments": args}
                name = str(fn.get("name", ""))
                names[str(call.get("id", ""))] = name
                made: dict[str, Any] = {"name": name}
                if call.get("id"):
                    made["id"] = str(call["id"])
                made["args"] = value if isinstance(value, dict) else {"value": value}
                parts.append({"functionCall": made})
        if out and out[-1]["role"] == turn:
            out[-1]["parts"] += parts
        elif parts:
            out.append({"role": turn, "parts": parts})
    if out and out[0]["role"] != "user":
        out.insert(0, {"role": "user", "parts": [{"text": EARLIER_LEFT_OUT}]})
    return ({"parts": [{"text": "\n\n".join(system)}]} if system else None), out


# -- the format object ------------------------------------------------------------------

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _check_parts(parts: Any, param: str) -> None:
    for j, part in enumerate(parts):
        try:
            part_kind(part, f"{param}[{j}]")
        except BadMessage as exc:
            raise bad(
                f"{param}[{j}]: {exc.problem.removeprefix('has ')}. {exc.fix}.", f"{param}[{j}]"
            ) from None


def _check_tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise bad("'tools' must be a list of tool objects.", "tools", "invalid_type")
    for i, tool in enumerate(tools):
        declared = tool.get("functionDeclarations")
        if declared is None:
            continue  # googleSearch, codeExecution...: counted as their JSON
        if not isinstance(declared, list):
            raise bad(
                f"tools[{i}].functionDeclarations must be a list, got {type_name(declared)}.",
                f"tools[{i}].functionDeclarations",
                "invalid_type",
            )
        for k, d in enumerate(declared):
            at = f"tools[{i}].functionDeclarations[{k}]"
            if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not d["name"]:
                raise bad(
                    f"{at} needs a 'name' (a non-empty string): a function declaration is "
                    "{'name': ..., 'description': ..., 'parameters': {...}}.",
                    f"{at}.name",
                    "missing_required_parameter",
                )
            if d.get("parameters") is not None and not isinstance(d["parameters"], dict):
                raise bad(
                    f"{at}.parameters must be a schema object, got {type_name(d['parameters'])}.",
                    f"{at}.parameters",
                    "invalid_type",
                )
    return tools or None


def parse_body(body: Mapping[str, Any], model: str | None) -> RequestParts:
    """Check a ``generateContent`` body (or a ``countTokens`` one, whose
    ``generateContentRequest`` or bare ``contents`` it reads)."""
    inner = body.get("generateContentRequest")
    if isinstance(inner, Mapping):
        body = inner
    name = model if model is not None else check_model(body)
    contents = check_items(body.get("contents"), "contents", ROLES, content="parts")
    for i, content in enumerate(contents):
        if not content["parts"]:
            at = f"contents[{i}].parts"
            raise bad(f"{at} must contain at least one part, got [].", at, "empty_array")
        _check_parts(content["parts"], f"contents[{i}].parts")
    system = body.get("systemInstruction")
    if system is not None:
        parts = system.get("parts") if isinstance(system, dict) else None
        if not isinstance(parts, list):
            raise bad(
                "'systemInstruction' must be a content object with a list of parts, like "
                "{'parts': [{'text': '...'}]}.",
                "systemInstruction",
                "invalid_type",
            )
        _check_parts(parts, "systemInstruction.parts")
    config = body.get("generationConfig")
    if config is not None and not isinstance(config, dict):
        raise bad(
            f"'generationConfig' must be an object, got {type_name(config)}.",
            "generationConfig",
            "invalid_type",
        )
    limit = positive_int(config or {}, "maxOutputTokens", "generationConfig.maxOutputTokens")
    return RequestParts(
        name, contents, system, max_tokens=limit, tools=_check_tools(body.get("tools"))
    )


_FINISH = {"stop": "STOP", "length": "MAX_TOKENS", "tool_calls": "STOP", "content_filter": "SAFETY"}


def answer_from_chat(status: int, answer: Any) -> Any:
    """A chat completion as a ``GenerateContentResponse`` (text and ``functionCall``
    parts, ``finishReason``, ``usageMetadata``), or an OpenAI-shaped error (``status``
    >= 400) as Google's ``{"error": {"code", "message", "status"}}``."""
    if status >= 400 or not isinstance(answer, Mapping) or "choices" not in answer:
        error = answer.get("error") if isinstance(answer, Mapping) else None
        message = error.get("message") if isinstance(error, Mapping) else None
        text = str(message) if message is not None else json.dumps(answer, default=str)[:2000]
        return GEMINI.error_json(status, text, type="upstream_error", code=None, param=None)
    choices = answer.get("choices") or [{}]
    first = choices[0] if isinstance(choices[0], Mapping) else {}
    message = first.get("message") or {}
    parts: list[dict[str, Any]] = []
    if isinstance(message.get("content"), str) and message["content"]:
        parts.append({"text": message["content"]})
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except ValueError:
            args = {"arguments": fn.get("arguments")}
        parts.append(
            {
                "functionCall": {
                    "id": str(call.get("id", "")),
                    "name": str(fn.get("name", "")),
                    "args": args if isinstance(args, dict) else {"value": args},
                }
            }
        )
    out: dict[str, Any] = {
        "candidates": [
            {
                "content": {"role": "model", "parts": parts or [{"text": ""}]},
                "finishReason": _FINISH.get(str(first.get("finish_reason")), "OTHER"),
                "index": 0,
            }
        ]
    }
    usage = answer.get("usage")
    if isinstance(usage, Mapping):
        out["usageMetadata"] = {
            "promptTokenCount": usage.get("prompt_tokens", 0),
            "candidatesTokenCount": usage.get("completion_tokens", 0),
            "totalTokenCount": usage.get("total_tokens", 0),
        }
    if isinstance(answer.get("model"), str):
        out["modelVersion"] = answer["model"]
    return out


class Gemini(RequestFormat):
    """Google Gemini ``generateContent``: ``systemInstruction`` + ``contents``."""

    name = "gemini"
    via_chat = True  # llama-server and other OpenAI-compatible upstreams speak chat
    path = "/v1beta/models/{model}:generateContent"
    stream_path = "/v1beta/models/{model}:streamGenerateContent"
    user_first = True
    count_path = "/v1beta/models/{model}:countTokens"
    items_key = "contents"
    system_key = "systemInstruction"
    limit_key = "maxOutputTokens"  # inside generationConfig

    def marks(self, item: Any) -> bool:
        if not isinstance(item, Mapping):
            return False
        return ("parts" in item and "content" not in item) or item.get("role") == "model"

    def marks_system(self, system: Any) -> bool:
        return isinstance(system, Mapping) and "parts" in system

    def parse(
        self, body: Mapping[str, Any], *, model: str | None = None, checked: int = 0
    ) -> RequestParts:
        return parse_body(body, model)

    def from_chat_answer(self, status: int, answer: Any) -> Any:
        return answer_from_chat(status, answer)

    def to_internal(
        self, items: Sequence[Any], system: Any = None, *, keep_reasoning: bool = False
    ) -> Converted:
        return gemini_to_internal(items, system)

    def added(self, message: Mapping[str, Any]) -> Any:
        return None  # appended to systemInstruction as text parts

    def with_system(self, system: Any, extra: Sequence[str]) -> Any:
        return with_system(system, extra)

    def to_chat(self, items: Sequence[Any], system: Any = None) -> list[dict[str, Any]]:
        return gemini_to_chat(items, system)

    def from_chat(self, messages: Sequence[Any]) -> tuple[Any, list[Any]]:
        return chat_to_gemini(messages)

    def body(self, model: str, items: list[Any], system: Any, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model, "contents": items}
        if system is not None:
            body["systemInstruction"] = system
        body["generationConfig"] = {"maxOutputTokens": max_tokens}
        return body

    def set_limit(self, body: dict[str, Any], max_tokens: int) -> None:
        config = body.get("generationConfig")
        body["generationConfig"] = {
            **(config if isinstance(config, Mapping) else {}),
            "maxOutputTokens": max_tokens,
        }

    def limit_fields(self) -> tuple[str, ...]:
        return ()  # nested in generationConfig

    def limit_of(self, body: Mapping[str, Any]) -> Any:
        config = body.get("generationConfig")
        return config.get("maxOutputTokens") if isinstance(config, Mapping) else None

    def tool(self, function: Mapping[str, Any]) -> dict[str, Any]:
        return {"functionDeclarations": [_declaration(function)]}

    def tools(self, functions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        # one Tool holds every declaration (the API takes one function tool)
        return [{"functionDeclarations": [_declaration(fn) for fn in functions]}]

    def tool_functions(self, tool: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        declared = tool.get("functionDeclarations")
        if not isinstance(declared, list):
            return None
        out: list[dict[str, Any]] = []
        for d in declared:
            fn: dict[str, Any] = {"name": d.get("name") if isinstance(d, Mapping) else None}
            if isinstance(d, Mapping) and d.get("description"):
                fn["description"] = d["description"]
            if isinstance(d, Mapping) and d.get("parameters") is not None:
                fn["parameters"] = d["parameters"]
            out.append(fn)
        return out

    def tool_calls(self, response: Mapping[str, Any]) -> list[ToolCall]:
        calls: list[ToolCall] = []
        for part in _answer_parts(response):
            call = part.get("functionCall") if isinstance(part, Mapping) else None
            if isinstance(call, Mapping):
                calls.append(
                    (call.get("id") or call.get("name"), call.get("name"), call.get("args"))
                )
        return calls

    def tool_round(
        self, response: Mapping[str, Any], results: Sequence[tuple[str, str]]
    ) -> list[Any]:
        parts = _answer_parts(response)
        named = {c: n for c, n, _ in self.tool_calls(response)}
        answers = []
        for cid, text in results:
            answer: dict[str, Any] = {"name": named.get(cid, cid), "response": {"result": text}}
            if any(
                isinstance(p, Mapping) and (p.get("functionCall") or {}).get("id") == cid
                for p in parts
            ):
                answer["id"] = cid
            answers.append({"functionResponse": answer})
        return [{"role": "model", "parts": list(parts)}, {"role": "user", "parts": answers}]

    def reported_input(self, fields: Mapping[bytes, int]) -> int | None:
        return fields.get(b"promptTokenCount", fields.get(b"prompt_tokens"))

    def count_answer(self, tokens: int) -> dict[str, Any]:
        return {"totalTokens": tokens}

    def error_json(
        self, status: int, message: str, *, type: str, code: str | None, param: str | None
    ) -> dict[str, Any]:
        state = _STATUS.get(status) or ("INTERNAL" if status >= 500 else "FAILED_PRECONDITION")
        return {"error": {"code": status, "message": message, "status": state}}


def _declaration(function: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": function["name"]}
    if function.get("description"):
        out["description"] = function["description"]
    if function.get("parameters") is not None:
        out["parameters"] = function["parameters"]
    return out


def _answer_parts(response: Mapping[str, Any]) -> list[Any]:
    candidates = response.get("candidates")
    first = candidates[0] if isinstance(candidates, list) and candidates else None
    content = first.get("content") if isinstance(first, Mapping) else None
    parts = content.get("parts") if isinstance(content, Mapping) else None
    return parts if isinstance(parts, list) else []


GEMINI = Gemini()
"""The Google Gemini ``generateContent`` format."""
