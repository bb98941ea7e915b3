"""Prompt.fit(): sections to solver specs, the allocation back to messages, and a Plan.

Each section becomes one :class:`~tokenflex.budget.SectionSpec` whose items are in keep
order (newest first, best score first, or reading order for a truncated text). A text
section's message envelope (role, header, marker) is its first item: required for a
required section, and for an optional one only while it fits (else the section is left
out and the solve repeated). The rendered messages are then counted as they will be
sent; when joining text made them cost more than the sum of their parts, the difference
is reserved and the solve repeated, so the plan's ``input_tokens`` is the real count.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._job import output_request
from ._types import Message
from .budget import Allocation, BudgetSpec, SectionSpec, solve
from .counting import MessageCounter
from .errors import ContextOverflowError, InvalidMessagesError
from .history import iter_groups
from .plan import DroppedItems, Plan, _DropRun, _log_dropped

if TYPE_CHECKING:
    from .prompt import Prompt, _Section


_ROUNDS = 8  # re-solves for joined text costing more than its parts
_ANSWER_ROLES = ("assistant", "tool", "function")


@dataclass
class _Layout:
    """One section as the solver sees it."""

    section: _Section
    costs: list[int]  # item tokens in keep order
    members: list[list[int]]  # per keep position, the input indices it stands for
    envelope: int | None = None  # tokens of the text message without items
    input_tokens: dict[int, int] = field(default_factory=dict)  # input index -> tokens

    @property
    def offset(self) -> int:
        return 0 if self.envelope is None else 1

    def spec(self) -> SectionSpec:
        s = self.section
        items = self.costs if self.envelope is None else [self.envelope, *self.costs]
        required = -1 if s.required else self.offset
        return SectionSpec(
            s.name,
            items,
            required=required,
            priority=s.priority,
            min_tokens=s.min_tokens,
            cap=s.cap,
            share=s.share,
            min_items=s.min_items + self.offset if s.min_items else 0,
            max_items=None if s.max_items is None else s.max_items + self.offset,
            contiguous=s.shrink in ("drop_oldest", "truncate"),
        )


def _keep_order(s: _Section, n: int, scores: list[float] | None) -> list[int]:
    if s.shrink == "truncate":
        return list(range(n))
    if s.shrink == "drop_oldest":
        return list(range(n - 1, -1, -1))
    if scores is None:
        return list(range(n))
    return sorted(range(n), key=lambda i: -scores[i])


def _layout(s: _Section, counter: MessageCounter) -> _Layout:
    if s.messages is not None:
        msgs = s.messages
        cost = counter.message
        try:
            counter.count(msgs)  # validates, naming the bad message's index; counts are cached
        except InvalidMessagesError as exc:
            raise InvalidMessagesError(f"Section {s.name!r}: {exc}") from None
        groups = list(iter_groups(msgs, 0, len(msgs), cost))[::-1]  # chronological
        scores = None
        if s.scores is not None:  # a group scores as its best message
            scores = [max(s.scores[i] for i in range(a, b)) for a, b, _ in groups]
        order = _keep_order(s, len(groups), scores)
        lay = _Layout(
            s,
            [groups[g][2] for g in order],
            [list(range(groups[g][0], groups[g][1])) for g in order],
        )
        lay.input_tokens = {i: cost(msgs[i]) for a, b, _ in groups for i in range(a, b)}
        return lay
    texts = s.texts or []
    count = counter.text
    sep = "" if s.shrink == "truncate" else s.separator
    tokens = {i: count(sep + t) for i, t in enumerate(texts)}
    order = _keep_order(s, len(texts), s.scores)
    head = s.header + s.separator if s.header else ""
    envelope = counter.message({"role": s.role, "content": head + s.marker})
    return _Layout(s, [tokens[i] for i in order], [[i] for i in order], envelope, tokens)


def _render(lay: _Layout, kept: tuple[int, ...]) -> tuple[list[Message], list[int]]:
    """The section's messages and the input indices they keep (ascending)."""
    s = lay.section
    positions = [p - lay.offset for p in kept if p >= lay.offset]
    indices = sorted(i for p in positions for i in lay.members[p])
    if s.messages is not None:
        return [s.messages[i] for i in indices], indices
    if not indices:
        return [], []
    texts = s.texts or []
    head = s.header + s.separator if s.header else ""
    if s.shrink == "truncate":
        body = "".join(texts[i] for i in indices)
        if len(indices) < len(texts):
            body += s.marker
    else:
        body = s.separator.join(texts[i] for i in indices)
    return [{"role": s.role, "content": head + body}], indices


def _runs(lay: _Layout, alloc: Allocation | None, kept: list[int]) -> list[_DropRun]:
    """Dropped input indices of a section as runs with their reasons."""
    s = lay.section
    n_items = len(s.source())
    reason_at: dict[int, str] = {}
    if alloc is not None:
        for d in alloc.dropped:
            if d.section != s.name:
                continue
            stop = len(lay.costs) + lay.offset if d.count is None else d.start + d.count
            for p in range(d.start, stop):
                for i in lay.members[p - lay.offset] if p >= lay.offset else ():
                    reason_at.setdefault(i, d.reason)
    kept_set = set(kept)
    runs: list[_DropRun] = []
    for i in range(n_items):
        if i in kept_set:
            continue
        reason = reason_at.get(i, "budget")
        last = runs[-1] if runs else None
        if last is not None and last.stop == i and last.reason == reason:
            runs[-1] = _DropRun(s.name, last.start, i + 1, reason)
        else:
            runs.append(_DropRun(s.name, i, i + 1, reason))
    return runs


