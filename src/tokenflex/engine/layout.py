"""What an entry point tells the engine: its :class:`Layout` (the sections of one
request, in order) and the history a summary may stand for (:class:`SummaryTarget`).

fit(), Prompt and Conversation each implement :class:`Layout`; everything else in
:mod:`tokenflex.engine` works on a layout and never asks which entry point made it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from .._types import Message, Tool
from ..models import Model
from .sections import MessageSection, Section

__all__ = ["Layout", "SummaryTarget", "history_section", "stable_target"]


class Layout(Protocol):
    """What fit(), Prompt and Conversation tell the engine."""

    model: Model
    tools: Sequence[Tool] | None

    def sections(self, model: Model) -> list[Section]:
        """The request's sections, in request order, counted for ``model``."""
        ...

    def summary_target(self) -> SummaryTarget | None:
        """The history a summarizer may shorten, if any."""
        ...

    def with_summary(self, summary: Message, recent_start: int) -> Layout:
        """The layout with ``summary`` standing for its history before ``recent_start``."""
        ...


@dataclass(frozen=True)
class SummaryTarget:
    """The history a summary may stand for: ``source[lo:hi]`` of section ``section``."""

    section: str
    source: Sequence[Message]
    lo: int
    hi: int
    tail: int = 0
    """Messages after ``hi`` that count toward ``keep_recent`` (the current turn)."""
    previous: int | None = None
    """Index in ``source`` of the summary message the new one rolls forward."""


def stable_target(layout: Layout, model: Model) -> SummaryTarget | None:
    """The history a cache-stable fit holds the cut of: the one a summary may shorten,
    else the layout's first newest-first message section (a Prompt's ``drop_oldest``)."""
    target = layout.summary_target()
    if target is not None:
        return target
    for s in layout.sections(model):
        if s.role == "history":
            assert isinstance(s, MessageSection)  # the history is a message section
            return SummaryTarget(s.name, s.source, s.lo, s.hi)
    return None


def history_section(layout: Layout, sections: Sequence[Section]) -> MessageSection | None:
    """The layout's history among ``sections`` (see :func:`stable_target`)."""
    target = layout.summary_target()
    for s in sections:
        if s.role == "history" and (target is None or s.name == target.section):
            assert isinstance(s, MessageSection)  # the history is a message section
            return s
    return None
