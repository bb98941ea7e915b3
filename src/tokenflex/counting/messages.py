"""What one message costs: the :class:`MessageCounter` interface every counter follows,
and the per-message envelope rules of the ``openai``, ``openai-0301`` and ``generic`` chat
formats (:class:`EnvelopeCounter`).

The per-format rules are described in :mod:`tokenflex.counting`.

Beyond the cookbook (documented, conservative rules):

- Assistant ``tool_calls`` (and legacy ``function_call``): per call, the function name,
  the arguments JSON and the call id, plus 12 tokens for the call's envelope.
- Tool results (role ``tool`` / ``function``): the cookbook rule (``tool_call_id``
  included) plus 8 tokens for the function-name header the API renders.
- Tool schemas: nested schema parts the cookbook skips (objects, arrays, ``anyOf``, extra
  keywords) add the tokens of their compact JSON (see :mod:`tokenflex.counting.tools`).
- Images: see :mod:`tokenflex.counting.images` (size read from a data URL's header, never
  fetched; remote URLs cost the model's worst case).
- Files (PDFs) and audio: conservative estimates from the request's own bytes, see
  :mod:`tokenflex.counting.media`; a file's name is counted as text.
- ``reasoning_content`` on an assistant message is counted as its text (fit() takes it
  out of the history it sends and lists it in ``plan.dropped``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._types import Message, Messages, Tool
from ..errors import InvalidInputError, InvalidMessagesError
from ..message.checks import (
    AUDIO_PARTS,
    FILE_PARTS,
    IMAGE_PARTS,
    ROLES,
    TEXT_PARTS,
    BadMessage,
    bad_part,
    validated_role,
)
from ..models import Model
from ..tokenizers import CountCache
from ..tokenizers.base import plain_until
from .images import image_size, image_tokens
from .media import audio_tokens, file_tokens
from .tools import dumps, generic_tools_tokens, openai_tools_tokens, tool_list

__all__ = [
    "GENERIC_BASE",
    "GENERIC_BASE_BY_FAMILY",
    "GENERIC_TOKENS_PER_MESSAGE",
    "TOOL_CALL_OVERHEAD",
    "TOOL_RESULT_OVERHEAD",
    "EnvelopeCounter",
    "MessageCounter",
    "shared_prefix",
]

TOOL_CALL_OVERHEAD = 12
TOOL_RESULT_OVERHEAD = 8
_ROLE_SET = frozenset(ROLES)
GENERIC_TOKENS_PER_MESSAGE = 8
GENERIC_BASE = 32
GENERIC_BASE_BY_FAMILY = {"gpt-oss": 96}


_EXACT_SEARCHES = 4
"""Runs of the last exact list :meth:`MessageCounter.exact_for` looks for in a new one."""
_PLAIN_ROLES = dict.fromkeys(ROLES)
"""The roles of the plain text messages :meth:`MessageCounter.exact_for` passes over in
one C loop (``plain_until``) for a counter whose :meth:`MessageCounter.message_exact` and
``_role_exact`` are the base class's: such a message is exact whatever its role."""


