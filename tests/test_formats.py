"""Request formats in fit(): chat, Anthropic Messages and Responses, as hypothesis properties.

Generated requests of each format (every content part and block the issue lists: images,
audio, files, refusals, tool calls and results, reasoning, thinking, cache_control) go
through ``tokenflex.fit`` and are checked against what each API documents, written here
independently of ``tokenflex.formats``:

- **round trip**: with room for everything, the plan is the request itself (the same items,
  ``system`` / ``instructions`` as given), and for chat only ``reasoning_content`` is taken
  out, each one listed in ``plan.dropped``;
- **valid output**: in a small window the fitted request is still one the API accepts:
  every tool_result / function_call_output with its call, every call with its result,
  reasoning and thinking with the call they led to, an Anthropic history that opens with a
  user message; kept + dropped is the whole request, each item once; the current turn and
  the system prompt are kept;
- **the promise**: the fitted request recounted here (its own conversion to chat messages,
  from the documented counting rules, through ``count_messages``) is the plan's
  ``input_tokens``, and ``input_tokens + max_tokens + safety_margin <= window``.
"""

from __future__ import annotations

import base64
import copy
import io
import json
import math
import re
import wave
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

import tokenflex
from tokenflex import ContextOverflowError, InvalidInputError, InvalidMessagesError

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
MODEL = tokenflex.get_model("gpt-4o")
WORDS = ["the", "pump", "valve", "東京", "код", "42", "{json:", "naïve", "print(x)", "—"]


def _png(width: int, height: int) -> str:
    buf = io.BytesIO()
    Image.new("L", (width, height)).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _wav(seconds: float) -> str:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(bytes(2 * int(8000 * seconds)))
    return base64.b64encode(buf.getvalue()).decode()


def _pdf(pages: int) -> str:
    buf = io.BytesIO()
    first, *rest = [Image.new("L", (8, 8)) for _ in range(pages)]
    first.save(buf, "PDF", save_all=True, append_images=rest)
    return base64.b64encode(buf.getvalue()).decode()


PNG = {(w, h): _png(w, h) for w, h in [(40, 30), (300, 200), (900, 1800)]}
WAV = _wav(0.5)
PDF = _pdf(2)

texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=40).map(" ".join)
ids = st.integers(0, 10**6).map(lambda n: f"call_{n}")
cache = st.one_of(st.none(), st.just({"type": "ephemeral"}))


def _with_cache(block: dict[str, Any], cc: Any) -> dict[str, Any]:
    return {**block, "cache_control": cc} if cc is not None else block


# -- generators: chat ----------------------------------------------------------------


