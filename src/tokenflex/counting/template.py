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

Rendering is :mod:`tokenflex.chat_template`'s: sandboxed and bounded, as Hugging Face
``apply_chat_template`` renders (its names are re-exported here).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from .._types import Message, Messages, Tool
from ..chat_template import (
    MAX_RENDER_CHARS,
    MAX_TEMPLATE_CHARS,
    RENDER_SECONDS,
    TemplateRejected,
    compile_template,
    render,
)
from ..errors import ConfigError, InvalidMessagesError
from ..message.checks import BadMessage, validated_role
from ..models import Model
from ..tokenizers import CountCache
from .messages import GENERIC_TOKENS_PER_MESSAGE, MessageCounter
from .tools import dumps

__all__ = [
    "MAX_RENDER_CHARS",
    "MAX_TEMPLATE_CHARS",
    "RENDER_SECONDS",
    "TemplateCounter",
    "TemplateRejected",
    "alternating_roles",
    "compile_template",
    "render",
]

log = logging.getLogger("tokenflex")


_alternates: dict[str, bool] = {}
_ALTERNATES_MAX = 64


def alternating_roles(model: Model) -> bool:
    """Whether ``model`` refuses two turns of one role in a row: its registry entry says
    so (:attr:`~tokenflex.Model.alternating_roles`), or it is a template model whose
    template refuses ``user, user`` (rendered once per template, remembered).

    >>> from tokenflex.models import Model
    >>> alternating_roles(Model("m", 4096)), alternating_roles(
    ...     Model("n", 4096, alternating_roles=True))
    (False, True)
    """
    if model.alternating_roles:
        return True
    source = model.chat_template
    if model.chat_format != "template" or not source:
        return False
    hit = _alternates.get(source)
    if hit is None:
        try:
            render(
                compile_template(source),
                [_USER, {"role": "user", "content": "Again"}],
                add_generation_prompt=True,
                bos_token=model.bos_token,
                eos_token=model.eos_token,
            )
            hit = False
        except TemplateRejected:
            hit = True
        except ConfigError:  # a template that does not compile: the counter says so
            hit = False
        if len(_alternates) >= _ALTERNATES_MAX:
            _alternates.clear()
        _alternates[source] = hit
    return hit


