"""OpenAI Chat Completions messages: the internal form itself, less what is never sent.

Chat messages are what the engine counts, so a list of plain dicts goes through as it is.
Two things change on the way in:

- **objects** (openai SDK messages, pydantic models, LangChain messages) become plain dicts
  for counting (:mod:`tokenflex.message.objects`); a kept one comes back as the object
  the caller gave;
- **reasoning_content** (DeepSeek, vLLM and llama.cpp reasoning parsers put the model's
  thinking there) is taken out of the history: the APIs that produce it reject or ignore
  it on input (DeepSeek answers 400), and sending it back only spends the window. Each one
  is listed in ``plan.dropped`` as section ``reasoning``, reason ``reasoning``, with its
  tokens. Pass ``keep_reasoning=True`` to fit() to send it (then it is counted as input).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidInputError
from ..message.checks import (
    IMAGE_PARTS,
    ROLES,
    TEXT_PARTS,
    BadMessage,
    bad_part,
    validated_role,
)
from ..message.objects import is_langchain, part_types, plain_message, sdk_module, untyped_message
from ..tokenizers.base import plain_until
from .base import RequestFormat, ToolCall
from .body import (
    RequestParts,
    bad,
    check_model,
    check_stream,
    check_tools,
    positive_int,
    type_name,
    vouch,
)
from .native import Converted, NativeMessage

__all__ = [
    "CHAT",
    "KNOWN_ROLES",
    "REASONING_FIELD",
    "Chat",
    "chat_to_internal",
    "check_messages",
    "completion_limit_field",
    "is_plain_chat",
]

REASONING_FIELD = "reasoning_content"


_ROLE_KEYS: dict[str, None] = dict.fromkeys(ROLES)


def is_plain_chat(messages: Sequence[Any]) -> bool:
    """Plain dicts with string content, no item ``type`` and no reasoning: the same in
    every format, and nothing to convert (the fast path)."""
    k, n = 0, len(messages)
    while k < n:
        k = plain_until(messages, k, n, _ROLE_KEYS)  # {"role", "content": str}, in C
        if k == n:
            return True
        m = messages[k]
        if type(m) is not dict:
            return False
        content = m.get("content")
        if type(content) is not str and content is not None:
            return False
        if REASONING_FIELD in m or "type" in m:
            return False
        k += 1
    return True


def _rebuilt(items: Sequence[Any]) -> dict[str, Any]:
    """The chat dict of a shrunk copy of a caller's chat message (its reasoning out)."""
    data = plain_message(items[0])
    return {k: v for k, v in data.items() if k != REASONING_FIELD}


def chat_to_internal(messages: Sequence[Any], *, keep_reasoning: bool = False) -> Converted:
    """Chat messages (dicts or objects) as internal messages.

    Raises:
        BadMessage: a message object that has no chat form (names its index).
    """
    out: list[dict[str, Any]] = []
    reasoning: list[tuple[int, str]] = []
    for i, m in enumerate(messages):
        try:
            data = plain_message(m)
        except BadMessage as exc:
            raise exc.at(i) from None
        if not isinstance(data, Mapping):
            out.append(data)  # the counter names what is wrong with it
            continue
        text = data.get(REASONING_FIELD)
        if text is not None and not keep_reasoning:
            data = {k: v for k, v in data.items() if k != REASONING_FIELD}
            if isinstance(text, str) and text:
                reasoning.append((i, text))
            out.append(NativeMessage(data, [data], i, _rebuilt))
        elif data is m:
            out.append(data)
        else:
            out.append(NativeMessage(dict(data), [m], i, _rebuilt))
    return Converted("chat", out, count=len(messages), reasoning=reasoning)


_COMPLETION_ONLY = re.compile(r"^(o\d|gpt-5)")
_CHAT_PARTS = frozenset({"image_url", "input_audio", "file", "refusal"})


def completion_limit_field(model: str) -> str:
    """``max_completion_tokens`` for the chat models that reject ``max_tokens``.

    >>> completion_limit_field("o3-mini"), completion_limit_field("gpt-4o")
    ('max_completion_tokens', 'max_tokens')
    """
    name = model.rsplit("/", 1)[-1]
    return "max_completion_tokens" if _COMPLETION_ONLY.match(name) else "max_tokens"


KNOWN_ROLES = ROLES
_ROLE_SET = frozenset(ROLES)
_ROLE_KEYS = dict.fromkeys(ROLES)  # (plain_until's roles)


