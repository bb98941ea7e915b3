"""Tool definitions in each API's shape, and the chat shape they are counted in.

- chat: ``{"type": "function", "function": {"name", "description", "parameters"}}``
- responses: ``{"type": "function", "name", "description", "parameters", "strict"}``
  (``strict`` is required there and defaults to true on the API, which rejects most
  schemas written for chat: a converted tool says ``strict: false`` unless it was strict)
- anthropic: ``{"name", "description", "input_schema"}`` (``cache_control`` kept)

Built-in tools (Responses ``web_search``, Anthropic server tools such as
``web_search_20250305``) have no schema: they are counted as their JSON and sent as given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidInputError

__all__ = ["tool_api", "tools_for", "tools_to_chat"]


def tool_api(tool: Mapping[str, Any]) -> str:
    """``chat``, ``responses``, ``anthropic`` or ``builtin`` for one tool definition."""
    if isinstance(tool.get("function"), Mapping):
        return "chat"
    if "input_schema" in tool:
        return "anthropic"
    if tool.get("type") == "function" and isinstance(tool.get("name"), str):
        return "responses"
    if "type" not in tool and isinstance(tool.get("name"), str):
        return "anthropic"
    return "builtin"


def _to_chat(tool: Mapping[str, Any]) -> dict[str, Any]:
    api = tool_api(tool)
    if api == "chat":
        return dict(tool)
    fn: dict[str, Any] = {}
    if api == "builtin":
        fn["name"] = str(tool.get("name") or tool.get("type") or "tool")
        fn["description"] = json.dumps(dict(tool), ensure_ascii=False, default=str)
        return {"type": "function", "function": fn}
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInputError(
            f"A {api} tool definition needs a 'name' (a non-empty string), got "
            f"{name!r}; its keys: {', '.join(map(str, tool))[:200]}. Give every tool a name."
        )
    fn["name"] = name
    if tool.get("description"):
        fn["description"] = tool["description"]
    params = tool.get("input_schema" if api == "anthropic" else "parameters")
    if params is not None:
        fn["parameters"] = params
    if tool.get("strict") is True:
        fn["strict"] = True
    return {"type": "function", "function": fn}


def tools_to_chat(tools: Sequence[Any] | None) -> list[dict[str, Any]] | None:
    """``tools`` (any API's shape) in the chat shape the counters read; None if none.
    Items that are not dicts are left for the counter's check to name."""
    if not tools:
        return None
    return [_to_chat(t) if isinstance(t, Mapping) else t for t in tools]


def tools_for(api: str, tools: Sequence[Any]) -> list[Any]:
    """``tools`` in ``api``'s shape (built-in tools as given)."""
    out: list[Any] = []
    for tool in tools:
        given = tool_api(tool)
        if given in (api, "builtin"):
            out.append(dict(tool))
            continue
        fn = _to_chat(tool)["function"]
        schema = fn.get("parameters") or {"type": "object", "properties": {}}
        if api == "chat":
            out.append(_to_chat(tool))
        elif api == "responses":
            entry = {
                "type": "function",
                "name": fn["name"],
                "parameters": schema,
                "strict": fn.get("strict") is True,
            }
            if fn.get("description"):
                entry["description"] = fn["description"]
            out.append(entry)
        else:
            entry = {"name": fn["name"], "input_schema": schema}
            if fn.get("description"):
                entry["description"] = fn["description"]
            out.append(entry)
    return out
