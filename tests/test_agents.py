"""Agent loops and do-no-harm, in the library: one user task followed by dozens of tool
rounds is served on every turn, in all three request formats; a request that fits is sent
as it is; an output request the window cannot give does not cost the history.

The references are written here from the documented rules (docs/fit.md "Agents"), and
every plan is recounted with the public counter.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tokenflex
from tokenflex import count_messages

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SYSTEM = "You are a coding agent. Use the tools to finish the task."
TASK = "Find why the nightly build fails and fix it; the task id is TASK-4242."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]


def output(k: int, size: int) -> str:
    """A tool result of about ``size`` words, different for every round."""
    return " ".join(f"line{k}_{j} = value({j * k})" for j in range(size // 3 + 1))


def chat_loop(rounds: int, size: int = 120) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": TASK},
    ]
    for k in range(rounds):
        call = f"call_{k}"
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": f'{{"path": "f{k}.py"}}'},
                    }
                ],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": call, "content": output(k, size + 10 * k)})
    return msgs


def anthropic_loop(rounds: int, size: int = 120) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": TASK}]}]
    for k in range(rounds):
        msgs.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Reading f{k}.py."},
                    {"type": "tool_use", "id": f"tu_{k}", "name": "read_file", "input": {"p": k}},
                ],
            }
        )
        msgs.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"tu_{k}", "content": output(k, size)}
                ],
            }
        )
    return msgs


def responses_loop(rounds: int, size: int = 120) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    for k in range(rounds):
        items.append(
            {
                "type": "function_call",
                "call_id": f"fc_{k}",
                "name": "read_file",
                "arguments": json.dumps({"path": f"f{k}.py"}),
            }
        )
        items.append(
            {"type": "function_call_output", "call_id": f"fc_{k}", "output": output(k, size)}
        )
    return items


def pairs_whole_chat(msgs: list[dict[str, Any]]) -> None:
    """Every tool result follows the call that made it; every call has all its results."""
    open_calls: set[str] = set()
    for m in msgs:
        if m.get("role") == "assistant" and m.get("tool_calls"):
            assert not open_calls, f"calls without results: {open_calls}"
            open_calls = {c["id"] for c in m["tool_calls"]}
        elif m.get("role") == "tool":
            assert m["tool_call_id"] in open_calls, f"orphan result {m['tool_call_id']}"
            open_calls.discard(m["tool_call_id"])
    assert not open_calls


def pairs_whole_anthropic(msgs: list[dict[str, Any]]) -> None:
    pending: set[str] = set()
    assert msgs[0]["role"] == "user"
    for m in msgs:
        blocks = m["content"] if isinstance(m["content"], list) else []
        uses = {b["id"] for b in blocks if b.get("type") == "tool_use"}
        results = {b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"}
        assert results <= pending, f"tool_result without its tool_use: {results - pending}"
        assert not (pending - results), f"tool_use without its result: {pending - results}"
        pending = uses
        for b in blocks:
            if b.get("type") == "tool_result":
                assert isinstance(b["content"], str | list)


def pairs_whole_responses(items: list[dict[str, Any]]) -> None:
    calls: set[str] = set()
    for it in items:
        assert it.get("role") != "tool", "a chat tool message in a Responses body"
        if it.get("type") == "function_call":
            calls.add(it["call_id"])
        elif it.get("type") == "function_call_output":
            assert it["call_id"] in calls, f"output without its call {it['call_id']}"
            calls.discard(it["call_id"])
    assert not calls, f"calls without output: {calls}"


def promise(plan: tokenflex.Plan) -> None:
    assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= plan.context_window


@pytest.mark.parametrize("ladder", [{}, {"clear_tool_results": True}], ids=["drop", "clear"])
@pytest.mark.parametrize("stable", [False, True], ids=["plain", "cache-stable"])
def test_chat_agent_loop_every_turn_served(ladder: dict[str, Any], stable: bool) -> None:
    """60 tool rounds under one task on an 8K model: every turn is served, the task and the
    newest round are sent, pairs are whole, and the plan is within the window."""
    state = tokenflex.state.MemoryStore() if stable else None
    full = chat_loop(60)
    for turn in range(1, 61):
        msgs = full[: 2 + 2 * turn]
        plan = tokenflex.fit(
            msgs,
            model="gpt-4",
            max_tokens=1000,
            tools=TOOLS,
            cache_stable=stable,
            state=state,
            **ladder,
        )
        sent = plan.messages
        assert sent[0]["content"] == SYSTEM and sent[1]["content"] == TASK
        assert sent[-2] is msgs[-2] and sent[-1] is msgs[-1], f"turn {turn}: newest round"
        pairs_whole_chat(sent)
        promise(plan)
        assert plan.input_tokens == count_messages(sent, model="gpt-4", tools=TOOLS)
    assert plan.dropped, "60 rounds of ~300 tokens cannot all fit 8K: history was cut"


def test_anthropic_agent_loop_every_turn_served() -> None:
    full = anthropic_loop(45)
    for turn in range(1, 46):
        msgs = full[: 1 + 2 * turn]
        plan = tokenflex.fit(
            msgs,
            model="gpt-4",
            system=SYSTEM,
            max_tokens=1000,
            clear_tool_results=True,
            cache_stable=True,
            state=tokenflex.state.MemoryStore(),
        )
        body = plan.request(api="anthropic")
        sent = body["messages"]
        assert sent[0] is msgs[0], "the task is sent"
        assert sent[-1]["content"][0]["content"] == msgs[-1]["content"][0]["content"]
        pairs_whole_anthropic(sent)
        promise(plan)


def test_responses_agent_loop_every_turn_served() -> None:
    full = responses_loop(45)
    for turn in range(1, 46):
        items = full[: 1 + 2 * turn]
        plan = tokenflex.fit(
            items,
            model="gpt-4",
            format="responses",
            system=SYSTEM,
            max_tokens=1000,
            clear_tool_results=True,
        )
        sent = plan.messages
        assert sent[0] is items[0], "the task is sent"
        assert sent[-1] is items[-1] and sent[-2] is items[-2], "the newest round is sent"
        pairs_whole_responses(list(sent))
        promise(plan)


@pytest.mark.parametrize("fmt", ["anthropic", "responses"])
def test_cleared_results_keep_the_callers_shape(fmt: str) -> None:
    """Clearing a tool result of another API rewrites that API's own item (a
    ``tool_result`` block, a ``function_call_output``), never a chat ``tool`` message."""
    msgs = anthropic_loop(30) if fmt == "anthropic" else responses_loop(30)
    plan = tokenflex.fit(
        msgs, model="gpt-4", system=SYSTEM, max_tokens=1000, clear_tool_results=True, format=fmt
    )
    cleared = [d for d in plan.dropped if d.reason == "cleared"]
    assert cleared, "the ladder cleared old results"
    text = json.dumps(list(plan.messages))
    assert '"role": "tool"' not in text
    assert "[tool result cleared" in text
    (pairs_whole_anthropic if fmt == "anthropic" else pairs_whole_responses)(list(plan.messages))


def test_newest_result_larger_than_the_window_is_truncated() -> None:
    """A single tool result bigger than the whole window is truncated (head and tail kept,
    a counted marker between them) instead of refusing the turn; it is listed."""
    msgs = chat_loop(3)
    huge = output(99, 30_000)
    msgs[-1] = {**msgs[-1], "content": huge}
    plan = tokenflex.fit(msgs, model="gpt-4", max_tokens=1000)
    promise(plan)
    sent = plan.messages[-1]
    assert sent["tool_call_id"] == msgs[-1]["tool_call_id"]
    assert sent["content"].startswith(huge[:200]) and sent["content"].endswith(huge[-100:])
    assert "truncated to fit the context window" in sent["content"]
    truncated = [d for d in plan.dropped if d.reason == "truncated"]
    assert [d.index for d in truncated] == [len(msgs) - 1]
    assert truncated[0].tokens > 0
    with pytest.raises(tokenflex.ContextOverflowError):
        tokenflex.fit(msgs, model="gpt-4", max_tokens=1000, truncate_tool_results=False)


def test_a_tool_round_may_open_a_cut_history() -> None:
    """After a cut, the history may start with a tool round (its call and results), not only
    with a user message: the task is pinned before it."""
    plan = tokenflex.fit(chat_loop(40), model="gpt-4", max_tokens=1000)
    sent = plan.messages
    assert sent[1]["content"] == TASK
    assert sent[2].get("tool_calls"), "the newest rounds that fit follow the task"
    assert len(sent) > 6


def test_pin_zero_and_pin_more() -> None:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for k in range(80):
        msgs.append({"role": "user", "content": f"question {k} " + output(k, 60)})
        msgs.append({"role": "assistant", "content": f"answer {k} " + output(k, 60)})
    msgs.append({"role": "user", "content": "last question"})
    pinned = tokenflex.fit(msgs, model="gpt-4", max_tokens=1000)
    assert pinned.messages[1] is msgs[1]
    free = tokenflex.fit(msgs, model="gpt-4", max_tokens=1000, pin=0)
    assert msgs[1] not in free.messages
    two = tokenflex.fit(msgs, model="gpt-4", max_tokens=1000, pin=2)
    assert two.messages[1:4] == msgs[1:4]


def test_pinned_task_too_big_is_left_out_and_listed() -> None:
    msgs = chat_loop(2)
    msgs[1] = {"role": "user", "content": output(1, 20_000)}
    plan = tokenflex.fit(msgs, model="gpt-4", max_tokens=1000)
    promise(plan)
    assert msgs[1] not in plan.messages
    assert any(d.section == "history" and d.index == 1 for d in plan.dropped)
    assert any("pinned opening" in w for w in plan.warnings)


@pytest.mark.parametrize("fmt", ["chat", "anthropic", "gemini"])
def test_a_pinned_opening_too_big_for_any_format_is_left_out_not_refused(fmt: str) -> None:
    """Every format falls back to sending the opening as history: Anthropic and Gemini
    requests open with the user's turn, so the current turn starts at the last user
    message and the cut history (here none) opens with a user message."""
    big, short = output(1, 9_000), "short question"
    if fmt == "gemini":
        msgs: list[dict[str, Any]] = [
            {"role": "user", "parts": [{"text": big}]},
            {"role": "model", "parts": [{"text": "ok"}]},
            {"role": "user", "parts": [{"text": short}]},
        ]
    else:
        msgs = [
            {"role": "user", "content": big},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": short},
        ]
    plan = tokenflex.fit(msgs, model="gpt-4", max_tokens=500, format=fmt)
    promise(plan)
    assert plan.messages == [msgs[2]]
    assert {d.index for d in plan.dropped if d.section == "history"} == {0, 1}
    assert any("pinned opening" in w for w in plan.warnings)


# -- do no harm ---------------------------------------------------------------------------

texts = st.integers(min_value=1, max_value=400).map(lambda n: output(n, n))


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    if draw(st.booleans()):
        msgs.append({"role": "system", "content": draw(texts)})
    for k in range(draw(st.integers(min_value=0, max_value=12))):
        kind = draw(st.sampled_from(["chat", "tool"]))
        if kind == "chat":
            msgs.append({"role": "user", "content": draw(texts)})
            msgs.append({"role": "assistant", "content": draw(texts)})
        else:
            call = f"c{k}"
            msgs.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call,
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                }
            )
            msgs.append({"role": "tool", "tool_call_id": call, "content": draw(texts)})
    msgs.append({"role": "user", "content": draw(texts)})
    return msgs


@SETTINGS
@given(
    msgs=conversations(),
    model=st.sampled_from(["gpt-4", "gpt-3.5-turbo", "gpt-4o"]),
    max_tokens=st.integers(min_value=1, max_value=6000),
    stable=st.booleans(),
    ladder=st.booleans(),
)
def test_a_request_that_fits_is_sent_as_it_is(
    msgs: list[dict[str, Any]], model: str, max_tokens: int, stable: bool, ladder: bool
) -> None:
    """Reference: the request's own count (public counter) + the output it asks for + the
    margin within the window means every message goes out, the same objects, in order,
    with the output asked for; whatever the session options."""
    m = tokenflex.get_model(model)
    request = min(max_tokens, m.max_output_tokens or max_tokens)
    fits = count_messages(msgs, model=model) + request + 100 <= m.context_window
    try:
        plan = tokenflex.fit(
            msgs,
            model=model,
            max_tokens=max_tokens,
            cache_stable=stable,
            clear_tool_results=ladder,
            state=tokenflex.state.MemoryStore() if stable else None,
        )
    except tokenflex.ContextOverflowError:
        assert not fits
        return
    if fits:
        assert len(plan.messages) == len(msgs)
        assert all(a is b for a, b in zip(plan.messages, msgs, strict=True))
        assert plan.max_tokens == request
        assert not list(plan.dropped)
    promise(plan)


def test_share_does_not_cut_a_request_that_fits() -> None:
    """The measured case: 13,131 input + 3,000 output + 100 margin <= 16,385 went out with
    12 messages dropped by the 0.8 history share."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    k = 0
    while count_messages(msgs, model="gpt-3.5-turbo") < 12_900:
        msgs.append({"role": "user" if k % 2 == 0 else "assistant", "content": output(k, 40)})
        k += 1
    if msgs[-1]["role"] != "user":
        msgs.append({"role": "user", "content": "Go on."})
    n = count_messages(msgs, model="gpt-3.5-turbo")
    assert n + 3000 + 100 <= 16_385
    plan = tokenflex.fit(msgs, model="gpt-3.5-turbo", max_tokens=3000)
    assert len(plan.messages) == len(msgs) and plan.max_tokens == 3000


