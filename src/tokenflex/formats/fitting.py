"""What fit() does around the engine for a request format: in, then back out.

:func:`prepare` reads the caller's list (detecting the format unless ``format=`` names
it) into internal messages and chat-shaped tools for counting; the plain-chat fast path
converts nothing. :func:`finish` turns the engine's plan back into the caller's format:
the kept internal messages give back the caller's own items, system text the plan added
(a summary, packed documents) goes into Anthropic's ``system`` or becomes a Responses
message, dropped runs are re-indexed to the caller's list, reasoning taken out of chat
messages is listed as dropped, and the warnings say which counts are estimates.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..counting import get_counter
from ..counting.checks import BadMessage
from ..counting.media import estimate_notes
from ..counting.shape import check_one, shape_checker
from ..errors import InvalidInputError
from ..models import Model
from ..plan import DroppedItems, DropRun, Plan, log_dropped
from .anthropic import anthropic_to_internal, with_system
from .chat import chat_to_internal, is_plain_chat
from .detect import FORMATS, detect_format
from .native import Converted, NativeMessage
from .objects import plain
from .responses import responses_to_internal
from .tools import tools_to_chat

__all__ = ["Prepared", "check_prepared", "finish", "prepare"]

_MESSAGE_SECTIONS = ("system", "summary", "history", "current")


@dataclass
class Prepared:
    """A request ready for the engine, and what is needed to give it back."""

    messages: Sequence[Any]
    """Internal messages (the caller's list itself on the fast path)."""
    tools: Sequence[Any] | None
    """Tools in the chat shape, for counting."""
    given_tools: Sequence[Any] | None
    """Tools as the caller gave them (sent by ``plan.request()``)."""
    converted: Converted | None
    """None on the fast path (plain chat dicts: nothing to give back)."""


def prepare(
    messages: Sequence[Any],
    *,
    format: str | None,
    system: Any,
    tools: Sequence[Any] | None,
    keep_reasoning: bool = False,
    lazy_history: bool = False,
) -> Prepared:
    """The caller's request as internal messages.

    Raises:
        InvalidInputError: an unknown ``format``, or ``system=`` / ``history=`` with a
            format that cannot take them.
        InvalidMessagesError: a message that is not of the format (names its index).
    """
    if format is not None and format not in FORMATS:
        raise InvalidInputError(f"format={format!r} is unknown. Use one of {', '.join(FORMATS)}.")
    counted = (
        tools_to_chat(tools)
        if tools
        and isinstance(tools, list | tuple)
        and not all(isinstance(t, Mapping) and "function" in t for t in tools)
        else tools
    )
    if format in (None, "chat") and system is None and is_plain_chat(messages):
        return Prepared(messages, counted, tools, None)
    fmt = format or detect_format(messages, system=system)
    if fmt == "chat":
        if system is not None:
            raise InvalidInputError(
                "system= is for Anthropic's top-level system or the Responses instructions; "
                "a chat request carries its system prompt as the first message."
            )
        conv = chat_to_internal(messages, keep_reasoning=keep_reasoning)
    elif lazy_history:
        raise InvalidInputError(
            f"history= reads chat messages; this request is {fmt}. Pass the whole "
            "conversation as messages."
        )
    elif fmt == "anthropic":
        conv = anthropic_to_internal(messages, system)
    else:
        conv = responses_to_internal(messages, system)
    return Prepared(conv.messages, counted, tools, conv)


def check_prepared(prepared: Prepared, model: Model) -> None:
    """Check every internal message (kept or not) the way counting reads it, naming the
    caller's index: the first of the items a unit stands for, or ``system=``.

    Raises:
        BadMessage: the first malformed message.
    """
    checker = shape_checker(model)
    for k, m in enumerate(prepared.messages):
        try:
            check_one(checker, m)
            if isinstance(m, NativeMessage):
                for offset, item in enumerate(m.native):
                    try:
                        _json_ready(item)
                    except BadMessage as exc:
                        raise exc.at(m.start + offset) from None
        except BadMessage as exc:
            if not isinstance(m, NativeMessage):
                raise exc.at(k) from None
            if m.start < 0:
                raise BadMessage(f"(system=) {exc.problem}", exc.fix) from None
            raise exc.at(m.start) from None


def _json_ready(item: Any) -> None:
    """Raise BadMessage if ``item`` (sent as given by ``plan.request()``) is not JSON."""
    try:
        json.dumps(plain(item))
    except (TypeError, ValueError, RecursionError) as exc:
        raise BadMessage(
            f"has a value that cannot be sent as JSON ({type(exc).__name__}: {exc})",
            "Use str keys, JSON values and no circular references in message fields",
        ) from None


def _native_span(conv: Converted, k: int) -> tuple[int, int]:
    m = conv.messages[k]
    if isinstance(m, NativeMessage):
        return (max(m.start, 0), max(m.start, 0) + len(m.native) if m.start >= 0 else 0)
    return (k, k + 1)  # chat: one to one


def _native_out(plan: Plan, conv: Converted) -> tuple[list[Any], Any]:
    out: list[Any] = []
    added: list[str] = []
    for m in plan.messages:
        if isinstance(m, NativeMessage):
            out += m.native
        elif conv.format == "anthropic":
            content = m.get("content")
            added.append(content if isinstance(content, str) else str(content))
        elif conv.format == "responses":
            out.append({"role": m.get("role"), "content": m.get("content")})
        else:
            out.append(m)
    system = with_system(conv.system, added) if conv.format == "anthropic" else conv.system
    return out, system


def finish(plan: Plan, prepared: Prepared) -> Plan:
    """``plan`` in the caller's format (see the module doc)."""
    notes = estimate_notes(plan.messages)
    tools = tuple(prepared.given_tools or ())
    conv = prepared.converted
    if conv is None:
        if not notes and not tools:
            return plan
        return replace(plan, warnings=tuple(dict.fromkeys([*plan.warnings, *notes])), tools=tools)
    messages, system = _native_out(plan, conv)
    old = plan.dropped
    runs: list[DropRun] = []
    for section, start, stop, reason in old.runs():
        if section not in _MESSAGE_SECTIONS:
            runs.append(DropRun(section, start, stop, reason))
            continue
        a, _ = _native_span(conv, start)
        _, b = _native_span(conv, stop - 1)
        runs.append(DropRun(section, a, b, reason))
    counter = get_counter(plan.model)
    reasoning = dict(conv.reasoning)
    taken_out = [DropRun("reasoning", i, i + 1, "reasoning") for i, _ in conv.reasoning]
    log_dropped(taken_out, plan.model.name)  # the solver never saw them: log them here
    runs += taken_out
    given = [m for c in conv.messages if isinstance(c, NativeMessage) for m in c.native]
    unit_at = {
        c.start: k
        for k, c in enumerate(conv.messages)
        if isinstance(c, NativeMessage) and c.start >= 0
    }

    def item(section: str, i: int) -> Any:
        if section == "reasoning":
            return reasoning[i]
        if section in _MESSAGE_SECTIONS:
            return given[i] if conv.format != "chat" else _chat_item(conv, i)
        return old_item(section, i)

    def old_item(section: str, i: int) -> Any:
        return next(d.item for d in old if d.section == section and d.index == i)

    def cost(section: str, i: int, it: Any) -> int:
        if section == "reasoning":
            return counter.text(reasoning[i])
        if section not in _MESSAGE_SECTIONS:
            return old.cost_of(section, i)
        if conv.format == "chat":
            return old.cost_of(section, i)
        k = unit_at.get(i)
        if k is None:
            return 0  # a later item of a unit: the unit's tokens are on its first item
        return old.cost_of(section, k)

    summary = plan.summary
    if summary is not None and conv.format != "chat":
        a, _ = _native_span(conv, summary.covers[0])
        _, b = _native_span(conv, max(summary.covers[1] - 1, summary.covers[0]))
        summary = replace(summary, covers=(a, b))
    return replace(
        plan,
        messages=messages,
        system=system,
        format=conv.format,
        tools=tools,
        summary=summary,
        dropped=DroppedItems(runs, item, cost),
        warnings=tuple(dict.fromkeys([*plan.warnings, *notes])),
    )


def _chat_item(conv: Converted, i: int) -> Any:
    m = conv.messages[i]
    return m.native[0] if isinstance(m, NativeMessage) else m
