"""Recall through the proxy (issue 28 item 1).

A loopback upstream (a real HTTP server in this test) that, offered the
``tokenflex_recall`` tool, calls it once with the id the cut note names, then answers
with what it was given back. The proxy must answer that call itself: the client gets the
final answer and never sees the tool; the second request keeps the window. The recall
route answers only the credentials whose request left the messages out. One run against
the real llama-server shows the tool and the ids are accepted there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from llama_server import LlamaServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from test_server import TINY, ServerThread, conversation, start_proxy

import tokenflex
from tokenflex.recall import RECALL_TOOL, recall_text

ID = re.compile(r"recall id: ([0-9a-f]{12})")


class Seen:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []


def _note_id(body: dict[str, Any]) -> str | None:
    found = ID.findall(json.dumps(body))
    return found[0] if found else None


def _recalled(text: str, items: list[Any]) -> bool:
    """The tool result carries the recalled items: whole, or truncated to fit the window
    (head and tail kept, with the marker between them)."""
    whole = recall_text("", items)
    if text == whole:
        return True
    head, _, tail = text.partition("\n[... ")
    return bool(tail) and whole.startswith(head) and "truncated to fit" in tail


def contiguous(items: list[Any], given: list[Any]) -> bool:
    """``items`` are a run of the client's own messages, in order."""
    if not items or items[0] not in given:
        return False
    a = given.index(items[0])
    return items == given[a : a + len(items)]


def _offered(body: dict[str, Any]) -> bool:
    return any(RECALL_TOOL in json.dumps(t) for t in body.get("tools") or ())


def recalling_upstream(seen: Seen) -> Starlette:
    """Calls ``tokenflex_recall`` once (when offered, with the note's id), then answers
    ``recalled N`` with the length of the result it was given."""

    async def chat(request: Request) -> Response:
        body = json.loads(await request.body())
        seen.bodies.append(body)
        last = body["messages"][-1]
        if body.get("stream"):
            chunk = {"choices": [{"index": 0, "delta": {"content": "streamed"}}]}
            events = [f"data: {json.dumps(chunk)}\n\n".encode(), b"data: [DONE]\n\n"]
            return StreamingResponse(iter(events), media_type="text/event-stream")
        if _offered(body) and last["role"] != "tool":
            args = json.dumps({"id": _note_id(body)})
            call = {
                "id": "call_r1",
                "type": "function",
                "function": {"name": RECALL_TOOL, "arguments": args},
            }
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            return JSONResponse(
                {
                    "object": "chat.completion",
                    "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                }
            )
        text = f"recalled {len(last['content'])}" if last["role"] == "tool" else "plain"
        message = {"role": "assistant", "content": text}
        return JSONResponse(
            {
                "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            }
        )

    async def messages(request: Request) -> Response:
        body = json.loads(await request.body())
        seen.bodies.append(body)
        last = body["messages"][-1]["content"]
        result = isinstance(last, list) and last and last[0].get("type") == "tool_result"
        if _offered(body) and not result:
            use = {
                "type": "tool_use",
                "id": "toolu_1",
                "name": RECALL_TOOL,
                "input": {"id": _note_id(body)},
            }
            return JSONResponse(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [use],
                    "stop_reason": "tool_use",
                }
            )
        text = f"recalled {len(last[0]['content'])}" if result else "plain"
        return JSONResponse(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
            }
        )

    async def responses(request: Request) -> Response:
        body = json.loads(await request.body())
        seen.bodies.append(body)
        last = body["input"][-1]
        result = last.get("type") == "function_call_output"
        if _offered(body) and not result:
            args = json.dumps({"id": _note_id(body)})
            call = {
                "type": "function_call",
                "call_id": "fc_1",
                "name": RECALL_TOOL,
                "arguments": args,
            }
            return JSONResponse({"object": "response", "output": [call]})
        text = f"recalled {len(last['output'])}" if result else "plain"
        out = {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text}],
        }
        return JSONResponse({"object": "response", "output": [out]})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/responses", responses, methods=["POST"]),
        ]
    )


@pytest.fixture(scope="module")
def seen() -> Seen:
    return Seen()


@pytest.fixture(scope="module")
def proxy(seen: Seen) -> Iterator[ServerThread]:
    with ServerThread(recalling_upstream(seen)) as upstream, start_proxy(upstream.url) as server:
        yield server


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30, trust_env=False) as c:
        yield c


ALICE = {"authorization": "Bearer sk-alice"}


def _anthropic(n: int) -> list[dict[str, Any]]:
    out = []
    for i, m in enumerate(conversation(n)[1:]):
        out.append(
            {"role": m["role"], "content": [{"type": "text", "text": f"{i} {m['content']}"}]}
        )
    return out


CASES = [
    pytest.param("/v1/chat/completions", {"messages": conversation(40)}, id="chat"),
    pytest.param(
        "/v1/messages",
        {"system": "You are terse.", "messages": _anthropic(40), "max_tokens": 100},
        id="anthropic",
    ),
    pytest.param(
        "/v1/responses",
        {"instructions": "You are terse.", "input": conversation(40)[1:]},
        id="responses",
    ),
]


