"""Fuzz: bad data raises only TokenflexError subclasses (issue 11, item 11).

A seeded generator feeds every public entry point random junk and near-valid input
(valid requests with one thing broken: a wrong type, a missing key, a huge or negative
number, NaN, a lone surrogate, a nested structure where a string belongs). The property,
per case: either a result that keeps its promise, recounted independently here, or a
:class:`tokenflex.TokenflexError`. Any other exception is a failure, reported with the
seed that reproduces it. ``CASES`` cases in all (at least 20,000), seeded, so a failure
reproduces exactly.
"""

from __future__ import annotations

import functools
import json
import math
import random
import time
from collections.abc import Callable
from typing import Any

import pytest

import tokenflex
from tokenflex import (
    Chunk,
    Conversation,
    InvalidInputError,
    Prompt,
    TokenflexError,
    choose_model,
    count_messages,
    count_tokens,
    estimate_cost,
    fit,
    pack_chunks,
    rag_budget,
    savings,
    validate_budget,
)

CASES = {  # entry point -> cases; fit-like ones are the slow ones
    "fit": 5_000,
    "fit_formats": 3_000,
    "conversation": 2_000,
    "prompt": 2_500,
    "count": 5_000,
    "pack": 3_000,
    "validate": 3_000,
    "choose_model": 2_000,
    "cost": 2_000,
}
MODELS = ["gpt-4o", "gpt-4", "gpt-3.5-turbo", "claude-3-5-sonnet", "mistral:7b", "gtp-4"]
SMALL = tokenflex.get_model("gpt-4o").replace(name="gpt-4o-small", context_window=3_000)
JUNK_SCALARS: list[Any] = [
    None, True, False, 0, -1, 1, 7, 2**63, -(2**70), 10**400, 0.5, -0.0, 1.5, 1e308,
    float("nan"), float("inf"), -float("inf"), "", "x", "\ud800", "日本語 " * 3, "100",
    b"bytes", bytearray(b"x"), 3j, object(), (), [], {}, set(), frozenset({1}), ...,
]  # fmt: skip
ROLES = ["system", "developer", "user", "assistant", "tool", "function"]


def junk(r: random.Random, depth: int = 0) -> Any:
    """Any value: scalars, containers of junk, sometimes deep."""
    k = r.random()
    if depth > 3 or k < 0.6:
        return r.choice(JUNK_SCALARS)
    if k < 0.75:
        return [junk(r, depth + 1) for _ in range(r.randint(0, 3))]
    if k < 0.9:
        return {r.choice(["role", "content", "type", "text", 1, None]): junk(r, depth + 1)}
    return tuple(junk(r, depth + 1) for _ in range(r.randint(0, 2)))


def text(r: random.Random) -> str:
    words = ["the", "pump", "東京", "код", "{json:", "1,", "\n", "  ", "[INST]", "ü", "😀"]
    return " ".join(r.choice(words) for _ in range(r.choice([0, 1, 5, 30, 300])))


def good_message(r: random.Random, role: str | None = None) -> dict[str, Any]:
    role = role or r.choice(["user", "assistant", "user", "assistant", "system"])
    m: dict[str, Any] = {"role": role, "content": text(r)}
    if r.random() < 0.1:
        m["content"] = [{"type": "text", "text": text(r)}]
    if role == "assistant" and r.random() < 0.15:
        m["content"] = None
        m["tool_calls"] = [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ]
    return m


def broken(r: random.Random, m: dict[str, Any]) -> Any:
    """``m`` with one thing wrong (or replaced by junk)."""
    m = dict(m)
    k = r.randint(0, 9)
    if k == 0:
        return junk(r)
    if k == 1:
        m["role"] = junk(r)
    elif k == 2:
        m["content"] = junk(r)
    elif k == 3:
        m.pop(r.choice(["role", "content"]), None)
    elif k == 4:
        m["content"] = [junk(r) for _ in range(r.randint(1, 3))]
    elif k == 5:
        m["content"] = [{"type": r.choice(["text", "image_url", "audio", 5]), "text": junk(r)}]
    elif k == 6:
        m["tool_calls"] = junk(r)
    elif k == 7:
        m[r.choice(["name", "extra", "meta"])] = junk(r)
    elif k == 8:
        m["content"] = "\ud800" + str(m.get("content"))
    else:
        m["function_call"] = junk(r)
    return m


