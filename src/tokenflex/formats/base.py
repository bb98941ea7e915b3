"""What a request format is: one object per API, asked by everything that reads or writes
one (detection, fit(), ``plan.request(api=...)``, recall, the proxy).

The engine counts and groups OpenAI-chat-shaped messages. A :class:`RequestFormat` knows
how its API's conversation becomes such messages and back, what its request body and
tool definitions look like, how a model's tool calls appear in its answers, and, for the
proxy, its routes and its error shape. The formats are listed once, in
:mod:`tokenflex.formats.registry`; code that needs to know something about a format asks
the object, never compares its name.

Adding a format is one module (a subclass, most of whose methods have a default) and one
line in the registry (or :func:`~tokenflex.formats.registry.register_format` from a
plug-in).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from .body import RequestParts
from .native import Converted, NativeMessage

__all__ = ["EARLIER_LEFT_OUT", "RequestFormat", "ToolCall"]

EARLIER_LEFT_OUT = "(Earlier turns of this conversation were left out.)"
"""The user turn a converted request opens with when its conversation would open with
the model's turn (Anthropic and Gemini want the user's first)."""

ToolCall = tuple[Any, Any, Any]
"""One tool call read from a model's answer: ``(call id, tool name, arguments)``."""


class RequestFormat:
    """One API's request format. Subclasses set the class attributes and override the
    conversions; the defaults describe a format whose items are chat messages."""

    name: ClassVar[str]
    """The format's name (``format=`` / ``api=`` / ``plan.format``)."""
    internal: ClassVar[bool] = False
    """The engine's own form (chat): plain items are counted as given, one internal
    message per item at the same index, ``history=`` can be read lazily, audio parts
    can be sent."""
    bare_system: ClassVar[bool] = False
    """A ``system=`` given with messages that carry no format's mark means this format
    (Anthropic's top-level ``system``; one format at most says so)."""
    user_first: ClassVar[bool] = False
    """The API wants the conversation to open with the user's turn: a cut history opens
    at a user message."""
    path: ClassVar[str | None] = None
    """The proxy route of this format, also the upstream path the fitted body is sent to
    (None: not served by the proxy). A ``{model}`` segment is the model's name."""
    stream_path: ClassVar[str | None] = None
    """The proxy's streaming route for this format, when it has its own (None: a
    ``stream`` field in the body says so)."""
    count_path: ClassVar[str | None] = None
    """The proxy's token-count route for this format (None: none)."""
    via_chat: ClassVar[bool] = False
    """The proxy serves this format in front of an OpenAI-compatible upstream: a request
    is converted to chat (:meth:`to_chat`), fitted and sent as chat, and the answer is
    converted back (:meth:`from_chat_answer`); False: fitted in this format and sent on
    in it to :attr:`path`."""
    items_key: ClassVar[str] = "messages"
    """The request body's field that holds the conversation."""
    takes_checked: ClassVar[bool] = False
    """Its :meth:`parse` skips the ``checked`` leading items a parse of it passed before;
    False: the proxy calls it without ``checked`` (a plug-in's parse need not take it).
    Said by the class that writes the parse: a subclass that writes its own parse and
    does not say it again is called without ``checked``."""
    system_key: ClassVar[str | None] = None
    """The request body's field that holds the top-level system prompt (None: none)."""
    limit_key: ClassVar[str] = "max_tokens"
    """The request body's output-limit field."""
    limit_required: ClassVar[bool] = False
    """The API requires the output limit: the proxy always sets it."""
    text_items: ClassVar[bool] = False
    """A string in :attr:`items_key` is one user turn (the Responses ``input``)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "parse" in cls.__dict__ and "takes_checked" not in cls.__dict__:
            cls.takes_checked = False  # a parse of its own, written without ``checked``

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    # -- detection ---------------------------------------------------------------------
    def marks(self, item: Any) -> bool:
        """Whether ``item`` (a caller's message, dict or object) carries a mark only this
        format has (see :mod:`tokenflex.formats.detect`)."""
        return False

    def marks_system(self, system: Any) -> bool:
        """Whether a ``system=`` value is of a shape only this format has."""
        return False

    # -- the conversation, to the engine's messages and back ----------------------------
    def to_internal(
        self, items: Sequence[Any], system: Any = None, *, keep_reasoning: bool = False
    ) -> Converted:
        """The caller's items (and top-level system) as internal messages, each a
        :class:`~tokenflex.formats.native.NativeMessage` that remembers its items.

        Raises:
            BadMessage: an item that is not of this format (names its index).
            InvalidInputError: a ``system=`` this format cannot take.
        """
        raise NotImplementedError

    def added(self, message: Mapping[str, Any]) -> Any:
        """A message the plan added (a summary, packed documents) as one of this
        format's items; None: it goes into the top-level system instead
        (:meth:`with_system`)."""
        return {"role": message.get("role"), "content": message.get("content")}

    def with_system(self, system: Any, extra: Sequence[str]) -> Any:
        """``system`` with the plan's added system texts (when :meth:`added` says None)."""
        return system

    def back(
        self, messages: Sequence[Any], system: Any, given: Sequence[Any] | None = None
    ) -> tuple[list[Any], Any]:
        """A plan's messages as the caller's items (each kept unit gives back the
        caller's own items), and the top-level system with what the plan added.
        ``given``: the caller's list now: where its items equal those a unit was read
        from, they are given back (an equal copy put in since is the caller's object
        now); a unit read from an altered copy (reasoning taken out) gives back that."""
        out: list[Any] = []
        extra: list[str] = []
        for m in messages:
            if isinstance(m, NativeMessage):
                caller = (
                    tuple(given[m.start : m.start + len(m.native)])
                    if given is not None and m.start >= 0
                    else None
                )
                out += caller if caller == m.native else m.native
                continue
            item = self.added(m)
            if item is not None:
                out.append(item)
            else:
                content = m.get("content")
                extra.append(content if isinstance(content, str) else str(content))
        return out, self.with_system(system, extra)

    # -- whole requests, between APIs ---------------------------------------------------
    def to_chat(self, items: Sequence[Any], system: Any = None) -> list[dict[str, Any]]:
        """A whole conversation of this format as OpenAI chat messages (what only this
        API has, such as thinking, is not carried)."""
        raise NotImplementedError

    def from_chat(self, messages: Sequence[Any]) -> tuple[Any, list[Any]]:
        """``(system, items)`` of this format for OpenAI chat messages."""
        raise NotImplementedError

    def body(self, model: str, items: list[Any], system: Any, max_tokens: int) -> dict[str, Any]:
        """The request body for a conversation (tools are added by the caller)."""
        body: dict[str, Any] = {"model": model}
        if system is not None and self.system_key is not None:
            body[self.system_key] = system
        body[self.items_key] = items
        body[self.limit_key] = max_tokens
        return body

    def items_of(self, body: Mapping[str, Any]) -> Any:
        """The conversation a client's body holds in :attr:`items_key` (a string is one
        user turn where :attr:`text_items` says so); not checked."""
        items = body.get(self.items_key)
        if isinstance(items, str) and self.text_items:
            return [{"role": "user", "content": items}]
        return items

    def limit_fields(self) -> tuple[str, ...]:
        """The top-level fields a client's body may set the output limit in, the
        preferred one first (empty: the limit is nested, read and set it with
        :meth:`limit_of` and :meth:`set_limit`)."""
        return (self.limit_key,)

    def limit_field(self, model: str) -> str:
        """The field a body for ``model`` sets the output limit in."""
        return self.limit_key

    def set_limit(self, body: dict[str, Any], max_tokens: int) -> None:
        """Set the output limit of a client's body (the proxy's fitted body)."""
        body[self.limit_key] = max_tokens

    def limit_of(self, body: Mapping[str, Any]) -> Any:
        """The output limit a client's body asks for (None: none)."""
        return body.get(self.limit_key)

    # -- tools ----------------------------------------------------------------------------
    def tool(self, function: Mapping[str, Any]) -> dict[str, Any]:
        """One function tool in this format's shape, from chat's ``function`` object
        (``name``, ``description``, ``parameters``, ``strict``)."""
        raise NotImplementedError

    def tool_functions(self, tool: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """The chat ``function`` objects a tool definition of this format holds; None
        when ``tool`` is not of this format's shape."""
        return None

    def tools(self, functions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Function tools (chat ``function`` objects) in this format's shape."""
        return [self.tool(fn) for fn in functions]

    # -- answers --------------------------------------------------------------------------
    def tool_calls(self, response: Mapping[str, Any]) -> list[ToolCall]:
        """The tool calls of a (non-streamed) answer of this API, in order."""
        return []

    def tool_round(
        self, response: Mapping[str, Any], results: Sequence[tuple[str, str]]
    ) -> list[Any]:
        """The items to append to a request for an answer's tool calls and their results
        (``(call id, result text)``): the model's turn, then the results."""
        raise NotImplementedError

    def reported_input(self, fields: Mapping[bytes, int]) -> int | None:
        """The input tokens an answer's ``usage`` fields report (None: none)."""
        return fields.get(b"prompt_tokens", fields.get(b"input_tokens"))

    # -- the proxy ------------------------------------------------------------------------
    def parse(
        self, body: Mapping[str, Any], *, model: str | None = None, checked: int = 0
    ) -> RequestParts:
        """Check a client's request body (a JSON object) and read what fitting needs;
        ``model``: the model named by the route, for APIs that put it in the path.
        ``checked``: how many of the leading items are the very objects this format's
        parse passed before (the proxy reuses a conversation's items parsed for its last
        turn): a format whose checks look at one item at a time need not check them
        again; one may check them all the same.

        Raises:
            BodyError: a missing or wrong field (names it).
        """
        raise NotImplementedError

    def from_chat_answer(self, status: int, answer: Any) -> Any:
        """A chat completion (or an OpenAI-shaped error, ``status`` >= 400) as this API's
        answer, for a :attr:`via_chat` format."""
        raise NotImplementedError

    def count_answer(self, tokens: int) -> dict[str, Any]:
        """The JSON answer of this format's count route."""
        return {"input_tokens": tokens}

    def error_json(
        self, status: int, message: str, *, type: str, code: str | None, param: str | None
    ) -> dict[str, Any]:
        """The proxy's own error in this API's shape (OpenAI's by default)."""
        return {"error": {"message": message, "type": type, "param": param, "code": code}}

    def stream_error(
        self, status: int, message: str, *, type: str, code: str | None, param: str | None
    ) -> bytes:
        """The last event of a stream the upstream broke off, in this API's shape."""
        body = self.error_json(status, message, type=type, code=code, param=param)
        return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"