@pytest.mark.parametrize(("path", "body"), CASES)
def test_the_proxy_answers_the_recall_call_itself(
    proxy: ServerThread, seen: Seen, client: httpx.Client, path: str, body: dict[str, Any]
) -> None:
    seen.bodies.clear()
    r = client.post(f"{proxy.url}{path}", json={"model": "tiny", **body}, headers=ALICE)
    assert r.status_code == 200, r.text
    assert r.headers["x-tokenflex-recall-rounds"] == "1"
    assert RECALL_TOOL not in r.text and "recalled " in r.text  # the client never sees it
    first, second = seen.bodies
    rid = _note_id(first)
    assert rid is not None and _offered(first) and _offered(second)
    # the recalled messages went upstream, appended after the conversation, and the
    # re-sent request keeps the window (counted with the tool, by the model's tokenizer)
    recalled = client.get(f"{proxy.url}/tokenflex/recall/{rid}", headers=ALICE).json()["items"]
    given = body.get("messages") or body.get("input")
    assert recalled and all(item in given for item in recalled)
    if path == "/v1/messages":
        call, result = second["messages"][-2]["content"][0], second["messages"][-1]["content"][0]
        assert call["name"] == RECALL_TOOL and call["input"] == {"id": rid}
        assert _recalled(result["content"], recalled)
    elif path == "/v1/responses":
        call, result = second["input"][-2], second["input"][-1]
        assert call["name"] == RECALL_TOOL and _recalled(result["output"], recalled)
    else:
        call, result = second["messages"][-2], second["messages"][-1]
        assert call["tool_calls"][0]["function"]["name"] == RECALL_TOOL
        assert result["role"] == "tool" and _recalled(result["content"], recalled)
        tokens = tokenflex.count_messages(second["messages"], model=TINY, tools=second["tools"])
        assert tokens + second["max_tokens"] <= TINY.context_window
    h = r.headers  # the plan of the re-sent request keeps the promise
    assert int(h["x-tokenflex-input-tokens"]) + int(h["x-tokenflex-max-tokens"]) <= int(
        h["x-tokenflex-context-window"]
    )


def test_the_recall_route_answers_its_own_credentials_only(
    proxy: ServerThread, seen: Seen, client: httpx.Client
) -> None:
    seen.bodies.clear()
    body = {"model": "tiny", "messages": conversation(40), "stream": True}
    with client.stream("POST", f"{proxy.url}/v1/chat/completions", json=body, headers=ALICE) as r:
        assert r.status_code == 200
        assert "streamed" in r.read().decode()
    [sent] = seen.bodies  # streamed: the tool and the id go to the client's own loop
    rid = _note_id(sent)
    assert rid is not None and _offered(sent)
    mine = client.get(f"{proxy.url}/tokenflex/recall/{rid}", headers=ALICE)
    assert mine.status_code == 200
    assert contiguous(mine.json()["items"], conversation(40))
    for other in ({"authorization": "Bearer sk-bob"}, {}):
        r = client.get(f"{proxy.url}/tokenflex/recall/{rid}", headers=other)
        assert r.status_code == 404 and r.json()["error"]["code"] == "recall_not_found"


def test_a_request_that_fits_gets_no_tool(
    proxy: ServerThread, seen: Seen, client: httpx.Client
) -> None:
    seen.bodies.clear()
    body = {"model": "tiny", "messages": conversation(2, words=3)}
    r = client.post(f"{proxy.url}/v1/chat/completions", json=body, headers=ALICE)
    assert r.status_code == 200 and "x-tokenflex-recall-rounds" not in r.headers
    [sent] = seen.bodies
    assert sent == body


def test_the_real_llama_server_accepts_the_tool_and_the_ids(
    llama_server: LlamaServer, client: httpx.Client
) -> None:
    """Only that the tool and the named ids are accepted: a 135M model's choice to call
    the tool is not what this shows."""
    from tokenflex.server import create_app
    from tokenflex.server.config import ServerConfig

    config = ServerConfig.load(upstream=llama_server.base_url, discovery_timeout=60)
    with ServerThread(create_app(config)) as proxy:
        msgs = [{"role": "system", "content": "You are terse."}]
        for i in range(60):
            role = "user" if i % 2 == 0 else "assistant"
            msgs.append({"role": role, "content": f"note {i}: " + "the valve is open " * 20})
        msgs.append({"role": "user", "content": "What was note 3?"})
        body = {"model": llama_server.model, "messages": msgs, "max_tokens": 8, "stream": True}
        with client.stream("POST", f"{proxy.url}/v1/chat/completions", json=body) as r:
            text = r.read().decode()
        assert r.status_code == 200, text
        assert "data:" in text
        plan = client.get(f"{proxy.url}/tokenflex/plans/{r.headers['x-tokenflex-plan-id']}").json()
        [rid] = plan["extras"]["recall"]["ids"]
        recalled = client.get(f"{proxy.url}/tokenflex/recall/{rid}").json()["items"]
        assert contiguous(recalled, msgs)