def _orphans(lay: _Layout, kept: list[int]) -> tuple[list[int], list[_DropRun]]:
    """History never starts with an answer whose question was dropped."""
    s = lay.section
    if s.messages is None or s.shrink != "drop_oldest" or not kept or kept[0] == 0:
        return kept, []
    msgs = s.messages
    drop: list[int] = []
    rest = list(kept)
    while rest and msgs[rest[0]].get("role") in _ANSWER_ROLES:
        # the whole group: an answer with its tool results
        drop.append(rest.pop(0))
        while rest and msgs[rest[0]].get("role") in ("tool", "function"):
            drop.append(rest.pop(0))
    if not drop:
        return kept, []
    return rest, [_DropRun(s.name, drop[0], drop[-1] + 1, "orphan")]


def fit_prompt(prompt: Prompt, started: float) -> Plan:
    """Solve, render and verify a :class:`~tokenflex.prompt.Prompt` (see the module doc)."""
    model = prompt.model
    counter = prompt._counter()
    warnings: list[str] = []
    request = output_request(model, prompt.max_tokens, counter, warnings)
    base = counter.base(prompt.tools)
    layouts = [_layout(s, counter) for s in prompt._sections if s.source()]
    left_out: list[_Layout] = []  # optional text sections whose envelope did not fit
    reserve = 0
    window, margin = model.context_window, prompt.safety_margin
    floor = max(0, min(prompt.min_output_tokens, request))
    for _ in range(_ROUNDS + len(layouts)):
        active = [lay for lay in layouts if lay not in left_out]
        spec = BudgetSpec(
            context_window=window,
            requested_output=request,
            min_output_tokens=prompt.min_output_tokens,
            safety_margin=margin,
            base_tokens=base + reserve,
            policy=prompt.policy,
            input_cap=prompt.max_input_tokens,
        )
        try:
            alloc = solve([lay.spec() for lay in active], spec, model=model.name)
        except ContextOverflowError:
            optional = [lay for lay in active if lay.envelope and not lay.section.required]
            if not optional:
                raise
            left_out.append(min(optional, key=lambda x: (x.section.priority, -x.section.order)))
            continue
        out: list[Message] = []
        rendered: dict[str, tuple[list[Message], list[int]]] = {}
        orphan_runs: list[_DropRun] = []
        for lay in active:
            msgs, solved = _render(lay, alloc.kept[lay.section.name])
            kept, orphaned = _orphans(lay, solved)
            if orphaned:
                msgs = [lay.section.messages[i] for i in kept]  # type: ignore[index]
                orphan_runs += orphaned
            rendered[lay.section.name] = (msgs, solved)
            out += msgs
        real = base + sum(counter.message(m) for m in out)
        if real <= alloc.input_tokens - reserve:
            break
        reserve += real - (alloc.input_tokens - reserve)
    else:
        if real + floor + margin > window:  # pragma: no cover - needs a pathological tokenizer
            raise ContextOverflowError(
                f"{model.name}: the joined sections cost {real:,} tokens, more than their "
                f"parts, and no re-solve made them fit {window:,} with the {floor:,}-token "
                "floor. Use message items instead of joined strings.",
                model=model.name,
                context_window=window,
                required_tokens=real,
                max_tokens=floor,
                safety_margin=margin,
            )
    max_tokens = min(request, window - margin - real)
    if not (real + max_tokens + margin <= window and max_tokens >= floor):  # the promise
        raise AssertionError(f"tokenflex prompt bug: input={real} max_tokens={max_tokens}")
    if max_tokens < request:
        warnings.append(
            f"max_tokens reduced from {request:,} to {max_tokens:,} to fit {real:,} input "
            f"tokens in the {window:,}-token window."
        )

    runs: list[_DropRun] = list(orphan_runs)
    sections: dict[str, int] = {}
    ordered: list[Message] = []
    by_name = {lay.section.name: lay for lay in layouts}
    for s in prompt._sections:
        found = by_name.get(s.name)
        if found is None:
            continue
        if found in left_out:
            runs += _runs(found, None, [])
            continue
        lay = found
        msgs, solved = rendered[s.name]
        ordered += msgs
        if msgs:
            sections[s.name] = sum(counter.message(m) for m in msgs)
        runs += _runs(lay, alloc, solved)  # orphans count as kept here: their own runs
    runs.sort(key=lambda r: (by_name[r.section].section.order, r.start))  # request order
    sections["tools_and_priming"] = base

    def item(section: str, i: int) -> Any:
        return by_name[section].section.source()[i]

    def item_cost(section: str, i: int, it: Any) -> int:
        return by_name[section].input_tokens.get(i, 0)

    _log_dropped(runs, model.name)
    return Plan(
        messages=[m if isinstance(m, dict) else dict(m) for m in ordered],
        max_tokens=max_tokens,
        input_tokens=real,
        context_window=window,
        safety_margin=margin,
        requested_max_tokens=request,
        min_output_tokens=floor,
        model=model,
        sections=sections,
        dropped=DroppedItems(runs, item, item_cost),
        warnings=tuple(dict.fromkeys([*warnings, *alloc.notes])),
        exact=counter.exact,
        policy=prompt.policy,
        elapsed_ms=(time.perf_counter() - started) * 1000,
    )
