"""One pass and the plan built from it.

:func:`run_pass` counts each section's items for one model (lazily, newest first, where
a section is contiguous), hands them to the pure solver (:func:`tokenflex.budget.solve`),
renders what was kept, and recounts only sections whose rendering is not the sum of
their parts (joined text). The solver is the only place that computes ``max_tokens``,
writes the output note and checks the promise. :func:`build_plan` makes the
:class:`~tokenflex.Plan` of a pass, once: the messages in request order, per-section
tokens, every dropped item as a run with its reason (read back from its section by
name), the reasoning taken out before the engine (:class:`TakenOut`), the warnings.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .._types import Message, Tool
from ..budget import Allocation, BudgetSpec, SectionSpec, solve
from ..cost import cached_tokens
from ..counting import MessageCounter, get_counter
from ..errors import ContextOverflowError
from ..models import Model, unknown_model_warning
from ..options import FitOptions
from ..plan import DroppedItems, DropRun, ItemSource, Plan, SummaryInfo, log_dropped
from .sections import Section

__all__ = [
    "LARGE_OUTPUT_PARTS",
    "Pass",
    "TakenOut",
    "build_plan",
    "dropped_messages_warnings",
    "dropped_warning",
    "large_output",
    "output_request",
    "run_pass",
]

log = logging.getLogger("tokenflex")


_ROUNDS = 8  # re-solves when joined text costs more than its parts


def output_request(
    model: Model, max_tokens: int | None, counter: MessageCounter, warnings: list[str]
) -> int:
    """The output request clamped to the model's max output; appends the warnings a plan
    for ``model`` carries from the start.

    ``max_tokens=None`` (the caller named no output) gives the most the model may emit:
    its max output, else its window. The solver then keeps the input down to the floor
    and lets the output take what is left (``BudgetSpec.output_given=False``), so a
    request without ``max_tokens`` keeps its history instead of reserving the model's
    whole max output for a reply that may be short."""
    request = (
        max_tokens if max_tokens is not None else (model.max_output_tokens or model.context_window)
    )
    if model.max_output_tokens is not None and request > model.max_output_tokens:
        warnings.append(
            f"max_tokens={request:,} is above {model.name}'s max output "
            f"{model.max_output_tokens:,}; requested {model.max_output_tokens:,}."
        )
        request = model.max_output_tokens
    if not model.known:  # the log said it once; the plan says it to its reader
        warnings.append(unknown_model_warning(model.name))
    if not counter.exact:
        warnings.append(
            f"{model.name}: counts are conservative estimates (no exact tokenizer or chat "
            "format registered)."
        )
    return request


@dataclass(slots=True)
class Pass:
    """One model's solve of one layout: the allocation and what it renders to."""

    model: Model
    counter: MessageCounter
    sections: list[Section]
    """Every section of the layout, in request order."""
    left_out: list[Section]
    """Optional sections left out whole (their envelope did not fit)."""
    alloc: Allocation
    rendered: dict[str, list[Message]]
    section_tokens: dict[str, int]
    base: int
    """Reply priming and tool schemas."""
    required: int
    """Base plus every required item: what must fit with the output floor."""
    warnings: list[str]
    tools: Sequence[Tool] | None = None
    """The request's tool schemas (counted in ``base``)."""

    def dropped_from(self, section: str) -> str | None:
        """Why ``section`` was cut (its first non-orphan drop reason), or None."""
        return next(
            (d.reason for d in self.alloc.dropped if d.section == section and d.reason != "orphan"),
            None,
        )


