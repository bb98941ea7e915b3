"""The fitting engine's invariants as hypothesis properties, checked against a slow reference.

Random conversations (system prompt or not, user/assistant turns, assistant tool calls with
one or several results, a current user turn, sometimes a trailing tool call after it, texts
from empty to a few thousand words), random registry models with small windows, and random
options go through ``tokenflex.fit``, ``tokenflex.Prompt`` and ``tokenflex.Conversation``.
Every plan is checked against a reference written here from the documented rules only
(README "The promise" and "History", docs/prompt.md): it recounts with
``tokenflex.count_messages``, walks the message lists by hand and finds the history the
solver should keep by brute force. Public API only.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

import tokenflex
from tokenflex import ContextOverflowError, Conversation, Prompt, count_messages

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(SETTINGS, max_examples=150)
# While a property is marked xfail it fails on nearly every run: no shrinking then (it
# costs half a minute per test), and the same examples every run so the strict marker is
# stable. Use SETTINGS again when its marker is removed.
XFAIL = settings(SETTINGS, phases=[Phase.explicit, Phase.reuse, Phase.generate], derandomize=True)

ANSWER_ROLES = ("assistant", "tool", "function")
PINNED_ROLES = ("system", "developer")
DROP_REASONS = {"budget", "share", "cap", "max_items", "orphan"}

# Prose, numbers, JSON, code, CJK and Cyrillic: the mix the counters see in practice.
WORDS = [
    *("the", "alpha", "beta", "gamma", "delta", "42", "3.14", "{json:", "true}", "[1,", "2]"),
    *("print(x)", "def", "f(a):", "東京", "日本語", "код", "ünïcode", "naïve", "—", "✓"),
    *("https://example.com/a?b=c", "return", "None;", "maintenance", "pump", "valve"),
    *("pressure", "warehouse", "parcel", "district", "shipped"),
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look up a part number in the plant's catalogue.",
            "parameters": {
                "type": "object",
                "properties": {"part": {"type": "string", "description": "Part number"}},
                "required": ["part"],
            },
        },
    }
]
MODELS = ["gpt-4o", "gpt-4", "gpt-3.5-turbo", "claude-3-5-sonnet", "mistral:7b"]


def brief(msgs: Sequence[dict[str, Any]]) -> str:
    """Messages in a failure report: role, size and tool ids, not the whole text."""
    parts = []
    for m in msgs:
        text = m.get("content") or ""
        calls = [c["id"] for c in m.get("tool_calls") or ()]
        tag = f"{m['role']}:{len(text.split())}w"
        if calls:
            tag += f"{calls}"
        if m.get("tool_call_id"):
            tag += f"<{m['tool_call_id']}>"
        parts.append(tag)
    return "[" + ", ".join(parts) + "]"


def words(n: int, seed: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 3 + i // 5) % len(WORDS)] for i in range(n))


# ------------------------------------------------------------------------ the reference


def msg_cost(m: dict[str, Any], model: tokenflex.Model) -> int:
    """What one message adds to a request: counted with and without it."""
    return count_messages([m], model=model) - count_messages([], model=model)


def is_answer(m: dict[str, Any]) -> bool:
    """May not open a cut history: an answer whose question was dropped. A tool round
    (an assistant message with tool calls) stands on its own and may."""
    if m.get("role") == "assistant" and m.get("tool_calls"):
        return False
    return m.get("role") in ANSWER_ROLES


def groups_of(msgs: Sequence[dict[str, Any]], lo: int, hi: int) -> list[tuple[int, int]]:
    """Atomic groups of ``msgs[lo:hi]``, oldest first: an assistant tool call with the tool
    results after it, else one message."""
    out, i = [], lo
    while i < hi:
        j = i + 1
        if msgs[i].get("role") == "assistant" and msgs[i].get("tool_calls"):
            while j < hi and msgs[j].get("role") == "tool":
                j += 1
        out.append((i, j))
        i = j
    return out


def requested_output(max_tokens: int | None, model: tokenflex.Model) -> int:
    """The output request: the caller's, else the most the model may emit (its max output,
    else its window); clamped to the model's max output."""
    request = (
        max_tokens if max_tokens is not None else (model.max_output_tokens or model.context_window)
    )
    if model.max_output_tokens is not None:
        request = min(request, model.max_output_tokens)
    return request


def newest_that_fit(costs: Sequence[int], room: int) -> int:
    """Brute force: how many of the newest groups (costs oldest first) fit in ``room``."""
    best = 0
    for k in range(len(costs) + 1):
        if sum(costs[len(costs) - k :]) <= room:
            best = k
    return best


def unorphaned(k: int, opens: Sequence[bool]) -> int:
    """``k`` newest groups kept of ``len(opens)``: when history was cut, the oldest kept
    group may not be an answer whose question was dropped; drop such groups."""
    n = len(opens)
    while 0 < k < n and not opens[n - k]:
        k -= 1
    return k


def expected_history_groups(
    costs: Sequence[int],
    opens: Sequence[bool],
    room: int,
    share: float | None,
    min_items: int,
    max_items: int | None,
) -> int:
    """The newest groups kept: all that fit the soft share of the room, more (up to
    ``min_items``) if the hard room allows, at most ``max_items``, then the orphan rule."""
    if sum(costs) <= room and (max_items is None or len(costs) <= max_items):
        return len(costs)  # do no harm: a history that fits is kept whole, share or not
    hard = newest_that_fit(costs, room)
    soft = hard if share is None else newest_that_fit(costs, math.floor(share * max(0, room)))
    k = max(soft, min(min_items, hard))
    if max_items is not None:
        k = min(k, max_items)
    return unorphaned(k, opens)


