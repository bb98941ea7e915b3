"""fit(): worked examples, history rules, lazy sources (the properties: test_properties.py)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import tokenflex
from tokenflex import ContextOverflowError, Conversation, InvalidMessagesError, fit
from tokenflex.counting import count_messages, get_counter
from tokenflex.history import SQLiteMessageStore

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "42",
    "{json:",
    "true}",
    "東京",
    "код",
    "print(x)",
    "ünïcode",
]


def _msg(role: str, n_words: int, seed: int = 0) -> dict[str, Any]:
    text = " ".join(WORDS[(seed + i) % len(WORDS)] for i in range(n_words))
    return {"role": role, "content": text}


def _chat(n: int, words: int = 40) -> list[dict[str, Any]]:
    msgs = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(n):
        msgs.append(_msg("user" if i % 2 == 0 else "assistant", words, i))
    if msgs[-1]["role"] != "user":
        msgs.append(_msg("user", words, n))
    return msgs


def _check_promise(plan: tokenflex.Plan, messages: list[dict[str, Any]], tools: Any = None) -> None:
    exact = count_messages(plan.messages, model=plan.model, tools=tools)
    assert plan.input_tokens == exact
    assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= plan.context_window
    assert plan.max_tokens >= plan.min_output_tokens
    # every message is either kept or reported dropped, never both
    kept = {id(m) for m in plan.messages}
    dropped = {d.index for d in plan.dropped}
    for i, m in enumerate(messages):
        assert (id(m) in kept) != (i in dropped), i


def test_docstring_example() -> None:
    plan = fit([{"role": "user", "content": "Hello!"}], model="gpt-4o", max_tokens=1000)
    assert (plan.input_tokens, plan.max_tokens) == (9, 1000)
    assert plan.exact and not plan.dropped and not plan.warnings


def test_everything_fits_nothing_dropped() -> None:
    msgs = _chat(10)
    plan = fit(msgs, model="gpt-4o", max_tokens=1000)
    assert plan.messages == msgs
    assert plan.max_tokens == 1000
    _check_promise(plan, msgs)


def test_long_history_is_trimmed_oldest_first_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    msgs = _chat(400)
    with caplog.at_level(logging.INFO, logger="tokenflex"):
        plan = fit(msgs, model="gpt-4", max_tokens=1000)
    _check_promise(plan, msgs)
    assert plan.messages[0] is msgs[0] and plan.messages[-1] is msgs[-1]
    assert plan.messages[1] is msgs[1]  # the opening question is pinned (pin=1)
    assert len(plan.dropped) > 0
    assert plan.dropped[0].index == 2 and plan.dropped[0].section == "history"
    assert plan.dropped[0].tokens == get_counter("gpt-4").message(msgs[2])
    assert any("dropped history" in r.getMessage() for r in caplog.records)
    # the soft share (0.8) leaves room; share=1.0 fills it
    full = fit(msgs, model="gpt-4", max_tokens=1000, history_share=1.0)
    assert full.input_tokens > plan.input_tokens
    assert full.input_tokens + 1000 + 100 <= 8192


def test_flex_policy_keeps_input_and_shrinks_output() -> None:
    msgs = _chat(60)
    reserve = fit(msgs, model="gpt-4", max_tokens=3000, history_share=1.0)
    flex = fit(msgs, model="gpt-4", max_tokens=3000, policy="flex", history_share=1.0)
    assert flex.input_tokens > reserve.input_tokens
    assert flex.max_tokens < 3000 and flex.max_tokens >= 500
    _check_promise(flex, msgs)


def test_required_input_too_big_raises_with_numbers_and_fix() -> None:
    msgs = [{"role": "system", "content": "word " * 9000}, {"role": "user", "content": "hi"}]
    with pytest.raises(ContextOverflowError) as exc:
        fit(msgs, model="gpt-4", max_tokens=1000)
    msg = str(exc.value)
    assert "8,192" in msg and "fallback_models" in msg and exc.value.overflow > 0


def test_fallback_model_for_this_request_only() -> None:
    msgs = [{"role": "system", "content": "word " * 9000}, {"role": "user", "content": "hi"}]
    plan = fit(msgs, model="gpt-4", max_tokens=1000, fallback_models=["gpt-4o"])
    assert plan.model.name == "gpt-4o" and plan.fallback_from == "gpt-4"
    assert any("fallback" in w for w in plan.warnings)


def test_tool_call_and_results_dropped_together_and_no_orphans() -> None:
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
        ],
    }
    result = {"role": "tool", "tool_call_id": "c1", "content": "result " * 30}
    msgs = [
        {"role": "system", "content": "sys"},
        _msg("user", 30),
        call,
        result,
        _msg("assistant", 30),
        _msg("user", 30),
    ]
    counter = get_counter("gpt-4o")
    for keep_tokens in range(0, counter.count(msgs) + 5, 7):
        window = keep_tokens + 100 + 50
        model = tokenflex.Model(
            name="tiny",
            context_window=max(window, 1),
            tokenizer="o200k_base",
            chat_format="openai",
            family="gpt-4o",
        )
        try:
            plan = fit(msgs, model=model, max_tokens=50, min_output_tokens=50, history_share=1.0)
        except ContextOverflowError:
            continue
        kept = plan.messages
        assert (call in kept) == (result in kept)
        first_hist = kept[1] if len(kept) > 1 else None
        if first_hist is not None and first_hist is not msgs[1]:
            assert first_hist.get("role") == "user"  # history never starts with an orphan
        _check_promise(plan, msgs)


def test_lazy_sqlite_source_is_read_only_as_far_as_needed() -> None:
    store = SQLiteMessageStore()
    store.extend("room", _chat(10_000)[1:-1])
    fetch = store.fetcher("room")
    plan = fit(
        [{"role": "system", "content": "sys"}, {"role": "user", "content": "now?"}],
        model="gpt-4",
        max_tokens=1000,
        history=fetch,
        page_size=20,
    )
    assert 0 < len(plan.messages) < 400
    assert store.rows_read <= len(plan.messages) + 40  # the pages needed, plus one page
    assert plan.input_tokens + plan.max_tokens + 100 <= 8192


async def test_afit_with_async_iterator_source() -> None:
    hist = _chat(3000)[1:-1]

    async def newest_first():  # type: ignore[no-untyped-def]
        for m in reversed(hist):
            yield m

    plan = await tokenflex.afit(
        [{"role": "user", "content": "now?"}],
        model="gpt-4",
        max_tokens=1000,
        history=newest_first(),
    )
    assert plan.messages[-1]["content"] == "now?"
    assert plan.input_tokens + plan.max_tokens + 100 <= 8192


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("hello", id="string"),
        pytest.param({"role": "user", "content": "x"}, id="dict"),
        pytest.param([{"role": "wizard", "content": "x"}], id="unknown-role"),
        pytest.param([{"role": "user", "content": None}], id="none-content"),
        pytest.param([{"role": "user", "content": 5}], id="int-content"),
        pytest.param(["not a dict"], id="not-a-dict"),
    ],
)
def test_bad_messages(bad: Any) -> None:
    with pytest.raises(InvalidMessagesError):
        fit(bad, model="gpt-4o", max_tokens=100)


def test_bad_options() -> None:
    for bad in (-5, 0, 1.5, 100.0, True, "100"):
        with pytest.raises(tokenflex.InvalidInputError, match="max_tokens"):
            fit(_chat(1), model="gpt-4o", max_tokens=bad)
    with pytest.raises(tokenflex.InvalidInputError, match="history_shar"):
        fit(_chat(1), model="gpt-4o", history_shar=0.5)


def test_plan_to_dict_and_determinism() -> None:
    msgs = _chat(300)
    a = fit(msgs, model="gpt-4", max_tokens=1000).to_dict()
    b = fit(msgs, model="gpt-4", max_tokens=1000).to_dict()
    a.pop("elapsed_ms"), b.pop("elapsed_ms")
    assert a == b
    assert a["dropped_count"] == len(a["dropped"]) and a["sections"]["history"] > 0


def test_conversation_incremental_matches_fit_every_turn() -> None:
    msgs = _chat(600, words=30)
    conv = Conversation(msgs[:1], model="gpt-4", cache_stable=False)
    for i, m in enumerate(msgs[1:], start=2):
        conv.append(m)
        if m["role"] == "user" and i % 25 == 0:
            a = conv.fit(max_tokens=1000)
            b = fit(msgs[:i], model="gpt-4", max_tokens=1000)
            assert [id(x) for x in a.messages] == [id(x) for x in b.messages]
            assert (a.input_tokens, a.max_tokens) == (b.input_tokens, b.max_tokens)


def test_unknown_model_is_in_the_plans_warnings_with_close_names() -> None:
    plan = fit(_chat(1), model="gtp-4", max_tokens=100)
    (w,) = [w for w in plan.warnings if w.startswith("Unknown model")]
    assert "'gtp-4'" in w and "8,192-token window" in w and "Did you mean gpt-4," in w
    assert "strict=True" in w
    assert tokenflex.models.close_names("gtp-4")[0] == "gpt-4"
    assert tokenflex.models.close_names("GPT-4O-MINI")[0] == "gpt-4o-mini"
    assert tokenflex.models.close_names("zzzzzzzz") == []
    known = fit(_chat(1), model="gpt-4", max_tokens=100)
    assert not any(w.startswith("Unknown model") for w in known.warnings)


BAD_MESSAGES = [
    pytest.param({"role": "assistant", "content": 5}, "content of type int", id="int-content"),
    pytest.param({"role": "wizard", "content": "x"}, "role 'wizard'", id="unknown-role"),
    pytest.param({"content": "x"}, "no 'role'", id="no-role"),
    pytest.param({"role": "user", "content": [{"type": "text"}]}, "'text'", id="bad-part"),
    pytest.param({"role": "user", "content": "x", "meta": {(1, 2): 3}}, "JSON", id="tuple-key"),
    pytest.param("not a dict", "not a dict", id="str-message"),
]


@pytest.mark.parametrize(("bad", "match"), BAD_MESSAGES)
@pytest.mark.parametrize("model", ["gpt-4", "gpt-4o"])
def test_a_bad_message_raises_whether_it_would_be_kept_or_dropped(
    bad: Any, match: str, model: str
) -> None:
    """gpt-4 drops messages[1] (old, and the history is long), gpt-4o keeps it: both raise
    before fitting, naming the index (it used to pass on gpt-4 and break to_dict())."""
    msgs = _chat(400)
    msgs[1] = bad
    with pytest.raises(InvalidMessagesError, match=rf"messages\[1\] .*{match}"):
        fit(msgs, model=model, max_tokens=1000)
    with pytest.raises(InvalidMessagesError, match=rf"messages\[1\] .*{match}"):
        Conversation(msgs, model=model)
    conv = Conversation(msgs[:1], model=model)
    with pytest.raises(InvalidMessagesError, match=rf"messages\[1\] .*{match}"):
        conv.append(bad)
    assert len(conv) == 1  # the bad message was not added


@pytest.mark.parametrize(("bad", "match"), BAD_MESSAGES)
def test_a_bad_history_message_is_named_as_the_caller_knows_it(bad: Any, match: str) -> None:
    history = _chat(6)[1:]  # oldest first
    history[-2] = bad
    current = [{"role": "user", "content": "and now?"}]
    with pytest.raises(InvalidMessagesError, match=rf"history\[{len(history) - 2}\] .*{match}"):
        fit(current, model="gpt-4o", max_tokens=100, history=history)
    newest_first = iter(list(reversed(history)))
    with pytest.raises(InvalidMessagesError, match=rf"history message 2 .*{match}"):
        fit(current, model="gpt-4o", max_tokens=100, history=newest_first)


async def test_afit_checks_every_message_too() -> None:
    msgs = _chat(400)
    msgs[1] = {"role": "assistant", "content": 5}
    with pytest.raises(InvalidMessagesError, match=r"messages\[1\]"):
        await tokenflex.afit(msgs, model="gpt-4", max_tokens=1000)


def test_without_max_tokens_history_is_kept_and_the_output_takes_what_is_left() -> None:
    """Issue 11 item 13: no max_tokens used to reserve gpt-4's whole max output and keep
    2 of 402 messages; now history fills the room down to the 500-token floor."""
    msgs = _chat(401, words=60)
    default = fit(msgs, model="gpt-4")
    explicit = fit(msgs, model="gpt-4", max_tokens=512)
    assert len(default.messages) > len(explicit.messages) > 10
    assert default.max_tokens >= 500
    assert default.input_tokens + default.max_tokens + 100 == 8192  # output takes the rest
    assert not any(w.startswith("max_tokens reduced") for w in default.warnings)
    for plan in (default, explicit):
        (w,) = [w for w in plan.warnings if w.startswith("history: dropped ")]
        kept = len(plan.messages) - 3  # system, the pinned opening and the current turn
        assert f"dropped {len(plan.dropped):,} of {len(plan.dropped) + kept:,} messages" in w
        _check_promise(plan, msgs)
    short = fit(msgs[:6], model="gpt-4o")
    assert len(short.messages) == 6 and short.max_tokens == 16_384 and not short.warnings


# -- issue 11 item 12: the objects users hold -------------------------------------------
def _sdk_conversation() -> tuple[list[Any], list[dict[str, Any]]]:
    """A conversation holding an openai SDK message and a pydantic model, and the dicts
    they stand for."""
    import pydantic
    from openai.types.chat import ChatCompletionMessage

    class Note(pydantic.BaseModel):
        role: str
        content: str

    reply = ChatCompletionMessage.model_validate(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        }
    )
    objects: list[Any] = [
        {"role": "user", "content": "What is the capital of France?"},
        reply,  # messages.append(resp.choices[0].message)
        {"role": "tool", "tool_call_id": "c1", "content": "Paris"},
        Note(role="user", content="And of Spain?"),
    ]
    dicts = [
        objects[0],
        {"role": "assistant", "tool_calls": reply.model_dump()["tool_calls"]},
        objects[2],
        {"role": "user", "content": "And of Spain?"},
    ]
    return objects, dicts


def test_sdk_and_pydantic_messages_are_accepted_by_every_entry_point() -> None:
    objects, dicts = _sdk_conversation()
    expected = count_messages(dicts, model="gpt-4o")
    assert tokenflex.count_messages(objects, model="gpt-4o") == expected
    plan = fit(objects, model="gpt-4o", max_tokens=100)
    assert plan.input_tokens == expected and plan.messages[1] is objects[1]
    conv = Conversation(model="gpt-4o")
    conv.extend(objects)
    assert conv.tokens() == expected == conv.fit(max_tokens=100).input_tokens
    prompt = tokenflex.Prompt("gpt-4o", max_tokens=100)
    prompt.add("history", objects[:-1]).add("current", [objects[-1]], required=True)
    assert prompt.fit().input_tokens == expected
    history = fit(objects[-1:], model="gpt-4o", max_tokens=100, history=objects[:-1])
    assert history.input_tokens == expected


def test_a_bad_message_object_is_named_by_its_index_everywhere() -> None:
    import pydantic

    class Bad(pydantic.BaseModel):
        role: str
        content: int

    objects, _ = _sdk_conversation()
    bad = [*objects[:2], Bad(role="user", content=5), *objects[2:]]
    m = r"messages\[2\] has content of type int"
    with pytest.raises(InvalidMessagesError, match=m):
        tokenflex.count_messages(bad, model="gpt-4o")
    with pytest.raises(InvalidMessagesError, match=m):
        fit([*bad, *_chat(400)], model="gpt-4", max_tokens=1000)  # in the dropped part
    with pytest.raises(InvalidMessagesError, match=m):
        Conversation(model="gpt-4o").extend(bad)
    with pytest.raises(InvalidMessagesError, match=rf"Section 'history': {m}"):
        tokenflex.Prompt("gpt-4o").add("history", bad)
    with pytest.raises(InvalidMessagesError, match=r"history\[2\] has content of type int"):
        fit(objects[-1:], model="gpt-4o", max_tokens=100, history=bad)


def test_the_up_front_check_reads_anthropic_and_responses_requests_in_their_format() -> None:
    """The shape check runs on the converted request: an Anthropic tool_use block or a
    Responses function_call item is not a malformed chat message."""
    anthropic = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]},
    ]
    assert fit(anthropic, model="gpt-4o", max_tokens=10).format == "anthropic"
    responses = [
        {"role": "user", "content": "q"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "r"},
    ]
    assert fit(responses, model="gpt-4o", max_tokens=10).format == "responses"
    anthropic[1]["content"] = [{"type": "text", "text": 5}]
    with pytest.raises(InvalidMessagesError, match=r"messages\[1\]"):
        fit(anthropic, model="gpt-4o", max_tokens=10)


# -- issue 11 item 15: history= orientation -------------------------------------------
def _tool_history(turns: int) -> list[dict[str, Any]]:
    """Oldest first; every turn calls a tool with the same id (ids repeat in the wild)."""
    out: list[dict[str, Any]] = []
    for t in range(turns):
        call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        out += [
            {"role": "user", "content": f"question {t}", "created_at": 1000 + 3 * t},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call],
                "created_at": 1001 + 3 * t,
            },
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": f"result {t}",
                "created_at": 1002 + 3 * t,
            },
        ]
    return out


def test_history_orientation_is_explicit_and_the_likely_mistake_is_caught() -> None:
    """A list is oldest first, an iterator newest first; a newest-first list (or an
    oldest-first iterator) used to keep the oldest messages silently."""
    history = _tool_history(30)
    current = [{"role": "user", "content": "and now?"}]
    kept = fit(current, model="gpt-4o", max_tokens=100, history=history)
    assert kept.messages[-2]["content"] == "result 29"  # the newest history came in
    same = fit(current, model="gpt-4o", max_tokens=100, history=iter(history[::-1]))
    assert same.messages == kept.messages
    untimed = [{k: v for k, v in m.items() if k != "created_at"} for m in history]
    with pytest.raises(tokenflex.InvalidInputError, match=r"history\[87\] is older than its"):
        fit(current, model="gpt-4o", max_tokens=100, history=untimed[::-1])
    with pytest.raises(tokenflex.InvalidInputError, match=r"wrong way round.*reverse"):
        fit(current, model="gpt-4o", max_tokens=100, history=iter(untimed))
    users = [m for m in history if m["role"] == "user"]  # no tools: the timestamps tell
    with pytest.raises(tokenflex.InvalidInputError, match=r"created_at 1003, newer than 1000"):
        fit(current, model="gpt-4o", max_tokens=100, history=users[::-1])
