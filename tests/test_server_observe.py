"""Observe mode (issue 22, item 8): the proxy forwards the client's body byte for byte,
makes the plan fit mode would have sent, keeps it and reports it in ``x-tokenflex-would-*``
headers.

A recording upstream on loopback keeps the exact bytes it received. Each would-header is
checked against an independent reference: the header fit mode answers for the same body
on a second proxy (fresh state, same upstream), and the plan kept in the store.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from test_server import ServerThread, fake_discover

from tokenflex.errors import ConfigError
from tokenflex.server import ServerConfig, create_app

PLAN_HEADERS = ("input-tokens", "max-tokens", "context-window", "dropped", "summary")
"""The ``x-tokenflex-*`` plan headers every fitted answer carries."""
EVENTS = [b'data: {"n":1}\n\n', b'data: {"n":2}\n\n', b"data: [DONE]\n\n"]
WINDOW = 1024  # the fake discovery's window for "tiny"
WORDS = ["valve", "pressure", "kernel", "harvest", "caf\u00e9", "signal", "river", "\u00fcber"]


@dataclass(frozen=True)
class Received:
    path: str
    raw: bytes
    headers: dict[str, str]


class Recorder:
    """What the upstream received, newest last."""

    def __init__(self) -> None:
        self.seen: list[Received] = []

    def app(self) -> Starlette:
        async def answer(request: Request) -> Response:
            raw = await request.body()
            self.seen.append(Received(request.url.path, raw, dict(request.headers)))
            try:
                stream = json.loads(raw).get("stream") is True
            except (ValueError, AttributeError):
                stream = False
            if stream:

                async def events() -> AsyncIterator[bytes]:
                    for event in EVENTS:
                        yield event

                return StreamingResponse(events(), media_type="text/event-stream")
            # usage below any prediction: calibration leaves the model alone
            return JSONResponse({"answered": request.url.path, "usage": {"prompt_tokens": 1}})

        return Starlette(routes=[Route("/v1/{rest:path}", answer, methods=["POST"])])


@pytest.fixture(scope="module")
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture(scope="module")
def upstream(recorder: Recorder) -> Iterator[ServerThread]:
    with ServerThread(recorder.app()) as server:
        yield server


def proxy_for(upstream: ServerThread, **settings: Any) -> ServerThread:
    config = ServerConfig.load(upstream=upstream.url, cut_note=False, **settings)
    return ServerThread(create_app(config, discover=fake_discover))


@pytest.fixture(scope="module")
def observing(upstream: ServerThread) -> Iterator[ServerThread]:
    """The whole proxy observes, but for the route ``/fitted``."""
    with proxy_for(upstream, mode="observe", routes={"fitted": {"mode": "fit"}}) as server:
        yield server


@pytest.fixture(scope="module")
def fitting(upstream: ServerThread) -> Iterator[ServerThread]:
    """The whole proxy fits, but for the route ``/trial``."""
    with proxy_for(upstream, routes={"trial": {"mode": "observe"}}) as server:
        yield server


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30, trust_env=False) as c:
        yield c


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def body_for(wire: str, seed: int, *, turns: int = 40, stream: bool = False) -> dict[str, Any]:
    """A conversation of ``turns`` messages in ``wire``'s shape (too long for the window
    at 40), its own words per seed so no two tests share a conversation."""
    rng = random.Random(seed)
    msgs = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"{i}: {_text(rng, 40)}"}
        for i in range(turns)
    ]
    msgs.append({"role": "user", "content": f"seed {seed}: and now?"})
    body: dict[str, Any] = {"model": "tiny", "temperature": 0.25}
    if wire == "chat":
        body |= {"messages": [{"role": "system", "content": "Be terse."}, *msgs]}
        body["max_tokens"] = 200
    elif wire == "anthropic":
        body |= {"system": "Be terse.", "messages": msgs, "max_tokens": 200}
    else:
        body |= {"instructions": "Be terse.", "input": msgs, "max_output_tokens": 200}
    if stream:
        body["stream"] = True
    return body


PATHS = {"chat": "/v1/chat/completions", "anthropic": "/v1/messages", "responses": "/v1/responses"}


def raw_bytes(body: dict[str, Any]) -> bytes:
    """The body as no serializer of the proxy would write it: indented, every non-ASCII
    character escaped, a trailing newline. Forwarding it unchanged keeps all of that."""
    return json.dumps(body, indent=2, ensure_ascii=True).encode() + b"\n"


def post(client: httpx.Client, url: str, raw: bytes, **headers: str) -> httpx.Response:
    headers = {"content-type": "application/json", "authorization": "Bearer sk-trial", **headers}
    return client.post(url, content=raw, headers=headers)


def would(response: httpx.Response) -> dict[str, str]:
    prefix = "x-tokenflex-would-"
    return {k[len(prefix) :]: v for k, v in response.headers.items() if k.startswith(prefix)}


CASES = [
    pytest.param(wire, stream, id=f"{wire}-{'stream' if stream else 'json'}")
    for wire in PATHS
    for stream in (False, True)
]


@pytest.mark.parametrize("wire,stream", CASES)
def test_observe_forwards_the_bytes_and_reports_what_fit_mode_would_do(
    wire: str,
    stream: bool,
    observing: ServerThread,
    fitting: ServerThread,
    recorder: Recorder,
    client: httpx.Client,
) -> None:
    seed = 100 + list(PATHS).index(wire) * 2 + stream
    raw = raw_bytes(body_for(wire, seed, stream=stream))
    r = post(client, observing.url + PATHS[wire], raw)
    assert r.status_code == 200, r.text
    received = recorder.seen[-1]
    assert received.path == PATHS[wire]
    assert received.raw == raw  # byte for byte
    assert received.headers["authorization"] == "Bearer sk-trial"
    assert received.headers["content-type"] == "application/json"
    if stream:
        assert r.content == b"".join(EVENTS)
    else:
        assert r.json()["answered"] == PATHS[wire]

    seen = would(r)
    assert r.headers["x-tokenflex-mode"] == "observe"
    assert seen["fit"] == "yes" and seen["change"] == "yes"
    assert int(seen["dropped"]) > 0
    assert int(seen["input-tokens"]) + int(seen["max-tokens"]) <= WINDOW
    # nothing claims the request was fitted
    assert not any(f"x-tokenflex-{name}" in r.headers for name in PLAN_HEADERS)

    # the reference: fit mode, the same body, a proxy with fresh state
    fitted = post(client, fitting.url + PATHS[wire], raw)
    assert fitted.status_code == 200, fitted.text
    assert "x-tokenflex-mode" not in fitted.headers
    assert recorder.seen[-1].raw != raw  # fit mode did change it
    assert {n: seen[n] for n in PLAN_HEADERS} == {
        n: fitted.headers[f"x-tokenflex-{n}"] for n in PLAN_HEADERS
    }

    # the plan is kept, for these credentials only
    plan_url = f"{observing.url}/tokenflex/plans/{r.headers['x-tokenflex-plan-id']}"
    plan = client.get(plan_url, headers={"authorization": "Bearer sk-trial"})
    assert plan.status_code == 200, plan.text
    data = plan.json()
    assert data["input_tokens"] == int(seen["input-tokens"])
    assert data["max_tokens"] == int(seen["max-tokens"])
    assert data["dropped_count"] == int(seen["dropped"])
    assert data["dropped_by_reason"].get("cleared", 0) == int(seen["cleared"])
    other = client.get(plan_url, headers={"authorization": "Bearer sk-other"})
    assert other.status_code == 404


def test_a_request_that_fits_would_not_change(
    observing: ServerThread, recorder: Recorder, client: httpx.Client
) -> None:
    raw = raw_bytes(body_for("chat", 7, turns=4))
    r = post(client, observing.url + PATHS["chat"], raw)
    assert r.status_code == 200, r.text
    assert recorder.seen[-1].raw == raw
    seen = would(r)
    assert (seen["fit"], seen["change"], seen["dropped"], seen["cleared"]) == (
        "yes",
        "no",
        "0",
        "0",
    )
    assert seen["max-tokens"] == "200"


def test_tool_results_that_would_be_cleared_are_counted(
    upstream: ServerThread, recorder: Recorder, client: httpx.Client
) -> None:
    rng = random.Random(3)
    msgs: list[dict[str, Any]] = []
    for i in range(12):  # a question, a tool round and an answer each
        call = {"id": f"c{i}", "type": "function", "function": {"name": "w", "arguments": "{}"}}
        msgs += [
            {"role": "user", "content": f"The weather in town {i}?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": _text(rng, 60)},
            {"role": "assistant", "content": f"Town {i}: fine."},
        ]
    msgs.append({"role": "user", "content": "And the next town?"})
    raw = raw_bytes({"model": "tiny", "messages": msgs, "max_tokens": 100})
    # without cache-stable cuts: the low-water cut would drop the old rounds whole
    settings = {"mode": "observe", "cache_stable": False, "fit": {"clear_tool_results": True}}
    with proxy_for(upstream, **settings) as proxy:
        r = post(client, proxy.url + PATHS["chat"], raw)
        assert r.status_code == 200, r.text
        assert recorder.seen[-1].raw == raw
        seen = would(r)
        plan = client.get(
            f"{proxy.url}/tokenflex/plans/{r.headers['x-tokenflex-plan-id']}",
            headers={"authorization": "Bearer sk-trial"},
        ).json()
    cleared = plan["dropped_by_reason"].get("cleared", 0)
    assert cleared > 0
    assert int(seen["cleared"]) == cleared
    assert int(seen["dropped"]) == plan["dropped_count"] >= cleared
    assert seen["change"] == "yes"


@pytest.mark.parametrize("wire", list(PATHS))
def test_a_request_fit_mode_refuses_is_forwarded_and_says_so(
    wire: str,
    observing: ServerThread,
    fitting: ServerThread,
    recorder: Recorder,
    client: httpx.Client,
) -> None:
    body = body_for(wire, 50, turns=0)
    huge = "lorem ipsum dolor " * 1500  # one message over the whole window
    key = "messages" if wire != "responses" else "input"
    body[key][-1]["content"] = huge
    raw = raw_bytes(body)

    calls = len(recorder.seen)
    refused = post(client, fitting.url + PATHS[wire], raw)
    assert refused.status_code == 400
    assert "Required input needs" in refused.text  # the message says why
    assert len(recorder.seen) == calls  # fit mode never sent it

    r = post(client, observing.url + PATHS[wire], raw)
    assert r.status_code == 200, r.text
    assert recorder.seen[-1].raw == raw
    assert would(r) == {"fit": "no", "refuse": "400 context_length_exceeded"}
    assert "x-tokenflex-plan-id" not in r.headers


def test_a_body_fit_mode_cannot_parse_is_forwarded_and_says_so(
    observing: ServerThread, recorder: Recorder, client: httpx.Client
) -> None:
    raw = b'{"model": "tiny", "messages": "not a list"}'
    r = post(client, observing.url + PATHS["chat"], raw)
    assert r.status_code == 200, r.text
    assert recorder.seen[-1].raw == raw
    seen = would(r)
    assert seen["fit"] == "no"
    assert seen["refuse"].startswith("400 ")
    # the proxy's own bounds still hold in observe mode: a body that is not JSON-typed
    calls = len(recorder.seen)
    r = client.post(
        observing.url + PATHS["chat"], content=raw, headers={"content-type": "text/plain"}
    )
    assert r.status_code == 415
    assert len(recorder.seen) == calls


def test_mode_is_per_route(
    observing: ServerThread, fitting: ServerThread, recorder: Recorder, client: httpx.Client
) -> None:
    raw = raw_bytes(body_for("chat", 60))
    r = post(client, fitting.url + "/trial" + PATHS["chat"], raw)  # fit proxy, observe route
    assert r.status_code == 200, r.text
    assert recorder.seen[-1].raw == raw
    assert would(r)["fit"] == "yes"
    r = post(client, observing.url + "/fitted" + PATHS["chat"], raw)  # the other way round
    assert r.status_code == 200, r.text
    assert recorder.seen[-1].raw != raw
    assert would(r) == {} and int(r.headers["x-tokenflex-dropped"]) > 0


@pytest.mark.parametrize(
    "settings,fragment",
    [
        pytest.param({"mode": "watch"}, "mode", id="bad-mode"),
        pytest.param({"routes": {"r": {"mode": "dry-run"}}}, "mode", id="bad-route-mode"),
        pytest.param({"fit": {"mode": "observe"}}, "[routes.NAME]", id="mode-in-fit"),
        pytest.param(
            {"models": {"tiny": {"mode": "observe"}}}, "[routes.NAME]", id="mode-in-model"
        ),
    ],
)
def test_mode_is_checked_at_startup(settings: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        create_app(ServerConfig.load(upstream="http://127.0.0.1:9", **settings))
    assert fragment in str(err.value)