# -- an output request larger than the window -----------------------------------------


@SETTINGS
@given(
    rounds=st.integers(min_value=1, max_value=40),
    size=st.integers(min_value=20, max_value=300),
    huge=st.integers(min_value=8_000, max_value=64_000),
)
def test_huge_max_tokens_keeps_the_history_of_a_sensible_one(
    rounds: int, size: int, huge: int
) -> None:
    """An output request above what the window can give keeps at least the history that
    ``max_tokens`` at the model's max output keeps (reference: that second fit), and the
    output takes the rest of the window."""
    msgs = chat_loop(rounds, size)
    model = tokenflex.get_model("gpt-4")  # 8,192 window, max output 8,192
    big = tokenflex.fit(msgs, model=model, max_tokens=huge)
    sensible = tokenflex.fit(msgs, model=model, max_tokens=model.max_output_tokens)
    promise(big)
    assert len(big.messages) >= len(sensible.messages)
    assert big.max_tokens == big.context_window - big.safety_margin - big.input_tokens or (
        big.max_tokens == min(huge, model.max_output_tokens or huge)
    )


def test_huge_max_tokens_cut_is_not_held() -> None:
    """A cut forced by an output request the window cannot give is not held: the next
    request of the conversation, with a normal max_tokens, keeps its history."""
    state = tokenflex.state.MemoryStore()
    msgs = chat_loop(12)
    opts: dict[str, Any] = {"model": "gpt-4", "cache_stable": True, "state": state}
    tokenflex.fit(msgs, max_tokens=32_000, **opts)
    later = tokenflex.fit(msgs, max_tokens=500, **opts)
    fresh = tokenflex.fit(msgs, max_tokens=500, model="gpt-4")
    assert len(later.messages) == len(fresh.messages)