def sensible_output(model: tokenflex.Model, request: int) -> int:
    """The output history is fitted for when the request is more than the window can give
    (docs/fit.md): the smaller of the model's max output and a quarter of the window."""
    quarter = model.context_window // 4
    return min(model.max_output_tokens or quarter, quarter, request)


def room_for_optional(
    window: int,
    margin: int,
    request: int,
    floor: int,
    policy: str,
    cap: int | None,
    required: int,
    *,
    given: bool = True,
    sensible: int = 0,
) -> int:
    """Tokens optional items may take: ``reserve`` keeps the request, ``flex`` only the
    floor; without a max_tokens from the caller (``given`` False) only the floor too;
    ``max_input_tokens`` caps the input."""
    reserve = request if policy == "reserve" and given else floor
    if policy == "reserve" and given and request > window - margin - required:
        # an output the window cannot give: the input is fitted for a sensible output
        reserve = max(floor, sensible)
    total = window - margin - reserve
    if cap is not None:
        total = min(total, cap)
    return total - required


def sentences(text: str) -> list[str]:
    """``text`` cut before the whitespace after each sentence end (joins back to it)."""
    return [s for s in re.split(r"(?<=[.!?])(?=\s)", text) if s]


def check_tool_pairs(messages: Sequence[dict[str, Any]]) -> None:
    """Every tool result has its call in the plan and every call its results."""
    calls = {
        c["id"] for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or ()
    }
    answered = {m["tool_call_id"] for m in messages if m.get("role") == "tool"}
    assert answered <= calls, f"tool results without their call: {answered - calls}"
    assert calls <= answered, f"tool calls without their results: {calls - answered}"


def check_promise(plan: tokenflex.Plan, model: tokenflex.Model, tools: Any) -> None:
    assert plan.context_window == model.context_window
    assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= plan.context_window
    assert plan.max_tokens >= min(plan.min_output_tokens, plan.requested_max_tokens)
    assert plan.max_tokens <= plan.requested_max_tokens
    assert plan.input_tokens == count_messages(plan.messages, model=model, tools=tools)


_NUM = r"(\d[\d,]*)"
_REDUCED = re.compile(
    rf"max_tokens reduced from {_NUM} to {_NUM} to fit {_NUM} input tokens in the "
    rf"{_NUM}-token window\."
)
_ABOVE = re.compile(rf"max_tokens={_NUM} is above (.+)'s max output {_NUM}; requested {_NUM}\.")
_MIN_YIELDS = re.compile(rf"(\w+): min_items={_NUM} yields to the window; kept {_NUM}\.")
_DROPPED = re.compile(
    rf"\w+: dropped {_NUM} of {_NUM} messages \(([^)]*)\); kept (?:the newest )?{_NUM} in the "
    rf"{_NUM}-token window \({_NUM} tokens\)\. "
)
_BEYOND_SHARE = re.compile(
    rf"(\w+): kept {_NUM} items beyond its soft share \(([\d.]+)\) to honour min_items={_NUM}\."
)


def _int(s: str) -> int:
    """``1,011`` -> 1011; a number of 4+ digits must have its thousands separators."""
    assert re.fullmatch(r"-?\d{1,3}(,\d{3})*", s), f"{s!r} is not formatted with separators"
    return int(s.replace(",", ""))


def check_warning_numbers(
    plan: tokenflex.Plan,
    *,
    caller_max_tokens: int | None,
    model: tokenflex.Model,
    kept_items: dict[str, int],
    min_items: dict[str, int],
    kept_messages: dict[str, int] | None = None,
) -> None:
    """Every number a warning states is the plan's own. ``kept_messages``: messages kept
    per message section, whose "dropped" warning is checked against the plan."""
    kept_messages = kept_messages or {}
    reduced = [w for w in plan.warnings if w.startswith("max_tokens reduced")]
    # Without max_tokens the output takes what is left: nothing asked for was reduced.
    was_reduced = caller_max_tokens is not None and plan.max_tokens < plan.requested_max_tokens
    assert len(reduced) == (1 if was_reduced else 0), plan.warnings
    for section in {d.section for d in plan.dropped if d.reason != "summarized"}:
        if section not in kept_messages:
            continue
        (w,) = [w for w in plan.warnings if w.startswith(f"{section}: dropped ")]
        m = _DROPPED.match(w)
        assert m, w
        n, total, _why, n_kept, window, tokens = m.groups()
        dropped = [d for d in plan.dropped if d.section == section and d.reason != "summarized"]
        assert _int(n) == len(dropped) and _int(n_kept) == kept_messages[section], w
        assert _int(total) == len(dropped) + kept_messages[section], w
        assert _int(window) == plan.context_window, w
        assert _int(tokens) == plan.sections.get(section, 0), w
        reasons = {r: sum(1 for d in dropped if d.reason == r) for r in {d.reason for d in dropped}}
        stated = {r: _int(k) for r, k in re.findall(r"(\w+): (\d{1,3}(?:,\d{3})*)", _why)}
        assert stated == reasons, w
    for w in plan.warnings:
        if m := _REDUCED.fullmatch(w):
            x, y, z, win = (_int(g) for g in m.groups())
            assert (x, y, z, win) == (
                plan.requested_max_tokens,
                plan.max_tokens,
                plan.input_tokens,
                plan.context_window,
            ), w
        elif m := _ABOVE.fullmatch(w):
            asked, name, top, req = m.groups()
            assert _int(asked) == caller_max_tokens, w
            assert name == model.name and _int(top) == model.max_output_tokens, w
            assert _int(req) == plan.requested_max_tokens, w
        elif m := _MIN_YIELDS.fullmatch(w):
            section, n_min, n_kept = m.groups()
            assert _int(n_min) == min_items[section], w
            assert _int(n_kept) == kept_items[section], w
            assert kept_items[section] < min_items[section], w
        elif _DROPPED.match(w):
            continue  # checked above
        elif m := _BEYOND_SHARE.fullmatch(w):
            section, n_kept, _share, n_min = m.groups()
            assert _int(n_min) == min_items[section], w
            assert _int(n_kept) == kept_items[section], w
        else:  # any other warning: each number it states is one of the plan's
            known = {
                plan.requested_max_tokens,
                plan.max_tokens,
                plan.input_tokens,
                plan.context_window,
                plan.safety_margin,
                plan.min_output_tokens,
                *kept_items.values(),
                *min_items.values(),
            }
            for n in re.findall(r"\d[\d,]*", w.replace(model.name, "")):
                assert _int(n) in known, f"{n} in {w!r} is none of the plan's numbers"