@st.composite
def chat_user(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        return {"role": "user", "content": draw(texts)}
    parts: list[dict[str, Any]] = [{"type": "text", "text": draw(texts)}]
    for kind in draw(st.lists(st.sampled_from(["image", "remote", "audio", "file"]), max_size=2)):
        if kind == "image":
            size = draw(st.sampled_from(sorted(PNG)))
            url = f"data:image/png;base64,{PNG[size]}"
            parts.append({"type": "image_url", "image_url": {"url": url, "detail": "high"}})
        elif kind == "remote":
            parts.append({"type": "image_url", "image_url": {"url": "https://example.com/a.png"}})
        elif kind == "audio":
            parts.append({"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}})
        else:
            data = f"data:application/pdf;base64,{PDF}"
            parts.append({"type": "file", "file": {"filename": "a.pdf", "file_data": data}})
    return {"role": "user", "content": draw(st.permutations(parts))}


@st.composite
def chat_turn(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = [draw(chat_user())]
    answer: dict[str, Any] = {"role": "assistant"}
    style = draw(st.sampled_from(["text", "refusal", "tools"]))
    if style == "text":
        answer["content"] = draw(texts)
    elif style == "refusal":
        answer["content"] = [{"type": "refusal", "refusal": draw(texts)}]
    else:
        calls = draw(st.lists(ids, min_size=1, max_size=3, unique=True))
        answer["content"] = None
        answer["tool_calls"] = [
            {"id": c, "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
            for c in calls
        ]
    if draw(st.booleans()):
        answer["reasoning_content"] = draw(texts)
    out.append(answer)
    for call in answer.get("tool_calls", []):
        out.append({"role": "tool", "tool_call_id": call["id"], "content": draw(texts)})
    return out


@st.composite
def chat_requests(draw: st.DrawFn) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    if draw(st.booleans()):
        msgs.append({"role": "system", "content": draw(texts)})
    for turn in draw(st.lists(chat_turn(), max_size=5)):
        msgs += turn
    msgs.append(draw(chat_user()))
    return _unique_calls(msgs)


def _unique_calls(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Renumber call ids so that every call is unique in the request (as APIs make them)."""
    n = 0
    rename: dict[str, str] = {}
    for m in msgs:
        for c in m.get("tool_calls") or []:
            n += 1
            rename[c["id"]] = c["id"] = f"call_{n}"
        if m.get("role") == "tool":
            m["tool_call_id"] = rename[m["tool_call_id"]]
    return msgs


# -- generators: Anthropic -------------------------------------------------------------


@st.composite
def anthropic_user_blocks(draw: st.DrawFn) -> Any:
    if draw(st.booleans()):
        return draw(texts)
    blocks: list[dict[str, Any]] = [_with_cache({"type": "text", "text": draw(texts)}, draw(cache))]
    for kind in draw(st.lists(st.sampled_from(["image", "url", "pdf", "textdoc"]), max_size=2)):
        if kind == "image":
            data = PNG[draw(st.sampled_from(sorted(PNG)))]
            src = {"type": "base64", "media_type": "image/png", "data": data}
            blocks.append({"type": "image", "source": src})
        elif kind == "url":
            src = {"type": "url", "url": "https://example.com/b.jpg"}
            blocks.append({"type": "image", "source": src})
        elif kind == "pdf":
            src = {"type": "base64", "media_type": "application/pdf", "data": PDF}
            blocks.append(_with_cache({"type": "document", "source": src}, draw(cache)))
        else:
            src = {"type": "text", "media_type": "text/plain", "data": draw(texts)}
            blocks.append({"type": "document", "source": src, "title": "notes"})
    return draw(st.permutations(blocks))


@st.composite
def anthropic_requests(draw: st.DrawFn) -> tuple[Any, list[dict[str, Any]]]:
    system: Any = draw(
        st.one_of(
            st.none(),
            texts,
            st.lists(texts, min_size=1, max_size=2).map(
                lambda ts: [{"type": "text", "text": t} for t in ts]
            ),
        )
    )
    if isinstance(system, list) and draw(st.booleans()):
        system[-1]["cache_control"] = {"type": "ephemeral"}
    msgs: list[dict[str, Any]] = []
    pending: list[str] = []  # tool_use ids the next user message answers
    for _ in range(draw(st.integers(0, 5))):
        content = draw(anthropic_user_blocks())
        if pending:
            results: list[Any] = []
            for tid in pending:
                inner = draw(st.one_of(texts, texts.map(lambda t: [{"type": "text", "text": t}])))
                results.append({"type": "tool_result", "tool_use_id": tid, "content": inner})
            extra = [] if isinstance(content, str) else content[:1]
            content = results + extra
        msgs.append({"role": "user", "content": content})
        blocks: list[dict[str, Any]] = []
        if draw(st.booleans()):
            blocks.append({"type": "thinking", "thinking": draw(texts), "signature": "sig=="})
        if draw(st.integers(0, 4)) == 0:
            blocks.append({"type": "redacted_thinking", "data": "EnRlZGFjdGVk"})
        if draw(st.booleans()) or not blocks:
            blocks.append({"type": "text", "text": draw(texts)})
        pending = [f"toolu_{len(msgs)}_{k}" for k in range(draw(st.integers(0, 2)))]
        for tid in pending:
            blocks.append({"type": "tool_use", "id": tid, "name": "lookup", "input": {"q": tid}})
        msgs.append({"role": "assistant", "content": blocks})
    last = draw(anthropic_user_blocks())
    if pending:
        last = [{"type": "tool_result", "tool_use_id": t, "content": draw(texts)} for t in pending]
    msgs.append({"role": "user", "content": last})
    return system, msgs


# -- generators: Responses --------------------------------------------------------------


@st.composite
def responses_user(draw: st.DrawFn) -> dict[str, Any]:
    shape = draw(st.sampled_from(["plain", "typed", "parts"]))
    if shape == "plain":
        return {"role": "user", "content": draw(texts)}
    parts: list[dict[str, Any]] = [{"type": "input_text", "text": draw(texts)}]
    if shape == "parts":
        data = PNG[draw(st.sampled_from(sorted(PNG)))]
        parts.append(
            {"type": "input_image", "image_url": f"data:image/png;base64,{data}", "detail": "high"}
        )
        if draw(st.booleans()):
            parts.append(
                {
                    "type": "input_file",
                    "filename": "a.pdf",
                    "file_data": f"data:application/pdf;base64,{PDF}",
                }
            )
    return {"type": "message", "role": "user", "content": draw(st.permutations(parts))}


@st.composite
def responses_requests(draw: st.DrawFn) -> tuple[Any, list[dict[str, Any]]]:
    instructions = draw(st.one_of(st.none(), texts))
    items: list[dict[str, Any]] = []
    n = 0
    for _ in range(draw(st.integers(0, 5))):
        items.append(draw(responses_user()))
        if draw(st.booleans()):
            n += 1
            reasoning: dict[str, Any] = {
                "type": "reasoning",
                "id": f"rs_{n}",
                "summary": [{"type": "summary_text", "text": draw(texts)}],
            }
            if draw(st.booleans()):
                reasoning["encrypted_content"] = "gAAAAB" + "x" * draw(st.integers(1, 200))
            items.append(reasoning)
        calls = []
        for _ in range(draw(st.integers(0, 2))):
            n += 1
            calls.append(f"fc_{n}")
            items.append(
                {
                    "type": "function_call",
                    "call_id": f"fc_{n}",
                    "name": "lookup",
                    "arguments": json.dumps({"q": draw(texts)}),
                }
            )
        for c in calls:
            items.append({"type": "function_call_output", "call_id": c, "output": draw(texts)})
        if not calls or draw(st.booleans()):
            n += 1
            text = {"type": "output_text", "text": draw(texts), "annotations": []}
            items.append(
                {
                    "type": "message",
                    "id": f"msg_{n}",
                    "status": "completed",
                    "role": "assistant",
                    "content": [text],
                }
            )
    items.append(draw(responses_user()))
    return instructions, items


# -- the independent reference: each format as chat messages for counting --------------


def _ref_source(source: Mapping[str, Any], kind: str) -> list[dict[str, Any]]:
    if source["type"] == "base64":
        url = f"data:{source['media_type']};base64,{source['data']}"
        if kind == "image":
            return [{"type": "image_url", "image_url": {"url": url}}]
        return [{"type": "file", "file": {"file_data": url}}]
    if source["type"] == "text":
        return [{"type": "text", "text": source["data"]}]
    return [{"type": "image_url", "image_url": {"url": source["url"]}}]


def _ref_block(b: Any) -> list[dict[str, Any]]:
    if isinstance(b, str):
        return [{"type": "text", "text": b}]
    t = b["type"]
    if t == "text":
        return [{"type": "text", "text": b["text"]}]
    if t in ("image", "document"):
        out = _ref_source(b["source"], t)
        return out + ([{"type": "text", "text": b["title"]}] if "title" in b else [])
    if t == "tool_result":
        inner = b["content"]
        out = [{"type": "text", "text": b["tool_use_id"]}]
        if isinstance(inner, str):
            return [*out, {"type": "text", "text": inner}]
        return out + [p for x in inner for p in _ref_block(x)]
    if t == "thinking":
        return [{"type": "text", "text": b["thinking"]}]
    if t == "redacted_thinking":
        return [{"type": "text", "text": b["data"]}]
    raise AssertionError(f"generator made an unknown block {t}")


def ref_anthropic(system: Any, msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic as chat messages counted the way the formats doc says."""
    out: list[dict[str, Any]] = []
    if system is not None:
        if isinstance(system, str):
            out.append({"role": "system", "content": system})
        else:
            out.append({"role": "system", "content": [p for b in system for p in _ref_block(b)]})
    for m in msgs:
        c = m["content"]
        if isinstance(c, str):
            out.append({"role": m["role"], "content": c})
            continue
        uses = [b for b in c if b["type"] == "tool_use"]
        is_result = any(b["type"] == "tool_result" for b in c)
        chat: dict[str, Any] = {
            "role": "tool" if is_result else m["role"],
            "content": [p for b in c if b["type"] != "tool_use" for p in _ref_block(b)],
        }
        if uses:
            chat["tool_calls"] = [
                {
                    "id": u["id"],
                    "type": "function",
                    "function": {
                        "name": u["name"],
                        "arguments": json.dumps(
                            u["input"], ensure_ascii=False, separators=(",", ":")
                        ),
                    },
                }
                for u in uses
            ]
        out.append(chat)
    return out


def _ref_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    out: list[dict[str, Any]] = []
    for p in content:
        if p["type"] in ("input_text", "output_text", "summary_text"):
            out.append({"type": "text", "text": p["text"]})
        elif p["type"] == "input_image":
            out.append(
                {"type": "image_url", "image_url": {"url": p["image_url"], "detail": p["detail"]}}
            )
        elif p["type"] == "input_file":
            out.append(
                {"type": "file", "file": {"file_data": p["file_data"], "filename": p["filename"]}}
            )
        else:
            raise AssertionError(p)
    return out


def ref_responses(instructions: Any, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses items as chat messages: the assistant side of a turn (reasoning, its
    message and calls) is one assistant message; each output a tool message."""
    out: list[dict[str, Any]] = []
    if instructions is not None:
        out.append({"role": "system", "content": instructions})
    turn: dict[str, Any] | None = None
    for it in items:
        kind = it.get("type", "message")
        side = kind in ("reasoning", "function_call") or it.get("role") == "assistant"
        if not side:
            turn = None
            if kind == "function_call_output":
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": it["call_id"],
                        "content": _ref_parts(it["output"]),
                    }
                )
            else:
                out.append({"role": it["role"], "content": _ref_parts(it["content"])})
            continue
        if turn is None:
            turn = {"role": "assistant", "content": []}
            out.append(turn)
        if kind == "reasoning":
            turn["content"] += _ref_parts(it["summary"])
            if "encrypted_content" in it:
                turn["content"].append({"type": "text", "text": it["encrypted_content"]})
        elif kind == "function_call":
            fn = {"name": it["name"], "arguments": it["arguments"]}
            turn.setdefault("tool_calls", []).append(
                {"id": it["call_id"], "type": "function", "function": fn}
            )
        else:
            turn["content"] += _ref_parts(it["content"])
    return out


def recount(plan: tokenflex.Plan) -> int:
    if plan.format == "anthropic":
        msgs = ref_anthropic(plan.system, plan.messages)
    elif plan.format == "responses":
        msgs = ref_responses(plan.system, plan.messages)
    else:
        msgs = plan.messages
    return tokenflex.count_messages(
        msgs, model=plan.model, tools=TOOLS_CHAT if plan.tools else None
    )


TOOLS_CHAT = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look up a part.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
]
TOOLS = {
    "chat": TOOLS_CHAT,
    "anthropic": [
        {
            "name": "lookup",
            "description": "Look up a part.",
            "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
        }
    ],
    "responses": [
        {
            "type": "function",
            "name": "lookup",
            "description": "Look up a part.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            "strict": False,
        }
    ],
}


# -- validity, from each API's rules ------------------------------------------------------


def check_anthropic_valid(msgs: list[dict[str, Any]]) -> None:
    assert msgs, "an Anthropic request needs a message"
    assert msgs[0]["role"] == "user", "the first message must be the user's"
    merged: list[dict[str, Any]] = []
    for m in msgs:  # the API merges consecutive same-role messages
        if merged and merged[-1]["role"] == m["role"]:
            merged[-1] = {"role": m["role"], "content": _blocks(merged[-1]) + _blocks(m)}
        else:
            merged.append({"role": m["role"], "content": _blocks(m)})
    for k, m in enumerate(merged):
        results = [b["tool_use_id"] for b in m["content"] if b.get("type") == "tool_result"]
        if results:
            assert k > 0 and merged[k - 1]["role"] == "assistant"
            uses = [b["id"] for b in merged[k - 1]["content"] if b.get("type") == "tool_use"]
            assert sorted(results) == sorted(uses), (results, uses)
        if m["role"] == "assistant":
            uses = [b["id"] for b in m["content"] if b.get("type") == "tool_use"]
            if uses and k + 1 < len(merged):
                nxt = [
                    b["tool_use_id"]
                    for b in merged[k + 1]["content"]
                    if b.get("type") == "tool_result"
                ]
                assert sorted(nxt) == sorted(uses)


def _blocks(m: Mapping[str, Any]) -> list[dict[str, Any]]:
    c = m["content"]
    return [{"type": "text", "text": c}] if isinstance(c, str) else list(c)


def check_responses_valid(items: list[dict[str, Any]], given: list[dict[str, Any]]) -> None:
    calls = [it["call_id"] for it in items if it.get("type") == "function_call"]
    outputs = [it["call_id"] for it in items if it.get("type") == "function_call_output"]
    answered = {it["call_id"] for it in given if it.get("type") == "function_call_output"}
    seen: set[str] = set()
    for it in items:
        if it.get("type") == "function_call":
            seen.add(it["call_id"])
        if it.get("type") == "function_call_output":
            assert it["call_id"] in seen, f"output {it['call_id']} without its call before it"
    assert set(outputs) == set(calls) & answered, (calls, outputs)
    for k, it in enumerate(items):  # a reasoning item is followed by what it led to
        if it.get("type") == "reasoning":
            j = next(j for j, g in enumerate(given) if g is it)
            assert k + 1 < len(items) and items[k + 1] is given[j + 1]


def check_chat_valid(msgs: list[dict[str, Any]]) -> None:
    open_calls: set[str] = set()
    for m in msgs:
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_calls, "a tool result without its call"
        if m["role"] == "assistant":
            open_calls = {c["id"] for c in m.get("tool_calls") or []}
    for k, m in enumerate(msgs):
        calls = [c["id"] for c in m.get("tool_calls") or []]
        if calls:
            answers = [x["tool_call_id"] for x in msgs[k + 1 : k + 1 + len(calls)]]
            if k + 1 < len(msgs):
                assert sorted(answers) == sorted(calls)


def check_accounting(plan: tokenflex.Plan, given: list[Any]) -> None:
    """Kept + dropped = the caller's list, each item once; the current turn is kept."""
    kept = [
        next(i for i, g in enumerate(given) if g is m)
        for m in plan.messages
        if any(g is m for g in given)
    ]
    dropped = [d.index for d in plan.dropped if d.section in ("history", "current", "system")]
    assert sorted(kept + dropped) == list(range(len(given))), (kept, dropped)
    for d in plan.dropped:
        if d.section in ("history", "current", "system"):
            assert d.item is given[d.index]
    # the current turn is required: sent as it is, or with its over-long tool results
    # truncated (a copy in the caller's own shape, listed as truncated)
    truncated = {d.index for d in plan.dropped if d.reason == "truncated"}
    last = plan.messages[-1]
    if last is not given[-1]:
        assert len(given) - 1 in truncated, "the current turn is required"
        assert _ids(last) == _ids(given[-1]), "a truncated copy keeps its ids and shape"


def _ids(item: Any) -> list[Any]:
    """The tool ids an item carries (a chat/Responses call id, Anthropic block ids)."""
    if not isinstance(item, dict):
        return []
    out = [item.get(k) for k in ("tool_call_id", "call_id", "type", "role") if k in item]
    content = item.get("content")
    if isinstance(content, list):
        out += [(b.get("type"), b.get("tool_use_id")) for b in content if isinstance(b, dict)]
    return out


def check_promise(plan: tokenflex.Plan, window: int) -> None:
    assert plan.context_window == window
    assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= window
    assert recount(plan) == plan.input_tokens


def small(window: int) -> tokenflex.Model:
    return MODEL.replace(name=f"gpt-4o-w{window}", context_window=window, max_output_tokens=4096)


# -- properties ---------------------------------------------------------------------------


@SETTINGS
@given(chat_requests())
def test_chat_round_trip(msgs: list[dict[str, Any]]) -> None:
    given_copy = copy.deepcopy(msgs)
    kept = tokenflex.fit(
        msgs, model="gpt-4o", max_tokens=100, keep_reasoning=True, tools=TOOLS_CHAT
    )
    assert kept.format == "chat" and kept.messages == given_copy and not list(kept.dropped)
    assert msgs == given_copy, "fit() must not change the caller's messages"
    plan = tokenflex.fit(msgs, model="gpt-4o", max_tokens=100, tools=TOOLS_CHAT)
    without = [{k: v for k, v in m.items() if k != "reasoning_content"} for m in given_copy]
    assert plan.messages == without
    reasoning = [
        (i, m["reasoning_content"]) for i, m in enumerate(given_copy) if "reasoning_content" in m
    ]
    listed = [(d.index, d.item) for d in plan.dropped if d.section == "reasoning"]
    assert listed == reasoning
    assert all(d.reason == "reasoning" and d.tokens > 0 for d in plan.dropped)
    check_promise(plan, MODEL.context_window)


@SETTINGS
@given(anthropic_requests())
def test_anthropic_round_trip(req: tuple[Any, list[dict[str, Any]]]) -> None:
    system, msgs = req
    given_copy = copy.deepcopy(req)
    plan = tokenflex.fit(
        msgs,
        model="gpt-4o",
        max_tokens=100,
        system=system,
        format="anthropic",
        tools=TOOLS["anthropic"],
    )
    assert plan.format == "anthropic"
    assert (plan.system, plan.messages) == given_copy
    assert all(a is b for a, b in zip(plan.messages, msgs, strict=True)), "the caller's own items"
    assert not list(plan.dropped)
    check_anthropic_valid(plan.messages)
    check_promise(plan, MODEL.context_window)


@SETTINGS
@given(responses_requests())
def test_responses_round_trip(req: tuple[Any, list[dict[str, Any]]]) -> None:
    instructions, items = req
    given_copy = copy.deepcopy(req)
    plan = tokenflex.fit(
        items,
        model="gpt-4o",
        max_tokens=100,
        system=instructions,
        format="responses",
        tools=TOOLS["responses"],
    )
    assert plan.format == "responses"
    assert (plan.system, plan.messages) == given_copy
    assert not list(plan.dropped)
    check_responses_valid(plan.messages, items)
    check_promise(plan, MODEL.context_window)


def _fit_small(
    msgs: list[Any], share: float, fmt: str, system: Any = None
) -> tuple[tokenflex.Plan | None, int]:
    """fit() into a window that holds ``share`` of what the whole request needs."""
    full = tokenflex.fit(
        msgs, model="gpt-4o", max_tokens=64, system=system, format=fmt, tools=TOOLS[fmt]
    )
    window = max(100, int(full.input_tokens * share) + 64 + 8)
    try:
        plan = tokenflex.fit(
            msgs,
            model=small(window),
            max_tokens=64,
            system=system,
            format=fmt,
            tools=TOOLS[fmt],
            min_output_tokens=16,
            safety_margin=8,
        )
    except ContextOverflowError as exc:
        # Only what is required (system, current turn, the calls it answers) overflows.
        assert exc.context_window == window
        assert exc.required_tokens + 16 + 8 > window
        return None, window
    return plan, window


windows = st.floats(0.05, 1.05)


@SETTINGS
@given(chat_requests(), windows)
def test_chat_fitted_is_valid(msgs: list[dict[str, Any]], share: float) -> None:
    plan, window = _fit_small(msgs, share, "chat")
    if plan is None:
        return
    check_chat_valid(plan.messages)
    if msgs[0]["role"] == "system":
        assert plan.messages[0] == msgs[0]
    check_promise(plan, window)


@SETTINGS
@given(anthropic_requests(), windows)
def test_anthropic_fitted_is_valid(req: tuple[Any, list[dict[str, Any]]], share: float) -> None:
    system, msgs = req
    plan, window = _fit_small(msgs, share, "anthropic", system)
    if plan is None:
        return
    assert plan.system == system, "the top-level system is always kept"
    check_anthropic_valid(plan.messages)
    check_accounting(plan, msgs)
    check_promise(plan, window)


@SETTINGS
@given(responses_requests(), windows)
def test_responses_fitted_is_valid(req: tuple[Any, list[dict[str, Any]]], share: float) -> None:
    instructions, items = req
    plan, window = _fit_small(items, share, "responses", instructions)
    if plan is None:
        return
    assert plan.system == instructions
    check_responses_valid(plan.messages, items)
    check_accounting(plan, items)
    check_promise(plan, window)


# -- examples: detection, errors, estimates -------------------------------------------------


def test_detected_without_format() -> None:
    anthropic = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "4"}]},
    ]
    assert tokenflex.fit(anthropic, model="gpt-4o", max_tokens=10).format == "anthropic"
    responses = [
        {"role": "user", "content": "q"},
        {"type": "function_call_output", "call_id": "c", "output": "4"},
    ]
    assert tokenflex.fit(responses, model="gpt-4o", max_tokens=10).format == "responses"
    assert (
        tokenflex.fit(
            [{"role": "user", "content": "q"}], model="gpt-4o", max_tokens=10, system="be brief"
        ).format
        == "anthropic"
    )


def test_mixed_formats_name_both() -> None:
    mixed = [
        {"role": "tool", "tool_call_id": "c", "content": "x"},
        {"type": "function_call_output", "call_id": "c", "output": "4"},
    ]
    with pytest.raises(
        InvalidMessagesError, match=r"chat \(messages\[0\]\).*responses \(messages\[1\]\).*format="
    ):
        tokenflex.fit(mixed, model="gpt-4o", max_tokens=10)


@pytest.mark.parametrize(
    ("fmt", "msgs", "where"),
    [
        (
            "anthropic",
            [{"role": "user", "content": "q"}, {"role": "system", "content": "x"}],
            "messages[1]",
        ),
        ("anthropic", [{"role": "user", "content": [{"type": "text"}]}], "messages[0]"),
        (
            "responses",
            [{"role": "user", "content": "q"}, {"type": "message", "role": "bot", "content": "x"}],
            "messages[1]",
        ),
        ("responses", [{"role": "user", "content": "q"}, 7], "messages[1]"),
        (
            "chat",
            [{"role": "user", "content": "q"}, {"role": "user", "content": [{"type": "video"}]}],
            "messages[1]",
        ),
    ],
)
def test_bad_message_names_its_index(fmt: str, msgs: list[Any], where: str) -> None:
    with pytest.raises(InvalidMessagesError, match=rf"^{re.escape(where)} "):
        tokenflex.fit(msgs, model="gpt-4o", max_tokens=10, format=fmt)


def test_unknown_format() -> None:
    with pytest.raises(InvalidInputError, match=r"format=.bedrock.*chat, anthropic, responses"):
        tokenflex.fit([{"role": "user", "content": "q"}], model="gpt-4o", format="bedrock")


def test_estimates_are_flagged() -> None:
    msgs = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "listen and read"},
                {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}},
                {"type": "file", "file": {"file_id": "file-abc"}},
            ],
        }
    ]
    plan = tokenflex.fit(msgs, model="gpt-4o", max_tokens=10)
    joined = " ".join(plan.warnings)
    assert "1 file(s) counted as an estimate" in joined and "given only by id" in joined
    assert "1 audio clip(s) counted as an estimate" in joined
    assert plan.input_tokens >= 10 * 4600 + math.ceil(0.5 * 32)


