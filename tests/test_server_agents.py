"""Agent loops through the proxy, against the real llama.cpp ``llama-server``.

Three clients as real agents drive them, each with ONE user task and 45 tool rounds whose
results grow to several hundred tokens, replaying the whole conversation every turn:

- Claude-like: the official ``anthropic`` SDK on ``/v1/messages``: tools, a ``system``
  list with ``cache_control``, ``tool_use`` / ``tool_result`` blocks; every other turn
  streamed with ``max_tokens=32_000`` as Claude Code sends it, the others not streamed
  with LangChain's ``ChatAnthropic`` default of 4,096;
- Codex-like: the official ``openai`` SDK on ``/v1/responses``, ``store=False``, full
  replay of ``function_call`` / ``function_call_output`` items;
- a chat tool loop: the ``openai`` SDK on ``/v1/chat/completions``.

Every turn must be served (HTTP 200), within the window by the server's own
``usage`` count, with the task message sent and the newest tool round whole: the plan the
proxy kept for the turn (``/tokenflex/plans/{id}``, the caller's own) is read back and
checked.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from llama_server import LlamaCppServer
from test_server import ServerThread

from tokenflex.server import ServerConfig, create_app

pytestmark = pytest.mark.server

WINDOW = 2048
ROUNDS = 45
TASK = "Task T-77: find the failing test in the repository and tell me its name."
SYSTEM = "You are a coding agent. Call read_file to inspect files, then answer briefly."
WORDS = ["assert", "fixture", "module", "return", "import", "value", "error", "line"]
TOOL_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
}


def tool_output(k: int) -> str:
    """Round ``k``'s tool result: from a few dozen words up to several hundred tokens."""
    rng = random.Random(k)
    n = 30 + 12 * k
    return f"# f{k}.py\n" + " ".join(rng.choice(WORDS) for _ in range(n))


@pytest.fixture(scope="module")
def agent_proxy(llama_cpp_server: LlamaCppServer) -> Iterator[ServerThread]:
    # the default config (recall on: a turn the proxy re-sends for a tokenflex_recall call
    # keeps the plan of the client's own turn, which these tests check)
    config = ServerConfig.load(upstream=llama_cpp_server.base_url, discovery_timeout=60)
    with ServerThread(create_app(config)) as proxy:
        yield proxy


def kept_plan(proxy: ServerThread, response: httpx.Response) -> dict[str, Any]:
    """The plan the proxy kept for a turn, asked with the credentials the SDK sent."""
    plan_id = response.headers["x-tokenflex-plan-id"]
    owner = {
        k: v
        for k, v in response.request.headers.items()
        if k in ("authorization", "x-api-key", "api-key")
    }
    r = httpx.get(
        f"{proxy.url}/tokenflex/plans/{plan_id}",
        headers=owner,
        timeout=30,
        trust_env=False,
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_claude_like_agent_is_served_every_turn(
    llama_cpp_server: LlamaCppServer, agent_proxy: ServerThread
) -> None:
    key = "sk-claude-like"
    client = anthropic.Anthropic(base_url=agent_proxy.url, api_key=key, max_retries=0)
    system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    tools = [{"name": "read_file", "description": "Read a file.", "input_schema": TOOL_SCHEMA}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    served = 0
    bodies = agent_proxy.app.state.proxy.bodies
    reused = bodies.reused
    for k in range(ROUNDS):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Reading f{k}.py."},
                    {
                        "type": "tool_use",
                        "id": f"toolu_{k}",
                        "name": "read_file",
                        "input": {"path": f"f{k}.py"},
                    },
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_{k}", "content": tool_output(k)}
                ],
            }
        )
        args: dict[str, Any] = dict(
            model=llama_cpp_server.model,
            system=system,
            messages=messages,
            tools=tools,
            stop_sequences=[".", "\n"],  # a short answer: the test is about the input
        )
        if k % 2:  # Claude Code: streamed, max_tokens 32,000
            with client.messages.stream(max_tokens=32_000, **args) as stream:
                final = stream.get_final_message()
                http = stream.response
        else:  # LangChain's ChatAnthropic default: 4,096, not streamed
            raw = client.messages.with_raw_response.create(max_tokens=4_096, **args)
            final, http = raw.parse(), raw.http_response
        max_tokens = int(http.headers["x-tokenflex-max-tokens"])
        assert final.usage.input_tokens + max_tokens <= WINDOW, k
        plan = kept_plan(agent_proxy, http)
        sent = plan["messages"]
        assert sent[0]["content"] == TASK, f"turn {k}: the task was not sent"
        assert sent[-1]["content"][0]["tool_use_id"] == f"toolu_{k}", "the newest result"
        assert sent[-2]["content"][1]["id"] == f"toolu_{k}", "the newest call"
        served += 1
    assert served == ROUNDS
    # each turn repeats the last one's bytes: from the third on, only what it added is
    # parsed (the plans above are those of the whole requests all the same)
    assert bodies.reused - reused >= ROUNDS - 10