def check_overflow(
    exc: ContextOverflowError,
    model: tokenflex.Model,
    required: int,
    floor: int,
    margin: int,
    *,
    numbers: bool,
) -> None:
    """A raise is only right when the required part alone, the floor and the margin
    exceed the window (no false raise); with ``numbers``, the error states the
    reference's numbers too."""
    window = model.context_window
    assert required + floor + margin > window, (required, floor, margin, window)
    if not numbers:
        return
    assert (exc.required_tokens, exc.context_window) == (required, window), str(exc)
    assert (exc.max_tokens, exc.safety_margin) == (floor, margin), str(exc)
    room = window - margin - floor
    nums = [_int(n) for n in re.findall(r"-?\d[\d,]*", str(exc).replace(model.name, ""))]
    assert required in nums and window in nums, str(exc)
    assert set(nums) <= {required, window, room, floor, margin, required - room}, str(exc)


# ------------------------------------------------------------------------ random inputs


@st.composite
def texts(draw: st.DrawFn) -> str:
    """Mostly short, sometimes empty, sometimes long (hundreds to thousands of words)."""
    kind = draw(st.integers(0, 9))
    n = (
        draw(st.integers(200, 2500))
        if kind == 0
        else draw(st.integers(20, 200))
        if kind < 4
        else draw(st.integers(0, 20))
    )
    return words(n, draw(st.integers(0, 50)))


@st.composite
def tool_turn(draw: st.DrawFn, tag: str) -> list[dict[str, Any]]:
    """An assistant message calling 1-3 tools, then one result per call."""
    n = draw(st.integers(1, 3))
    ids = [f"call_{tag}_{k}" for k in range(n)]
    call: dict[str, Any] = {
        "role": "assistant",
        "content": draw(st.sampled_from([None, "Let me check."])),
        "tool_calls": [
            {
                "id": cid,
                "type": "function",
                "function": {"name": "lookup", "arguments": f'{{"part": "{cid}"}}'},
            }
            for cid in ids
        ],
    }
    results = [{"role": "tool", "tool_call_id": cid, "content": draw(texts())} for cid in ids]
    return [call, *results]


@st.composite
def histories(draw: st.DrawFn, max_turns: int = 14) -> list[dict[str, Any]]:
    """User and assistant turns (any order) and tool calls with their results."""
    out: list[dict[str, Any]] = []
    for t in range(draw(st.integers(0, max_turns))):
        kind = draw(st.sampled_from(["user", "assistant", "user", "assistant", "tools"]))
        if kind == "tools":
            out += draw(tool_turn(f"h{t}"))
        else:
            m: dict[str, Any] = {"role": kind, "content": draw(texts())}
            if kind == "user" and draw(st.integers(0, 5)) == 0:
                m["name"] = "alice"
            out.append(m)
    return out


@st.composite
def current_turns(draw: st.DrawFn) -> list[dict[str, Any]]:
    """The current user message, sometimes followed by a tool call and its results (an
    agent loop in progress)."""
    out = [{"role": "user", "content": draw(texts())}]
    if draw(st.integers(0, 3)) == 0:
        out += draw(tool_turn("cur"))
    return out


@st.composite
def small_models(draw: st.DrawFn, full: int, request_hint: int) -> tokenflex.Model:
    """A registry model with a window around what the request needs: often too small for
    everything, sometimes too small for the required part, sometimes roomy."""
    base = tokenflex.get_model(draw(st.sampled_from(MODELS)))
    max_output = draw(st.sampled_from(["keep", None, 300, 2000]))
    max_output = base.max_output_tokens if max_output == "keep" else max_output
    frac = draw(st.floats(0.15, 1.5))
    window = max(1, int(frac * (full + request_hint)))
    return base.replace(
        name=f"{base.name}-w{window}-o{max_output}",
        context_window=window,
        max_output_tokens=max_output,
    )


@dataclass
class FitCase:
    messages: list[dict[str, Any]]
    sys_end: int
    cur: int
    model: tokenflex.Model
    tools: list[dict[str, Any]] | None
    max_tokens: int | None
    options: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        m = self.model
        return (
            f"FitCase({brief(self.messages)}, sys_end={self.sys_end}, cur={self.cur}, "
            f"model={m.name!r} window={m.context_window} max_output={m.max_output_tokens}, "
            f"tools={bool(self.tools)}, max_tokens={self.max_tokens}, {self.options})"
        )

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # hypothesis' failure report
        p.text(repr(self))

    def opt(self, name: str, default: Any) -> Any:
        return self.options.get(name, default)

    def kwargs(self) -> dict[str, Any]:
        return {"max_tokens": self.max_tokens, "tools": self.tools, **self.options}