def messages(r: random.Random) -> Any:
    """A conversation: usually valid, often with one broken message, sometimes junk."""
    k = r.random()
    if k < 0.05:
        return junk(r)
    msgs: list[Any] = []
    if r.random() < 0.5:
        msgs.append(good_message(r, "system"))
    msgs += [good_message(r) for _ in range(r.randint(0, 12))]
    msgs.append(good_message(r, "user"))
    if k < 0.55:
        i = r.randrange(len(msgs))
        msgs[i] = broken(r, msgs[i])
    return msgs if r.random() < 0.95 else tuple(msgs)


def maybe(r: random.Random, good: Callable[[], Any], p: float = 0.85) -> Any:
    return good() if r.random() < p else junk(r)


def model(r: random.Random) -> Any:
    return maybe(r, lambda: r.choice([*MODELS, SMALL]), 0.95)


def options(r: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, good in [
        ("policy", lambda: r.choice(["reserve", "flex"])),
        ("min_output_tokens", lambda: r.choice([0, 1, 100, 500, 4000])),
        ("safety_margin", lambda: r.choice([0, 10, 100])),
        ("history_share", lambda: r.choice([0.3, 0.8, 1.0])),
        ("min_messages", lambda: r.choice([0, 2])),
        ("max_messages", lambda: r.choice([None, 0, 3])),
        ("max_input_tokens", lambda: r.choice([None, 50, 2000])),
        ("fallback_models", lambda: r.choice([[], ["gpt-4o"], ["nope-model"]])),
        ("strict", lambda: r.choice([False, True])),
        ("cache_stable", lambda: r.choice([False, True])),
        ("low_water", lambda: r.choice([0.3, 0.6, 1.0])),
        ("clear_tool_results", lambda: r.choice([False, True])),
        ("keep_tool_results", lambda: r.choice([0, 3])),
        ("drop_reasoning", lambda: r.choice([False, True])),
    ]:
        if r.random() < 0.2:
            out[name] = maybe(r, good, 0.9)
    if r.random() < 0.03:
        out[r.choice(["polcy", "bogus"])] = 1
    return out


def check_plan(plan: tokenflex.Plan) -> None:
    """The promise, recounted independently, and the plan serializes.

    The recount reads the plan's chat request body (system, messages and tools) with the
    public counter: equal for chat plans; for Anthropic and Responses plans the chat body
    is a conversion (reasoning and thinking are not carried, empty turns go), so it may
    cost less than the plan counted, never more.
    """
    assert isinstance(plan.max_tokens, int) and not isinstance(plan.max_tokens, bool)
    assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= plan.context_window
    assert plan.max_tokens >= min(plan.min_output_tokens, plan.requested_max_tokens)
    json.loads(plan.to_json())
    try:
        body = plan.request(api="chat")
    except TokenflexError:
        assert plan.format != "chat"  # e.g. Anthropic content chat cannot carry
        return
    recount = count_messages(body["messages"], model=plan.model, tools=body.get("tools"))
    if plan.format == "chat":
        assert plan.input_tokens == recount, (plan.input_tokens, recount)
    else:
        assert recount <= plan.input_tokens, (plan.format, plan.input_tokens, recount)


# ------------------------------------------------------------------------ one case each


def case_fit(r: random.Random) -> None:
    msgs = messages(r)
    tools = None
    if r.random() < 0.1:
        tools = maybe(r, lambda: [{"type": "function", "function": {"name": "f"}}], 0.5)
    kwargs: dict[str, Any] = {"model": model(r), "tools": tools, **options(r)}
    if r.random() < 0.6:
        kwargs["max_tokens"] = maybe(r, lambda: r.choice([1, 100, 1000, 50_000, 1.5]), 0.7)
    if r.random() < 0.1:
        kwargs["documents"] = maybe(r, lambda: [Chunk(text(r), score=r.random())], 0.6)
    if r.random() < 0.05:
        kwargs["state"] = junk(r)
    check_plan(fit(msgs, **kwargs))


def anthropic_messages(r: random.Random) -> list[Any]:
    """Anthropic Messages ``messages``: alternating turns, text or blocks, tool use."""
    out: list[Any] = []
    for i in range(r.randint(0, 5) * 2 + 1):
        role = "user" if i % 2 == 0 else "assistant"
        content: Any = text(r)
        if r.random() < 0.3:
            content = [{"type": "text", "text": text(r)}]
        out.append({"role": role, "content": content})
    return out


def responses_input(r: random.Random) -> list[Any]:
    """OpenAI Responses ``input`` items: messages, and a function call with its output."""
    out: list[Any] = []
    for _ in range(r.randint(0, 6)):
        if r.random() < 0.15:
            out.append({"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"})
            out.append({"type": "function_call_output", "call_id": "c1", "output": text(r)})
        else:
            role = r.choice(["user", "assistant"])
            out.append({"type": "message", "role": role, "content": text(r)})
    out.append({"role": "user", "content": text(r)})
    return out


def case_fit_formats(r: random.Random) -> None:
    """fit() in the Anthropic and Responses formats, with system=, and plan.request(api=)."""
    fmt = maybe(r, lambda: r.choice(["anthropic", "responses", "chat", None]), 0.9)
    msgs: Any = anthropic_messages(r) if fmt == "anthropic" else responses_input(r)
    if fmt in ("chat", None) and r.random() < 0.5:
        msgs = messages(r)
    elif r.random() < 0.4:
        i = r.randrange(len(msgs))
        msgs[i] = broken(r, msgs[i])
    kwargs: dict[str, Any] = {"model": model(r), "format": fmt, **options(r)}
    if r.random() < 0.5:
        blocks = lambda: [{"type": "text", "text": text(r)}]  # noqa: E731
        kwargs["system"] = maybe(r, lambda: r.choice([text(r), blocks()]), 0.8)
    if r.random() < 0.6:
        kwargs["max_tokens"] = maybe(r, lambda: r.choice([1, 100, 1000, 50_000]), 0.8)
    if r.random() < 0.1:
        kwargs["state"] = junk(r)
    plan = fit(msgs, **kwargs)
    check_plan(plan)
    api = maybe(r, lambda: r.choice(["chat", "responses", "anthropic", None]), 0.9)
    body = plan.request(api=api)
    json.dumps(body)


def case_conversation(r: random.Random) -> None:
    msgs = messages(r)
    conv = Conversation(model=model(r), **options(r))
    for m in msgs if isinstance(msgs, list | tuple) else [msgs]:
        conv.append(m)
    check_plan(conv.fit(max_tokens=maybe(r, lambda: r.choice([None, 10, 800]), 0.9), **options(r)))


def case_prompt(r: random.Random) -> None:
    p = Prompt(model(r), max_tokens=maybe(r, lambda: r.choice([None, 50, 900]), 0.9))
    p.add("system", maybe(r, lambda: text(r), 0.9), required=True)
    n = r.randint(0, 4)
    p.add(
        "memories",
        maybe(r, lambda: [text(r) for _ in range(n)], 0.8),
        scores=maybe(r, lambda: [r.choice([r.random(), 1e308, -1.7e308, 0.0]) for _ in range(n)]),
        cap=maybe(r, lambda: r.choice([None, 0, 100]), 0.9),
    )
    p.add("manual", maybe(r, lambda: text(r), 0.9), shrink=maybe(r, lambda: "truncate", 0.9))
    msgs = messages(r)
    p.add("history", msgs[:-1] if isinstance(msgs, list) else msgs)
    p.add("current", [good_message(r, "user")], required=True)
    check_plan(p.fit())


def case_count(r: random.Random) -> None:
    if r.random() < 0.3:
        n = count_tokens(maybe(r, lambda: text(r), 0.7), model=model(r))
        assert isinstance(n, int) and n >= 0
        return
    n = count_messages(messages(r), model=model(r), tools=maybe(r, lambda: None, 0.9))
    assert isinstance(n, int) and n >= 0


def chunk(r: random.Random) -> Any:
    kwargs = {
        "source": maybe(r, lambda: "Atlas", 0.9),
        "identifier": maybe(r, lambda: "https://x.example/a", 0.9),
        "extras": maybe(r, lambda: {"page": r.randint(0, 9)}, 0.85),
        "score": maybe(r, lambda: r.choice([None, r.random(), 1e308, -1e308, 0.0]), 0.9),
        "id": maybe(r, lambda: f"c{r.randint(0, 99)}", 0.9),
    }
    return Chunk(maybe(r, lambda: text(r), 0.95), **kwargs)


def case_pack(r: random.Random) -> None:
    chunks = [chunk(r) for _ in range(r.randint(0, 6))] if r.random() < 0.95 else junk(r)
    budget = maybe(r, lambda: r.choice([0, 64, 200, 2000]), 0.9)
    buffer = maybe(r, lambda: r.choice([0, 16, 64]), 0.9)
    result = pack_chunks(
        chunks,
        budget=budget,
        safety_buffer=buffer,
        policy=maybe(r, lambda: r.choice(["skip", "stop", "optimal"]), 0.95),
        format=maybe(r, lambda: r.choice(["markdown", "xml"]), 0.95),
        tokenizer=maybe(r, lambda: r.choice(["estimate", "o200k_base"]), 0.95),
    )
    assert result.tokens <= budget - buffer  # the packing promise
    json.dumps(result.to_dict())


def case_validate(r: random.Random) -> None:
    if r.random() < 0.2:
        got = rag_budget(
            maybe(r, lambda: r.randint(0, 10**5)),
            input_cap=maybe(r, lambda: r.randint(0, 10**5)),
            rag_cap=maybe(r, lambda: r.randint(0, 10**5)),
        )
        assert isinstance(got, int) and got >= 0
        return
    components = maybe(
        r, lambda: {"base": r.randint(0, 5000), "rag": maybe(r, lambda: text(r), 0.8)}, 0.85
    )
    v = validate_budget(
        components,
        expected_output=maybe(r, lambda: r.randint(0, 5000)),
        total_budget=maybe(r, lambda: r.randint(1, 20_000)),
        input_cap=maybe(r, lambda: r.choice([None, 1000])),
        warning_at=maybe(r, lambda: 0.85, 0.9),
        tokenizer=maybe(r, lambda: "estimate", 0.95),
    )
    assert v.total_tokens == v.total_input + v.expected_output
    assert v.status in ("OK", "WARNING", "FALLBACK")


def case_choose_model(r: random.Random) -> None:
    c = choose_model(
        model(r),
        maybe(r, lambda: r.sample(MODELS[:4], r.randint(0, 3)), 0.9),
        required_input_tokens_by_model=maybe(r, lambda: r.randint(0, 300_000), 0.85),
        min_output_tokens=maybe(r, lambda: r.choice([0, 500]), 0.9),
        safety_margin=maybe(r, lambda: 100, 0.9),
        max_input_share=maybe(r, lambda: r.choice([None, 0.9]), 0.9),
    )
    assert c.required_input_tokens + c.output_room + 0 <= c.model.context_window


def case_cost(r: random.Random) -> None:
    if r.random() < 0.5:
        c = estimate_cost(model(r), maybe(r, lambda: r.randint(0, 10**6)), maybe(r, lambda: 10))
        assert c.total_usd is None or c.total_usd >= 0
    else:
        s = savings(model(r), maybe(r, lambda: r.randint(0, 10**6)), maybe(r, lambda: 10**6))
        assert isinstance(s.saved_tokens, int)


ENTRY_POINTS: dict[str, Callable[[random.Random], None]] = {
    "fit": case_fit,
    "fit_formats": case_fit_formats,
    "conversation": case_conversation,
    "prompt": case_prompt,
    "count": case_count,
    "pack": case_pack,
    "validate": case_validate,
    "choose_model": case_choose_model,
    "cost": case_cost,
}


def run(name: str, seed: int) -> str:
    """One case: ``ok``, the TokenflexError's class name, or a failure."""
    r = random.Random(f"{name}-{seed}")
    try:
        ENTRY_POINTS[name](r)
    except TokenflexError as exc:
        assert str(exc), f"{name} seed={seed}: {type(exc).__name__} with no message"
        return type(exc).__name__
    except AssertionError as exc:
        raise AssertionError(f"{name} seed={seed}: a result broke its promise: {exc}") from exc
    except BaseException as exc:
        raise AssertionError(
            f"{name} seed={seed}: {type(exc).__name__} escaped: {exc!r:.300}. "
            f"Reproduce: run({name!r}, {seed})"
        ) from exc
    return "ok"


def test_case_count_meets_the_issue() -> None:
    assert sum(CASES.values()) >= 20_000


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # 1e308 arithmetic in junk scores
@pytest.mark.parametrize("name", list(CASES))
def test_bad_data_raises_only_tokenflex_errors(name: str) -> None:
    started = time.perf_counter()
    outcomes: dict[str, int] = {}
    for seed in range(CASES[name]):
        got = run(name, seed)
        outcomes[got] = outcomes.get(got, 0) + 1
    # A fuzz that only ever raises (or never does) tests nothing: both must happen.
    assert outcomes.get("ok", 0) >= CASES[name] // 20, outcomes
    assert sum(v for k, v in outcomes.items() if k != "ok") >= CASES[name] // 20, outcomes
    elapsed = time.perf_counter() - started
    print(f"{name}: {CASES[name]:,} cases in {elapsed:.1f} s: {outcomes}")
    assert math.isfinite(elapsed)


def test_responses_item_with_a_non_json_field_is_rejected() -> None:
    """Found by the fuzz (fit_formats seed 1050): the chat format rejects a field JSON
    cannot write (item 10); the Responses format kept it and plan.request() was then not
    JSON. fit() now checks every item it would send as given."""
    items = [
        {"type": "message", "role": "assistant", "content": "a"},
        {"role": "user", "content": "b", "extra": bytearray(b"x")},
    ]
    with pytest.raises(TokenflexError):
        json.dumps(fit(items, model="gpt-4o", max_tokens=10).request())


U = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(b"bytes", id="bytes"),
        pytest.param(bytearray(b"x"), id="bytearray"),
        pytest.param({1, 2}, id="set"),
        pytest.param(3j, id="complex"),
        pytest.param(object(), id="object"),
    ],
)
def test_chat_message_with_a_non_json_field_is_rejected(value: Any) -> None:
    """Found by scripts/fuzz_count.py (fit_formats seed 127379261062: a system message
    named b'bytes'): counting reads an unknown value with str(), so a chat message went
    out as given and plan.request() was not JSON. fit() now checks chat messages as it
    checks Anthropic blocks and Responses items, naming the message."""
    msgs = [*U, {"role": "system", "content": "", "name": value}, *U]
    with pytest.raises(TokenflexError, match=r"messages\[1\].*cannot be sent as JSON"):
        json.dumps(fit(msgs, model="gpt-4o", max_tokens=10).request())


