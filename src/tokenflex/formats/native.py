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

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..message.checks import BadMessage
from ..message.objects import plain_message

__all__ = ["Converted", "ItemConverter", "NativeMessage", "one_per_item"]


class NativeMessage(dict[str, Any]):
    """A chat-shaped dict for counting, with the caller's items it stands for.

    Attributes:
        native: The caller's items (messages or Responses items), in order.
        start: Index of the first of them in the caller's list (-1: the top-level
            ``system`` / ``instructions``, which is not in the list).
    """

    __slots__ = ("native", "rebuild", "start")

    def __init__(
        self,
        chat: dict[str, Any],
        native: Sequence[Any],
        start: int,
        rebuild: Callable[[Sequence[Any]], dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(chat)
        self.native = native if type(native) is tuple else tuple(native)
        self.start = start
        self.rebuild = rebuild
        """The format's converter for these items: the chat dict of changed items."""

    def __reduce__(self) -> Any:  # copy/pickle keep the origin
        return (NativeMessage, (dict(self), self.native, self.start, self.rebuild))

    def with_tool_text(self, text: Callable[[str], str]) -> NativeMessage:
        """This tool result with the text of each result it carries replaced by
        ``text(old)``, in the caller's own shape (Anthropic ``tool_result`` blocks,
        Responses ``function_call_output`` items, chat ``tool`` messages), so the body
        sent is one the API accepts; the chat dict counted is the format's own converter's
        (:attr:`rebuild`), so the copy is counted as any item of its format is."""
        native: list[Any] = []
        parts: list[dict[str, Any]] = []
        for item in self.native:
            shrunk, texts = _tool_item(item, text)
            native.append(shrunk)
            parts += ({"type": "text", "text": t} for t in texts)
        if self.rebuild is not None:
            chat = self.rebuild(native)
        else:  # pragma: no cover - every converter that makes tool units sets rebuild
            chat = dict(self)
            chat["content"] = parts
        return NativeMessage(chat, native, self.start, self.rebuild)


def _plain(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)  # an SDK's pydantic object
    return dump(mode="json", exclude_none=True) if callable(dump) else value


def _text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in value)
    return "" if value is None else json.dumps(value, default=str)


def _tool_item(item: Any, text: Callable[[str], str]) -> tuple[Any, list[str]]:
    """``item`` with its tool output text replaced, and the texts it now carries."""
    data = _plain(item)
    if not isinstance(data, Mapping):
        return item, [str(data)]
    if data.get("type") == "function_call_output":  # Responses
        new = text(_text_of(data.get("output")))
        return {**data, "output": new}, [new]
    content = data.get("content")
    if data.get("role") in ("tool", "function"):  # chat
        new = text(_text_of(content))
        return {**data, "content": new}, [new]
    if not isinstance(content, list):  # an Anthropic message with string content
        return item, [_text_of(content)]
    blocks: list[Any] = []
    texts: list[str] = []
    for block in content:
        b = _plain(block)
        if isinstance(b, Mapping) and b.get("type") == "tool_result":
            new = text(_text_of(b.get("content")))
            blocks.append({**b, "content": new})
            texts.append(new)
        else:
            blocks.append(block)
            is_text = isinstance(b, Mapping) and b.get("type") == "text"
            texts.append(str(b.get("text", "")) if is_text else json.dumps(b, default=str))
    return {**data, "content": blocks}, texts


@dataclass
class Converted:
    """A request in some format, as internal messages."""

    format: str
    """The format's name (:mod:`tokenflex.formats.registry`)."""
    messages: list[dict[str, Any]]
    """Internal chat-shaped messages, oldest first (system first)."""
    system: Any = None
    """The top-level ``system`` (Anthropic), ``instructions`` (Responses) or
    ``systemInstruction`` (Gemini), as given."""
    count: int = 0
    """Items in the caller's list."""
    reasoning: list[tuple[int, str]] = field(default_factory=list)
    """``(index, text)`` of reasoning taken out of chat messages (not sent back)."""
    estimated: list[int] | None = None
    """The places of the messages with a part whose cost is an estimate (a file, audio,
    an image by URL), once they were looked for (None: not yet)."""


@dataclass(frozen=True, slots=True)
class ItemConverter:
    """The :attr:`NativeMessage.rebuild` of a format whose units are single items: the
    chat dict of the (changed) item, by the format's own converter (a class, not a
    closure, so a plan's messages pickle)."""

    convert: Callable[[Mapping[str, Any]], dict[str, Any]]

    def __call__(self, items: Sequence[Any]) -> dict[str, Any]:
        return self.convert(plain_message(items[0]))


def one_per_item(
    fmt: str,
    items: Sequence[Any],
    system: Any,
    *,
    convert: Callable[[Mapping[str, Any]], dict[str, Any]],
    system_message: Callable[[Any], dict[str, Any]],
) -> Converted:
    """A conversation of a format whose every item is one unit (an Anthropic message, a
    Gemini content) as internal messages: the top-level system first (index -1), then
    each item converted by ``convert`` at its own index.

    Args:
        fmt: The format's name.
        items: The caller's items (dicts or SDK objects).
        system: The top-level system prompt (a string or the format's own shape).
        convert: One item (as a plain dict) to its internal chat dict; raises
            :class:`~tokenflex.message.checks.BadMessage` for an item not of the format.
        system_message: The top-level system to its internal system message.

    Raises:
        BadMessage: an item not of the format (names its index), or a bad system.
    """
    out: list[dict[str, Any]] = []
    if system is not None:
        system = plain_message(system) if not isinstance(system, str) else system
        try:
            out.append(NativeMessage(system_message(system), (), -1))
        except BadMessage as exc:
            raise BadMessage(exc.problem.removeprefix("has "), exc.fix) from None
    rebuild = ItemConverter(convert)
    for i, m in enumerate(items):
        try:
            out.append(NativeMessage(convert(plain_message(m)), (m,), i, rebuild))
        except BadMessage as exc:
            raise exc.at(i) from None
    return Converted(fmt, out, system=system, count=len(items))
