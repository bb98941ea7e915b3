"""The request body a plan becomes for each API (``plan.request(api=...)``).

- ``chat``: ``model``, ``messages``, the output limit as ``max_completion_tokens`` for the
  models that take only that (o-series, gpt-5) and ``max_tokens`` otherwise, ``tools``;
- ``responses``: ``model``, ``input``, ``instructions``, ``max_output_tokens``, ``tools``;
- ``anthropic``: ``model``, ``system``, ``messages``, ``max_tokens``, ``tools``.

A plan in the same format as the body is sent as fitted (the caller's items, objects
dumped to JSON); another format is converted through chat messages (what only one API
has, such as thinking blocks or reasoning items, is not carried across; an Anthropic
body whose messages would open with the assistant's turn gets a short user turn before
them, see :func:`~.anthropic.chat_to_anthropic`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidInputError
from .anthropic import anthropic_to_chat, chat_to_anthropic
from .detect import FORMATS
from .objects import plain, plain_message
from .responses import chat_to_responses, responses_to_chat
from .tools import tools_for

__all__ = ["completion_limit_field", "request_body"]

_COMPLETION_ONLY = re.compile(r"^(o\d|gpt-5)")


def completion_limit_field(model: str) -> str:
    """``max_completion_tokens`` for the chat models that reject ``max_tokens``.

    >>> completion_limit_field("o3-mini"), completion_limit_field("gpt-4o")
    ('max_completion_tokens', 'max_tokens')
    """
    name = model.rsplit("/", 1)[-1]
    return "max_completion_tokens" if _COMPLETION_ONLY.match(name) else "max_tokens"


def _chat(fmt: str, messages: Sequence[Any], system: Any) -> list[dict[str, Any]]:
    if fmt == "anthropic":
        return anthropic_to_chat(messages, system)
    if fmt == "responses":
        return responses_to_chat(messages, system)
    return [plain_message(m) for m in messages]


def _no_audio(api: str, messages: Sequence[Any]) -> None:
    """Raise for audio parts: only chat takes them (as text they would cost far more
    than the audio was counted at)."""
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, Mapping) else None
        for j, part in enumerate(content if isinstance(content, list) else ()):
            if isinstance(part, Mapping) and part.get("type") == "input_audio":
                raise InvalidInputError(
                    f"messages[{i}] content[{j}] is audio (input_audio), which the {api} API "
                    "does not take as input. Build the request with api='chat', or leave the "
                    "audio out of the messages."
                )


def request_body(
    api: str,
    *,
    fmt: str,
    model: str,
    messages: Sequence[Any],
    system: Any,
    max_tokens: int,
    tools: Sequence[Any],
) -> dict[str, Any]:
    """The body for ``api`` of a plan in format ``fmt``.

    Raises:
        InvalidInputError: ``api`` is not one of :data:`~tokenflex.formats.detect.FORMATS`,
            or the messages hold audio and ``api`` is not chat.
    """
    if api not in FORMATS:
        raise InvalidInputError(
            f"api={api!r} is not a request format. Use one of {', '.join(FORMATS)}."
        )
    body: dict[str, Any] = {"model": model}
    if api == fmt and api != "chat":
        items: list[Any] = [plain_message(m) for m in messages]
        system = plain(system)
    elif api == "chat":
        items = _chat(fmt, messages, system)
    else:
        chat = _chat(fmt, messages, system)
        _no_audio(api, chat)
        if api == "anthropic":
            system, items = chat_to_anthropic(chat)
        else:
            system, items = chat_to_responses(chat)
    if api == "chat":
        body["messages"] = items
        body[completion_limit_field(model)] = max_tokens
    elif api == "responses":
        if system is not None:
            body["instructions"] = system
        body["input"] = items
        body["max_output_tokens"] = max_tokens
    else:
        if system is not None:
            body["system"] = system
        body["messages"] = items
        body["max_tokens"] = max_tokens
    if tools:
        body["tools"] = tools_for(api, [plain(t) for t in tools])
    return body