@pytest.mark.parametrize(
    ("kwargs", "where"),
    [
        pytest.param(
            {"tools": [{"type": "function", "function": {"name": "f", "x": b"x"}}]},
            r"tools\[0\]",
            id="chat-tool",
        ),
        pytest.param(
            {"format": "anthropic", "tools": [{"name": "f", "input_schema": {}, "x": {1}}]},
            r"tools\[0\]",
            id="anthropic-tool",
        ),
        pytest.param(
            {"format": "anthropic", "system": [{"type": "text", "text": "s", "x": 3j}]},
            r"\(system=\)",
            id="anthropic-system",
        ),
    ],
)
def test_tools_and_system_with_a_non_json_value_are_rejected(
    kwargs: dict[str, Any], where: str
) -> None:
    """The same class as the chat message above, beside the messages: tools and the
    Anthropic system are sent as given, so they are checked too."""
    with pytest.raises(TokenflexError, match=rf"{where}.*cannot be sent as JSON"):
        json.dumps(fit(U, model="gpt-4o", max_tokens=10, **kwargs).request())


def _circular_tool() -> dict[str, Any]:
    tool: dict[str, Any] = {"type": "function", "function": {"name": "f", "parameters": {}}}
    tool["function"]["parameters"]["self"] = tool
    return tool


