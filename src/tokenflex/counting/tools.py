"""What tool (function) schemas add to a request, per chat format.

``openai`` / ``openai-0301``
    The OpenAI cookbook's ``num_tokens_for_tools`` with the constants of the model's
    family (other OpenAI families get the larger ``func_init``: conservative), plus the
    compact JSON of the nested schema parts the cookbook skips (objects, arrays,
    ``anyOf``, extra keywords).
``generic`` (and templates that ignore tools)
    :data:`GENERIC_TOOLS_PREAMBLE` plus the tools' JSON as a server would render them
    (indented by 4).

Structured values (tool-call arguments given as objects, unknown message fields) are
counted as their compact JSON, :func:`dumps`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._types import Tool
from ..errors import InvalidInputError
from ..message.objects import compact_json

__all__ = [
    "GENERIC_TOOLS_PREAMBLE",
    "dumps",
    "generic_tools_tokens",
    "openai_tools_tokens",
    "tool_list",
]

GENERIC_TOOLS_PREAMBLE = 128
"""Tokens a generic chat format spends introducing the tool list."""

# (func_init, prop_init, prop_key, enum_init, enum_item, func_end), from the cookbook's
# num_tokens_for_tools. Other OpenAI families get the larger func_init (conservative).
_TOOL_CONSTANTS = {
    "gpt-4o": (7, 3, 3, -3, 3, 12),
    "gpt-4o-mini": (7, 3, 3, -3, 3, 12),
    "gpt-4": (10, 3, 3, -3, 3, 12),
    "gpt-3.5-turbo": (10, 3, 3, -3, 3, 12),
}
_TOOL_CONSTANTS_DEFAULT = (10, 3, 3, -3, 3, 12)
# Property and parameter keys the cookbook rule counts; the rest is counted as JSON.
_FLAT_KEYS = frozenset({"type", "description", "enum"})
_PARAM_KEYS = frozenset({"type", "properties", "required"})


def dumps(value: Any, indent: int | None = None) -> str:
    """The JSON text counted for a structured value: compact unless ``indent`` is given.

    Non-ASCII characters stay as they are and values JSON cannot hold become ``str()``.
    """
    if indent is None:
        return compact_json(value)
    return json.dumps(value, ensure_ascii=False, indent=indent, default=str)


def tool_list(tools: Any) -> list[Mapping[str, Any]]:
    """``tools`` as a list, once checked to be a list of dicts.

    Raises:
        InvalidInputError: ``tools`` is not a list or tuple, or one of its items is not
            a dict (the error names the index and the expected shape).
    """
    if not isinstance(tools, list | tuple):
        raise InvalidInputError(
            f"tools must be a list of tool definitions, got {type(tools).__name__}. "
            "Use [{'type': 'function', 'function': {'name': ..., 'parameters': {...}}}]."
        )
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise InvalidInputError(
                f"tools[{i}] is a {type(tool).__name__}, not a dict. Use "
                "{'type': 'function', 'function': {'name': ..., 'parameters': {...}}}."
            )
    return list(tools)


def generic_tools_tokens(tools: Sequence[Tool] | None, count: Callable[[str], int]) -> int:
    """Tokens of tool schemas under the generic rule (0 without tools).

    Args:
        tools: The request's tool definitions.
        count: The model's text counter (``CountCache.count``).

    Raises:
        InvalidInputError: ``tools`` is not a list of dicts.
    """
    if not tools:
        return 0
    return GENERIC_TOOLS_PREAMBLE + count(dumps(tool_list(tools), indent=4))


def openai_tools_tokens(
    tools: Sequence[Tool] | None, family: str, count: Callable[[str], int]
) -> int:
    """The cookbook's ``num_tokens_for_tools``, plus nested schema parts it skips.

    Args:
        tools: The request's tool definitions (``{"type": "function", "function": ...}``
            or the legacy ``functions`` list of bare function dicts).
        family: The model's family, which picks the cookbook's constants.
        count: The model's text counter (``CountCache.count``).

    Returns:
        The tokens the schemas add (0 without tools).

    Raises:
        InvalidInputError: ``tools`` is not a list of dicts, or a tool has no function
            name.
    """
    if not tools:
        return 0
    func_init, prop_init, prop_key, enum_init, enum_item, func_end = _TOOL_CONSTANTS.get(
        family, _TOOL_CONSTANTS_DEFAULT
    )
    total = 0
    for i, tool in enumerate(tool_list(tools)):
        fn = tool.get("function", tool)  # also the legacy `functions` list
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise InvalidInputError(
                f"tools[{i}] has no function name. Use {{'type': 'function', "
                "'function': {'name': ..., 'description': ..., 'parameters': {...}}}."
            )
        total += func_init
        desc = str(fn.get("description") or "")
        total += count(fn["name"] + ":" + desc.removesuffix("."))
        params = fn.get("parameters") or {}
        props = (params.get("properties") or {}) if isinstance(params, Mapping) else {}
        if props:
            total += prop_init
            for key, prop in props.items():
                total += prop_key
                prop = prop if isinstance(prop, Mapping) else {"type": prop}
                p_type = prop.get("type", "")
                p_type = p_type if isinstance(p_type, str) else dumps(p_type)
                if "enum" in prop:
                    total += enum_init
                    for item in prop["enum"]:
                        total += enum_item + count(str(item))
                p_desc = str(prop.get("description", "")).removesuffix(".")
                total += count(f"{key}:{p_type}:{p_desc}")
                nested = {k: v for k, v in prop.items() if k not in _FLAT_KEYS}
                if nested:
                    total += count(dumps(nested))
        if isinstance(params, Mapping):
            extra = {k: v for k, v in params.items() if k not in _PARAM_KEYS}
            if extra:
                total += count(dumps(extra))
    return total + func_end