@pytest.mark.parametrize("fmt", ["anthropic", "responses"])
def test_summary_and_documents_in_the_format(fmt: str) -> None:
    msgs: list[dict[str, Any]] = []
    for i in range(12):
        msgs.append({"role": "user", "content": f"question {i} about the pump " * 20})
        msgs.append({"role": "assistant", "content": f"answer {i} about the valve " * 20})
    msgs.append({"role": "user", "content": "and now?"})
    docs = [tokenflex.Chunk(text="The pump runs at 3 bar.", source="manual.pdf")]
    plan = tokenflex.fit(
        msgs,
        model=small(1200),
        max_tokens=50,
        format=fmt,
        system="be brief",
        documents=docs,
        summarizer=tokenflex.ExtractiveSummarizer(),
        min_output_tokens=10,
    )
    assert plan.summary is not None and plan.format == fmt
    added = [plan.summary.text, "The pump runs at 3 bar."]
    if fmt == "anthropic":  # added system text goes into the top-level system
        assert plan.system[0] == {"type": "text", "text": "be brief"}
        system_text = " ".join(b["text"] for b in plan.system)
        assert all(a in system_text for a in added)
        assert all(m in msgs for m in plan.messages)
    else:  # Responses keeps its instructions and gets system messages
        assert plan.system == "be brief"
        extra = [m["content"] for m in plan.messages if m.get("role") == "system"]
        assert all(any(a in e for e in extra) for a in added)
    covered = {d.index for d in plan.dropped if d.reason == "summarized"}
    assert covered and plan.summary.covers == (min(covered), max(covered) + 1)
    assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= 1200
    assert recount(plan) <= plan.input_tokens


