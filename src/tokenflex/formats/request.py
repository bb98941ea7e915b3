"""The request body a plan becomes for each API (``plan.request(api=...)``).

Each format builds its own body (:meth:`~tokenflex.formats.base.RequestFormat.body`):

- ``chat``: ``model``, ``messages``, the output limit as ``max_completion_tokens`` for the
  models that take only that (o-series, gpt-5) and ``max_tokens`` otherwise, ``tools``;
- ``responses``: ``model``, ``input``, ``instructions``, ``max_output_tokens``, ``tools``;
- ``anthropic``: ``model``, ``system``, ``messages``, ``max_tokens``, ``tools``;
- ``gemini``: ``model``, ``contents``, ``systemInstruction``,
  ``generationConfig.maxOutputTokens``, ``tools``.

A plan in the same format as the body is sent as fitted (the caller's items, objects
dumped to JSON); another format is converted through chat messages (what only one API
has, such as thinking blocks or reasoning items, is not carried across; an Anthropic or
Gemini body whose conversation would open with the model's turn gets a short user turn
before it, see :data:`~tokenflex.formats.base.EARLIER_LEFT_OUT`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidInputError
from ..message.objects import plain, plain_message
from .chat import completion_limit_field
from .registry import get_format
from .tools import tools_for

__all__ = ["completion_limit_field", "request_body"]


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
        InvalidInputError: ``api`` is not a registered format, or the messages hold
            audio and ``api`` is not chat.
    """
    target = get_format(api, option="api")
    given = get_format(fmt)
    if target is given and not target.internal:
        items: list[Any] = [plain_message(m) for m in messages]
        system = plain(system)
    else:
        chat = given.to_chat(messages, system)
        if not target.internal:
            _no_audio(api, chat)
        system, items = target.from_chat(chat)
    body = target.body(model, items, system, max_tokens)
    if tools:
        body["tools"] = tools_for(api, [plain(t) for t in tools])
    return body
