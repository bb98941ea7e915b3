"""OpenAI Chat Completions messages: the internal form itself, less what is never sent.

Chat messages are what the engine counts, so a list of plain dicts goes through as it is.
Two things change on the way in:

- **objects** (openai SDK messages, pydantic models, LangChain messages) become plain dicts
  for counting (:mod:`tokenflex.formats.objects`); a kept one comes back as the object
  the caller gave;
- **reasoning_content** (DeepSeek, vLLM and llama.cpp reasoning parsers put the model's
  thinking there) is taken out of the history: the APIs that produce it reject or ignore
  it on input (DeepSeek answers 400), and sending it back only spends the window. Each one
  is listed in ``plan.dropped`` as section ``reasoning``, reason ``reasoning``, with its
  tokens. Pass ``keep_reasoning=True`` to fit() to send it (then it is counted as input).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..counting.checks import BadMessage
from .native import Converted, NativeMessage
from .objects import plain_message

__all__ = ["REASONING_FIELD", "chat_to_internal", "is_plain_chat"]

REASONING_FIELD = "reasoning_content"


def is_plain_chat(messages: Sequence[Any]) -> bool:
    """Plain dicts with string content, no item ``type`` and no reasoning: the same in
    every format, and nothing to convert (the fast path)."""
    for m in messages:
        if type(m) is not dict:
            return False
        content = m.get("content")
        if type(content) is not str and content is not None:
            return False
        if REASONING_FIELD in m or "type" in m:
            return False
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
