"""Counting through mistral-common's reference encoder (``chat_format = "mistral"``).

mistral-common lays a conversation out as Mistral's servers do: BOS, ``[INST]`` ...
``[/INST]`` around user turns, ``</s>`` after assistant turns, ``[TOOL_CALLS]`` and
``[TOOL_RESULTS]`` as JSON, tool schemas in ``[AVAILABLE_TOOLS]`` before the last user
turn, and the system prompt either as ``[SYSTEM_PROMPT]`` (v7 and later) or joined with
``"\\n\\n"`` into the *last* user turn (tekken v3: Mistral Nemo; SentencePiece v2/v3).
It encodes every message's text on its own and concatenates the ids, so a message costs
the same wherever it stands, except a joined system prompt, whose text merges with the
user text it is joined to.

A message's tokens are what it adds to a short probe conversation mistral-common accepts
(user: alone; assistant: between two user turns; tool result: after the call it answers),
so they are exact; a joined system prompt gets 2 tokens more for the join (and at least
what it costs alone, wrapped in its own ``[INST]`` turn). The additive count is therefore
at least the exact one, and :meth:`MistralCounter.count_rendered` encodes the whole
conversation for the exact total. A message mistral-common refuses on its own (a tool
call id that is not 9 letters or digits, a role it does not know) is counted by the
generic rule with twice its envelope. Images, files and audio are not given to
mistral-common (nothing is fetched or decoded): they cost what
:mod:`tokenflex.counting.images` and :mod:`tokenflex.counting.media` say.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from .._types import Message, Messages, Tool
from ..errors import ConfigError, InvalidMessagesError
from ..message.checks import BadMessage, validated_role
from ..models import Model
from ..tokenizers import CountCache
from ..tokenizers.mistral import MistralTokenizer
from .messages import GENERIC_TOKENS_PER_MESSAGE, MessageCounter
from .tools import dumps

__all__ = ["MistralCounter"]

log = logging.getLogger("tokenflex")

_USER = {"role": "user", "content": "Hi"}
_PROBE_ID = "probe0000"
_BOS = 1
"""mistral-common starts every prompt with one BOS token."""
_JOIN = 2
"""Tokens a system prompt joined into a user turn may cost beyond its probe: the text
around ``"\\n\\n"`` tokenizes differently once joined (SentencePiece drops the leading
``▁`` of the user text, BPE merges across the join)."""
_MAX_CACHED = 100_000


class MistralCounter(MessageCounter):
    """Exact counts with mistral-common's encoder and a ``mistral:`` tokenizer."""

    def __init__(self, model: Model, tokenizer: CountCache) -> None:
        backend = tokenizer.tokenizer
        if not isinstance(backend, MistralTokenizer):
            raise ConfigError(
                f"Model {model.name!r} has chat_format 'mistral' but tokenizer "
                f"{model.tokenizer!r}; it needs a mistral: tokenizer (e.g. 'mistral:tekken', "
                "'mistral:v3'), or use chat_format 'generic'."
            )
        super().__init__(model, tokenizer, exact=True)
        self._mistral = backend
        self._cache: dict[str, int] = {}
        self._tool_costs: dict[str, tuple[int, bool]] = {}
        self._user = self._chat([_USER]) - _BOS
        probe = {"role": "system", "content": "Hi"}
        # v7+: [SYSTEM_PROMPT] is a turn of its own; before: joined into the user turn
        self._joined_system = self._chat([probe, _USER]) != self._chat([probe]) + self._user

    def _chat(self, messages: Sequence[Mapping[str, Any]], tools: Any = None) -> int:
        return self._mistral.count_chat(messages, tools)

    # Public API ---------------------------------------------------------------------

    def message(self, msg: Message) -> int:
        if type(msg) is dict and len(msg) == 2:
            role, content = msg.get("role"), msg.get("content")
            if type(role) is str and type(content) is str:
                key = f"{role}\0{content}"
                n = self._cache.get(key)
                if n is None:
                    n = self._message(msg)
                    if len(self._cache) >= _MAX_CACHED:
                        self._cache.clear()
                    self._cache[key] = n
                return n
        return self._message(msg)

    def _message(self, msg: Any) -> int:
        role = validated_role(msg)
        view, media = self._text_view(msg)
        try:
            n = self._probe(role, view)
        except InvalidMessagesError as exc:
            log.debug("mistral-common refuses %r alone (%s): generic count", msg, exc)
            n = 2 * GENERIC_TOKENS_PER_MESSAGE + self._count(dumps(view))
        return n + media

    def _probe(self, role: str, msg: dict[str, Any]) -> int:
        if role == "user":
            return self._chat([msg]) - _BOS
        if role == "assistant":
            return self._chat([_USER, msg, _USER]) - _BOS - 2 * self._user
        if role == "tool":
            call_id = msg.get("tool_call_id")
            call = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id if isinstance(call_id, str) else _PROBE_ID,
                        "type": "function",
                        "function": {"name": str(msg.get("name") or "probe"), "arguments": "{}"},
                    }
                ],
            }
            return self._chat([_USER, call, msg]) - self._chat([_USER, call, _USER]) + self._user
        if role == "system":
            joined = self._chat([msg, _USER]) - _BOS - self._user
            if not self._joined_system:
                return joined
            return max(joined + _JOIN, self._chat([msg]) - _BOS)
        raise InvalidMessagesError(f"mistral-common has no role {role!r}")

    def _text_view(self, msg: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
        """``msg`` with only its text parts (what mistral-common sees), and the tokens of
        its other parts (images, files, audio), which are never passed on."""
        view = dict(msg)
        content = msg.get("content")
        if not isinstance(content, list):
            return view, 0
        media = self._parts(content, text=False)
        texts = [p for p in content if isinstance(p, Mapping) and p.get("type") == "text"]
        view["content"] = texts if texts else ""
        return view, media

    def tools(self, tools: Sequence[Tool] | None) -> int:
        return self._tools(tools)[0] if tools else 0

    def tools_exact(self, tools: Sequence[Tool] | None) -> bool:
        return self._tools(tools)[1] if tools else True

    def _tools(self, tools: Sequence[Tool]) -> tuple[int, bool]:
        """``(tokens, encoded)``; schemas mistral-common refuses get the generic rule."""
        tool_list = self._tool_list(tools)  # checked first: a bad schema names itself
        key = dumps(list(tools))
        hit = self._tool_costs.get(key)
        if hit is not None:
            return hit
        try:
            cost = (self._chat([_USER], tool_list) - self._chat([_USER]), True)
        except InvalidMessagesError:
            cost = (self._generic_tools(tool_list), False)
        if len(self._tool_costs) >= 1024:
            self._tool_costs.clear()
        self._tool_costs[key] = cost
        return cost

    def _role_exact(self, role: Any) -> bool:
        return role != "function" and not (role == "system" and self._joined_system)

    def _parts_exact(self, msg: Any) -> bool:
        # A system prompt joined into the last user turn is charged a margin for the
        # join; a message mistral-common refuses alone (a role it does not know, a tool
        # call id that is not 9 letters or digits) gets the generic rule.
        if not super()._parts_exact(msg) or not isinstance(msg, Mapping):
            return False
        role = msg.get("role")
        if not self._role_exact(role):
            return False
        ids = [msg.get("tool_call_id")] if role == "tool" else []
        ids += [c.get("id") for c in msg.get("tool_calls") or () if isinstance(c, Mapping)]
        return all(isinstance(i, str) and len(i) == 9 and i.isalnum() for i in ids)

    def base(self, tools: Sequence[Tool] | None = None) -> int:
        return _BOS + self.tools(tools)

    def count_rendered(self, messages: Messages, tools: Sequence[Tool] | None = None) -> int:
        """Exact: the whole conversation through mistral-common's ``encode_chat_completion``
        (plus what images and files cost). A conversation mistral-common refuses as a
        whole (it ends with an assistant turn, say) gets the additive count, which is
        never below it."""
        if not isinstance(messages, list | tuple):
            raise InvalidMessagesError(
                f"messages must be a list of message dicts, got {type(messages).__name__}."
            )
        views: list[dict[str, Any]] = []
        media = 0
        for i, msg in enumerate(messages):
            try:
                validated_role(msg)
                view, cost = self._text_view(msg)
            except BadMessage as exc:
                raise exc.at(i) from None
            views.append(view)
            media += cost
        tool_list = self._tool_list(tools) if tools else None
        try:
            return self._chat(views, tool_list) + media
        except InvalidMessagesError as exc:
            log.debug("%s: %s; counting message by message", self.model.name, exc)
            return self.count(messages, tools)
