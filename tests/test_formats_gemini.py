"""Gemini ``contents`` / ``parts`` in the library: fit() in and out, plan.request(api=...).

The references are independent of the converter: a fitted body's contents are the
caller's own objects (identity), the dropped indices are exactly the missing ones, chat
messages taken to Gemini and back are the same messages, and the window promise is
checked by counting the body that is sent, read afresh from its JSON. (The proxy's
Gemini route, which fits the conversation as the chat it sends, is end to end in
tests/test_server_gemini.py.)
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenflex
from tokenflex.counting import get_counter
from tokenflex.errors import InvalidInputError, InvalidMessagesError
from tokenflex.formats.detect import detect_format
from tokenflex.formats.gemini import GEMINI, chat_to_gemini, gemini_to_chat
from tokenflex.formats.registry import format_names, get_format, register_format
from tokenflex.formats.tools import tools_for, tools_to_chat
from tokenflex.models import get_model
from tokenflex.recall import recall_calls, recall_tool, resolved_round
from tokenflex.roundtrip import prepare

MODEL = "gpt-4o"
WORDS = st.sampled_from(["river", "budget", "window", "kernel", "packet", "harvest"])
TEXT = st.lists(WORDS, min_size=1, max_size=40).map(" ".join)
NAME = st.sampled_from(["get_weather", "search", "lookup"])
TOOLS = [
    {
        "functionDeclarations": [
            {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            }
        ]
    }
]


@st.composite
def rounds(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Gemini contents: user questions, model answers, and function call rounds (a model
    turn with calls, then a user turn with one response per call)."""
    out: list[dict[str, Any]] = []
    for k in range(draw(st.integers(1, 12))):
        out.append({"role": "user", "parts": [{"text": draw(TEXT)}]})
        names = draw(st.lists(NAME, max_size=3))
        if names:
            calls = [
                {"functionCall": {"name": n, "args": {"q": draw(TEXT)}, "id": f"c{k}_{j}"}}
                for j, n in enumerate(names)
            ]
            out.append({"role": "model", "parts": calls})
            out.append(
                {
                    "role": "user",
                    "parts": [
                        {
                            "functionResponse": {
                                "name": n,
                                "id": f"c{k}_{j}",
                                "response": {"result": draw(TEXT)},
                            }
                        }
                        for j, n in enumerate(names)
                    ],
                }
            )
        out.append({"role": "model", "parts": [{"text": draw(TEXT)}]})
    out.append({"role": "user", "parts": [{"text": draw(TEXT)}]})
    return out


SYSTEM = {"parts": [{"text": "Be brief."}]}


def _recount(body: dict[str, Any]) -> int:
    """The input tokens of the body that is sent, read afresh from its JSON (not from
    the objects fit() converted and kept)."""
    sent = json.loads(json.dumps(body))
    prepared = prepare(
        sent["contents"], format="gemini", system=sent.get("systemInstruction"), tools=sent["tools"]
    )
    return get_counter(get_model(MODEL)).count(list(prepared.messages), tools=prepared.tools)


@settings(max_examples=40, deadline=None)
@given(contents=rounds())
def test_a_body_that_fits_comes_back_as_given(contents: list[dict[str, Any]]) -> None:
    plan = tokenflex.fit(contents, model=MODEL, max_tokens=100, system=SYSTEM, tools=TOOLS)
    assert plan.format == "gemini"
    assert all(a is b for a, b in zip(plan.messages, contents, strict=True))
    body = plan.request()
    assert body["contents"] == contents and body["systemInstruction"] == SYSTEM
    assert body["generationConfig"] == {"maxOutputTokens": 100}
    assert body["tools"] == TOOLS
    assert not plan.dropped


@settings(max_examples=25, deadline=None)
@given(contents=rounds(), budget=st.integers(150, 900))
def test_dropped_items_are_exactly_the_difference(
    contents: list[dict[str, Any]], budget: int
) -> None:
    plan = tokenflex.fit(
        contents, model=MODEL, max_tokens=50, max_input_tokens=budget, system=SYSTEM, tools=TOOLS
    )
    kept = {id(m) for m in plan.messages}
    missing = {i for i, m in enumerate(contents) if id(m) not in kept}
    dropped = {d.index for d in plan.dropped if d.section in ("history", "current")}
    assert dropped == missing
    for d in plan.dropped:
        assert d.item is contents[d.index]
    # the kept contents are in order, and a cut never opens on a model turn or a
    # function response (they need the turn before them)
    where = {id(m): i for i, m in enumerate(contents)}
    order = [where[id(m)] for m in plan.messages]
    assert order == sorted(order)
    first = plan.messages[0]
    assert first["role"] == "user" and "functionResponse" not in first["parts"][0]
    # the window promise, on the body that is sent
    assert plan.input_tokens <= budget
    assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= plan.context_window
    assert _recount(plan.request()) == plan.input_tokens