@st.composite
def fit_cases(draw: st.DrawFn, *, maximal: bool = False) -> FitCase:
    """A conversation, a model and options. ``maximal``: history_share=1.0 and no
    min/max messages (the solver must keep all the history the window allows)."""
    system: list[dict[str, Any]] = []
    for role in draw(st.sampled_from([[], ["system"], ["system", "developer"]])):
        system.append({"role": role, "content": draw(texts())})
    history = draw(histories())
    current = draw(current_turns())
    msgs = [*system, *history, *current]
    tools = TOOLS if draw(st.booleans()) else None
    max_tokens = draw(st.one_of(st.none(), st.integers(1, 3000)))
    options: dict[str, Any] = {
        "policy": draw(st.sampled_from(["reserve", "flex"])),
        "min_output_tokens": draw(st.sampled_from([0, 1, 50, 500, 1200])),
        "safety_margin": draw(st.sampled_from([0, 10, 100, 250])),
    }
    if maximal:
        options["history_share"] = 1.0
    else:
        options["history_share"] = draw(st.sampled_from([0.3, 0.5, 0.8, 1.0]))
        options["min_messages"] = draw(st.sampled_from([0, 0, 1, 3, 8]))
        options["max_messages"] = draw(st.sampled_from([None, None, 0, 1, 4]))
    options["max_input_tokens"] = draw(st.sampled_from([None, None, None, 200, 1500]))
    probe = tokenflex.get_model("gpt-4o")
    full = count_messages(msgs, model=probe, tools=tools)
    model = draw(small_models(full, max_tokens or 1000))
    # pin=0: the history rules on their own (pinning is tested in test_agents.py). The
    # current turn is the newest tool round when one follows the last user message.
    options["pin"] = 0
    options["truncate_tool_results"] = False  # (truncation: tests/test_agents.py)
    cur = len(system) + len(history) + (1 if len(current) > 1 else 0)
    case = FitCase(msgs, len(system), cur, model, tools, max_tokens, options)
    if draw(st.integers(0, 3)) == 0:  # the required part, the floor and the margin fill it
        ref = reference(case)
        window = ref.required + ref.floor + options["safety_margin"]
        window = max(1, window + draw(st.sampled_from([-1, 0])))
        case.model = model.replace(name=f"{model.name}-r{window}", context_window=window)
    elif draw(st.booleans()):  # a window where the newest k groups fit exactly (or 1 short)
        ref = reference(case)
        case.model = draw(tight(model, ref.required, ref.group_costs, ref, options))
    return case


@st.composite
def tight(
    draw: st.DrawFn, model: tokenflex.Model, required: int, costs: list[int], ref: Any, o: Any
) -> tokenflex.Model:
    """``model`` with the window at which the newest ``k`` groups fit exactly, give or take
    a token: an off-by-one in the solver's room keeps the wrong number of groups here."""
    k = draw(st.integers(0, len(costs)))
    delta = draw(st.sampled_from([-1, 0, 0, 1]))
    reserve = o.get("policy", "reserve") == "reserve" and ref.given
    out = ref.request if reserve else ref.floor
    out = draw(st.sampled_from([out, ref.floor]))  # or at the overflow boundary
    window = required + sum(costs[len(costs) - k :]) + delta + o.get("safety_margin", 100) + out
    window = max(1, window)
    return model.replace(name=f"{model.name}-t{window}", context_window=window)


@dataclass
class Reference:
    """What the documented rules say a fit of ``case`` must give."""

    required: int
    request: int
    floor: int
    room: int
    group_bounds: list[tuple[int, int]]
    group_costs: list[int]
    opens: list[bool]
    given: bool = True
    """The caller gave max_tokens (without, the output takes what the input leaves)."""


def reference(case: FitCase) -> Reference:
    m, msgs = case.model, case.messages
    required_msgs = [*msgs[: case.sys_end], *msgs[case.cur :]]
    required = count_messages(required_msgs, model=m, tools=case.tools)
    request = requested_output(case.max_tokens, m)
    floor = min(case.opt("min_output_tokens", 500), request)
    room = room_for_optional(
        m.context_window,
        case.opt("safety_margin", 100),
        request,
        floor,
        case.opt("policy", "reserve"),
        case.opt("max_input_tokens", None),
        required,
        given=case.max_tokens is not None,
        sensible=sensible_output(m, request),
    )
    bounds = groups_of(msgs, case.sys_end, case.cur)
    costs = [sum(msg_cost(msgs[i], m) for i in range(a, b)) for a, b in bounds]
    opens = [not is_answer(msgs[a]) for a, _b in bounds]
    given = case.max_tokens is not None
    return Reference(required, request, floor, room, bounds, costs, opens, given)


def required_fits(case: FitCase, ref: Reference) -> bool:
    return ref.required + ref.floor + case.opt("safety_margin", 100) <= case.model.context_window


def fit_or_overflow(
    case: FitCase, ref: Reference, *, numbers: bool = False
) -> tokenflex.Plan | None:
    """fit(); a raise must be a true overflow (checked), then None."""
    try:
        plan = tokenflex.fit(case.messages, model=case.model, **case.kwargs())
    except ContextOverflowError as exc:
        event("overflow")
        margin = case.opt("safety_margin", 100)
        check_overflow(exc, case.model, ref.required, ref.floor, margin, numbers=numbers)
        return None
    assert required_fits(case, ref)
    event("history cut" if plan.dropped else "everything kept")
    return plan


def kept_history(case: FitCase, plan: tokenflex.Plan) -> tuple[int, int]:
    """The plan's messages are the pinned ones, a newest run of history and the current
    turn, by identity; returns the first kept history index and how many groups."""
    msgs, out = case.messages, plan.messages
    n_sys, n_cur = case.sys_end, len(msgs) - case.cur
    assert len(out) >= n_sys + n_cur
    assert all(a is b for a, b in zip(out[:n_sys], msgs[:n_sys], strict=True)), "system"
    assert all(a is b for a, b in zip(out[len(out) - n_cur :], msgs[case.cur :], strict=True))
    middle = out[n_sys : len(out) - n_cur]
    start = case.cur - len(middle)
    assert start >= case.sys_end
    assert all(a is b for a, b in zip(middle, msgs[start : case.cur], strict=True)), (
        "kept history is not the newest run of the history"
    )
    bounds = groups_of(msgs, case.sys_end, case.cur)
    starts = [a for a, _ in bounds]
    assert start == case.cur or start in starts, "a tool call was split from its results"
    return start, sum(1 for a in starts if a >= start)