_USER = {"role": "user", "content": "Hi"}
_ASSISTANT = {"role": "assistant", "content": "Hello"}
_CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "probe", "arguments": "{}"}}
    ],
}
_CALL_1 = {"id": "call_1", "type": "function"}
_RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "7"}
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
        self._tool_costs: dict[str, tuple[int, bool]] = {}
        self._kinds: dict[str, bool] = {}
        self._no_tools: list[Any] | None = None
        self._newline = tokenizer.count("\n")
        try:
            self._render([_USER])
        except TemplateRejected as exc:
            # Tool-use templates (Hermes, Command-R) loop over ``tools`` unconditionally:
            # without tools they get an empty list, as their authors' examples pass.
            self._no_tools = []
            try:
                self._render([_USER])
            except TemplateRejected:
                raise ConfigError(
                    f"The chat template of {model.name!r} cannot render a one-message "
                    f"conversation ({exc}); tokenflex cannot count with it. Use the model's "
                    "general chat template (tokenizer_config.json's default), not a "
                    "tool-use-only variant, or chat_format 'generic'."
                ) from exc

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
            tools=tools if tools else self._no_tools,
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
        validated_role(msg)
        segment = self._segment(msg)
        if segment is None and self._unseen(msg["role"]):
            # the template renders no message of this role (Phi-3's GGUF template drops
            # the system prompt and tool results): the model never sees it, nor its tokens
            n = 0
        elif segment is None:
            log.debug("chat template of %s renders no segment for %r", self.model.name, msg)
            n = GENERIC_TOKENS_PER_MESSAGE + self._count(dumps(dict(msg)))
        else:
            # A template may move a message's text elsewhere (Mistral Nemo puts the system
            # prompt into the last user turn; Gemma 4 folds tool results into the model
            # turn), so its segment can miss it: never count less than the text itself.
            n = self._segment_tokens(segment)
            contents, calls = self._texts(msg)
            # text the segment does not show is rendered elsewhere: count it, with two
            # tokens per piece for what joins it there ("\n\n" in Mistral Nemo)
            n += sum(self._count(text) + 2 for text in contents if text not in segment)
            call_tokens = sum(map(self._count, calls))
            if n < call_tokens and not self._drops_calls():
                n += call_tokens + 2 * len(calls)
            n += self._media(msg)
        if plain:
            if len(self._segments) >= _MAX_SEGMENTS:
                self._segments.clear()
            self._segments[(msg["role"], msg["content"])] = n
        return n

    def notes(self) -> list[str]:
        """One note per role the template was found to leave out of the prompt."""
        return [
            f"The chat template of {self.model.name!r} renders no {key[7:]!r} message: the "
            "model will not see it (counted as 0 tokens). Put what it says in a user turn "
            "if the model must read it."
            for key, unseen in self._kinds.items()
            if key.startswith("unseen-") and unseen
        ]

    def _unseen(self, role: str) -> bool:
        """Whether the template leaves every message of ``role`` out of the prompt (True:
        logged once as a warning, the message counts 0 tokens, as the model sees it).

        Raises:
            TemplateRejected: the template refuses the role outright (Gemma 2 and 3 and
                Command-R's GGUF template raise on a tool result): the model's server
                rejects such a request, so the count does too, with the fix.
        """
        key = f"unseen-{role}"
        unseen = self._kinds.get(key)
        if unseen is None:
            unseen = self._kinds[key] = self._probe_unseen(role)
        if unseen:
            return True
        refused = self._kinds.get(f"refused-{role}")
        if refused:
            raise TemplateRejected(
                f"The chat template of {self.model.name!r} cannot render a {role!r} "
                "message (it raises on one in the shortest conversation that holds it); "
                "the model's server would reject the request. Send tool results as user "
                "messages and the system prompt in the first user turn, or count with "
                "chat_format 'generic' if the server uses another template."
            )
        return False

    def _probe_unseen(self, role: str) -> bool:
        """Render the shortest conversation holding a ``role`` message with a marker, and
        the same without it: the same text means the template drops the role; a render
        that raises only with it means the template refuses it (kept for ``_unseen``)."""
        marker = "tokenflex probe 7351"
        msg: dict[str, Any] = {"role": role, "content": marker}
        if role in ("tool", "function"):
            msg["tool_call_id"] = "call_1"
            fn = {"name": "probe", "arguments": "{}"}
            before, after = [_USER, {**_CALL, "tool_calls": [{**_CALL_1, "function": fn}]}], []
        elif role in ("system", "developer"):
            before, after = [], [_USER]
        else:
            return False  # user and assistant turns: every chat template renders them
        try:
            without = self._render([*before, *after])
        except TemplateRejected:
            return False  # the probe itself fails: cannot tell
        try:
            with_it = self._render([*before, msg, *after])
        except TemplateRejected:
            self._kinds[f"refused-{role}"] = True
            return False
        unseen = with_it == without
        if unseen:
            log.warning(
                "The chat template of %s renders no %r message: the model will not see "
                "one, and it is counted as 0 tokens. Put what it says in a user turn if "
                "the model must read it.",
                self.model.name,
                role,
            )
        return unseen

    def _drops_calls(self) -> bool:
        """Whether the template renders an assistant tool call nowhere (SmolLM2's renders
        only ``content``): then a call costs what its segment renders, nothing more."""
        dropped = self._kinds.get("drops-calls")
        if dropped is None:
            fn = {"name": "probe", "arguments": '{"q": 7351}'}
            call = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{**_CALL_1, "function": fn}],
            }
            try:
                text = self._render([_USER, call, _RESULT])
            except TemplateRejected:
                text = "7351"  # cannot tell: keep counting the call's text
            dropped = self._kinds["drops-calls"] = "7351" not in text and "probe" not in text
        return dropped

    def _segment_tokens(self, segment: str) -> int:
        """Tokens of a segment as it stands inside a conversation. SentencePiece
        tokenizers give text at the start of a string a space prefix ("▁fits", one
        token) that the same text after other text lacks ("fits", two): count it both
        alone and after a newline (a token of its own there), and take the larger."""
        alone = self._count(segment)
        inside = self._count("\n" + segment) - self._newline
        return max(alone, inside)

    @staticmethod
    def _texts(msg: Mapping[str, Any]) -> tuple[list[str], list[str]]:
        """The text a message carries: content strings, tool-call names and arguments."""
        contents: list[str] = []
        content = msg.get("content")
        if isinstance(content, str):
            contents.append(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                    contents.append(part["text"])
        calls: list[str] = []
        tool_calls = msg.get("tool_calls")
        for call in tool_calls if isinstance(tool_calls, list | tuple) else ():
            fn = call.get("function", call) if isinstance(call, Mapping) else None
            if isinstance(fn, Mapping):
                name, args = fn.get("name"), fn.get("arguments")
                calls.append(name if isinstance(name, str) else "")
                calls.append(args if isinstance(args, str) else dumps(args))
        return [t for t in contents if t], [t for t in calls if t]

    def tools(self, tools: Sequence[Tool] | None) -> int:
        return self._tools(tools)[0] if tools else 0

    def tools_exact(self, tools: Sequence[Tool] | None) -> bool:
        return self.exact and (self._tools(tools)[1] if tools else True)

    def _tools(self, tools: Sequence[Tool]) -> tuple[int, bool]:
        """``(tokens, rendered)``: what the schemas add to a rendered conversation, as
        the template renders them (0 for a template that renders no tools: servers that
        render the model's template, llama.cpp's, llama-cpp-python's, vLLM's, then send
        the model nothing of them). Only a template that fails with tools falls back to
        the generic rule, an estimate (``rendered`` False)."""
        key = dumps(list(tools))
        hit = self._tool_costs.get(key)
        if hit is not None:
            return hit
        tool_list = self._tool_list(tools)
        try:
            with_tools = self._count(self._render([_USER], tools=tool_list))
            without = self._count(self._render([_USER]))
            cost = (max(0, with_tools - without), True)
        except TemplateRejected:
            cost = (self._generic_tools(tool_list), False)
        if len(self._tool_costs) >= 1024:
            self._tool_costs.clear()
        self._tool_costs[key] = cost
        return cost

    def _parts_exact(self, msg: Any) -> bool:
        # Templates render media as placeholders: what the model sees is estimated.
        if not super()._parts_exact(msg):
            return False
        if not isinstance(msg, Mapping):
            return True  # message() raises on it
        return self._role_exact("call" if msg.get("tool_calls") else msg.get("role"))

    def _role_exact(self, role: Any) -> bool:
        exact = self._kinds.get(role)
        if exact is None:
            if role not in _PROBES and role != "call":
                return True  # message() raises on it
            exact = self._kinds[role] = self._renders_in_place(role)
        return exact

    def _renders_in_place(self, kind: str) -> bool:
        """Whether messages of this kind (a role, or ``call``: an assistant tool call) are
        counted as the template renders them: the message's text is in its own segment,
        and a short conversation around it counts what its render counts. Where not,
        the count adds text again, falls back to the generic rule, or keeps a default
        system text the message replaces: a conservative estimate."""
        marker = "tokenflex probe 7351"
        msg: dict[str, Any]
        if kind == "call":
            fn = {"name": "probe", "arguments": '{"q": 7351}'}
            msg = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{**_CALL_1, "function": fn}],
            }
            texts = ["probe", "7351"]  # arguments may be re-serialized (tojson)
        else:
            msg = {"role": kind, "content": marker}
            if kind in ("tool", "function"):
                msg["tool_call_id"] = "call_0"
            texts = [marker]
        segment = self._segment(msg)
        if segment is None:
            return False
        if not all(t in segment for t in texts) and not (kind == "call" and self._drops_calls()):
            return False
        around: dict[str, list[dict[str, Any]]] = {
            "system": [msg, _USER],
            "developer": [msg, _USER],
            "user": [_USER, _ASSISTANT, msg],
            "assistant": [_USER, msg, _USER],
            "call": [_USER, msg, _RESULT],
            "tool": [_USER, _CALL, msg],
            "function": [_USER, _CALL, msg],
        }
        conversation = around[kind]
        try:
            return self.count(conversation) == self.count_rendered(conversation)
        except InvalidMessagesError:  # the template rejects the probe
            return False

    def base(self, tools: Sequence[Tool] | None = None) -> int:
        key = dumps(list(tools)) if tools else ""
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
                validated_role(msg)
                images += self._media(msg)
            except BadMessage as exc:
                raise exc.at(i) from None
        tool_list = self._tool_list(tools) if tools else None
        return self._count(self._render(messages, True, tool_list)) + images