@pytest.mark.parametrize(
    "tool",
    [
        pytest.param(
            lambda: {"type": "function", "function": {"name": "f", "x": b"x"}}, id="bytes"
        ),
        pytest.param(_circular_tool, id="circular"),
    ],
)
def test_count_messages_refuses_the_tools_fit_refuses(tool: Callable[[], Any]) -> None:
    """count_messages() with a tool schema that cannot be sent as JSON (a value only
    str() can read, one that contains itself) raised json's bare ValueError or counted
    the str(); fit() refuses it with a tokenflex error naming the tool: both now do."""
    for call in (count_messages, functools.partial(fit, max_tokens=10)):
        with pytest.raises(InvalidInputError, match=r"tools\[0\].*cannot be sent as JSON"):
            call(U, model="gpt-4o", tools=[tool()])


@pytest.mark.parametrize(
    "tool",
    [
        pytest.param({"type": "function", "function": {"name": "f"}}, id="chat"),
        pytest.param({"name": "f", "input_schema": {"type": "object"}}, id="anthropic"),
        pytest.param({"type": "function", "name": "f", "parameters": {}}, id="responses"),
        pytest.param({"type": "web_search"}, id="builtin"),
        pytest.param({"text": False}, id="junk"),  # scripts/fuzz_count.py: fit seed 591369397026
    ],
)
@pytest.mark.parametrize("model", ["gpt-4o", "100"])
def test_count_messages_counts_a_tool_as_fit_counts_it(tool: dict[str, Any], model: str) -> None:
    """A tool in any API's shape (or none: a built-in tool, counted as a function whose
    description is its JSON) costs count_messages() what it costs fit(): the plan's
    input is the request's count. count_messages read a tool that is not chat's shape as
    given, so a plan's own request recounted to less than the plan said."""
    plan = fit(U, model=model, tools=[tool], max_tokens=10)
    assert count_messages(U, model=model, tools=[tool]) == plan.input_tokens