def check_accounting(
    plan: tokenflex.Plan, section: str, items: Sequence[Any], model: tokenflex.Model
) -> set[int]:
    """Each message of ``items`` is kept (by identity) or dropped, never both; a dropped
    one is reported with its own tokens. Returns the dropped indices."""
    dropped = [d for d in plan.dropped if d.section == section]
    indices = [d.index for d in dropped]
    assert len(indices) == len(set(indices)), "an item dropped twice"
    for d in dropped:
        assert 0 <= d.index < len(items)
        assert d.item is items[d.index]
        assert d.reason in DROP_REASONS, d.reason
        assert d.tokens == msg_cost(items[d.index], model), d
    kept = {i for i, m in enumerate(items) if any(x is m for x in plan.messages)}
    assert kept.isdisjoint(indices), "kept and dropped"
    assert kept | set(indices) == set(range(len(items))), "neither kept nor dropped"
    return set(indices)


def frozen(plan: tokenflex.Plan) -> dict[str, Any]:
    d = plan.to_dict()
    d.pop("elapsed_ms")
    return d


# ------------------------------------------------------------------------ fit()


@SETTINGS
@given(case=fit_cases())
def test_fit_keeps_the_promise_and_every_required_message(case: FitCase) -> None:
    """1, 3, 4, 6: the window promise with an independent recount, required messages in,
    tool pairs whole, no orphan at the start of history, every message kept or dropped."""
    ref = reference(case)
    plan = fit_or_overflow(case, ref)
    if plan is None:
        return
    check_promise(plan, case.model, case.tools)
    assert plan.safety_margin == case.opt("safety_margin", 100)
    assert plan.requested_max_tokens == ref.request
    assert plan.max_tokens >= ref.floor
    start, _ = kept_history(case, plan)  # pinned and current messages all in, in order
    check_tool_pairs(plan.messages)
    dropped = check_accounting(plan, "history", case.messages, case.model)
    assert {d.section for d in plan.dropped} <= {"history"}
    assert dropped == set(range(case.sys_end, start))
    if dropped and start < case.cur:
        assert not is_answer(case.messages[start]), "history starts with an orphan answer"


@SETTINGS
@given(case=fit_cases(maximal=True))
def test_fit_keeps_as_much_history_as_fits(case: FitCase) -> None:
    """2: with history_share=1.0 and no min/max, exactly the most newest groups that fit,
    less only the orphans at the start (reported as ``orphan``)."""
    ref = reference(case)
    plan = fit_or_overflow(case, ref)
    if plan is None:
        return
    _, n_groups = kept_history(case, plan)
    fit_k = newest_that_fit(ref.group_costs, ref.room)
    want = unorphaned(fit_k, ref.opens)
    assert n_groups == want, (n_groups, want, ref.room, ref.group_costs)
    g = len(ref.group_bounds)
    orphans = {i for a, b in ref.group_bounds[g - fit_k : g - want] for i in range(a, b)}
    assert {d.index for d in plan.dropped if d.reason == "orphan"} == orphans


@SETTINGS
@given(case=fit_cases())
def test_fit_history_follows_share_min_and_max_messages(case: FitCase) -> None:
    """The soft share yields to min_messages, both to the window; max_messages caps."""
    ref = reference(case)
    plan = fit_or_overflow(case, ref)
    if plan is None:
        return
    _, n_groups = kept_history(case, plan)
    want = expected_history_groups(
        ref.group_costs,
        ref.opens,
        ref.room,
        # the share applies to the room a requested output leaves; none without one
        case.opt("history_share", 0.8) if case.max_tokens is not None else None,
        case.opt("min_messages", 0),
        case.opt("max_messages", None),
    )
    assert n_groups == want, (n_groups, want, ref.room, ref.group_costs, case.options)


@SETTINGS
@given(case=fit_cases())
def test_fit_warnings_state_the_plans_numbers(case: FitCase) -> None:
    """5: every number in a warning (or in the overflow error) is the plan's own, and
    that the output was reduced is said once."""
    ref = reference(case)
    plan = fit_or_overflow(case, ref, numbers=True)
    if plan is None:
        return
    start, n_groups = kept_history(case, plan)
    check_warning_numbers(
        plan,
        caller_max_tokens=case.max_tokens,
        model=case.model,
        kept_items={"history": n_groups},
        min_items={"history": case.opt("min_messages", 0)},
        kept_messages={"history": case.cur - start},
    )


@SETTINGS
@given(case=fit_cases())
def test_fit_leaves_the_callers_list_alone_and_is_deterministic(case: FitCase) -> None:
    """7: the caller's list and dicts unchanged; the same input gives the same plan."""
    before = copy.deepcopy(case.messages)
    ids = [id(m) for m in case.messages]
    try:
        a = tokenflex.fit(case.messages, model=case.model, **case.kwargs())
    except ContextOverflowError as exc:
        with pytest.raises(ContextOverflowError) as again:
            tokenflex.fit(case.messages, model=case.model, **case.kwargs())
        assert str(again.value) == str(exc)
        assert case.messages == before
        return
    b = tokenflex.fit(case.messages, model=case.model, **case.kwargs())
    assert case.messages == before and [id(m) for m in case.messages] == ids
    assert frozen(a) == frozen(b)
    assert [id(m) for m in a.messages] == [id(m) for m in b.messages]


# ------------------------------------------------------------------------ Conversation