@settings(SETTINGS, max_examples=15)
@given(anthropic_requests())
def test_afit_reads_formats_like_fit(req: tuple[Any, list[dict[str, Any]]]) -> None:
    import asyncio

    system, msgs = req
    plan = tokenflex.fit(msgs, model="gpt-4o", max_tokens=50, system=system, format="anthropic")
    aplan = asyncio.run(
        tokenflex.afit(msgs, model="gpt-4o", max_tokens=50, system=system, format="anthropic")
    )
    assert (aplan.format, aplan.system, aplan.messages) == (plan.format, plan.system, plan.messages)
    assert aplan.input_tokens == plan.input_tokens


async def test_afit_bad_item_names_its_index() -> None:
    items = [{"role": "user", "content": "q"}, {"type": "message", "role": "bot", "content": "x"}]
    with pytest.raises(InvalidMessagesError, match=r"^messages\[1\] has role 'bot'"):
        await tokenflex.afit(items, model="gpt-4o", max_tokens=10, format="responses")


def test_reasoning_taken_out_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    # nothing dropped silently: in plan.dropped and in the log, for fit() and Conversation
    import logging

    from tokenflex import Conversation, fit

    msgs = [
        {"role": "user", "content": "Which is larger, 9.11 or 9.9?"},
        {"role": "assistant", "content": "9.9", "reasoning_content": "Compare tenths: 9 > 1."},
        {"role": "user", "content": "Why?"},
    ]
    caplog.set_level(logging.INFO, logger="tokenflex")
    plan = fit(msgs, model="gpt-4o", max_tokens=100)
    assert [d.section for d in plan.dropped] == ["reasoning"]
    assert "dropped reasoning[1:2] (1 items, reason=reasoning)" in caplog.text
    caplog.clear()
    conv = Conversation(model="gpt-4o", max_tokens=100)
    for m in msgs:
        conv.append(m)
    conv.fit()
    assert "reason=reasoning" in caplog.text


@pytest.mark.parametrize("fmt", ["anthropic", "responses"])
def test_a_truncated_newest_result_is_counted_as_its_format_counts_it(fmt: str) -> None:
    """The newest tool result, too long for the window, is sent truncated in the caller's
    own shape, and the plan counts the copy as the independent recount of the body does
    (the fresh-clone fuzz once found the copy counted without its ``tool_use_id``)."""
    big = " ".join(f"row{k} value" for k in range(3000))
    if fmt == "anthropic":
        msgs: list[Any] = [
            {"role": "user", "content": "Look it up."},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_9", "name": "lookup", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": big}],
            },
        ]
    else:
        msgs = [
            {"role": "user", "content": "Look it up."},
            {"type": "function_call", "call_id": "fc_9", "name": "lookup", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "fc_9", "output": big},
        ]
    plan = tokenflex.fit(
        msgs, model=small(2000), max_tokens=64, format=fmt, tools=TOOLS[fmt], safety_margin=8
    )
    check_promise(plan, 2000)
    check_accounting(plan, msgs)
    assert [d.reason for d in plan.dropped] == ["truncated"]
    assert "truncated to fit the context window" in json.dumps(plan.messages[-1])
