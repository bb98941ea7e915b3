"""The fitting engine: a layout's sections, through the solver, into one Plan.

:func:`tokenflex.fit`, :class:`tokenflex.Prompt` and :class:`tokenflex.Conversation` are
*layouts*: each says which sections a request has, in which order, and how each may
shrink. Everything else happens here, once for all of them, one concept per module:

- :mod:`.layout`: the :class:`Layout` protocol an entry point implements, and the history
  a summary may stand for (:class:`SummaryTarget`).
- :mod:`.flow`: fitting a layout, written once as a sans-I/O flow (:func:`layout_flow`)
  and driven sync (:func:`fit_layout`) and async (:func:`afit_layout`): the first pass
  (the primary model, else the cheapest fallback that fits), then a summary of the
  history the pass had to cut and one more pass; and a conversation's "nothing changed"
  fit (:func:`grown_plan`: the previous plan plus the appended messages, all kept).
- :mod:`.sections`: every section kind (:class:`Section`, :class:`MessageSection`,
  :class:`DocumentsSection`), each with a :attr:`~Section.role` (history, pinned,
  current, documents, ...) by which the engine finds it.
- :mod:`.passes`: one pass (:func:`run_pass`: count, solve, render) and the plan built
  from it, once (:func:`build_plan`), with the reasoning taken out before the engine
  (:class:`TakenOut`).
- :mod:`.ladder`: the shrink ladder (:class:`ShrinkStep`, :data:`LADDER`) and the
  cache-stable cut (:func:`solve_history`).
- :mod:`.summary`: the summary step (:class:`~tokenflex.engine.summary.Outcome`) and a
  summary's key in a state store (:func:`summary_key`).

A conversation's memory between requests (where the last plan cut its history) is
:mod:`tokenflex.session`, outside the package: the proxy and the state stores read it too.
"""

from __future__ import annotations

from .flow import Work, afit_layout, fit_layout, grown_plan, layout_flow, whole_plan
from .ladder import (
    LADDER,
    ClearToolResults,
    DropReasoning,
    ShrinkStep,
    TruncateToolResults,
    solve_history,
)
from .layout import Layout, SummaryTarget, history_section, stable_target
from .passes import Pass, TakenOut, build_plan, run_pass
from .sections import (
    ANSWER_ROLES,
    ROLES,
    DocumentsSection,
    GroupIndex,
    ListIndex,
    MessageSection,
    Section,
    cut_note,
    opens_history,
)
from .summary import summary_key

__all__ = [
    "ANSWER_ROLES",
    "LADDER",
    "ROLES",
    "ClearToolResults",
    "DocumentsSection",
    "DropReasoning",
    "GroupIndex",
    "Layout",
    "ListIndex",
    "MessageSection",
    "Pass",
    "Section",
    "ShrinkStep",
    "SummaryTarget",
    "TakenOut",
    "TruncateToolResults",
    "Work",
    "afit_layout",
    "build_plan",
    "cut_note",
    "fit_layout",
    "grown_plan",
    "history_section",
    "layout_flow",
    "opens_history",
    "run_pass",
    "solve_history",
    "stable_target",
    "summary_key",
    "whole_plan",
]