@SETTINGS
@given(
    case=fit_cases(),
    split=st.sets(st.sampled_from(["policy", "safety_margin", "history_share", "min_messages"])),
)
def test_conversation_gives_the_same_plan_as_fit(case: FitCase, split: set[str]) -> None:
    """8: appending the same messages to a Conversation and fitting it gives fit()'s plan
    (options given at construction or per fit)."""
    ctor = {k: v for k, v in case.options.items() if k in split}
    per_fit = {k: v for k, v in case.options.items() if k not in split}
    conv = Conversation(model=case.model, tools=case.tools, cache_stable=False, **ctor)
    for m in case.messages:
        conv.append(m)
    try:
        want = tokenflex.fit(case.messages, model=case.model, **case.kwargs())
    except ContextOverflowError as exc:
        with pytest.raises(ContextOverflowError) as got:
            conv.fit(max_tokens=case.max_tokens, **per_fit)
        assert got.value.required_tokens == exc.required_tokens
        return
    plan = conv.fit(max_tokens=case.max_tokens, **per_fit)
    assert [id(m) for m in plan.messages] == [id(m) for m in want.messages]
    assert (plan.max_tokens, plan.input_tokens) == (want.max_tokens, want.input_tokens)
    assert plan.dropped.runs() == want.dropped.runs()


@SETTINGS
@given(case=fit_cases())
def test_conversation_plan_says_what_fits_plan_says(case: FitCase) -> None:
    """8, the whole plan: warnings, sections and accounting as fit() gives them."""
    conv = Conversation(case.messages, model=case.model, tools=case.tools, cache_stable=False)
    try:
        want = tokenflex.fit(case.messages, model=case.model, **case.kwargs())
    except ContextOverflowError:
        return
    plan = conv.fit(max_tokens=case.max_tokens, **case.options)
    assert frozen(plan) == frozen(want)


# ------------------------------------------------------------------------ Prompt


@dataclass
class PromptCase:
    model: tokenflex.Model
    tools: list[dict[str, Any]] | None
    max_tokens: int | None
    policy: str
    min_output_tokens: int
    safety_margin: int
    max_input_tokens: int | None
    system: str
    memories: list[str] | None
    scores: list[float] | None
    memory_min_items: int
    header: str
    manual: str | None
    history: list[dict[str, Any]]
    history_share: float | None
    history_min: int
    history_max: int | None
    current: list[dict[str, Any]]
    priorities: tuple[int, int, int]
    system_as_message: bool = False

    def __repr__(self) -> str:
        m = self.model
        return (
            f"PromptCase(model={m.name!r} window={m.context_window} max_output="
            f"{m.max_output_tokens}, tools={bool(self.tools)}, max_tokens={self.max_tokens}, "
            f"policy={self.policy}, floor={self.min_output_tokens}, margin={self.safety_margin}"
            f", max_input={self.max_input_tokens}, system={len(self.system.split())}w, "
            f"memories={[len(x.split()) for x in self.memories or ()]} scores={self.scores} "
            f"min={self.memory_min_items} header={self.header!r}, manual="
            f"{None if self.manual is None else len(sentences(self.manual))} sentences, "
            f"history={brief(self.history)} share={self.history_share} min={self.history_min}"
            f" max={self.history_max}, current={brief(self.current)}, "
            f"priorities={self.priorities})"
        )

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # hypothesis' failure report
        p.text(repr(self))

    def build(self) -> Prompt:
        p = Prompt(
            self.model,
            max_tokens=self.max_tokens,
            policy=self.policy,  # type: ignore[arg-type]
            min_output_tokens=self.min_output_tokens,
            safety_margin=self.safety_margin,
            max_input_tokens=self.max_input_tokens,
            tools=self.tools,
        )
        if self.system_as_message:
            p.add("system", [self.system_message], required=True)
        else:
            p.add("system", self.system, required=True)
        if self.memories is not None:
            p.add(
                "memories",
                self.memories,
                scores=self.scores,
                header=self.header,
                min_items=self.memory_min_items,
                priority=self.priorities[0],
            )
        if self.manual is not None:
            p.add(
                "manual",
                self.manual,
                shrink="truncate",
                boundary="sentence",
                role="user",
                priority=self.priorities[1],
            )
        p.add(
            "history",
            self.history,
            share=self.history_share,
            min_items=self.history_min,
            max_items=self.history_max,
            priority=self.priorities[2],
        )
        p.add("current", self.current, required=True)
        return p

    @property
    def system_message(self) -> dict[str, Any]:
        return {"role": "system", "content": self.system}

    def required(self) -> int:
        return count_messages(
            [self.system_message, *self.current], model=self.model, tools=self.tools
        )


