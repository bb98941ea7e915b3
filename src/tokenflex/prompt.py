"""Prompt: a builder for multi-section prompts, fitted by the same solver as fit().

:func:`tokenflex.fit` knows one layout (system, summary, documents, history, current
turn). ``Prompt`` lets you lay out your own: add sections in the order they should appear
in the request, each with a priority, an optional minimum and cap in tokens,
``required``, and a way to shrink, then call :meth:`Prompt.fit`.

>>> from tokenflex import Prompt
>>> p = (
...     Prompt("gpt-4o", max_tokens=500)
...     .add("system", "You are a concise assistant.", required=True)
...     .add("memories", ["Likes tea.", "Lives in Lyon."], scores=[0.2, 0.9])
...     .add("current", [{"role": "user", "content": "Where do I live?"}], required=True)
... )
>>> plan = p.fit()
>>> [m["role"] for m in plan.messages]
['system', 'system', 'user']

**Sections.** ``content`` is a list of OpenAI-style message dicts (sent as they are), a
list of strings (joined into one message with ``role`` and an optional ``header``), or
one string (one item, or segments of it with ``shrink="truncate"``). Items are atomic:
an assistant message with ``tool_calls`` stays with its results.

**Shrinking** (optional sections; required ones are never shrunk):

- ``drop_oldest``: keep the newest items that fit, without gaps (history). The kept
  messages never start with an answer whose question was dropped (reason ``orphan``).
- ``drop_lowest``: keep the highest-``scores`` items that fit, skipping any that do not
  (memories, retrieved passages); without scores the given order is the importance
  order, most important first. Kept items appear in their input order.
- ``truncate``: keep the longest prefix of a text that fits, cut at a ``boundary``
  (``paragraph``, ``line``, ``sentence`` or ``word``); ``marker`` is appended when text
  was cut so the model knows.

**The promise** is fit()'s: ``input_tokens + max_tokens + safety_margin <= window``,
``max_tokens >= min_output_tokens`` and nothing required dropped, else
:class:`~tokenflex.errors.ContextOverflowError`. ``plan.input_tokens`` is the count of
the messages returned (joined text is counted as joined, not as the sum of its parts).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ._types import Message, Tool
from .budget import Policy
from .counting import MessageCounter, get_counter
from .errors import InvalidInputError
from .models import Model, get_model
from .plan import Plan

__all__ = ["Boundary", "Prompt", "Shrink", "segments"]

Shrink = Literal["drop_oldest", "drop_lowest", "truncate"]
Boundary = Literal["paragraph", "line", "sentence", "word"]

# A cut is made before the delimiter, so a segment starts with the whitespace that
# separates it from the previous one (as BPE pieces do: " word"), the sum of the
# segments' tokens is the text's, and "".join(segments) is the text again.
_CUTS: dict[str, re.Pattern[str]] = {
    "paragraph": re.compile(r"(\n[ \t]*\n\s*)"),
    "line": re.compile(r"(\n)"),
    "sentence": re.compile(r"((?<=[.!?。！？])\s+|(?<=[。！？]))"),
    "word": re.compile(r"(\s+)"),
}


def segments(text: str, boundary: Boundary) -> list[str]:
    """``text`` cut at each ``boundary``; the segments join back to ``text``.

    >>> segments("One. Two! Three", "sentence")
    ['One.', ' Two!', ' Three']
    """
    try:
        pattern = _CUTS[boundary]
    except KeyError:
        raise InvalidInputError(
            f"boundary={boundary!r} is not valid; use one of {sorted(_CUTS)}."
        ) from None
    parts = pattern.split(text)  # [text, delimiter, text, delimiter, ..., text]
    out = [parts[0]] + [parts[i] + parts[i + 1] for i in range(1, len(parts) - 1, 2)]
    return [s for s in out if s]


@dataclass
class _Section:
    name: str
    order: int
    messages: list[Message] | None  # message sections
    texts: list[str] | None  # text sections (items joined into one message)
    required: bool
    priority: int
    min_tokens: int
    cap: int | None
    share: float | None
    min_items: int
    max_items: int | None
    shrink: Shrink
    scores: list[float] | None
    role: str
    header: str
    separator: str
    marker: str

    def source(self) -> list[Any]:
        return self.messages if self.messages is not None else self.texts or []


class Prompt:
    """A multi-section prompt for one model; :meth:`fit` returns a :class:`~tokenflex.Plan`.

    Args:
        model: Model name or :class:`~tokenflex.Model`.
        max_tokens: Output request; None: the model's max output, else 4,000.
        policy: ``reserve`` keeps the requested output and trims input; ``flex`` keeps
            input and lets the output shrink to ``min_output_tokens``.
        min_output_tokens: The output floor (never above the request).
        safety_margin: Tokens kept free.
        max_input_tokens: Cap on input tokens for optional items.
        tools: Tool schemas sent with the request (counted in the base cost).
        strict: Unknown model names raise instead of getting the conservative default.
    """

    def __init__(
        self,
        model: str | Model,
        *,
        max_tokens: int | None = None,
        policy: Policy = "reserve",
        min_output_tokens: int = 500,
        safety_margin: int = 100,
        max_input_tokens: int | None = None,
        tools: Sequence[Tool] | None = None,
        strict: bool = False,
    ) -> None:
        from .options import FitOptions

        # FitOptions validates the shared knobs with the same messages fit() gives.
        FitOptions(
            max_tokens=max_tokens,
            policy=policy,
            min_output_tokens=min_output_tokens,
            safety_margin=safety_margin,
            max_input_tokens=max_input_tokens,
        )
        self.model = model if isinstance(model, Model) else get_model(model, strict=strict)
        self.max_tokens = max_tokens
        self.policy = policy
        self.min_output_tokens = min_output_tokens
        self.safety_margin = safety_margin
        self.max_input_tokens = max_input_tokens
        self.tools = list(tools) if tools else None
        self._sections: list[_Section] = []

    def add(
        self,
        name: str,
        content: str | Sequence[str] | Sequence[Message],
        *,
        required: bool = False,
        priority: int = 0,
        shrink: Shrink | None = None,
        min_tokens: int = 0,
        cap: int | None = None,
        share: float | None = None,
        min_items: int = 0,
        max_items: int | None = None,
        scores: Sequence[float] | None = None,
        role: str = "system",
        header: str = "",
        separator: str = "\n\n",
        boundary: Boundary = "sentence",
        marker: str = "\n[truncated]",
    ) -> Prompt:
        """Add a section; sections appear in the request in the order they are added.

        Args:
            name: Section name, unique (``system``, ``memories``, ``history``, ...).
            content: Message dicts, strings, or one string.
            required: Every item must fit, or fit() raises.
            priority: Higher priorities fill first (required items always come first).
            shrink: How an optional section gives way: ``drop_oldest`` (default for
                messages), ``drop_lowest`` (default for strings) or ``truncate``
                (one string, cut at ``boundary``).
            min_tokens: Room reserved for this section against higher priorities.
            cap: Most tokens the section may take.
            share: Soft target share of the room left at its turn (yields to
                ``min_items`` and to the hard window).
            min_items: Keep at least this many items if the window allows.
            max_items: Keep at most this many items.
            scores: Per-item relevance for ``drop_lowest`` (higher is kept first).
            role: Role of the message that carries string items.
            header: Text put before string items in their message.
            separator: Between string items.
            boundary: Where ``truncate`` may cut.
            marker: Appended to a truncated text.

        Returns:
            The prompt, for chaining.
        """
        if any(s.name == name for s in self._sections):
            raise InvalidInputError(f"Section {name!r} was added twice; names are unique.")
        if required and shrink is not None:
            raise InvalidInputError(
                f"Section {name!r}: a required section is never shrunk; drop shrink= or "
                "required=True."
            )
        msgs: list[Message] | None = None
        texts: list[str] | None = None
        if isinstance(content, str):
            if shrink == "truncate":
                texts = segments(content, boundary)
            else:
                texts = [content] if content else []
        elif isinstance(content, Sequence) and all(isinstance(x, str) for x in content):
            texts = [str(x) for x in content if x]
            if shrink == "truncate":
                raise InvalidInputError(
                    f"Section {name!r}: shrink='truncate' cuts one string; pass a str."
                )
        elif isinstance(content, Sequence) and all(isinstance(x, dict) for x in content):
            msgs = list(content)  # type: ignore[arg-type]
            if shrink == "truncate":
                raise InvalidInputError(
                    f"Section {name!r}: shrink='truncate' cuts a string, not messages."
                )
        else:
            raise InvalidInputError(
                f"Section {name!r}: content must be a str, a list of str or a list of "
                "message dicts."
            )
        n = len(msgs) if msgs is not None else len(texts or [])
        if scores is not None and len(scores) != n:
            raise InvalidInputError(
                f"Section {name!r}: {len(scores)} scores for {n} items; give one per item."
            )
        default: Shrink = "drop_oldest" if msgs is not None else "drop_lowest"
        self._sections.append(
            _Section(
                name=name,
                order=len(self._sections),
                messages=msgs,
                texts=texts,
                required=required,
                priority=priority,
                min_tokens=min_tokens,
                cap=cap,
                share=share,
                min_items=min_items,
                max_items=max_items,
                shrink=shrink or default,
                scores=list(scores) if scores is not None else None,
                role=role,
                header=header,
                separator=separator,
                marker=marker if shrink == "truncate" else "",
            )
        )
        return self

    # -- fitting -----------------------------------------------------------------------
    def fit(self) -> Plan:
        """Fit the sections into the model's window.

        Raises:
            ContextOverflowError: the required sections plus the output floor do not fit.
        """
        from ._prompt_fit import fit_prompt

        return fit_prompt(self, time.perf_counter())

    @property
    def sections(self) -> list[str]:
        """Section names in request order."""
        return [s.name for s in self._sections]

    def _counter(self) -> MessageCounter:
        return get_counter(self.model)

    def __repr__(self) -> str:
        return f"Prompt({self.model.name!r}, sections={self.sections})"