def test_chat_message_with_json_values_of_other_types_is_kept() -> None:
    """A tuple is sent as a JSON list and an int key as a string: not refused."""
    msgs = [{"role": "user", "content": "x", "meta": (1, 2), "ids": {1: "a"}}, *U]
    plan = fit(msgs, model="gpt-4o", max_tokens=10)
    assert plan.messages == msgs and json.dumps(plan.request())


ISSUE_EXAMPLES: dict[str, Callable[[], Any]] = {  # issue 11 item 11, then fuzz findings
    "Chunk(source=5)": lambda: Chunk("t", 5),  # type: ignore[arg-type]
    "extras with mixed key types": lambda: Chunk("t", extras={"a": 1, 2: "b"}),
    "Prompt scores with None": lambda: Prompt("gpt-4o").add("m", ["a", "b"], scores=[1, None]),
    "Prompt(max_tokens='100')": lambda: Prompt("gpt-4o", max_tokens="100"),  # type: ignore[arg-type]
    "validate_budget([1, 2])": lambda: validate_budget(
        [1, 2],  # type: ignore[arg-type]
        expected_output=1,
        total_budget=10,
    ),
    "fit(max_tokens=1.5)": lambda: fit(U, model="gpt-4o", max_tokens=1.5),  # type: ignore[arg-type]
    "Chunk score 10**400": lambda: Chunk("t", score=10**400),
    "pack_chunks(5)": lambda: pack_chunks(5, budget=10),  # type: ignore[arg-type]
    "validate total_budget 10**400": lambda: validate_budget(
        {"a": 1}, expected_output=1, total_budget=10**400
    ),
    "estimate_cost 10**400": lambda: estimate_cost("gpt-4o", 10**400),
    "choose_model fallbacks=5": lambda: choose_model(
        "gpt-4",
        5,  # type: ignore[arg-type]
        required_input_tokens_by_model=1,
    ),
    "choose_model max_input_share='x'": lambda: choose_model(
        "gpt-4",
        [],
        required_input_tokens_by_model=1,
        max_input_share="x",  # type: ignore[arg-type]
    ),
    "content part with a dict type": lambda: count_messages(
        [{"role": "user", "content": [{"type": {"a": 1}}]}], model="gpt-4o"
    ),
    "fit(state=5)": lambda: fit(U, model="gpt-4o", cache_stable=True, state=5),
}


