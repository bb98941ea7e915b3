"""What an internal message stands for in the caller's request.

The engine counts and groups OpenAI-chat-shaped dicts. A request in another format is
converted to such dicts, one per *unit* the engine may keep or drop: an Anthropic message,
or a run of Responses items that belong together (reasoning, assistant text and the
function calls of one turn). Each internal message is a :class:`NativeMessage`: a plain
dict the counters read like any chat message, which also remembers the caller's items it
came from (an attribute, so it is never counted or sent). Converting back is then lossless
by construction: a kept internal message gives back exactly the caller's items, with every
field the converter did not need (``cache_control``, ids, signatures) untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Converted", "NativeMessage"]


class NativeMessage(dict[str, Any]):
    """A chat-shaped dict for counting, with the caller's items it stands for.

    Attributes:
        native: The caller's items (messages or Responses items), in order.
        start: Index of the first of them in the caller's list (-1: the top-level
            ``system`` / ``instructions``, which is not in the list).
    """

    __slots__ = ("native", "start")

    def __init__(self, chat: dict[str, Any], native: Sequence[Any], start: int) -> None:
        super().__init__(chat)
        self.native = tuple(native)
        self.start = start

    def __reduce__(self) -> Any:  # copy/pickle keep the origin
        return (NativeMessage, (dict(self), self.native, self.start))


@dataclass
class Converted:
    """A request in some format, as internal messages."""

    format: str
    """``chat``, ``anthropic`` or ``responses``."""
    messages: list[dict[str, Any]]
    """Internal chat-shaped messages, oldest first (system first)."""
    system: Any = None
    """The top-level ``system`` (Anthropic) or ``instructions`` (Responses), as given."""
    count: int = 0
    """Items in the caller's list."""
    reasoning: list[tuple[int, str]] = field(default_factory=list)
    """``(index, text)`` of reasoning taken out of chat messages (not sent back)."""