def run_pass(
    model: Model,
    sections: list[Section],
    *,
    tools: Sequence[Tool] | None,
    opts: FitOptions,
    warnings: Sequence[str] = (),
) -> Pass:
    """Count, solve and render ``sections`` for ``model`` (see the module docstring).

    Raises:
        ContextOverflowError: the required sections plus the output floor do not fit.
    """
    counter = get_counter(model)
    notes = list(warnings)
    request = output_request(model, opts.max_tokens, counter, notes)
    base = counter.base(tools)
    budget = BudgetSpec(
        context_window=model.context_window,
        requested_output=request,
        min_output_tokens=opts.min_output_tokens,
        safety_margin=opts.safety_margin,
        base_tokens=base,
        policy=opts.policy,
        input_cap=opts.max_input_tokens,
        max_input_tokens=model.max_input_tokens,
        output_given=opts.max_tokens is not None,
    )
    specs: dict[str, SectionSpec] = {}
    for s in sections:
        if not s.needs_room:
            specs[s.name] = s.spec(counter, 0)
    required = base + sum(_required(sp) for sp in specs.values())
    sensible = large_output(model, budget, required)
    if sensible is not None:
        budget = replace(budget, history_output=sensible)
        notes.append(
            f"max_tokens={request:,} is more than {model.name}'s {model.context_window:,}-token "
            "window can give after the required input and the margin: the history was fitted "
            "as if the smaller of the model's max output and a quarter of the window were "
            "asked, and the output takes what is left."
        )
    if any(s.needs_room for s in sections):
        room = model.context_window - opts.safety_margin
        room -= budget.reserved_output
        for cap in (opts.max_input_tokens, model.max_input_tokens):
            if cap is not None:
                room = min(room, cap)
        room -= required
        for s in sections:
            if s.needs_room:
                specs[s.name] = sp = s.spec(counter, room)
                required += _required(sp)
    left_out: list[Section] = []
    reserve = 0
    for _ in range(_ROUNDS + len(sections)):
        active = [s for s in sections if s not in left_out]
        try:
            alloc = solve(
                [specs[s.name] for s in active],
                replace(budget, base_tokens=base + reserve) if reserve else budget,
                model=model.name,
            )
        except ContextOverflowError:
            optional = [s for s in active if s.may_leave_out]
            if not optional:
                raise
            out = min(optional, key=lambda s: (_priority(specs[s.name]), -sections.index(s)))
            left_out.append(out)
            continue
        rendered = {s.name: s.render(alloc.kept[s.name]) for s in active}
        tokens = dict(alloc.section_tokens)
        added = {s.name: s.render_added() for s in active}
        inexact = [s for s in active if added[s.name] != []]
        if not inexact:
            break
        for s in inexact:
            extra = added[s.name]
            if extra is None:  # the whole rendering counted
                tokens[s.name] = counter.total(rendered[s.name])
            else:  # the kept items as the solve counted them, and what the render added
                tokens[s.name] = tokens.get(s.name, 0) + counter.total(extra)
        real = base + sum(tokens[s.name] for s in active)
        if real <= alloc.input_tokens:
            alloc = alloc.settle(real)
            break
        reserve += real - alloc.input_tokens
    else:  # pragma: no cover - needs a tokenizer where joining always costs more
        raise ContextOverflowError(
            f"{model.name}: the joined sections cost more than their parts and no re-solve "
            f"made them fit {model.context_window:,} tokens. Use message items instead of "
            "joined strings.",
            model=model.name,
            context_window=model.context_window,
            required_tokens=required,
            max_tokens=budget.floor,
            safety_margin=opts.safety_margin,
        )
    return Pass(
        model, counter, sections, left_out, alloc, rendered, tokens, base, required, notes, tools
    )


LARGE_OUTPUT_PARTS = 4
"""A too-large output request is fitted for this part (a quarter) of the window when the
model's max output is not known or larger (see :func:`large_output`)."""