@st.composite
def prompt_cases(draw: st.DrawFn, *, only_history: bool = False) -> PromptCase:
    system = words(draw(st.integers(1, 60)), draw(st.integers(0, 9)))
    memories = scores = manual = None
    if not only_history and draw(st.booleans()):
        memories = [
            f"Note {i}: " + words(draw(st.integers(1, 60)), i)
            for i in range(draw(st.integers(1, 8)))
        ]
        if draw(st.booleans()):
            scores = [draw(st.floats(0, 1)) for _ in memories]
    if not only_history and draw(st.booleans()):
        manual = " ".join(
            f"Step {i}: " + words(draw(st.integers(1, 25)), i) + "."
            for i in range(draw(st.integers(1, 40)))
        )
    history = draw(histories())
    current = draw(current_turns())
    tools = TOOLS if draw(st.booleans()) else None
    max_tokens = draw(st.one_of(st.none(), st.integers(1, 3000)))
    probe = tokenflex.get_model("gpt-4o")
    full = count_messages(
        [
            {"role": "system", "content": system},
            {"role": "system", "content": "\n\n".join(memories or [])},
            {"role": "user", "content": manual or ""},
            *history,
            *current,
        ],
        model=probe,
        tools=tools,
    )
    case = PromptCase(
        model=draw(small_models(full, max_tokens or 1000)),
        tools=tools,
        max_tokens=max_tokens,
        policy=draw(st.sampled_from(["reserve", "flex"])),
        min_output_tokens=draw(st.sampled_from([0, 1, 50, 500, 1200])),
        safety_margin=draw(st.sampled_from([0, 10, 100, 250])),
        max_input_tokens=draw(st.sampled_from([None, None, None, 200, 1500])),
        system=system,
        memories=memories,
        scores=scores,
        memory_min_items=draw(st.sampled_from([0, 0, 2, 4])),
        header=draw(st.sampled_from(["", "What you remember:"])),
        manual=manual,
        history=history,
        history_share=draw(st.sampled_from([None, 0.3, 0.6, 1.0])),
        history_min=draw(st.sampled_from([0, 0, 1, 3])),
        history_max=draw(st.sampled_from([None, None, 0, 2, 5])),
        current=current,
        priorities=draw(st.tuples(*[st.integers(0, 3)] * 3)),
        # the history rule alone: no joined string beside it (see the xfails below)
        system_as_message=only_history,
    )
    request = requested_output(case.max_tokens, case.model)
    if draw(st.integers(0, 3)) == 0:  # the required part, the floor and the margin fill it
        window = case.required() + min(case.min_output_tokens, request) + case.safety_margin
        window = max(1, window + draw(st.sampled_from([-1, 0])))
        case.model = case.model.replace(name=f"{case.model.name}-r{window}", context_window=window)
    elif draw(st.booleans()):
        ref = SimpleNamespace(
            request=request,
            floor=min(case.min_output_tokens, request),
            given=case.max_tokens is not None,
        )
        costs, _opens, _room = prompt_history_reference(case)
        o = {"policy": case.policy, "safety_margin": case.safety_margin}
        case.model = draw(tight(case.model, case.required(), costs, ref, o))
    return case


def prompt_fit(case: PromptCase, *, numbers: bool = False) -> tokenflex.Plan | None:
    request = requested_output(case.max_tokens, case.model)
    floor = min(case.min_output_tokens, request)
    required = case.required()
    try:
        plan = case.build().fit()
    except ContextOverflowError as exc:
        event("overflow")
        check_overflow(exc, case.model, required, floor, case.safety_margin, numbers=numbers)
        return None
    assert required + floor + case.safety_margin <= case.model.context_window
    assert plan.requested_max_tokens == request
    event("dropped something" if plan.dropped else "kept everything")
    return plan


@dataclass
class PromptLayout:
    memory_kept: list[int]
    manual_kept: int
    history_start: int
    history_groups: int


def prompt_layout(case: PromptCase, plan: tokenflex.Plan) -> PromptLayout:
    """Walk the plan's messages section by section (request order) and check each."""
    out = list(plan.messages)
    assert out[0] == case.system_message, "the required system prompt"
    pos = 1
    memory_kept: list[int] = []
    if case.memories is not None:
        dropped = {d.index for d in plan.dropped if d.section == "memories"}
        assert dropped <= set(range(len(case.memories)))
        memory_kept = [i for i in range(len(case.memories)) if i not in dropped]
        for d in plan.dropped:
            if d.section == "memories":
                assert d.item == case.memories[d.index] and d.reason in DROP_REASONS
        if memory_kept:
            head = case.header + "\n\n" if case.header else ""
            body = "\n\n".join(case.memories[i] for i in memory_kept)
            assert out[pos] == {"role": "system", "content": head + body}
            pos += 1
    manual_kept = 0
    if case.manual is not None:
        segs = sentences(case.manual)
        dropped = {d.index for d in plan.dropped if d.section == "manual"}
        manual_kept = len(segs) - len(dropped)
        assert dropped == set(range(manual_kept, len(segs))), "truncate keeps a prefix"
        if manual_kept:
            text = "".join(segs[:manual_kept]) + ("\n[truncated]" if dropped else "")
            assert out[pos] == {"role": "user", "content": text}
            pos += 1
    n_cur = len(case.current)
    assert all(a is b for a, b in zip(out[len(out) - n_cur :], case.current, strict=True))
    middle = out[pos : len(out) - n_cur]
    h = case.history
    start = len(h) - len(middle)
    assert start >= 0
    assert all(a is b for a, b in zip(middle, h[start:], strict=True)), (
        "kept history is not the newest run of the history section"
    )
    starts = [a for a, _ in groups_of(h, 0, len(h))]
    assert start == len(h) or start in starts, "a tool call was split from its results"
    return PromptLayout(memory_kept, manual_kept, start, sum(1 for a in starts if a >= start))


def prompt_history_reference(case: PromptCase) -> tuple[list[int], list[bool], int]:
    request = requested_output(case.max_tokens, case.model)
    floor = min(case.min_output_tokens, request)
    room = room_for_optional(
        case.model.context_window,
        case.safety_margin,
        request,
        floor,
        case.policy,
        case.max_input_tokens,
        case.required(),
        given=case.max_tokens is not None,
        sensible=sensible_output(case.model, request),
    )
    h = case.history
    bounds = groups_of(h, 0, len(h))
    costs = [sum(msg_cost(h[i], case.model) for i in range(a, b)) for a, b in bounds]
    return costs, [not is_answer(h[a]) for a, _ in bounds], room


