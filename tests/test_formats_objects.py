"""SDK and framework message objects in fit(), and back out (issue 11 item 12, issue 13).

The objects are the real ones: responses parsed by the openai and anthropic SDKs' own
models, LangChain messages, a pydantic model of the caller's. Each is counted like the
plain dict the SDK itself would send (``model_dump`` for the SDKs, LangChain's own
``convert_to_openai_messages`` as the independent reference), comes back out of fit() as
the caller's own object, and ``plan.request()`` turns it into JSON. A message that is not
one names its index in a :class:`tokenflex.TokenflexError`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types import Message
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from openai.types.chat import ChatCompletion
from openai.types.responses import Response
from pydantic import BaseModel

import tokenflex
from tokenflex import InvalidMessagesError, TokenflexError

WORDS = ["the", "pump", "valve", "東京", "код", "42", "{json:", "naïve"]
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=30).map(" ".join)


def chat_response(content: str | None, calls: list[str]) -> ChatCompletion:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": c, "type": "function", "function": {"name": "lookup", "arguments": '{"q":1}'}}
            for c in calls
        ]
    return ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-4o",
            "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
        }
    )


def test_openai_message_appended_as_is() -> None:
    msgs: list[Any] = [{"role": "user", "content": "Which part?"}]
    resp = chat_response(None, ["call_1"])
    msgs.append(resp.choices[0].message)  # what the openai docs tell users to do
    msgs.append({"role": "tool", "tool_call_id": "call_1", "content": "P-42"})
    msgs.append({"role": "user", "content": "And the price?"})
    plan = tokenflex.fit(msgs, model="gpt-4o", max_tokens=50)
    assert plan.format == "chat"
    assert plan.messages[1] is msgs[1], "the caller's own object comes back"
    dumped = [*msgs[:1], msgs[1].model_dump(exclude_none=True), *msgs[2:]]
    assert plan.input_tokens == tokenflex.count_messages(dumped, model="gpt-4o")
    body = plan.request()
    json.dumps(body)  # plain JSON
    assert body["messages"][1]["tool_calls"][0]["id"] == "call_1"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(texts, texts, st.booleans()), min_size=1, max_size=6), texts)
def test_langchain_counted_like_langchain_sends_it(turns: list[Any], last: str) -> None:
    msgs: list[BaseMessage] = [SystemMessage("be brief")]
    for n, (question, answer, tool) in enumerate(turns):
        msgs.append(HumanMessage(question))
        if tool:
            call = {"name": "lookup", "args": {"q": question}, "id": f"c{n}"}
            msgs.append(AIMessage("", tool_calls=[call]))
            msgs.append(ToolMessage(answer, tool_call_id=f"c{n}"))
        else:
            msgs.append(AIMessage(answer))
    msgs.append(HumanMessage(last))
    plan = tokenflex.fit(msgs, model="gpt-4o", max_tokens=50)
    assert all(a is b for a, b in zip(plan.messages, msgs, strict=True)), "a LangChain list back"
    reference = convert_to_openai_messages(msgs)
    assert plan.input_tokens == tokenflex.count_messages(reference, model="gpt-4o")
    window = plan.input_tokens // 2 + 60
    small = tokenflex.get_model("gpt-4o").replace(name="gpt-4o-small", context_window=window)
    try:
        cut = tokenflex.fit(msgs, model=small, max_tokens=20, min_output_tokens=10)
    except tokenflex.ContextOverflowError:
        return
    assert all(isinstance(m, BaseMessage) for m in cut.messages)
    assert cut.messages[-1] is msgs[-1]
    kept_calls = {c["id"] for m in cut.messages if isinstance(m, AIMessage) for c in m.tool_calls}
    for m in cut.messages:
        if isinstance(m, ToolMessage):
            assert m.tool_call_id in kept_calls, "a ToolMessage without its AIMessage"


def test_anthropic_sdk_objects() -> None:
    resp = Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 1, "output_tokens": 1},
            "content": [
                {"type": "thinking", "thinking": "look it up", "signature": "sig"},
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "P"}},
            ],
        }
    )
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "P-42"}
    as_blocks = [
        {"role": "user", "content": "Which part?"},
        {"role": "assistant", "content": resp.content},  # the SDK's content blocks
        {"role": "user", "content": [result]},
    ]
    whole = [as_blocks[0], resp, as_blocks[2]]  # the whole Message appended
    dicts = [
        as_blocks[0],
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in resp.content]},
        as_blocks[2],
    ]
    counts = set()
    for msgs in (as_blocks, whole, dicts):
        plan = tokenflex.fit(msgs, model="claude-sonnet-4-5", max_tokens=50, system="be brief")
        assert plan.format == "anthropic"
        assert plan.messages[1] is msgs[1]
        counts.add(plan.input_tokens)
        body = plan.request()
        json.dumps(body)
        assert body["messages"][1] == dicts[1]
        assert body["system"] == "be brief"
    assert len(counts) == 1, "objects count as the dicts they stand for"


def test_responses_sdk_output_items() -> None:
    resp = Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 0,
            "model": "gpt-5",
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "output": [
                {
                    "type": "reasoning",
                    "id": "rs_1",
                    "summary": [{"type": "summary_text", "text": "hm"}],
                },
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "call_1",
                    "name": "lookup",
                    "arguments": '{"q":"P"}',
                    "status": "completed",
                },
            ],
        }
    )
    items: list[Any] = [{"role": "user", "content": "Which part?"}, *resp.output]
    items.append({"type": "function_call_output", "call_id": "call_1", "output": "P-42"})
    plan = tokenflex.fit(items, model="gpt-5", max_tokens=50)
    assert plan.format == "responses"
    assert all(a is b for a, b in zip(plan.messages, items, strict=True))
    dumped = [i if isinstance(i, dict) else i.model_dump(exclude_none=True) for i in items]
    assert tokenflex.fit(dumped, model="gpt-5", max_tokens=50).input_tokens == plan.input_tokens
    body = plan.request(previous_response_id="resp_0")
    assert body["input"] == [json.loads(json.dumps(d)) for d in dumped]
    assert body["previous_response_id"] == "resp_0"


class Turn(BaseModel):
    role: str
    content: str


def test_other_pydantic_models() -> None:
    msgs = [Turn(role="system", content="be brief"), Turn(role="user", content="hi")]
    plan = tokenflex.fit(msgs, model="gpt-4o", max_tokens=10)
    assert plan.messages == msgs and plan.messages[0] is msgs[0]
    as_dicts = [m.model_dump() for m in msgs]
    assert plan.input_tokens == tokenflex.count_messages(as_dicts, model="gpt-4o")
    assert plan.request()["messages"] == as_dicts


@pytest.mark.parametrize(
    ("bad", "pattern"),
    [
        (object(), r"messages\[2\] is a object, not a dict"),
        (42, r"messages\[2\] is a int"),
        (ChatMessage(role="wizard", content="x"), r"messages\[2\] has role 'wizard'"),
        (Turn(role="bot", content="x"), r"messages\[2\] has role 'bot'"),
        ({"role": "user", "content": [{"type": "video"}]}, r"messages\[2\] has content\[0\]"),
    ],
)
def test_bad_object_names_its_index(bad: Any, pattern: str) -> None:
    msgs = [HumanMessage("a"), AIMessage("b"), bad, HumanMessage("c")]
    if isinstance(bad, dict):
        msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, bad]
    with pytest.raises(InvalidMessagesError, match=pattern) as info:
        tokenflex.fit(msgs, model="gpt-4o", max_tokens=10)
    assert isinstance(info.value, TokenflexError)