@pytest.mark.parametrize("name", list(ISSUE_EXAMPLES))
def test_issue_examples_raise_tokenflex_errors(name: str) -> None:
    with pytest.raises(TokenflexError) as info:
        ISSUE_EXAMPLES[name]()
    assert str(info.value)


def test_optimal_packing_with_scores_near_1e308() -> None:
    chunks = [Chunk("a b c", score=1.7e308), Chunk("d e f", score=1e308), Chunk("g", score=-1e308)]
    result = pack_chunks(chunks, budget=200, policy="optimal")
    assert result.tokens <= 200 and len(result.admitted) == 3


def test_cache_stable_fit_with_a_lone_surrogate() -> None:
    plan = fit([{"role": "user", "content": "\ud800"}], model="gpt-4o", cache_stable=True)
    assert plan.input_tokens == count_messages(plan.messages, model="gpt-4o")


def test_an_empty_tuple_field_costs_what_an_empty_list_does() -> None:
    """What is sent is JSON, where () and [] are both ``[]``."""
    m = {"role": "user", "content": "hi"}
    assert count_messages([{**m, "name": ()}], model="gpt-4o") == count_messages(
        [{**m, "name": []}], model="gpt-4o"
    )


def test_the_fast_backend_reads_lone_surrogates_as_tiktoken_does() -> None:
    """Found by the fuzz in the full suite (where a test had turned prefer_fast_backend()
    on): fastokens raised UnicodeEncodeError on '\\ud800'."""
    pytest.importorskip("fastokens")
    from tokenflex.tokenizers import get_tokenizer
    from tokenflex.tokenizers.fast import FastTokenizer

    fast, slow = FastTokenizer("o200k_base"), get_tokenizer("o200k_base").tokenizer
    for s in ["\ud800", "a\ud800b", "x\udfff\ud800 y 東京"]:
        assert fast.count(s) == slow.count(s) and fast.encode(s) == slow.encode(s)
