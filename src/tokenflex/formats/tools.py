"""Tool definitions in each API's shape, and the chat shape they are counted in.

Each format says what its tool definitions look like
(:meth:`~tokenflex.formats.base.RequestFormat.tool_functions` reads one,
:meth:`~tokenflex.formats.base.RequestFormat.tools` writes them):

- chat: ``{"type": "function", "function": {"name", "description", "parameters"}}``
- responses: ``{"type": "function", "name", "description", "parameters", "strict"}``
  (``strict`` is required there and defaults to true on the API, which rejects most
  schemas written for chat: a converted tool says ``strict: false`` unless it was strict)
- anthropic: ``{"name", "description", "input_schema"}`` (``cache_control`` kept)
- gemini: ``{"functionDeclarations": [{"name", "description", "parameters"}, ...]}``
  (one tool holds every function)

Built-in tools (Responses ``web_search``, Anthropic server tools such as
``web_search_20250305``, Gemini ``googleSearch``) have no schema: they are counted as
their JSON and sent as given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidInputError
from .registry import default_format, formats, get_format

__all__ = ["tool_api", "tools_for", "tools_to_chat"]

BUILTIN = "builtin"


def _read(tool: Mapping[str, Any]) -> tuple[str, list[dict[str, Any]] | None]:
    """The format of one tool definition (:data:`BUILTIN`: none) and its functions."""
    for f in formats():
        functions = f.tool_functions(tool)
        if functions is not None:
            return f.name, functions
    return BUILTIN, None


def tool_api(tool: Mapping[str, Any]) -> str:
    """The format name of one tool definition (``chat``, ``responses``, ``anthropic``,
    ``gemini``), or ``builtin``."""
    return _read(tool)[0]


def _functions(tool: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The chat ``function`` objects of one tool (a built-in one: its JSON as the
    description, which is how it is counted)."""
    api, functions = _read(tool)
    if functions is None:
        name = str(tool.get("name") or tool.get("type") or "tool")
        return [
            {"name": name, "description": json.dumps(dict(tool), ensure_ascii=False, default=str)}
        ]
    for fn in functions:
        given = fn.get("name")
        if not isinstance(given, str) or not given:
            raise InvalidInputError(
                f"A {api} tool definition needs a 'name' (a non-empty string), got "
                f"{given!r}; its keys: {', '.join(map(str, tool))[:200]}. Give every tool a name."
            )
    return functions


def tools_to_chat(tools: Sequence[Any] | None) -> list[dict[str, Any]] | None:
    """``tools`` (any API's shape) in the chat shape the counters read; None if none.
    Items that are not dicts are left for the counter's check to name."""
    if not tools:
        return None
    chat = default_format()
    out: list[Any] = []
    for t in tools:
        if not isinstance(t, Mapping):
            out.append(t)
        elif tool_api(t) == chat.name:
            out.append(dict(t))
        else:
            out += (chat.tool(fn) for fn in _functions(t))
    return out


def tools_for(api: str, tools: Sequence[Any]) -> list[Any]:
    """``tools`` in ``api``'s shape (tools already in it, and built-in tools, as given;
    the converted ones where the first of them was)."""
    target = get_format(api, option="api")
    out: list[Any] = []
    converted: list[dict[str, Any]] = []
    at = -1
    for tool in tools:
        if tool_api(tool) in (target.name, BUILTIN):
            out.append(dict(tool))
            continue
        if at < 0:
            at = len(out)
        converted += _functions(tool)
    if converted:
        out[at:at] = target.tools(converted)
    return out