@SETTINGS
@given(case=prompt_cases())
def test_prompt_keeps_the_promise(case: PromptCase) -> None:
    """1, 3, 4, 6, 7 for Prompt: the promise with a recount, required sections in, tool
    pairs whole, no orphan at the start of history, every item kept or dropped, the
    caller's content unchanged, the same plan twice."""
    before = copy.deepcopy((case.memories, case.manual, case.history, case.current))
    plan = prompt_fit(case)
    assert (case.memories, case.manual, case.history, case.current) == before
    if plan is None:
        return
    check_promise(plan, case.model, case.tools)
    lay = prompt_layout(case, plan)
    check_tool_pairs(plan.messages)
    dropped = check_accounting(plan, "history", case.history, case.model)
    assert dropped == set(range(lay.history_start))
    if dropped and lay.history_start < len(case.history):
        assert not is_answer(case.history[lay.history_start]), "history starts with an orphan"
    assert {d.section for d in plan.dropped} <= {"memories", "manual", "history"}
    assert frozen(case.build().fit()) == frozen(plan)


@FEW
@given(case=prompt_cases(only_history=True))
def test_prompt_history_keeps_as_much_as_its_rules_allow(case: PromptCase) -> None:
    """2 for Prompt: alone with the required sections, a drop_oldest history keeps the
    newest groups its share, min_items, max_items and the window allow, less orphans."""
    plan = prompt_fit(case)
    if plan is None:
        return
    lay = prompt_layout(case, plan)
    costs, opens, room = prompt_history_reference(case)
    want = expected_history_groups(
        costs, opens, room, case.history_share, case.history_min, case.history_max
    )
    assert lay.history_groups == want, (lay.history_groups, want, room, costs)


@SETTINGS
@given(case=prompt_cases())
def test_prompt_warnings_state_the_plans_numbers(case: PromptCase) -> None:
    """5 for Prompt: every number in a warning (or in the overflow error) is the plan's."""
    plan = prompt_fit(case, numbers=True)
    if plan is None:
        return
    lay = prompt_layout(case, plan)
    check_warning_numbers(
        plan,
        caller_max_tokens=case.max_tokens,
        model=case.model,
        kept_items={
            "history": lay.history_groups,
            "memories": len(lay.memory_kept),
            "manual": lay.manual_kept,
        },
        min_items={"history": case.history_min, "memories": case.memory_min_items, "manual": 0},
        kept_messages={"history": len(case.history) - lay.history_start},
    )


# ------------------------------------------------------------------------ fixed examples


def test_prompt_does_not_raise_for_a_request_that_fits_exactly() -> None:
    """1 for Prompt at the boundary: required + floor + margin == window fits."""
    system = {"role": "system", "content": "Be brief."}
    current = [{"role": "user", "content": "Hello there!"}]
    need = count_messages([system, *current], model="gpt-4o")
    model = tokenflex.get_model("gpt-4o").replace(name="gpt-4o-exact", context_window=need + 1)
    plan = tokenflex.fit([system, *current], model=model, max_tokens=1, safety_margin=0)
    assert (plan.input_tokens, plan.max_tokens) == (need, 1)  # fit() agrees it fits
    prompt = Prompt(model, max_tokens=1, min_output_tokens=1, safety_margin=0)
    prompt.add("system", system["content"], required=True).add("current", current, required=True)
    plan = prompt.fit()
    assert plan.messages == [system, *current]
    assert (plan.input_tokens, plan.max_tokens) == (need, 1)


@pytest.mark.parametrize(
    ("costs", "opens", "room", "want"),
    [
        pytest.param([5, 5, 5], [True, False, True], 100, 3, id="all-fit-no-orphan-rule"),
        pytest.param([5, 5, 5], [True, True, False], 10, 2, id="cut-opens-with-a-question"),
        pytest.param([5, 5, 5], [True, False, True], 10, 1, id="cut-drops-the-orphan-answer"),
        pytest.param([5, 5, 5], [False, False, False], 10, 0, id="cut-all-answers"),
        pytest.param([50, 1, 1], [True, True, True], 10, 2, id="stops-at-the-first-too-big"),
        pytest.param([1, 1, 1], [True, True, True], -5, 0, id="no-room"),
    ],
)
def test_the_reference_itself(costs: list[int], opens: list[bool], room: int, want: int) -> None:
    """The brute-force reference, on cases small enough to check by eye."""
    assert unorphaned(newest_that_fit(costs, room), opens) == want
    assert expected_history_groups(costs, opens, room, None, 0, None) == want


def test_warning_parser_reads_separators() -> None:
    assert _int("1,011") == 1011 and _int("800") == 800
    with pytest.raises(AssertionError):
        _int("1011,0")


# ------------------------------------------------------------------------ no max_tokens


@SETTINGS
@given(case=fit_cases())
def test_without_max_tokens_history_is_kept_and_the_output_takes_what_is_left(
    case: FitCase,
) -> None:
    """Issue 11 item 13: with no max_tokens (and no cap on history), every message is kept
    when the history and the floor fit, and max_tokens = min(model's max output, what the
    input leaves); history is cut only when it must be, and then a warning says so."""
    case.max_tokens = None
    kept = ("policy", "min_output_tokens", "safety_margin", "pin", "truncate_tool_results")
    case.options = {k: case.options[k] for k in kept}
    ref = reference(case)
    plan = fit_or_overflow(case, ref)
    if plan is None:
        return
    check_promise(plan, case.model, case.tools)
    margin, window = case.opt("safety_margin", 100), case.model.context_window
    left = window - margin - plan.input_tokens
    top = case.model.max_output_tokens
    assert plan.max_tokens == (left if top is None else min(top, left))
    everything = ref.required + sum(ref.group_costs)
    if everything + ref.floor + margin <= window:
        assert len(plan.messages) == len(case.messages) and not plan.dropped
        assert not any("dropped" in w or "reduced" in w for w in plan.warnings)
    else:
        assert plan.dropped
        assert any(w.startswith("history: dropped ") for w in plan.warnings), plan.warnings