def shared_prefix(a: list[Any], b: list[Any]) -> int:
    """How many leading items lists ``a`` and ``b`` share (``is`` or ``==``), found by
    bisecting list comparisons, which run at C speed (``==`` tries ``is`` first).

    >>> x, y = {"role": "user", "content": "a"}, {"role": "user", "content": "b"}
    >>> shared_prefix([x, y, x], [x, y, y]), shared_prefix([x], [x, y])
    (2, 1)
    """
    n = min(len(a), len(b))
    # (only a list longer than the other is sliced: a list's usual successor extends it)
    if (a if len(a) == n else a[:n]) == (b if len(b) == n else b[:n]):
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class MessageCounter:
    """Counts tokens of messages for one model (get one with
    :func:`~tokenflex.counting.get_counter`).

    Attributes:
        model: The model counted for.
        tokenizer: The cached tokenizer (``.count(text)``).
        exact: True when counts are the model's real counts (real tokenizer and known
            chat format), False for conservative estimates.
    """

    def __init__(self, model: Model, tokenizer: CountCache, *, exact: bool) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.exact = exact
        self._count = tokenizer.count
        self._images: dict[tuple[str, str], int] = {}
        self._exact_seen: list[Any] = []  # the last list exact_for found exact

    def __repr__(self) -> str:
        kind = "exact" if self.exact else "conservative"
        return (
            f"<MessageCounter {self.model.name} {self.model.chat_format} "
            f"tokenizer={self.tokenizer.name} {kind}>"
        )

    # Public API ---------------------------------------------------------------------

    def notes(self) -> list[str]:
        """What a plan counted this way should tell its reader about the counts (a chat
        template that leaves a role out); none for the OpenAI rules."""
        return []

    def text(self, text: str) -> int:
        """Tokens of plain text (no chat envelope)."""
        if not isinstance(text, str):
            raise InvalidInputError(
                f"Expected text as a str, got {type(text).__name__}. Decode bytes first."
            )
        return self._count(text)

    def message(self, msg: Message) -> int:
        """Tokens one message adds to a request, its envelope included.

        Raises:
            InvalidMessagesError: the message is not an OpenAI-style chat message.
        """
        raise NotImplementedError

    def tools(self, tools: Sequence[Tool] | None) -> int:
        """Tokens the tool (function) schemas add to a request."""
        raise NotImplementedError

    def base(self, tools: Sequence[Tool] | None = None) -> int:
        """Tokens a request costs beyond its messages: reply priming and tool schemas."""
        raise NotImplementedError

    def tools_exact(self, tools: Sequence[Tool] | None) -> bool:
        """Whether :meth:`tools` is the model's own count for ``tools`` (True without
        tools), not a conservative estimate."""
        return self.exact

    def total(self, messages: Sequence[Message]) -> int:
        """The sum of :meth:`message` over ``messages`` (no reply priming, no tools)."""
        return sum(map(self.message, messages))

    def plain_run(
        self, messages: Sequence[Message], hi: int, lo: int, total: int, bound: int, limit: int
    ) -> tuple[list[int], int] | None:
        """:meth:`message` of ``messages[hi - 1]``, ``messages[hi - 2]``, ... down to
        ``messages[lo]`` in one native loop, as far as the messages are plain chat whose
        counts are cached, each its own group (never a tool call or result): the counts,
        newest first, and ``total`` plus their sum; it stops after the count that takes the
        sum past ``bound`` or makes ``limit`` counts. None: no such loop for this counter
        (count message by message)."""
        return None

    def message_exact(self, msg: Message) -> bool:
        """Whether :meth:`message` is the model's own count for ``msg``: False where a
        part of it is estimated (media, unknown fields, a rule beyond the chat format).

        O(1) for a plain ``{"role", "content": str}`` message."""
        if not self.exact:
            return False
        if type(msg) is dict and len(msg) == 2 and type(msg.get("content")) is str:
            return self._role_exact(msg.get("role"))
        return self._parts_exact(msg)

    def exact_for(self, messages: Messages, tools: Sequence[Tool] | None = None) -> bool:
        """Whether ``count(messages, tools)`` is the model's own count: an exact counter,
        tool schemas counted as the model renders them, and no estimated part in any
        message.

        >>> from tokenflex import get_counter
        >>> get_counter("gpt-4o").exact_for([{"role": "user", "content": "Hi"}])
        True
        """
        if not self.exact or not self.tools_exact(tools):
            return False
        # A plan's kept messages are mostly the previous plan's: the runs shared with the
        # last list found exact (found at C speed: the same pinned opening, the kept
        # history moved by a cut, a few searches) are not read again; nor, for the base
        # rules, runs of plain text messages (one C loop: exact whatever they say).
        given = list(messages)
        seen = self._exact_seen
        exact = self.message_exact
        i, n, searches = 0, len(given), _EXACT_SEARCHES if seen else 0
        plain = _PLAIN_ROLES if self._plain_exact else None
        while i < n:
            if searches and i < len(seen) and given[i] is seen[i]:  # the list grew
                searches -= 1
                i += shared_prefix(seen[i:], given[i:])
                continue
            if plain is not None:
                # a run of plain text messages, exact whatever they say: passed over in
                # C (a proxy's request is parsed afresh: no object of it was seen)
                k = plain_until(given, i, n, plain)
                if k > i:
                    i = k
                    continue
            if searches:
                searches -= 1
                try:
                    j = seen.index(given[i])  # (``==`` tries ``is`` first)
                except ValueError:
                    j = -1
                if j >= 0:
                    i += shared_prefix(seen[j:], given[i:])
                    continue
            if not exact(given[i]):
                return False
            i += 1
        self._exact_seen = given
        return True

    def _role_exact(self, role: Any) -> bool:
        """Whether a plain text message of this role is counted exactly."""
        return True

    @property
    def _plain_exact(self) -> bool:
        """Whether every plain text message is exact here (the base class's rules)."""
        cls = type(self)
        return (
            cls.message_exact is MessageCounter.message_exact
            and cls._role_exact is MessageCounter._role_exact
        )

    def _parts_exact(self, msg: Any) -> bool:
        """No estimated content part: text only, or (``openai`` formats) images whose size
        the data URL states, counted by OpenAI's own rule."""
        if not isinstance(msg, Mapping):
            return True  # message() raises on it
        content = msg.get("content")
        if not isinstance(content, list):
            return True
        openai = self.model.chat_format in ("openai", "openai-0301")
        for part in content:
            ptype = part.get("type") if type(part) is dict or isinstance(part, Mapping) else None
            if not isinstance(ptype, str):  # a list or object "type": message() refuses it
                return False
            if ptype in TEXT_PARTS:
                continue
            if ptype in IMAGE_PARTS and openai:
                image = part.get("image_url")
                url = image.get("url") if isinstance(image, Mapping) else image
                if isinstance(url, str) and image_size(url) is not None:
                    continue
            return False
        return True

    def count(self, messages: Messages, tools: Sequence[Tool] | None = None) -> int:
        """Tokens of a whole request: ``base(tools) + sum(message(m) for m in messages)``.

        Raises:
            InvalidMessagesError: ``messages`` is not a list of chat messages (the error
                names the index and the fix).
        """
        if not isinstance(messages, list | tuple):
            raise InvalidMessagesError(
                f"messages must be a list of message dicts, got {type(messages).__name__}. "
                "Wrap a single message in a list: [{'role': 'user', 'content': '...'}]."
            )
        total = self.base(tools)
        try:
            return total + sum(map(self.message, messages))
        except BadMessage:
            pass
        for i, msg in enumerate(messages):  # slow path, only to name the bad index
            try:
                self.message(msg)
            except BadMessage as exc:
                raise exc.at(i) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def count_rendered(self, messages: Messages, tools: Sequence[Tool] | None = None) -> int:
        """The exact total for the whole conversation (same as :meth:`count` unless the
        model counts through a chat template, where the whole conversation is rendered)."""
        return self.count(messages, tools)

    # Shared parts ---------------------------------------------------------------------

    def _image(self, url: str, detail: str) -> int:
        key = (url, detail)
        n = self._images.get(key)
        if n is None:
            n = image_tokens(self.model, image_size(url), detail)
            if len(self._images) >= 1024:
                self._images.clear()
            self._images[key] = n
        return n

    def _text_run(self, run: list[str]) -> int:
        """Tokens of a run of adjacent text parts: each on its own, or joined, whichever is
        more. A conversion to another API joins them (two Responses assistant items, or
        Anthropic text blocks, become one chat string), and a joined text may cost more
        than its parts where a piece spans the seam ("[INST]" + "ü"); a server that
        tokenizes each part may spend more than on the join."""
        each = sum(map(self._count, run))
        return max(each, self._count("".join(run))) if len(run) > 1 else each

    def _parts(self, parts: list[Any], *, text: bool = True) -> int:
        """Tokens of a list of content parts (text parts only when ``text``)."""
        total = 0
        run: list[str] = []  # the text parts since the last part of another kind
        for j, part in enumerate(parts):
            ptype = part.get("type") if type(part) is dict or isinstance(part, Mapping) else None
            if not isinstance(ptype, str):
                raise bad_part(j, part)
            if ptype in TEXT_PARTS:
                value = part.get(TEXT_PARTS[ptype])
                if not isinstance(value, str):
                    raise bad_part(j, part)
                if text:
                    run.append(value)
                continue
            if run:
                total += self._text_run(run)
                run = []
            if ptype in IMAGE_PARTS:
                image = part.get("image_url")
                url = image.get("url") if isinstance(image, Mapping) else image
                if not isinstance(url, str):
                    raise bad_part(j, part)
                detail = image.get("detail", "auto") if isinstance(image, Mapping) else "auto"
                total += self._image(url, str(detail or "auto"))
            elif ptype in FILE_PARTS:
                total += self._file(part.get("file"), j, part)
            elif ptype in AUDIO_PARTS:
                audio = part.get("input_audio")
                data = audio.get("data") if isinstance(audio, Mapping) else None
                if not isinstance(data, str):
                    raise bad_part(j, part)
                total += audio_tokens(data, audio.get("format"))
            else:
                raise bad_part(j, part)
        return total + self._text_run(run) if run else total

    def _file(self, file: Any, j: int, part: Any) -> int:
        """An estimate for one ``file`` part (see :mod:`tokenflex.counting.media`)."""
        if not isinstance(file, Mapping):
            raise bad_part(j, part)
        data, file_id = file.get("file_data"), file.get("file_id") or file.get("file_url")
        if not isinstance(data, str) and not isinstance(file_id, str):
            raise bad_part(j, part)
        name = file.get("filename")
        named = self._count(name) if isinstance(name, str) else 0
        return named + file_tokens(data if isinstance(data, str) else None, self._count)

    def _call(self, call: Any, with_id: bool) -> int:
        """Tokens of one assistant tool call (or legacy function_call)."""
        if type(call) is not dict and not isinstance(call, Mapping):
            raise BadMessage(
                f"has a tool call of type {type(call).__name__}",
                "Each tool call is {'id': ..., 'type': 'function', 'function': "
                "{'name': ..., 'arguments': '{...}'}}",
            )
        fn = call.get("function", call) if with_id else call
        if (type(fn) is not dict and not isinstance(fn, Mapping)) or not isinstance(
            fn.get("name"), str
        ):
            # Not a function call (e.g. a custom tool): count all of it.
            return TOOL_CALL_OVERHEAD + self._count(dumps(call))
        args = fn.get("arguments", "")
        total = TOOL_CALL_OVERHEAD + self._count(fn["name"])
        total += self._count(args if isinstance(args, str) else dumps(args))
        call_id = call.get("id") if with_id else None
        if isinstance(call_id, str):
            total += self._count(call_id)
        return total

    def _tool_calls(self, calls: Any) -> int:
        if not isinstance(calls, list | tuple):
            raise BadMessage(
                f"has tool_calls of type {type(calls).__name__}", "tool_calls must be a list"
            )
        return sum(self._call(call, True) for call in calls)

    def _tool_list(self, tools: Any) -> list[Mapping[str, Any]]:
        """``tools`` checked to be a list of tool dicts (raises InvalidInputError)."""
        return tool_list(tools)

    def _generic_tools(self, tools: Sequence[Tool] | None) -> int:
        """Tokens of tool schemas under the generic rule (also a template's fallback)."""
        return generic_tools_tokens(tools, self._count)


