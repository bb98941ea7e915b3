"""``plan.request(api=...)``: the body for each API, accepted by the real SDKs' request types.

For generated requests of every format (tests/test_formats.py's generators) fitted and
turned into a body for every API, the body is validated against the SDK's own
``*CreateParamsNonStreaming`` type through pydantic (every nested iterable consumed, so
every message and block is checked), and must come back unchanged: no field the SDK does
not know. The output limit field follows the model (``max_completion_tokens`` for o-series
and gpt-5 chat models), the counted tools are always sent, and converted conversations keep
every tool call with its result.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from hypothesis import example, given, settings
from hypothesis import strategies as st
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from pydantic import TypeAdapter
from test_formats import (
    TOOLS,
    anthropic_requests,
    chat_requests,
    check_anthropic_valid,
    check_chat_valid,
    responses_requests,
)

import tokenflex
from tokenflex import InvalidInputError

ADAPTERS = {
    "chat": TypeAdapter(CompletionCreateParamsNonStreaming),
    "responses": TypeAdapter(ResponseCreateParamsNonStreaming),
    "anthropic": TypeAdapter(MessageCreateParamsNonStreaming),
}
IMAGE = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAACgAAAAeCAAAAAB7tgMBAAAAEklEQVR4nGNgGAWj"
    "YBSMguEAAATOAAEXIyT0AAAAAElFTkSuQmCC"
)
ASSISTANT = {
    "type": "message",
    "id": "msg_2",
    "status": "completed",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "the", "annotations": []}],
}
LIMIT = {"responses": "max_output_tokens", "anthropic": "max_tokens"}


def consume(value: Any) -> Any:
    """The validated value with every lazy ``Iterable`` validator run to the end."""
    if isinstance(value, dict):
        return {k: consume(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [consume(v) for v in value]
    if isinstance(value, Iterator) or type(value).__name__ == "ValidatorIterator":
        return [consume(v) for v in value]
    return value


def check_body(api: str, body: dict[str, Any]) -> None:
    json.dumps(body)
    validated = consume(ADAPTERS[api].validate_python(body))
    assert validated == json.loads(json.dumps(body)), "a field the SDK does not know"


@st.composite
def any_request(draw: st.DrawFn) -> tuple[str, Any, list[Any]]:
    fmt = draw(st.sampled_from(["chat", "anthropic", "responses"]))
    if fmt == "chat":
        return fmt, None, draw(chat_requests())
    system, msgs = draw(anthropic_requests() if fmt == "anthropic" else responses_requests())
    return fmt, system, msgs


@example(
    req=(
        "responses",
        None,
        [
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "the"},
                    {"type": "input_image", "image_url": IMAGE, "detail": "high"},
                ],
            },
            {"type": "function_call", "call_id": "fc_1", "name": "lookup", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "fc_1", "output": "the"},
            *[{"role": "user", "content": "the"}, ASSISTANT] * 2,
            {"role": "user", "content": "the"},
        ],
    ),
    api="anthropic",
    share=0.375,
)  # the cut opens at a tool round: the Anthropic body still opens with a user turn
@settings(max_examples=80, deadline=None)
@given(any_request(), st.sampled_from(["chat", "anthropic", "responses"]), st.floats(0.3, 1.0))
def test_body_accepted_by_the_sdk(req: tuple[str, Any, list[Any]], api: str, share: float) -> None:
    fmt, system, msgs = req
    full = tokenflex.fit(msgs, model="gpt-4o", max_tokens=64, system=system, format=fmt)
    window = int(full.input_tokens * share) + 64 + 200
    model = tokenflex.get_model("gpt-4o").replace(name="gpt-4o-small", context_window=window)
    try:
        plan = tokenflex.fit(
            msgs,
            model=model,
            max_tokens=64,
            system=system,
            format=fmt,
            tools=TOOLS[fmt],
            min_output_tokens=16,
        )
    except tokenflex.ContextOverflowError:
        return
    audio = api != "chat" and any(
        isinstance(m.get("content"), list)
        and any(p.get("type") == "input_audio" for p in m["content"])
        for m in plan.messages
    )
    if audio:
        with pytest.raises(InvalidInputError, match=rf"input_audio.*{api} API.*api='chat'"):
            plan.request(api=api)
        return
    body = plan.request(api=api)
    check_body(api, body)
    assert body[LIMIT.get(api, "max_tokens")] == plan.max_tokens
    assert len(body["tools"]) == len(TOOLS[fmt]), "the counted tools are sent"
    assert body["tools"] == TOOLS[api]
    if api == "anthropic":
        check_anthropic_valid(body["messages"])
        assert (body.get("system") is not None) == (system is not None or _has_system(plan))
    elif api == "chat":
        check_chat_valid(body["messages"])
    else:
        items = body["input"]
        calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
        for i in items:
            if i.get("type") == "function_call_output":
                assert i["call_id"] in calls


def _has_system(plan: tokenflex.Plan) -> bool:
    return plan.format == "chat" and any(m.get("role") == "system" for m in plan.messages)


@pytest.mark.parametrize(
    ("model", "field"),
    [
        ("o1", "max_completion_tokens"),
        ("o3-mini", "max_completion_tokens"),
        ("o4-mini", "max_completion_tokens"),
        ("gpt-5", "max_completion_tokens"),
        ("gpt-5-mini", "max_completion_tokens"),
        ("openai/gpt-5", "max_completion_tokens"),
        ("gpt-4o", "max_tokens"),
        ("gpt-4.1", "max_tokens"),
        ("claude-sonnet-4-5", "max_tokens"),
        ("llama3.2:3b", "max_tokens"),
    ],
)
def test_chat_limit_field(model: str, field: str) -> None:
    plan = tokenflex.fit([{"role": "user", "content": "hi"}], model=model, max_tokens=50)
    body = plan.request(api="chat", temperature=0.2)
    other = {"max_tokens", "max_completion_tokens"} - {field}
    assert body[field] == 50 and not other & body.keys()
    assert body["temperature"] == 0.2
    check_body("chat", {**body, "model": "gpt-4o"})


def test_responses_body_fields() -> None:
    items = [{"role": "user", "content": "hi"}]
    plan = tokenflex.fit(items, model="gpt-5", max_tokens=50, system="be brief", format="responses")
    body = plan.request(previous_response_id="resp_1", store=False)
    assert body == {
        "model": "gpt-5",
        "instructions": "be brief",
        "input": items,
        "max_output_tokens": 50,
        "previous_response_id": "resp_1",
        "store": False,
    }
    check_body("responses", body)


def test_summary_goes_into_the_system() -> None:
    system = [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}]
    plan = tokenflex.fit(
        [{"role": "user", "content": "hi"}], model="gpt-4o", max_tokens=50, system=system
    )
    body = plan.request()
    assert body["system"] == system, "cache_control kept where it was"
    check_body("anthropic", body)


def test_unknown_api() -> None:
    plan = tokenflex.fit([{"role": "user", "content": "hi"}], model="gpt-4o", max_tokens=5)
    with pytest.raises(InvalidInputError, match=r"api='bedrock'.*chat, anthropic, responses"):
        plan.request(api="bedrock")
