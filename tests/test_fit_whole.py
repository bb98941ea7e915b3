"""fit() of a request that fits whole, for a caller that keeps no list between calls (the
proxy: a fresh parse every request, cache-stable, recall, a state store): one count of
each message, no solve (:func:`tokenflex.engine.whole_plan`).

The reference is the full path (``engine.flow.FAST_PATH = False``) fed the same turns
with a store of its own: every plan is compared field by field, and so is every state
each path wrote (the cut records, what recall kept), turn after turn, so a record the
fast path writes differently shows in the next turns' plans too.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from test_cache_stable import SETTINGS, model, sessions
from test_conversation_fastpath import OPTIONS, full_path
from test_formats import anthropic_requests, responses_requests

import tokenflex
import tokenflex.engine.flow as flow
from tokenflex.state import MemoryStore


class Recording(MemoryStore):
    """A memory store that keeps every value written, by key (the last one)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: dict[str, Any] = {}

    def set(self, key: str, value: bytes, *, ttl_s: float | None = None) -> None:
        super().set(key, value, ttl_s=ttl_s)
        self.writes[key] = _comparable(value)


def _comparable(value: bytes) -> Any:
    """A stored value without the moment it was written (a cut's ``at``, a recall
    mark's ``born``)."""
    try:
        data = json.loads(value)
    except ValueError:
        return value
    if isinstance(data, dict):
        data.pop("at", None)
        data.pop("born", None)
    return data


@contextmanager
def answered() -> Iterator[list[int]]:
    """How many fits :func:`~tokenflex.engine.whole_plan` answered (``[0]``)."""
    fit_module = sys.modules["tokenflex.fit"]
    count = [0]
    real = fit_module.whole_plan

    def spy(*args: Any, **kwargs: Any) -> Any:
        plan = real(*args, **kwargs)
        count[0] += plan is not None
        return plan

    fit_module.whole_plan = spy
    try:
        yield count
    finally:
        fit_module.whole_plan = real


def plan_fields(plan: tokenflex.Plan) -> dict[str, Any]:
    """Every field of ``plan`` but its time, with its messages and the request body it
    builds (the tools as sent)."""
    data = plan.to_dict(include_messages=True)
    data.pop("elapsed_ms", None)
    data["request"] = plan.request()
    data["sections"] = list(plan.sections.items())  # (the JSON's order too)
    return data


_SCHEMA = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
SYSTEM = {"role": "system", "content": "You are a careful maintenance assistant."}


def chat_loops(*, low_water: bool = True) -> st.SearchStrategy[dict[str, Any]]:
    """A chat loop's turns (tool rounds, reasoning or not) and the fit() keywords its
    calls take: a window, outputs that change from turn to turn, a policy, a pin, tools,
    the fit options (``low_water`` among them or not: it asks for a cache-stable fit)."""
    options = {k: v for k, v in OPTIONS.items() if low_water or k != "low_water"}
    return st.fixed_dictionaries(
        {
            "turns": sessions(),
            "reasoning": st.booleans(),
            "window": st.sampled_from([1500, 3000, 8000, 32_000, 128_000, 128_000]),
            "outputs": st.lists(
                st.sampled_from([None, 64, 300, 1000, 200_000]), min_size=1, max_size=3
            ),
            "policy": st.sampled_from(["reserve", "flex"]),
            "pin": st.integers(0, 2),
            "tools": st.booleans(),
            "options": st.fixed_dictionaries(
                {},
                optional={
                    **options,
                    "min_messages": st.integers(1, 6),
                    "min_output_tokens": st.sampled_from([16, 500]),
                },
            ),
        }
    )


def loop_kwargs(loop: dict[str, Any]) -> dict[str, Any]:
    """The fit() keywords of a drawn chat loop (``max_tokens`` set turn by turn)."""
    return {
        "model": model(loop["window"]).replace(max_output_tokens=16_000),
        "policy": loop["policy"],
        "pin": loop["pin"],
        "tools": _SCHEMA if loop["tools"] else None,
        **loop["options"],
    }


def loop_turns(loop: dict[str, Any]) -> Iterator[tuple[int | None, list[dict[str, Any]]]]:
    """Each turn's output asked for (a client that asks for another now and then: an
    agent's summary turn, a retry; a turn after a cut may then fit whole) and its
    messages (their reasoning taken out when the loop keeps none)."""
    outputs = loop["outputs"]
    for t, turn in enumerate(loop["turns"]):
        if not loop["reasoning"]:
            turn = [{k: v for k, v in x.items() if k != "reasoning_content"} for x in turn]
        yield outputs[t % len(outputs)], turn