class EnvelopeCounter(MessageCounter):
    """Per-message envelope rules: the OpenAI cookbook, and the generic format."""

    def __init__(
        self,
        model: Model,
        tokenizer: CountCache,
        *,
        exact: bool,
        per_message: int,
        per_name: int,
        priming: int,
    ) -> None:
        super().__init__(model, tokenizer, exact=exact)
        self.per_message, self.per_name, self.priming = per_message, per_name, priming
        # Roles are few: pre-add the envelope so the hot path is two dict lookups. Tool
        # results carry an extra overhead: they take the slow path.
        self.plain_roles = {
            r: per_message + tokenizer.count(r) for r in ROLES if r not in ("tool", "function")
        }
        """Role -> the envelope of a plain ``{"role", "content": str}`` message of that role
        (the roles whose plain messages take the hot path)."""
        self._envelope = (per_message, per_name, TOOL_RESULT_OVERHEAD, TOOL_CALL_OVERHEAD)

    def message(self, msg: Message) -> int:
        # Hot path: a plain {"role", "content"} dict whose text the cache already holds.
        if type(msg) is dict and len(msg) == 2:
            role = msg.get("role")
            content = msg.get("content")
            if type(content) is str and type(role) is str:
                envelope = self.plain_roles.get(role)
                if envelope is not None:
                    return envelope + self._count(content)
        # an agent's messages (tool calls and results, a converted request's units): one
        # C call where the cache holds every text (_message's rule, for the shapes it reads)
        total = self.tokenizer.message_total(msg, _ROLE_SET, TEXT_PARTS, self._envelope)
        return total if total is not None else self._message(msg)

    def plain_run(
        self, messages: Sequence[Message], hi: int, lo: int, total: int, bound: int, limit: int
    ) -> tuple[list[int], int] | None:
        # (the roles of plain_roles are never a tool's: each plain message is its own group)
        if type(messages) is not list:
            return None
        return self.tokenizer.plain_run(messages, hi, lo, self.plain_roles, total, bound, limit)

    def count(self, messages: Messages, tools: Sequence[Tool] | None = None) -> int:
        plain = self._plain_total(messages)
        if plain is not None:
            return self.base(tools) + plain
        return super().count(messages, tools)

    def total(self, messages: Sequence[Message]) -> int:
        plain = self._plain_total(messages)
        return plain if plain is not None else super().total(messages)

    def _plain_total(self, messages: Any) -> int | None:
        """A chat history of plain {"role", "content"} dicts summed in one C loop (the
        envelope per role, the cached count per text); None: count message by message."""
        if type(messages) is list and messages:
            return self.tokenizer.plain_total(messages, self.plain_roles)
        return None

    def _message(self, msg: Any) -> int:
        role = validated_role(msg)
        total = self.per_message
        for key, value in msg.items():
            if value is None:
                continue
            if key == "content" and isinstance(value, list):
                total += self._parts(value)
            elif key == "tool_calls":
                total += self._tool_calls(value)
            elif key == "function_call":
                total += self._call(value, False)
            elif isinstance(value, str):
                total += self._count(value)
                if key == "name":
                    total += self.per_name
            elif isinstance(value, list | tuple | dict) and not value:
                continue
            else:
                total += self._count(dumps(value))  # unknown structured field: its JSON
        if role in ("tool", "function"):
            total += TOOL_RESULT_OVERHEAD
        return total

    def base(self, tools: Sequence[Tool] | None = None) -> int:
        return self.priming + self.tools(tools)

    def _parts_exact(self, msg: Any) -> bool:
        # Tool calls and results are counted by rules beyond the cookbook, and unknown
        # structured fields as their JSON: conservative estimates.
        if not isinstance(msg, Mapping):
            return True
        if msg.get("role") in ("tool", "function"):
            return False
        for key, value in msg.items():
            if key != "content" and value and not isinstance(value, str):
                return False
        return super()._parts_exact(msg)

    def tools(self, tools: Sequence[Tool] | None) -> int:
        if self.model.chat_format == "generic":
            return self._generic_tools(tools)
        return openai_tools_tokens(tools, self.model.family, self._count)
