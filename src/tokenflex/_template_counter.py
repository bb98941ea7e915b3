"""Counting through a model's own Jinja chat template (``chat_format = "template"``).

A message's tokens are those of its *segment*: what rendering it after a short probe
conversation appends to the probe's rendering. Probes are chosen so the result is valid
for templates that insist on alternating roles (user → assistant → user):

- user: after a user/assistant exchange;
- assistant: after a user message;
- tool / function: after a user message and an assistant tool call;
- system / developer: from the start of the conversation.

The base is the generation prompt (``add_generation_prompt=True`` minus ``False``) plus
what the template adds around a lone user message beyond its segment: BOS, a default
system prompt (Qwen, SmolLM), a date header (Llama 3.1). When a conversation has its own
system message that default text is replaced, so the additive count may exceed the exact
one by it; :meth:`TemplateCounter.count_rendered` renders the whole conversation once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ._chat_template import TemplateRejected, compile_template, render
from ._types import Message, Messages, Tool
from .counting import (
    GENERIC_TOKENS_PER_MESSAGE,
    MessageCounter,
    _BadMessage,
    _dumps,
    _validated_role,
)
from .errors import InvalidMessagesError
from .models import Model
from .tokenizers import CountCache

__all__ = ["TemplateCounter"]

log = logging.getLogger("tokenflex")

_USER = {"role": "user", "content": "Hi"}
_ASSISTANT = {"role": "assistant", "content": "Hello"}
_CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "probe", "arguments": "{}"}}
    ],
}
_PROBES: dict[str, tuple[list[dict[str, Any]], ...]] = {
    "user": ([_USER, _ASSISTANT], []),
    "assistant": ([_USER], []),
    "tool": ([_USER, _CALL], [_USER], []),
    "function": ([_USER, _CALL], [_USER], []),
    "system": ([],),
    "developer": ([],),
}
_MAX_SEGMENTS = 100_000


class TemplateCounter(MessageCounter):
    """Exact per-segment counts through the model's chat template and tokenizer."""

    def __init__(self, model: Model, tokenizer: CountCache) -> None:
        super().__init__(model, tokenizer, exact=tokenizer.exact)
        self._template = compile_template(model.chat_template or "")
        self._segments: dict[tuple[str, str], int] = {}
        self._bases: dict[str, int] = {}

    def _render(
        self,
        messages: Sequence[Any],
        generation: bool = False,
        tools: Sequence[Tool] | None = None,
    ) -> str:
        return render(
            self._template,
            messages,
            add_generation_prompt=generation,
            bos_token=self.model.bos_token,
            eos_token=self.model.eos_token,
            tools=tools,
        )

    def _segment(self, msg: Mapping[str, Any]) -> str | None:
        """The text ``msg`` adds to a conversation, or None if no probe renders it."""
        for context in _PROBES[msg["role"]]:
            try:
                before = self._render(context) if context else self._empty()
                after = self._render([*context, msg])
            except TemplateRejected:
                continue
            if after.startswith(before) and len(after) > len(before):
                return after[len(before) :]
        return None

    def _empty(self) -> str:
        try:
            return self._render([])
        except TemplateRejected:  # templates that read messages[0]
            return ""

    def _media(self, msg: Mapping[str, Any]) -> int:
        # Templates render an image as a placeholder; the model sees the image's tokens.
        content = msg.get("content")
        return self._parts(content, text=False) if isinstance(content, list) else 0

    def message(self, msg: Message) -> int:
        plain = type(msg) is dict and len(msg) == 2
        if plain:
            key = (msg.get("role"), msg.get("content"))
            if type(key[0]) is str and type(key[1]) is str:
                n = self._segments.get(key)  # type: ignore[arg-type]
                if n is not None:
                    return n
            else:
                plain = False
        _validated_role(msg)
        segment = self._segment(msg)
        if segment is None:
            log.debug("chat template of %s renders no segment for %r", self.model.name, msg)
            n = GENERIC_TOKENS_PER_MESSAGE + self._count(_dumps(dict(msg)))
        else:
            n = self._count(segment) + self._media(msg)
        if plain:
            if len(self._segments) >= _MAX_SEGMENTS:
                self._segments.clear()
            self._segments[(msg["role"], msg["content"])] = n
        return n

    def tools(self, tools: Sequence[Tool] | None) -> int:
        if not tools:
            return 0
        tool_list = self._tool_list(tools)
        try:
            with_tools = self._count(self._render([_USER], tools=tool_list))
            without = self._count(self._render([_USER]))
        except TemplateRejected:
            return self._generic_tools(tool_list)
        if with_tools <= without:
            # The template ignores tools; a server may still pass them on another way.
            return self._generic_tools(tool_list)
        return with_tools - without

    def base(self, tools: Sequence[Tool] | None = None) -> int:
        key = _dumps(list(tools)) if tools else ""
        n = self._bases.get(key)
        if n is not None:
            return n
        lone = self._render([_USER])
        prompted = self._render([_USER], generation=True)
        generation = prompted[len(lone) :] if prompted.startswith(lone) else prompted
        segment = self._segment(_USER)
        implicit = self._count(lone) - (self._count(segment) if segment is not None else 0)
        n = self._count(generation) + max(0, implicit) + self.tools(tools)
        self._bases[key] = n
        return n

    def count_rendered(self, messages: Messages, tools: Sequence[Tool] | None = None) -> int:
        """Exact: the whole conversation rendered with the generation prompt, tokenized."""
        if not isinstance(messages, list | tuple):
            raise InvalidMessagesError(
                f"messages must be a list of message dicts, got {type(messages).__name__}."
            )
        images = 0
        for i, msg in enumerate(messages):
            try:
                _validated_role(msg)
                images += self._media(msg)
            except _BadMessage as exc:
                raise exc.at(i) from None
        tool_list = self._tool_list(tools) if tools else None
        return self._count(self._render(messages, True, tool_list)) + images