def large_output(model: Model, budget: BudgetSpec, required: int) -> int | None:
    """The output the history is fitted for when the output request is larger than the
    window can give even with no history (``window - required - margin``), else None.

    Clients send output requests sized for the largest models (Claude Code 32,000,
    LangChain's ChatAnthropic 4,096); on a smaller window, reserving them would cost the
    whole history for room the model cannot use. Such a request is treated as ``flex``:
    the history keeps what it would keep at a sensible output, the smaller of the
    model's max output and a quarter of the window (:data:`LARGE_OUTPUT_PARTS`), and the output
    takes the rest (down to the floor). A request the window can give is reserved as
    asked.

    >>> from tokenflex.models import get_model
    >>> b = BudgetSpec(context_window=2048, requested_output=32_000)
    >>> large_output(get_model("gpt-4"), replace(b, context_window=8192), 100)
    2048
    """
    if not budget.output_given or budget.policy != "reserve":
        return None
    room = budget.context_window - budget.safety_margin - required
    if budget.requested_output <= room:
        return None
    share = model.context_window // LARGE_OUTPUT_PARTS
    sensible = min(model.max_output_tokens or share, share, budget.requested_output)
    return max(sensible, budget.floor)


def _required(spec: SectionSpec) -> int:
    if spec.required == -1:
        return sum(spec.items)  # required sections carry lists
    if spec.required > 0:
        return sum(list(spec.items)[: spec.required])
    return 0


def _priority(spec: SectionSpec) -> int:
    return spec.priority


_TO_KEEP_MORE = {
    "share": "raise history_share",
    "max_items": "raise max_messages",
    "cap": "raise max_input_tokens",
}


def dropped_messages_warnings(p: Pass, runs: Sequence[DropRun], opts: FitOptions) -> list[str]:
    """One warning per message section that dropped messages: how many, why, what was
    kept, and how to keep more. Nothing is dropped silently, and "max_tokens reduced"
    alone does not say that history went.

    The dropped messages' own tokens are not summed here: fit() counts history newest
    first only as far as the budget needs, and counting the rest for one number would
    make every fit O(history). ``plan.dropped`` counts each one when it is read.
    """
    out: list[str] = []
    for s in p.sections:
        if s.role not in ("history", "ranked") or s in p.left_out:
            continue
        reasons: dict[str, int] = {}
        for r in runs:
            if r.section == s.name and r.reason != "summarized":
                reasons[r.reason] = reasons.get(r.reason, 0) + r.stop - r.start
        dropped = sum(reasons.values())
        if not dropped:
            continue
        kept = len(p.rendered.get(s.name, ()))
        tokens = p.section_tokens.get(s.name, 0)
        out.append(
            dropped_warning(s, reasons, kept, p.model.context_window, tokens, opts.max_tokens)
        )
    return out


def _grouped(n: int) -> str:
    """``f"{n:,}"``, a third as costly for the counts under a thousand (most of a
    warning's counts of messages; the fast path writes one warning per fit)."""
    return str(n) if -1000 < n < 1000 else f"{n:,}"


def dropped_warning(
    s: Section,
    reasons: Mapping[str, int],
    kept: int,
    window: int,
    tokens: int,
    max_tokens: int | None,
) -> str:
    """The warning of one message section that dropped messages (``reasons``: how many
    for each reason, in the order of the runs); also the fast path's, which updates a
    held cut's counts without a pass."""
    dropped = sum(reasons.values())
    why = ", ".join([f"{reason}: {_grouped(n)}" for reason, n in reasons.items()])
    which = "the newest " if s.role == "history" else ""
    text = (
        f"{s.name}: dropped {_grouped(dropped)} of {_grouped(dropped + kept)} messages "
        f"({why}); kept {which}{_grouped(kept)} in the {window:,}-token window "
        f"({tokens:,} tokens). plan.dropped lists each one."
    )
    if not s.label:  # fit()'s own history: name the options that keep more
        main, most = "orphan", -1  # the reason that dropped the most; orphans only alone
        for reason, n in reasons.items():
            if reason != "orphan" and n > most:
                main, most = reason, n
        fix = _TO_KEEP_MORE.get(main) or (
            "lower max_tokens" if max_tokens is not None else "lower min_output_tokens"
        )
        text += f" To keep more: {fix}, add fallback_models=[...], or pass summarizer=."
    return text