def test_codex_like_agent_is_served_every_turn(
    llama_cpp_server: LlamaCppServer, agent_proxy: ServerThread
) -> None:
    key = "sk-codex-like"
    client = openai.OpenAI(base_url=f"{agent_proxy.url}/v1", api_key=key, max_retries=0)
    tools = [
        {
            "type": "function",
            "name": "read_file",
            "description": "Read a file.",
            "parameters": TOOL_SCHEMA,
        }
    ]
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": TASK}]
    for k in range(ROUNDS):
        items.append(
            {
                "type": "function_call",
                "call_id": f"call_{k}",
                "name": "read_file",
                "arguments": json.dumps({"path": f"f{k}.py"}),
            }
        )
        items.append(
            {"type": "function_call_output", "call_id": f"call_{k}", "output": tool_output(k)}
        )
        raw = client.responses.with_raw_response.create(
            model=llama_cpp_server.model,
            instructions=SYSTEM,
            input=items,  # type: ignore[arg-type]
            tools=tools,  # type: ignore[arg-type]
            store=False,
            max_output_tokens=8,
        )
        response = raw.parse()
        assert response.usage is not None
        max_tokens = int(raw.headers["x-tokenflex-max-tokens"])
        assert response.usage.input_tokens + max_tokens <= WINDOW, k
        sent = kept_plan(agent_proxy, raw.http_response)["messages"]
        assert sent[0]["content"] == TASK, f"turn {k}: the task was not sent"
        assert sent[-1] == items[-1] and sent[-2] == items[-2], f"turn {k}: the newest round"


def test_chat_tool_loop_is_served_every_turn(
    llama_cpp_server: LlamaCppServer, agent_proxy: ServerThread
) -> None:
    key = "sk-chat-loop"
    client = openai.OpenAI(base_url=f"{agent_proxy.url}/v1", api_key=key, max_retries=0)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file.",
                "parameters": TOOL_SCHEMA,
            },
        }
    ]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": TASK},
    ]
    for k in range(ROUNDS):
        call = f"call_{k}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {
                            "name": "read_file",
                            "arguments": json.dumps({"path": f"f{k}.py"}),
                        },
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call, "content": tool_output(k)})
        raw = client.chat.completions.with_raw_response.create(
            model=llama_cpp_server.model,
            messages=messages,  # type: ignore[arg-type]
            tools=tools,  # type: ignore[arg-type]
            max_tokens=8,
            temperature=0,
        )
        completion = raw.parse()
        assert completion.usage is not None
        max_tokens = int(raw.headers["x-tokenflex-max-tokens"])
        assert completion.usage.prompt_tokens + max_tokens <= WINDOW, k
        sent = kept_plan(agent_proxy, raw.http_response)["messages"]
        assert sent[1]["content"] == TASK, f"turn {k}: the task was not sent"
        assert sent[-1] == messages[-1] and sent[-2] == messages[-2], f"turn {k}: newest round"


def test_a_request_that_fits_is_forwarded_byte_for_byte(
    llama_cpp_server: LlamaCppServer, agent_proxy: ServerThread
) -> None:
    """Do no harm: a short request goes out as the client sent it (the plan keeps
    everything and says the output it asked for)."""
    body = (
        b'{"model": "%s", "messages": [{"role": "user", "content": "Hi"}],   "max_tokens": 4}'
        % llama_cpp_server.model.encode()
    )
    r = httpx.post(
        f"{agent_proxy.url}/v1/chat/completions",
        content=body,
        headers={"content-type": "application/json", "authorization": "Bearer sk-fits"},
        timeout=60,
        trust_env=False,
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-tokenflex-dropped"] == "0"
    assert r.headers["x-tokenflex-max-tokens"] == "4"