@st.composite
def chat_conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Alternating chat turns with tool rounds: what chat_to_gemini must carry both ways."""
    out: list[dict[str, Any]] = [{"role": "system", "content": draw(TEXT)}]
    for k in range(draw(st.integers(1, 8))):
        out.append({"role": "user", "content": draw(TEXT)})
        names = draw(st.lists(NAME, max_size=3))
        if names:
            said = draw(st.one_of(st.none(), TEXT))
            calls = [
                {
                    "id": f"call_{k}_{j}",
                    "type": "function",
                    "function": {"name": n, "arguments": json.dumps({"q": draw(TEXT)})},
                }
                for j, n in enumerate(names)
            ]
            out.append({"role": "assistant", "content": said, "tool_calls": calls})
            out += [{"role": "tool", "tool_call_id": c["id"], "content": draw(TEXT)} for c in calls]
        out.append({"role": "assistant", "content": draw(TEXT)})
    return out


def _canonical(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        m = dict(m)
        for call in m.get("tool_calls") or ():
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
        out.append(m)
    return out


@settings(max_examples=60, deadline=None)
@given(chat=chat_conversations())
def test_chat_to_gemini_and_back_is_the_same_conversation(chat: list[dict[str, Any]]) -> None:
    system, contents = chat_to_gemini(chat)
    assert contents[0]["role"] == "user"
    assert all(a["role"] != b["role"] for a, b in itertools.pairwise(contents))
    assert _canonical(gemini_to_chat(contents, system)) == _canonical(chat)


@settings(max_examples=30, deadline=None)
@given(contents=rounds())
def test_a_plan_in_another_api_and_back(contents: list[dict[str, Any]]) -> None:
    plan = tokenflex.fit(contents, model=MODEL, max_tokens=64, system=SYSTEM)
    chat = plan.request(api="chat")["messages"]
    again = tokenflex.fit(chat, model=MODEL, max_tokens=64).request(api="gemini")
    assert again["systemInstruction"] == SYSTEM
    assert _without_ids(again["contents"]) == _without_ids(contents)


def _without_ids(contents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Contents as a chat round trip keeps them: consecutive same-role turns merged."""
    out: list[dict[str, Any]] = []
    for c in contents:
        if out and out[-1]["role"] == c["role"]:
            out[-1] = {"role": c["role"], "parts": out[-1]["parts"] + c["parts"]}
        else:
            out.append(c)
    return out


def test_detection_and_system_instruction() -> None:
    assert detect_format([{"role": "user", "parts": [{"text": "hi"}]}]) == "gemini"
    assert detect_format([{"role": "user", "content": "hi"}], system=SYSTEM) == "gemini"
    with pytest.raises(InvalidMessagesError, match=r"gemini \(messages\[1\]\)"):
        detect_format(
            [{"role": "tool", "content": "x"}, {"role": "model", "parts": [{"text": "y"}]}]
        )


def test_added_system_text_goes_into_system_instruction() -> None:
    contents = [
        {"role": "user" if i % 2 == 0 else "model", "parts": [{"text": f"turn {i} " * 60}]}
        for i in range(30)
    ] + [{"role": "user", "parts": [{"text": "and now?"}]}]
    docs = [{"id": f"d{i}", "text": f"document {i}"} for i in range(3)]
    plan = tokenflex.fit(
        contents,
        model=MODEL,
        max_tokens=64,
        max_input_tokens=1500,
        system=SYSTEM,
        documents=[tokenflex.Chunk(d["text"], d["id"]) for d in docs],
    )
    parts = plan.system["parts"]
    assert parts[0] == SYSTEM["parts"][0] and len(parts) > 1
    assert "document 0" in json.dumps(parts[1:])
    assert SYSTEM == {"parts": [{"text": "Be brief."}]}  # the caller's is not changed


@pytest.mark.parametrize(
    ("content", "where"),
    [
        pytest.param({"parts": [{"text": "x"}]}, r"messages\[0\] has role None", id="no-role"),
        pytest.param({"role": "bot", "parts": []}, r"messages\[0\] has role 'bot'", id="role"),
        pytest.param(
            {"role": "user", "parts": "hi"}, r"messages\[0\] has parts of type str", id="parts"
        ),
        pytest.param(
            {"role": "user", "parts": [{"image": "x"}]}, r"messages\[0\] has parts\[0\]", id="kind"
        ),
        pytest.param(
            {"role": "user", "parts": [{"text": "a", "inlineData": {}}]},
            r"parts\[0\] with text and inlineData",
            id="two-kinds",
        ),
        pytest.param(
            {"role": "model", "parts": [{"functionCall": {"args": {}}}]},
            r"functionCall without a string 'name'",
            id="call-name",
        ),
    ],
)
def test_bad_contents_name_the_item(content: dict[str, Any], where: str) -> None:
    with pytest.raises(InvalidMessagesError, match=where):
        tokenflex.fit([content], model=MODEL, format="gemini")


def test_tools_in_every_shape() -> None:
    [chat] = tools_to_chat(TOOLS) or []
    assert chat["function"]["name"] == "get_weather"
    assert tools_for("gemini", [chat, {"googleSearch": {}}]) == [*TOOLS, {"googleSearch": {}}]
    assert tools_for("anthropic", TOOLS)[0]["input_schema"]["properties"] == {
        "city": {"type": "string"}
    }
    assert recall_tool("gemini")["functionDeclarations"][0]["name"] == "tokenflex_recall"


def test_recall_round_in_gemini() -> None:
    answer = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [{"functionCall": {"name": "tokenflex_recall", "args": {"id": "ab"}}}],
                }
            }
        ]
    }
    assert recall_calls("gemini", answer) == [("tokenflex_recall", "ab")]
    model_turn, results = resolved_round("gemini", answer, None, lookup=lambda rid, state: None)
    assert model_turn["role"] == "model" and results["role"] == "user"
    [part] = results["parts"]
    assert part["functionResponse"]["name"] == "tokenflex_recall"
    assert "No recall id 'ab'" in part["functionResponse"]["response"]["result"]


def test_the_registry() -> None:
    assert format_names()[:4] == ("chat", "anthropic", "responses", "gemini")
    assert get_format("gemini") is GEMINI
    with pytest.raises(InvalidInputError, match="registered already"):
        register_format(GEMINI)
    with pytest.raises(InvalidInputError, match=r"api='bedrock'.*gemini"):
        tokenflex.fit([{"role": "user", "content": "q"}], model=MODEL).request(api="bedrock")