@SETTINGS
@given(loop=chat_loops(), state=st.sampled_from(["cache", "recall", "both", "both", "neither"]))
def test_a_request_that_fits_whole_gets_the_full_paths_plan(
    loop: dict[str, Any], state: str
) -> None:
    kwargs = loop_kwargs(loop)
    kwargs["cache"] = state in ("cache", "both")
    kwargs["recall"] = state in ("recall", "both")
    fast_store, full_store = Recording(), Recording()
    history: list[dict[str, Any]] = [SYSTEM]
    fitted = 0
    with answered() as whole:
        for output, turn in loop_turns(loop):
            kwargs["max_tokens"] = output
            history += turn
            results = []
            for store, reference in ((fast_store, False), (full_store, True)):
                sent = copy.deepcopy(history)  # a fresh parse of the same body
                try:
                    if reference:
                        with full_path():
                            plan = tokenflex.fit(sent, state=store, **kwargs)
                    else:
                        plan = tokenflex.fit(sent, state=store, **kwargs)
                except tokenflex.ContextOverflowError as exc:
                    results.append(("refused", exc.required_tokens))
                    continue
                results.append(("plan", plan_fields(plan)))
            assert results[0] == results[1]
            assert fast_store.writes == full_store.writes
            fitted += results[0][0] == "plan"
    assert flow.FAST_PATH
    share = "none" if not whole[0] else "some" if whole[0] < fitted else "all"
    event(f"turns answered whole: {share}")


@SETTINGS
@given(loop=chat_loops(low_water=False))  # (no low_water: it asks for a cache-stable fit)
def test_a_plain_fit_that_fits_whole_gets_the_full_paths_plan(loop: dict[str, Any]) -> None:
    """fit() with no state, recall or cache (a library caller's chat loop): a fresh list
    every turn, and one list kept and grown, fitted twice a turn (the warm and grown
    paths read what a whole plan remembered of it), each plan the full path's."""
    kwargs = loop_kwargs(loop)
    history: list[dict[str, Any]] = [SYSTEM]
    kept: list[dict[str, Any]] = [dict(SYSTEM)]  # one list, grown in place
    fitted = 0
    with answered() as whole:
        for output, turn in loop_turns(loop):
            kwargs["max_tokens"] = output
            history += turn
            kept += copy.deepcopy(turn)
            results = []
            for way in ("fresh", "kept", "kept again", "reference"):
                try:
                    if way == "reference":
                        with full_path():
                            plan = tokenflex.fit(copy.deepcopy(history), **kwargs)
                    elif way == "fresh":
                        plan = tokenflex.fit(copy.deepcopy(history), **kwargs)
                    else:
                        plan = tokenflex.fit(kept, **kwargs)
                except tokenflex.ContextOverflowError as exc:
                    results.append(("refused", exc.required_tokens))
                    continue
                results.append(("plan", plan_fields(plan)))
            assert results[0] == results[1] == results[2] == results[3]
            fitted += results[0][0] == "plan"
    share = "none" if not whole[0] else "some" if whole[0] < 2 * fitted else "all"
    event(f"fits answered whole: {share}")


def test_the_proxys_request_that_fits_is_answered_whole() -> None:
    """A chat request that fits, fitted as the proxy fits it (a fresh list, cache-stable,
    recall, a cut note, a state store), turn after turn: answered by the whole path on
    every turn, and the plan is the full path's (the property above, on the shape that
    matters most)."""
    m = tokenflex.get_model("gpt-4o")
    kwargs: dict[str, Any] = {"model": m, "max_tokens": 256, "cache": True, "recall": True}
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    fast_store, full_store = Recording(), Recording()
    with answered() as whole:
        for t in range(6):
            history.append({"role": "user", "content": f"question {t}: " + "word " * 40})
            fast = tokenflex.fit(copy.deepcopy(history), state=fast_store, cut_note=True, **kwargs)
            with full_path():
                full = tokenflex.fit(
                    copy.deepcopy(history), state=full_store, cut_note=True, **kwargs
                )
            assert plan_fields(fast) == plan_fields(full)
            assert fast_store.writes == full_store.writes
            if t >= 2:  # (the conversation is named by its first three messages)
                assert fast.prefix_tokens and fast.prefix_tokens < fast.input_tokens
            history.append({"role": "assistant", "content": f"answer {t}"})
    assert whole == [6]


def both(
    history: list[dict[str, Any]], stores: tuple[Recording, Recording], **kwargs: Any
) -> tokenflex.Plan:
    """fit() of ``history`` by both paths (each with its store), compared; the plan."""
    fast = tokenflex.fit(copy.deepcopy(history), state=stores[0], **kwargs)
    with full_path():
        full = tokenflex.fit(copy.deepcopy(history), state=stores[1], **kwargs)
    assert plan_fields(fast) == plan_fields(full)
    assert stores[0].writes == stores[1].writes
    return fast