def check_messages(value: Any, *, key: str = "messages", checked: int = 0) -> list[dict[str, Any]]:
    """A body's chat messages, checked as the counters read them (a message that fit()
    drops is never counted, yet it is stored with the plan and must be valid).
    ``checked``: how many leading messages a parse of chat passed before (the very
    objects, reused from that body's parse): they are not read again.

    Raises:
        BodyError: the first bad message, naming its field.
    """
    if value is None:
        raise bad(
            f"'{key}' is required: a list of chat messages.", key, "missing_required_parameter"
        )
    if not isinstance(value, list):
        raise bad(
            f"'{key}' must be a list of chat messages, got {type_name(value)}.",
            key,
            "invalid_type",
        )
    if not value:
        raise bad(f"'{key}' must contain at least one message, got [].", key, "empty_array")
    roles = _ROLE_SET
    n = len(value)
    i = min(max(checked, 0), n)  # (the leading messages a parse of chat passed before)
    while i < n:
        i = plain_until(value, i, n, _ROLE_KEYS)  # a run of plain messages, in one C loop
        if i >= n:
            break
        at, msg = i, value[i]
        i += 1
        if type(msg) is dict and len(msg) == 2:
            role, content = msg.get("role"), msg.get("content")
            if type(content) is str and type(role) is str and role in roles:
                continue  # {"role": a chat role, "content": text}: nothing more to check
        param = f"{key}[{at}]"
        if not isinstance(msg, dict):
            raise bad(
                f"{param} must be an object with 'role' and 'content', got {type_name(msg)}.",
                param,
                "invalid_type",
            )
        role = msg.get("role")
        if not isinstance(role, str):
            raise bad(
                f"{param}.role must be a string, one of {', '.join(KNOWN_ROLES)}; got "
                f"{type_name(role)}.",
                f"{param}.role",
                "invalid_type" if role is not None else "missing_required_parameter",
            )
        if role not in KNOWN_ROLES:
            raise bad(
                f"{param}.role {role!r} is not a chat role; use one of {', '.join(KNOWN_ROLES)}.",
                f"{param}.role",
            )
        content = msg.get("content")
        if content is not None and not isinstance(content, str | list):
            raise bad(
                f"{param}.content must be a string, a list of content parts or null, got "
                f"{type_name(content)}.",
                f"{param}.content",
                "invalid_type",
            )
        try:
            _check_message(msg)
        except BadMessage as exc:
            raise bad(f"{exc.at(at)}", param) from None
    return value


def _check_message(msg: dict[str, Any]) -> None:
    """What the counters would find wrong with ``msg``, found before fitting."""
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


class Chat(RequestFormat):
    """OpenAI Chat Completions: ``messages``, the engine's own form."""

    name = "chat"
    internal = True
    path = "/v1/chat/completions"
    takes_checked = True

    def marks(self, item: Any) -> bool:
        if is_langchain(item):
            return True
        module = sdk_module(item)
        if module is not None:
            return ".chat" in module and ".responses" not in module
        if not isinstance(item, Mapping) or not untyped_message(item):
            return False
        if item.get("role") in ("tool", "function") or item.get("tool_calls"):
            return True
        if item.get("function_call"):
            return True
        return not _CHAT_PARTS.isdisjoint(part_types(item))

    def parse(
        self, body: Mapping[str, Any], *, model: str | None = None, checked: int = 0
    ) -> RequestParts:
        name = check_model(body)
        messages = check_messages(body.get("messages"), checked=checked)
        parts = RequestParts(
            name,
            messages,
            max_tokens=positive_int(body, "max_tokens"),
            max_completion_tokens=positive_int(body, "max_completion_tokens"),
            tools=check_tools(body),
            stream=check_stream(body),
        )
        vouch(messages, self.name)  # check_messages reads them as the counters do
        return parts

    def to_internal(
        self, items: Sequence[Any], system: Any = None, *, keep_reasoning: bool = False
    ) -> Converted:
        if system is not None:
            raise InvalidInputError(
                "system= is for Anthropic's top-level system or the Responses instructions; "
                "a chat request carries its system prompt as the first message."
            )
        return chat_to_internal(items, keep_reasoning=keep_reasoning)

    def added(self, message: Mapping[str, Any]) -> Any:
        return message

    def to_chat(self, items: Sequence[Any], system: Any = None) -> list[dict[str, Any]]:
        return [plain_message(m) for m in items]

    def from_chat(self, messages: Sequence[Any]) -> tuple[Any, list[Any]]:
        return None, [plain_message(m) for m in messages]

    def body(self, model: str, items: list[Any], system: Any, max_tokens: int) -> dict[str, Any]:
        return {"model": model, "messages": items, self.limit_field(model): max_tokens}

    def limit_fields(self) -> tuple[str, ...]:
        return ("max_completion_tokens", "max_tokens")

    def limit_field(self, model: str) -> str:
        return completion_limit_field(model)

    def tool(self, function: Mapping[str, Any]) -> dict[str, Any]:
        return {"type": "function", "function": dict(function)}

    def tool_functions(self, tool: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        fn = tool.get("function")
        return [dict(fn)] if isinstance(fn, Mapping) else None

    def tool_calls(self, response: Mapping[str, Any]) -> list[ToolCall]:
        choices = response.get("choices") or ()
        first = choices[0] if isinstance(choices, list) and choices else None
        message = first.get("message") if isinstance(first, Mapping) else None
        calls: list[ToolCall] = []
        for call in (message.get("tool_calls") if isinstance(message, Mapping) else None) or ():
            fn = call.get("function") or {} if isinstance(call, Mapping) else {}
            calls.append((call.get("id"), fn.get("name"), fn.get("arguments")))
        return calls

    def tool_round(
        self, response: Mapping[str, Any], results: Sequence[tuple[str, str]]
    ) -> list[Any]:
        said = response["choices"][0]["message"]
        message = {
            "role": "assistant",
            "content": said.get("content"),
            "tool_calls": said["tool_calls"],
        }
        return [message] + [{"role": "tool", "tool_call_id": c, "content": t} for c, t in results]


CHAT = Chat()
"""The OpenAI Chat Completions format."""