@dataclass(frozen=True)
class TakenOut:
    """What the reasoning step took out of the caller's messages before the engine saw
    them (a chat message's ``reasoning_content``: the rule is
    :func:`tokenflex.formats.chat.chat_to_internal`'s), one step for fit(), Prompt and
    Conversation alike: never sent, and listed in ``plan.dropped`` by :func:`build_plan`
    (section and reason ``reasoning``, the caller's index, its tokens)."""

    texts: Mapping[int, str]
    """Caller's message index -> the reasoning text taken out of it, in order."""

    section = "reasoning"

    def runs(self) -> list[DropRun]:
        return [DropRun(self.section, i, i + 1, "reasoning") for i in self.texts]

    def item(self, index: int) -> Any:
        return self.texts[index]

    def item_tokens(self, index: int, item: Any, counter: MessageCounter) -> int:
        return counter.text(item)


def build_plan(
    p: Pass,
    *,
    opts: FitOptions,
    started: float,
    runs: Sequence[DropRun] = (),
    summary: SummaryInfo | None = None,
    fallback_from: str | None = None,
    taken_out: TakenOut | None = None,
    prefix: Callable[[Sequence[Message], int], int | None] | None = None,
) -> Plan:
    """The :class:`~tokenflex.Plan` of a pass; ``runs`` adds items dropped before it
    (a summarized span), ``taken_out`` the reasoning the caller's messages lost before
    the engine; ``prefix`` records the plan's messages and input tokens in a
    conversation's memory and gives the tokens of the prefix it shares with the plan
    before (``plan.prefix_tokens``). ``plan.dropped`` reads each item from its section by
    name (a dict)."""
    order = {s.name: i for i, s in enumerate(p.sections)}
    sources: dict[str, ItemSource] = {s.name: s for s in p.sections}
    all_runs = list(runs)
    messages: list[Any] = []
    warnings = list(p.warnings)
    extras: dict[str, Any] = {}
    for s in p.sections:
        if s in p.left_out:
            all_runs += s.runs(None)
            warnings.append(
                f"{s.name}: left out whole: it does not fit with the required input, the "
                "output floor and the margin. plan.dropped lists what it held."
            )
            continue
        messages += p.rendered[s.name]
        all_runs += s.runs(p.alloc)
        warnings += s.warnings()
        extras |= s.extras()
    all_runs.sort(key=lambda r: (order[r.section], r.start))
    warnings += p.alloc.notes
    warnings += dropped_messages_warnings(p, all_runs, opts)
    counter = p.counter
    warnings += counter.notes()  # what the model's chat template will not show it
    log_dropped(all_runs, p.model.name)
    if taken_out is not None and taken_out.texts:
        taken = taken_out.runs()
        log_dropped(taken, p.model.name)  # the solver never saw them
        all_runs += taken
        sources[taken_out.section] = taken_out
    alloc = p.alloc
    spec = alloc.spec
    assert spec is not None
    shared = prefix(messages, alloc.input_tokens) if prefix is not None else None
    plan = Plan(
        messages=messages,
        max_tokens=alloc.max_tokens,
        input_tokens=alloc.input_tokens,
        context_window=p.model.context_window,
        safety_margin=spec.safety_margin,
        requested_max_tokens=spec.requested_output,
        min_output_tokens=spec.floor,
        model=p.model,
        sections={k: v for k, v in p.section_tokens.items() if v} | {"tools_and_priming": p.base},
        dropped=DroppedItems(all_runs, sources, counter),
        summary=summary,
        warnings=tuple(dict.fromkeys(warnings)),
        exact=counter.exact_for(messages, p.tools),
        policy=opts.policy,
        elapsed_ms=(time.perf_counter() - started) * 1000,
        fallback_from=fallback_from,
        extras=extras,
        prefix_tokens=shared,
        cached_tokens=cached_tokens(p.model, shared) if shared is not None else None,
    )
    log.debug("tokenflex: %r", plan)
    return plan