def words(n: int, seed: int = 0) -> str:
    return " ".join(f"w{(seed * 31 + i) % 97}" for i in range(n))


def test_an_output_the_window_cannot_give_is_not_answered_whole() -> None:
    """Claude Code's ``max_tokens=32000`` on a model whose window is smaller: the full
    path fits the history for a sensible output (a quarter of the window) and cuts a
    history that would fit beside the output floor; the whole path leaves it alone."""
    m = model(8000).replace(max_output_tokens=16_000)
    history = [{"role": "system", "content": "sys"}]
    for t in range(8):
        history += [
            {"role": "user", "content": words(220, t)},
            {"role": "assistant", "content": words(220, t + 50)},
        ]
    history.append({"role": "user", "content": "go on"})
    assert tokenflex.count_messages(history, model=m) + 500 + 100 <= 8000  # beside the floor
    stores = Recording(), Recording()
    with answered() as whole:
        plan = both(history, stores, model=m, max_tokens=32_000, cache=True, recall=True)
    assert whole == [0] and len(plan.dropped)


def test_a_held_cut_keeps_its_cleared_results_cleared_though_the_rest_fits() -> None:
    """A cache-stable cut that cleared old tool results keeps them cleared on the next
    turns (the prefix sent stays the same), even when a smaller output request would
    let the whole conversation fit: not a whole plan."""
    m = model(4000)
    history: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    for t in range(6):
        call = {"id": f"call_{t}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        history += [
            {"role": "user", "content": words(20, t)},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{t}", "content": words(200, t)},
            {"role": "assistant", "content": words(20, t + 9)},
        ]
    history.append({"role": "user", "content": "and now?"})
    stores = Recording(), Recording()
    kwargs: dict[str, Any] = {
        "model": m,
        "cache": True,
        "clear_tool_results": True,
        "keep_tool_results": 1,
    }
    with answered() as whole:
        first = both(history, stores, max_tokens=1500, **kwargs)
        assert first.dropped.by_reason() == {"cleared": 5} and whole == [0]
        history += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
        assert tokenflex.count_messages(history, model=m) + 64 + first.safety_margin <= 4000
        second = both(history, stores, max_tokens=64, **kwargs)
    assert second.dropped.by_reason() == {"cleared": 5} and whole == [0]


def test_a_template_that_hides_a_role_is_noted_in_a_whole_plan() -> None:
    """A model counted through its chat template (phi-3's renders no system message):
    the whole plan says so as the full path's does, and counts what the template
    renders."""
    from test_template_roles import SYSTEM, USER, gguf_model

    m = gguf_model("phi-3")
    stores = Recording(), Recording()
    with answered() as whole:
        plan = both([SYSTEM, USER], stores, model=m, max_tokens=100, cache=True, recall=True)
    assert whole == [1]
    assert any("renders no 'system' message" in w for w in plan.warnings)


@SETTINGS
@given(
    request=st.one_of(
        anthropic_requests().map(lambda r: ("anthropic", *r)),
        responses_requests().map(lambda r: ("responses", *r)),
    ),
    window=st.sampled_from([600, 1500, 8000, 128_000]),
    max_tokens=st.sampled_from([None, 64, 300, 32_000]),
    state=st.sampled_from(["cache", "recall", "both"]),
    keep_reasoning=st.booleans(),
    tools=st.booleans(),
)
def test_a_native_request_that_fits_whole_gets_the_full_paths_plan(
    request: tuple[str, Any, list[dict[str, Any]]],
    window: int,
    max_tokens: int | None,
    state: str,
    keep_reasoning: bool,
    tools: bool,
) -> None:
    """Anthropic Messages and Responses requests (thinking, reasoning items, tool rounds,
    images, documents, cache markers), sent twice as a client retries: the same plans
    and records by both paths; the second fit reads the first one's record."""
    fmt, system, msgs = request
    m = model(window).replace(max_output_tokens=16_000)
    schema = (
        [{"name": "lookup", "input_schema": {"type": "object"}}]
        if fmt == "anthropic"
        else [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
    )
    kwargs: dict[str, Any] = {
        "model": m,
        "format": fmt,
        "system": system,
        "max_tokens": max_tokens,
        "cache": state in ("cache", "both"),
        "recall": state in ("recall", "both"),
        "keep_reasoning": keep_reasoning,
        "tools": schema if tools else None,
    }
    stores = Recording(), Recording()
    with answered() as whole:
        for _ in range(2):
            try:
                both(msgs, stores, **kwargs)
            except tokenflex.ContextOverflowError:
                with full_path(), pytest.raises(tokenflex.ContextOverflowError):
                    tokenflex.fit(copy.deepcopy(msgs), state=stores[1], **kwargs)
                return
    event(f"{fmt}: answered whole {whole[0]} of 2")
