"""How messages read as text to a summarizer: one labelled paragraph per message.

Text parts are kept, images and audio become ``[image]`` / ``[audio]``, tool calls are
spelled out as ``[calls name(arguments)]``, and an earlier summary message is labelled
``Earlier summary`` without its :data:`~tokenflex.summarize.SUMMARY_PREFIX`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._types import Message
from .format import SUMMARY_PREFIX, is_summary_message

__all__ = ["message_line", "render_transcript"]


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                if isinstance(part.get("text"), str):
                    parts.append(part["text"])
                elif part.get("type") in ("image_url", "image", "input_image"):
                    parts.append("[image]")
                elif part.get("type") in ("input_audio", "audio"):
                    parts.append("[audio]")
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return str(content)


def message_line(msg: Message) -> str:
    """One message as transcript text: ``"User: ..."``, tool calls spelled out."""
    role = str(msg.get("role", "user"))
    text = _content_text(msg.get("content"))
    if role in ("tool", "function"):
        label = f"Tool result ({msg.get('name')})" if msg.get("name") else "Tool result"
    elif is_summary_message(msg):
        label, text = "Earlier summary", text[len(SUMMARY_PREFIX) :]
    else:
        label = role.capitalize()
    calls = msg.get("tool_calls") or []
    call_texts = []
    for call in calls if isinstance(calls, Sequence) else []:
        fn = call.get("function", {}) if isinstance(call, Mapping) else {}
        if isinstance(fn, Mapping):
            call_texts.append(f"[calls {fn.get('name', '?')}({fn.get('arguments', '')})]")
    if isinstance(msg.get("function_call"), Mapping):
        fc = msg["function_call"]
        call_texts.append(f"[calls {fc.get('name', '?')}({fc.get('arguments', '')})]")
    body = " ".join(t for t in [text.strip(), *call_texts] if t)
    return f"{label}: {body}"


def render_transcript(messages: Sequence[Message]) -> str:
    """Messages as the plain transcript a summarizer reads, one paragraph per message.

    >>> print(render_transcript([{"role": "user", "content": "Hi"},
    ...                          {"role": "assistant", "content": "Hello!"}]))
    User: Hi
    <BLANKLINE>
    Assistant: Hello!
    """
    return "\n\n".join(message_line(m) for m in messages)
