"""The proxy under attack and bad input: a corpus of raw HTTP requests over loopback.

Every request goes through ``http.client`` (which sends the request target exactly as
written: no client-side ``..`` normalization) to the real app under uvicorn, in front of
a real upstream on loopback that records what reaches it and answers with hostile
headers (CORS for any origin, with credentials) and, for one model, an error body that
echoes the key it was sent. Each case of :data:`CORPUS` is (request, expected status,
expected body check); a 4xx of the proxy's own must also leave the upstream untouched.
"""

from __future__ import annotations

import asyncio
import gzip
import http.client
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from test_server import ServerThread, dead_url, fake_discover

from tokenflex.models import register_model
from tokenflex.redact import RedactingFilter, redact
from tokenflex.server import ProxyError, ServerConfig, create_app
from tokenflex.server._models import MAX_CACHED_BYTES, MAX_CACHED_UNKNOWN, ModelResolver
from tokenflex.server._upstream import Upstream
from tokenflex.server.paths import upstream_path
from tokenflex.tokenizers import register_tokenizer
from tokenflex.tokenizers.server import ServerTokenizer

CORS = {
    "access-control-allow-origin": "*",
    "access-control-allow-credentials": "true",
    "access-control-expose-headers": "*",
}
OPERATOR_KEY = "sk-operator-0123456789abcdef"
PROXY_KEY = "proxy-key-123456"


# -- the upstream -------------------------------------------------------------------------


class Seen:
    """Requests that reached the upstream."""

    def __init__(self) -> None:
        self.hits: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def add(self, hit: dict[str, Any]) -> None:
        with self.lock:
            self.hits.append(hit)

    def __len__(self) -> int:
        with self.lock:
            return len(self.hits)


def hostile_upstream(seen: Seen) -> Starlette:
    async def chat(request: Request) -> Response:
        body = json.loads(await request.body())
        auth = request.headers.get("authorization", "")
        seen.add({"path": request.url.path, "body": body, "authorization": auth})
        first = body["messages"][0].get("content") or ""
        if body.get("model") == "echo-key" or str(first).startswith("You summarize"):
            # like a gateway that quotes the key it refused
            message = f"Incorrect API key provided: {auth.partition(' ')[2]} (header {auth})"
            return JSONResponse({"error": {"message": message}}, status_code=401, headers=CORS)
        reply = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
        }
        return JSONResponse(reply, headers=CORS)

    async def echo(request: Request) -> Response:
        seen.add({"path": request.url.path, "raw_path": request.scope["raw_path"].decode()})
        return JSONResponse(
            {
                "echo": True,
                "path": request.url.path,
                "raw_path": request.scope["raw_path"].decode(),
                "host": request.headers.get("host"),
                "authorization": request.headers.get("authorization"),
            },
            status_code=201,
            headers=CORS,
        )

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/gateway/tenant-a/v1/chat/completions", chat, methods=["POST"]),
            Route("/{path:path}", echo, methods=["GET", "POST", "PUT", "DELETE", "OPTIONS"]),
        ]
    )


@pytest.fixture(scope="module")
def seen() -> Seen:
    return Seen()


@pytest.fixture(scope="module")
def upstream(seen: Seen) -> Iterator[ServerThread]:
    with ServerThread(hostile_upstream(seen)) as server:
        yield server


def proxy_for(upstream_url: str, uvicorn_options: Any = None, **options: Any) -> ServerThread:
    config = ServerConfig.load(upstream=upstream_url, read_timeout=5.0, **options)
    app = create_app(config, discover=fake_discover)
    return ServerThread(app, **(uvicorn_options or {}))


@pytest.fixture(scope="module")
def proxies(upstream: ServerThread) -> Iterator[dict[str, ServerThread]]:
    routes = {"x0": {}, "sum": {"summarize": True, "keep_recent": 2}}
    servers = {
        "open": proxy_for(upstream.url, routes=routes),
        "based": proxy_for(f"{upstream.url}/gateway/tenant-a", routes={"x0": {}}),
        "locked": proxy_for(
            upstream.url,
            proxy_key=PROXY_KEY,
            upstream_api_key=OPERATOR_KEY,
            allowed_hosts=["proxy.local", "127.0.0.1"],
            passthrough_paths=["/v1/files/*", "/v1/embeddings"],
            cors_origins=["https://app.example"],
        ),
        "noplans": proxy_for(upstream.url, store_plans=False),
        # uvicorn closes a connection `timeout_keep_alive` after its response, even while
        # the client is still sending the body it did not read: 1 s makes that quick
        "impatient": proxy_for(upstream.url, {"timeout_keep_alive": 1}),
        "impatient-h11": proxy_for(upstream.url, {"timeout_keep_alive": 1, "http": "h11"}),
        "deadtok": proxy_for(upstream.url, models={"local": {"tokenizer": f"server:{dead_url()}"}}),
    }
    for s in servers.values():
        s.__enter__()
    try:
        yield servers
    finally:
        for s in servers.values():
            s.__exit__(None, None, None)


# -- raw requests -------------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def error(self) -> dict[str, Any]:
        data = self.json()
        assert set(data) == {"error"}, data
        err = data["error"]
        assert isinstance(err["message"], str) and err["message"], err
        assert isinstance(err["type"], str) and err["type"], err
        return dict(err)


def send(
    port: int,
    method: str,
    target: str,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
) -> Reply:
    """One request with the target exactly as given (no normalization, no escaping)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        given = {k.lower(): v for k, v in (headers or {}).items()}
        given.setdefault("host", f"127.0.0.1:{port}")
        if body is not None:
            given.setdefault("content-length", str(len(body)))
        for k, v in given.items():
            conn.putheader(k, v)
        conn.endheaders(body)
        r = conn.getresponse()
        return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()


# -- the corpus ---------------------------------------------------------------------------

Check = Callable[[Reply], None]
JSON = {"content-type": "application/json"}
USER = [{"role": "user", "content": "hi"}]


def chat_body(**extra: Any) -> bytes:
    return json.dumps({"model": "gpt-4o", "messages": USER, **extra}).encode()


def long_history(bad: dict[str, Any], at: int = 1, n: int = 40) -> bytes:
    """A conversation for the 1,024-token 'tiny' model whose message ``at`` (in the part
    that is dropped) is ``bad``."""
    msgs: list[Any] = [{"role": "system", "content": "Be terse."}]
    msgs += [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"{i} " + "lorem ipsum " * 60}
        for i in range(n)
    ]
    msgs.append({"role": "user", "content": "And now?"})
    msgs[at] = bad
    return json.dumps({"model": "tiny", "messages": msgs, "max_tokens": 100}).encode()


@dataclass
class Case:
    id: str
    target: str
    status: int
    code: str | None = None
    method: str = "GET"
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    proxy: str = "open"
    check: Check | None = None


def echoed(path: str) -> Check:
    """The request reached our upstream (its echo), at exactly ``path`` (raw)."""

    def check(r: Reply) -> None:
        data = r.json()
        assert data["echo"] is True and data["raw_path"] == path, data

    return check


def under_base(r: Reply) -> None:
    data = r.json()
    assert data["raw_path"].startswith("/gateway/tenant-a/"), data


def param(name: str) -> Check:
    def check(r: Reply) -> None:
        assert r.error()["param"] == name, r.error()

    return check


def param_prefix(prefix: str) -> Check:
    def check(r: Reply) -> None:
        assert (r.error()["param"] or "").startswith(prefix), r.error()

    return check


def allow(methods: str) -> Check:
    def check(r: Reply) -> None:
        assert r.headers.get("allow") == methods, r.headers

    return check


def no_cors(r: Reply) -> None:
    leaked = [k for k in r.headers if k.startswith("access-control-")]
    assert not leaked, leaked


def cors_for(origin: str) -> Check:
    def check(r: Reply) -> None:
        assert r.headers.get("access-control-allow-origin") == origin, r.headers
        assert "access-control-allow-credentials" not in r.headers

    return check


def retry_after(r: Reply) -> None:
    assert r.headers.get("retry-after", "").isdigit(), r.headers
    assert "configuration" not in r.error()["message"]


def plain_ok(r: Reply) -> None:
    assert r.json()["choices"][0]["message"]["content"] == "ok"


CORPUS: list[Case] = []

# 1. Retargeting: paths that try to leave the upstream, its port or its base path.
BAD_PATHS = [
    "/x0/../v1/files",
    "/x0/%2e%2e/admin",
    "/x0/%2E%2E/admin",
    "/x0/.%2e/admin",
    "/x0/%2e./admin",
    "/x0/./v1/files",
    "/x0/%2e/v1/files",
    "/x0/v1/%2e%2e/%2e%2e/admin",
    "/x0/v1/..%2fadmin",
    "/x0/v1/..%2Fadmin",
    "/x0/v1/..%5cadmin",
    "/x0/v1/%2f%2fevil.example/x",
    "/x0//evil.example/x",
    "/x0/v1//files",
    "/x0/v1/a%2Fb",
    "/x0/v1/a\\b",
    "/x0/v1/..\\..\\admin",
    "/x0/v1/a%00b",
    "/x0/v1/a%09b",
    "/v1/../../admin",
    "/v1/%2e%2e/%2e%2e/admin",
    "/v1/files/..",
    "/v1/files/%2E",
    "//evil.example/v1/files",
    "/v1/files/a%2f..%2f..%2fadmin",
]
# a decoded line break matches no route at all: a JSON 404, never forwarded
for i, path in enumerate(["/x0/v1/a%0d%0aX-Injected:%201", "/v1/a%0ab"]):
    CORPUS.append(Case(f"path-newline-{i}", path, 404, "http_error"))
for i, path in enumerate(BAD_PATHS):
    for proxy in ("open", "based"):
        CORPUS.append(Case(f"path-{proxy}-{i}", path, 400, "invalid_path", proxy=proxy))

GOOD_PATHS = [
    ("/x%30/v1/files", "/v1/files"),  # the route's name percent-encoded: still the route
    ("/%78%30/v1/files", "/v1/files"),
    ("/x0/v1/files", "/v1/files"),
    ("/x0/@evil.example/v1", "/%40evil.example/v1"),
    ("/x0/v1/files@evil.example:80", "/v1/files%40evil.example%3A80"),
    ("/x0/v1/%252e%252e/admin", "/v1/%252e%252e/admin"),  # a literal '%2e%2e', not '..'
    ("/x0/v1/file%20name", "/v1/file%20name"),
    ("/x0/v1/files/", "/v1/files/"),
    ("/x0", "/x0"),  # no slash after the route: not the route, forwarded as it is
    ("/v1/files/caf%C3%A9", "/v1/files/caf%C3%A9"),
]
for i, (path, forwarded) in enumerate(GOOD_PATHS):
    CORPUS.append(Case(f"path-ok-{i}", path, 201, check=echoed(forwarded)))
    CORPUS.append(
        Case(
            f"path-ok-based-{i}",
            path,
            201,
            proxy="based",
            check=echoed("/gateway/tenant-a" + forwarded),
        )
    )
# an absolute-form target names another host: only the configured upstream is ever asked
CORPUS.append(
    Case("absolute-form", "http://evil.example:1/v1/files", 201, check=echoed("/v1/files"))
)

# 2. JSON that Python reads but no one should send on: NaN, Infinity, lone surrogates.
for i, text in enumerate(
    [
        '{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "temperature": NaN}',
        '{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "top_p": Infinity}',
        '{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "x": -Infinity}',
        '{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "x": 1e400}',
        '{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "x": [-1e999]}',
        '{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi", "w": NaN}]}',
    ]
):
    CORPUS.append(
        Case(
            f"not-finite-{i}",
            "/v1/chat/completions",
            400,
            "invalid_json",
            method="POST",
            body=text.encode(),
            headers=JSON,
        )
    )
S = "SURROGATE"  # replaced by a lone surrogate escape in the JSON text


def with_surrogate(body: dict[str, Any], escape: str = "\\ud800") -> str:
    return json.dumps(body).replace(S, escape)


SURROGATES = [
    (
        with_surrogate({"model": "gpt-4o", "messages": [{"role": "user", "content": S}]}),
        "messages[0].content",
    ),
    (
        with_surrogate(
            {"model": "gpt-4o", "messages": [{"role": "user", "content": f"a{S}b"}]}, "\\udfff"
        ),
        "messages[0].content",
    ),
    (with_surrogate({"model": f"gpt-{S}", "messages": USER}), "model"),
    (
        with_surrogate({"model": "gpt-4o", "messages": [{"role": f"user{S}", "content": "hi"}]}),
        "messages[0].role",
    ),
    (with_surrogate({"model": "gpt-4o", "messages": USER, "user": S}, "\\udc00"), "user"),
    (with_surrogate({"model": "gpt-4o", "messages": USER, S: 1}), None),
    (
        with_surrogate(
            {
                "model": "gpt-4o",
                "messages": [{"role": "user", "content": [{"type": "text", "text": S}]}],
            },
            "\\ud83d",
        ),
        "messages[0].content[0].text",
    ),
    (
        with_surrogate(
            {
                "model": "gpt-4o",
                "messages": USER,
                "tools": [{"type": "function", "function": {"name": f"f{S}"}}],
            }
        ),
        "tools[0].function.name",
    ),
]
for i, (text, where) in enumerate(SURROGATES):
    CORPUS.append(
        Case(
            f"surrogate-chat-{i}",
            "/v1/chat/completions",
            400,
            "invalid_json",
            method="POST",
            body=text.encode(),
            headers=JSON,
            check=param(where) if where else None,
        )
    )
    CORPUS.append(
        Case(
            f"surrogate-count-{i}",
            "/tokenflex/count",
            400,
            "invalid_json",
            method="POST",
            body=text.encode(),
            headers=JSON,
        )
    )
# A lone surrogate without an escape: its own UTF-8 bytes (json.loads decodes bytes with
# "surrogatepass"), or a UTF-16 body (json.loads reads it too).
_LONE = '{"model": "gpt-4o", "messages": [{"role": "user", "content": "a\ud800b"}]}'
for name, raw in (
    ("utf8-bytes", _LONE.encode("utf-8", "surrogatepass")),
    ("utf16-body", _LONE.encode("utf-16", "surrogatepass")),
):
    CORPUS.append(
        Case(
            f"surrogate-{name}",
            "/v1/chat/completions",
            400,
            "invalid_json",
            method="POST",
            body=raw,
            headers=JSON,
            check=param("messages[0].content"),
        )
    )
CORPUS.append(
    Case(
        "surrogate-in-dropped-part",
        "/v1/chat/completions",
        400,
        "invalid_json",
        method="POST",
        body=long_history({"role": "user", "content": "x"}).replace(b'"1 lorem', b'"\\ud800 lorem'),
        headers=JSON,
    )
)
CORPUS.append(
    Case(
        "surrogate-pair-is-text",
        "/v1/chat/completions",
        200,
        method="POST",
        body=b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}',
        headers=JSON,
        check=plain_ok,
    )
)

# 3. Every message is checked, also those fit() drops (they are stored with the plan).
BAD_MESSAGES = [
    {"role": "user", "content": [42]},
    {"role": "user", "content": [{"type": "text"}]},
    {"role": "user", "content": [{"type": "text", "text": 5}]},
    {"role": "user", "content": [{"type": "image_url"}]},
    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": 7}}]},
    {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]},
    {"role": "user", "content": ["just a string"]},
    {"role": "user", "content": None},
    {"role": "user"},
    {"role": "assistant", "content": None, "tool_calls": "call"},
    {"role": "assistant", "content": None, "tool_calls": [1]},
    {"role": "user", "content": "x", "name": 5},
    {"role": "tool", "content": "x", "tool_call_id": ["a"]},
    {"role": "wizard", "content": "x"},
    {"content": "x"},
    "a string",
]
for i, bad in enumerate(BAD_MESSAGES):
    CORPUS.append(
        Case(
            f"bad-dropped-message-{i}",
            "/v1/chat/completions",
            400,
            method="POST",
            body=long_history(bad),
            headers=JSON,
            check=param_prefix("messages[1]"),
        )
    )
CORPUS.append(
    Case(
        "good-image-in-dropped-part",
        "/v1/chat/completions",
        200,
        method="POST",
        body=long_history(
            {
                "role": "user",
                "content": [
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://x.example/a.png", "detail": "low"},
                    }
                ],
            }
        ),
        headers=JSON,
        check=plain_ok,
    )
)

# 4. Fitted routes take JSON only, uncompressed, by POST.
FITTED = [
    ("/v1/chat/completions", chat_body()),
    ("/x0/v1/chat/completions", chat_body()),
    ("/tokenflex/count", json.dumps({"model": "gpt-4o", "text": "hi"}).encode()),
    ("/v1/tokenize", json.dumps({"model": "gpt-4o", "text": "hi"}).encode()),
]
BAD_TYPES = [
    None,
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "text/json",
    "application/jsonp",
    "application/json5",
    "application/xml",
]
GOOD_TYPES = [
    "application/json; charset=utf-8",
    "APPLICATION/JSON",
    "application/json;charset=UTF-8",
]
ENCODINGS = ["gzip", "br", "deflate", "zstd", "gzip, identity"]
for path, body in FITTED:
    slug = path.strip("/").replace("/", "-")
    for ctype in BAD_TYPES:
        headers = {} if ctype is None else {"content-type": ctype}
        CORPUS.append(
            Case(
                f"type-{slug}-{ctype}",
                path,
                415,
                "unsupported_media_type",
                method="POST",
                body=body,
                headers=headers,
            )
        )
    for ctype in GOOD_TYPES:
        CORPUS.append(
            Case(
                f"type-ok-{slug}-{ctype}",
                path,
                200,
                method="POST",
                body=body,
                headers={"content-type": ctype},
            )
        )
    for enc in ENCODINGS:
        CORPUS.append(
            Case(
                f"encoding-{slug}-{enc}",
                path,
                415,
                "unsupported_media_type",
                method="POST",
                body=gzip.compress(body),
                headers={**JSON, "content-encoding": enc},
            )
        )
    CORPUS.append(
        Case(
            f"encoding-identity-{slug}",
            path,
            200,
            method="POST",
            body=body,
            headers={**JSON, "content-encoding": "identity"},
        )
    )
    for method in ("GET", "PUT", "DELETE", "PATCH"):
        CORPUS.append(
            Case(
                f"method-{slug}-{method}",
                path,
                405,
                "method_not_allowed",
                method=method,
                check=allow("POST"),
            )
        )
for method in ("POST", "PUT", "DELETE"):
    CORPUS.append(
        Case(
            f"method-plans-{method}",
            "/tokenflex/plans/plan_x",
            405,
            "method_not_allowed",
            method=method,
            check=allow("GET, HEAD"),
        )
    )
    CORPUS.append(
        Case(
            f"method-health-{method}",
            "/tokenflex/health",
            405,
            "method_not_allowed",
            method=method,
            check=allow("GET, HEAD"),
        )
    )
for path in ("/tokenflex/admin", "/tokenflex/", "/tokenflex/planz", "/tokenflex/count/x"):
    CORPUS.append(Case(f"own-path-{path}", path, 404, "not_found"))

# 5. Sizes: a declared Content-Length over max_body_bytes is answered before reading.
CORPUS.append(
    Case(
        "content-length-over",
        "/v1/chat/completions",
        413,
        "request_too_large",
        method="POST",
        body=b"{" + b" " * 5_000_000 + b"}",
        headers=JSON,
    )
)
CORPUS.append(
    Case(
        "count-over",
        "/tokenflex/count",
        413,
        "request_too_large",
        method="POST",
        body=b"{" + b" " * 5_000_000 + b"}",
        headers=JSON,
    )
)
# tiktoken panics (a BaseException) on ~1M consecutive spaces: the tokenizers cut such runs,
# so the count is exact (or a few tokens above) and the request goes through; a tokenizer
# that still panics is a 400 (test_a_panicking_tokenizer_is_a_400 below)
CORPUS.append(
    Case(
        "million-spaces-count",
        "/tokenflex/count",
        200,
        method="POST",
        body=json.dumps({"model": "gpt-4o", "text": " " * 1_000_000}).encode(),
        headers=JSON,
        check=lambda r: None if 7_000 < r.json()["tokens"] < 10_000 else pytest.fail(r.body),
    )
)
CORPUS.append(
    Case(
        "million-spaces-chat",
        "/v1/chat/completions",
        200,
        method="POST",
        body=chat_body(messages=[{"role": "user", "content": " " * 1_000_000}]),
        headers=JSON,
    )
)

# 6. Browser-borne: no upstream CORS relayed; Host and path allowlists.
CORPUS.append(
    Case(
        "cors-chat-stripped",
        "/v1/chat/completions",
        200,
        method="POST",
        body=chat_body(),
        headers={**JSON, "origin": "https://evil.example"},
        check=no_cors,
    )
)
CORPUS.append(
    Case(
        "cors-passthrough-stripped",
        "/v1/files/x",
        201,
        headers={"origin": "https://evil.example"},
        check=no_cors,
    )
)
CORPUS.append(
    Case(
        "cors-preflight-not-relayed",
        "/v1/files/x",
        201,
        method="OPTIONS",
        headers={"origin": "https://evil.example", "access-control-request-method": "POST"},
        check=no_cors,
    )
)
LOCKED = {"x-tokenflex-key": PROXY_KEY}
CORPUS.append(
    Case(
        "cors-allowed-origin",
        "/v1/files/x",
        201,
        proxy="locked",
        headers={**LOCKED, "origin": "https://app.example"},
        check=cors_for("https://app.example"),
    )
)
CORPUS.append(
    Case(
        "cors-other-origin",
        "/v1/files/x",
        201,
        proxy="locked",
        headers={**LOCKED, "origin": "https://evil.example"},
        check=no_cors,
    )
)
CORPUS.append(
    Case(
        "cors-preflight-allowed",
        "/v1/chat/completions",
        204,
        method="OPTIONS",
        proxy="locked",
        headers={"origin": "https://app.example", "access-control-request-method": "POST"},
        check=cors_for("https://app.example"),
    )
)
CORPUS.append(
    Case(
        "cors-preflight-other",
        "/v1/chat/completions",
        405,
        "method_not_allowed",
        method="OPTIONS",
        proxy="locked",
        headers={
            **LOCKED,
            "origin": "https://evil.example",
            "access-control-request-method": "POST",
        },
        check=no_cors,
    )
)
for i, host in enumerate(
    [
        "evil.example",
        "evil.example:8787",
        "proxy.local.evil.example",
        "127.0.0.2",
        "localhost",
        "[::1]:8787",
        "PROXY.LOCAL.",
        "x",
    ]
):
    CORPUS.append(
        Case(
            f"host-{i}",
            "/v1/chat/completions",
            421,
            "host_not_allowed",
            method="POST",
            body=chat_body(),
            proxy="locked",
            headers={**JSON, **LOCKED, "host": host},
        )
    )
    CORPUS.append(
        Case(
            f"host-health-{i}",
            "/tokenflex/health",
            421,
            "host_not_allowed",
            proxy="locked",
            headers={"host": host},
        )
    )
for i, host in enumerate(["proxy.local", "proxy.local:8787", "PROXY.LOCAL"]):
    CORPUS.append(
        Case(f"host-ok-{i}", "/tokenflex/health", 200, proxy="locked", headers={"host": host})
    )
for i, path in enumerate(
    [
        "/admin",
        "/v1/fine_tuning/jobs",
        "/v1/files",
        "/v1/embeddings/x",
        "/v1/files%2Fx",
        "/metrics/x",  # /metrics itself is the proxy's own (docs/operating.md)
        "/v1/models/x",
    ]
):
    CORPUS.append(
        Case(
            f"passthrough-denied-{i}",
            path,
            404 if "%2F" not in path else 400,
            proxy="locked",
            headers=LOCKED,
        )
    )
for i, path in enumerate(["/v1/files/abc", "/v1/embeddings", "/v1/files/a/b"]):
    CORPUS.append(
        Case(
            f"passthrough-allowed-{i}",
            path,
            201,
            proxy="locked",
            headers=LOCKED,
            check=echoed(path),
        )
    )
CORPUS.append(Case("locked-no-key", "/v1/files/abc", 401, "invalid_api_key", proxy="locked"))

# 7. Statuses: a tokenizer that cannot be reached is a 503 that says so, not a 500.
for i, path in enumerate(["/v1/chat/completions", "/tokenflex/count"]):
    CORPUS.append(
        Case(
            f"tokenizer-unreachable-{i}",
            path,
            503,
            "tokenizer_unavailable",
            method="POST",
            proxy="deadtok",
            headers=JSON,
            body=json.dumps({"model": "local", "messages": USER}).encode(),
            check=retry_after,
        )
    )
CORPUS.append(
    Case("store-off-no-plan", "/tokenflex/plans/plan_0123", 404, "plan_not_found", proxy="noplans")
)


@pytest.mark.parametrize("case", CORPUS, ids=[c.id for c in CORPUS])
def test_attack_corpus(case: Case, proxies: dict[str, ServerThread], seen: Seen) -> None:
    server = proxies[case.proxy]
    before = len(seen)
    r = send(server.port, case.method, case.target, case.headers, case.body)
    assert r.status == case.status, (r.status, r.body[:500])
    if r.status >= 400:
        err = r.error()  # JSON, with a type and a message, never a bare error
        if case.code is not None:
            assert err["code"] == case.code, err
        assert r.headers.get("x-tokenflex-request-id", "").startswith("req_")
        assert len(seen) == before, "a refused request reached the upstream"
    assert r.status != 500
    if case.check is not None:
        case.check(r)


class PanicException(BaseException):
    """Named as pyo3's is (tiktoken and fastokens raise it from Rust): the proxy knows it by
    that name, since pyo3_runtime cannot be imported."""


class Panics:
    name, exact = "panics", True

    def count(self, text: str) -> int:
        raise PanicException("called `Result::unwrap()` on an `Err` value")


@pytest.mark.parametrize(
    ("target", "body"),
    [
        ("/tokenflex/count", {"model": "panicky", "text": "x"}),
        ("/v1/chat/completions", {"model": "panicky", "messages": USER}),
    ],
)
def test_a_panicking_tokenizer_is_a_400(
    target: str, body: dict[str, Any], proxies: dict[str, ServerThread], seen: Seen
) -> None:
    register_tokenizer("panics", Panics, replace=True)
    register_model(name="panicky", context_window=8_192, tokenizer="panics", chat_format="openai")
    before = len(seen)
    r = send(proxies["open"].port, "POST", target, JSON, json.dumps(body).encode())
    assert r.status == 400, r.body
    assert r.error()["code"] == "tokenizer_failed"
    assert len(seen) == before
    assert send(proxies["open"].port, "GET", "/tokenflex/health").status == 200


def test_a_slow_tokenize_endpoint_is_a_503_not_a_wait(
    proxies: dict[str, ServerThread], seen: Seen
) -> None:
    # a live but busy tokenize endpoint (item 9): the request gets 503 tokenizer_unavailable
    # with Retry-After once the tokenizer's timeout passes, never a 500 or an endless wait
    async def tokenize(request: Request) -> Response:
        await asyncio.sleep(5)
        return JSONResponse({"tokens": [1]})

    slow = Starlette(routes=[Route("/tokenize", tokenize, methods=["POST"])])
    with ServerThread(slow) as server:
        register_tokenizer(
            "slowtok",
            lambda: ServerTokenizer(server.url, kind="llama.cpp", timeout=0.5),
            replace=True,
        )
        register_model(name="slowmodel", context_window=8_192, tokenizer="slowtok")
        before = len(seen)
        started = time.monotonic()
        body = json.dumps({"model": "slowmodel", "messages": USER}).encode()
        r = send(proxies["open"].port, "POST", "/v1/chat/completions", JSON, body)
        assert r.status == 503, r.body
        assert r.error()["code"] == "tokenizer_unavailable"
        retry_after(r)
        assert time.monotonic() - started < 4
        assert len(seen) == before


def test_corpus_is_large() -> None:
    assert len(CORPUS) >= 150, len(CORPUS)


# -- retargeting, as a property -----------------------------------------------------------

_PIECES = st.sampled_from(
    ["/", "//", ".", "..", "%2e", "%2E", "%2f", "%2F", "%5c", "\\", "@", ":", "%40", "%3a",
     "x0", "x%30", "%78%30", "v1", "files", "%", "%25", "%00", "?", "#", "evil.example",
     "http:", "https://", "%252e", " ", "é", "%C3%A9", ";", "~", "0", "1"]
)  # fmt: skip
_PATHS = st.lists(_PIECES, max_size=12).map(lambda xs: "/" + "".join(xs))
_UPSTREAMS = ["http://127.0.0.1:193", "http://127.0.0.1:193/gateway/tenant-a"]


@settings(max_examples=600, deadline=None)
@given(
    raw=_PATHS | st.text(max_size=40),
    route=st.sampled_from([None, "x0"]),
    base=st.sampled_from(_UPSTREAMS),
)
def test_upstream_urls_never_leave_the_upstream(raw: str, route: str | None, base: str) -> None:
    """For any request path: a 400, or a URL on the configured scheme, host and port,
    under the configured base path (compared with an independent parse: urllib)."""
    from urllib.parse import urlsplit

    upstream = Upstream(ServerConfig.load(upstream=base))
    try:
        url = str(upstream.url(upstream_path(raw, route)))
    except ProxyError as exc:
        assert exc.status_code == 400 and exc.code == "invalid_path"
        return
    parts, want = urlsplit(url), urlsplit(base)
    assert (parts.scheme, parts.hostname, parts.port) == ("http", "127.0.0.1", 193)
    assert parts.username is None and parts.password is None and not parts.fragment
    assert parts.path.startswith(want.path + "/")
    segments = parts.path[len(want.path) + 1 :].split("/")
    assert ".." not in segments and "." not in segments
    lowered = parts.path.lower()
    assert "%2f" not in lowered and "%5c" not in lowered and "\\" not in parts.path


# -- plans ----------------------------------------------------------------------------------


def post_chat(port: int, headers: dict[str, str], body: bytes | None = None) -> Reply:
    return send(port, "POST", "/v1/chat/completions", {**JSON, **headers}, body or chat_body())


def test_plans_are_only_for_the_credentials_that_made_them(
    proxies: dict[str, ServerThread],
) -> None:
    port = proxies["open"].port
    mine = {"authorization": "Bearer sk-mine-0123456789"}
    r = post_chat(port, mine)
    assert r.status == 200
    plan_id = r.headers["x-tokenflex-plan-id"]
    assert send(port, "GET", f"/tokenflex/plans/{plan_id}", mine).json()["max_tokens"] > 0
    others: list[dict[str, str]] = [
        {},
        {"authorization": "Bearer sk-other-0123456789"},
        {"x-api-key": "sk-mine-0123456789"},
        {**mine, "x-api-key": "extra"},
    ]
    unknown = send(port, "GET", "/tokenflex/plans/plan_000000000000000000000000", mine)
    for headers in others:
        r = send(port, "GET", f"/tokenflex/plans/{plan_id}", headers)
        assert r.status == 404 and r.error()["code"] == "plan_not_found"
        # the same answer as an id that never existed: ids cannot be probed
        assert r.error()["message"].replace(plan_id, "ID") == unknown.error()["message"].replace(
            "plan_000000000000000000000000", "ID"
        )
    # x-api-key clients (Anthropic style) own their plans too
    keyed = {"x-api-key": "key-abcdef-123"}
    plan_id = post_chat(port, keyed).headers["x-tokenflex-plan-id"]
    assert send(port, "GET", f"/tokenflex/plans/{plan_id}", keyed).status == 200
    assert send(port, "GET", f"/tokenflex/plans/{plan_id}").status == 404


def test_plan_store_can_be_turned_off(proxies: dict[str, ServerThread]) -> None:
    r = post_chat(proxies["noplans"].port, {})
    assert r.status == 200
    assert "x-tokenflex-plan-id" not in r.headers
    assert int(r.headers["x-tokenflex-input-tokens"]) > 0  # the other headers stay
    r = send(proxies["noplans"].port, "GET", "/tokenflex/plans/plan_0123456789abcdef01234567")
    assert r.status == 404 and "store_plans" in r.error()["message"]


# -- redaction ------------------------------------------------------------------------------


def test_keys_echoed_by_an_upstream_are_not_stored_or_logged(
    proxies: dict[str, ServerThread], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    key = "sk-client-secret-7f3a9b2c"
    port = proxies["open"].port
    # the summarizer's call is refused with an error body that quotes the key
    r = send(
        port, "POST", "/sum/v1/chat/completions",
        {**JSON, "authorization": f"Bearer {key}"}, long_history({"role": "user", "content": "x"}),
    )  # fmt: skip
    assert r.status == 200, r.body[:300]
    assert r.headers["x-tokenflex-summary"] == "no"  # dropped instead, and said so
    plan = send(port, "GET", f"/tokenflex/plans/{r.headers['x-tokenflex-plan-id']}",
                {"authorization": f"Bearer {key}"})  # fmt: skip
    warnings = " ".join(plan.json()["warnings"])
    # the summary needs several calls: it is made in the background, and its failure is
    # logged there (a one-call roll would put it in this plan's warnings)
    assert "in the background" in warnings or "401" in warnings, warnings
    assert key not in plan.body.decode() and "7f3a9b2c" not in warnings
    deadline = time.monotonic() + 10
    while "401" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "Incorrect API key" in caplog.text or "401" in caplog.text  # the log says why...
    assert key not in caplog.text  # ... without the key
    # the operator's key, too
    locked = proxies["locked"].port
    r = send(locked, "POST", "/v1/chat/completions", {**JSON, "x-tokenflex-key": PROXY_KEY},
             chat_body(model="echo-key"))  # fmt: skip
    assert r.status == 401  # the upstream's own answer, passed back
    assert OPERATOR_KEY not in caplog.text and PROXY_KEY not in caplog.text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Incorrect API key provided: sk-proj-AbC123xyz789", "AbC123xyz789"),
        ("authorization: Bearer eyJhbGciOi.JIUzI1Ni.Isw", "eyJhbGciOi"),
        ('{"x-api-key": "anthropic-key-42"}', "anthropic-key-42"),
        ("GET /v1?api_key=qwerty12345&x=1", "qwerty12345"),
        ("api-key=azurekey99", "azurekey99"),
        ("connect http://user:p4ssw0rd@host/v1 failed", "p4ssw0rd"),
        ("the key my-own-token-xyz was refused", "my-own-token-xyz"),
        ("Authorization: Token tok_live_abcdef", "tok_live_abcdef"),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA"),
        ("password=hunter2hunter2", "hunter2hunter2"),
    ],
)
def test_redact_removes_credentials(text: str, secret: str) -> None:
    clean = redact(text, ["my-own-token-xyz"])
    assert secret not in clean and "***" in clean


@pytest.mark.parametrize(
    "text",
    [
        "max_tokens reduced from 4,000 to 1,200: the token budget is 8,192",
        "dropped history[1:157] (156 items, reason=share); basic policy kept 3 messages",
        "summarizer failed (HTTP 500: Internal Server Error); history dropped instead",
        "token count 1,234 is an upper bound (estimator)",
        "the model sk (short) and a key-value pair key=value",
    ],
)
def test_redact_leaves_ordinary_warnings_alone(text: str) -> None:
    assert redact(text, ["short", None, ""]) == text


_FRAGMENTS = [  # credential words in every case, the characters re.IGNORECASE folds, filler
    "sk-",
    "Bearer ",
    "bearer\t",
    "BEARER  ",
    "Basic ",
    "basic ",
    "authorization",
    "Authorization: ",
    "AUTHOR\u0130ZATION=",
    "api_key=",
    "x-api-key: ",
    "X-TOKENFLEX-KEY=",
    "apikey",
    "access_token",
    "auth-token",
    "client_secret",
    "secret",
    "pa\u017fsword",
    "passwd",
    "PASSWORD",
    "http://",
    "://",
    "user:pw@",
    "@",
    "abc123XYZ",
    "dXNlcjpwYXNzd29yZA==",
    " ",
    "=",
    ":",
    '"',
    "'",
    "\u212a",
    "\u0131",
    "\u0130",
    "\u017f",
    "\u0307",
    "max_tokens=256",
    "token",
    "key",
    "my-own-key",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS) | st.text(max_size=6), max_size=8).map("".join))
@example("pa\u017fsword=hunter22")
@example("AUTHOR\u0130ZATION: Token abcdef")
@example("author\u0131zation: Token abcdef")
@example("api_\u212aey=abcd")
def test_redact_skips_only_patterns_that_cannot_match(text: str) -> None:
    """redact() runs a pattern only where one of its words is (a log line without any
    costs no regex scan): the same text as running every pattern, whatever the case and
    the characters re.IGNORECASE folds (Kelvin sign, dotted and dotless i, long s)."""
    from tokenflex import redact as module

    expected = text.replace("my-own-key", "***")
    for pattern, replacement in module._PATTERNS:
        expected = pattern.sub(replacement, expected)
    assert redact(text, ["my-own-key"]) == expected


# -- bodies over the limit, time on the event loop ------------------------------------------


@pytest.mark.parametrize("server", ["impatient", "impatient-h11"])
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_60_mb_body_gets_a_readable_413(
    proxies: dict[str, ServerThread], chunked: bool, server: str
) -> None:
    """A client that sends the whole 60 MB body (with Content-Length, or chunked) at
    ~60 MB/s reads our 413, not a connection reset; the proxy keeps none of it."""
    size = 60 * 1024 * 1024
    port = proxies[server].port
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}"
    chunk = b" " * (1024 * 1024)
    piece = b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\n" + f"{framing}\r\n\r\n".encode()
        )
        sent = 0
        # the whole body goes through: a client (httpx, requests) that hits a reset while
        # sending raises and never reads the answer
        while sent < size:
            sock.sendall(piece)
            sent += len(chunk)
            time.sleep(0.01)  # a client on a slower link than loopback
        if chunked:
            sock.sendall(b"0\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
            got = sock.recv(65536)
            if not got:
                break
            data += got
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), data[:300]
    err = json.loads(body)["error"]
    assert err["code"] == "request_too_large"
    assert f"{size:,}" in err["message"] if not chunked else "4,194,304" in err["message"]


def test_counting_4_mb_does_not_stall_other_clients(proxies: dict[str, ServerThread]) -> None:
    port = proxies["open"].port
    words = " ".join(f"w{i % 9973}x{i % 17}" for i in range(450_000))
    body = json.dumps({"model": "gpt-4o", "text": words[:4_000_000]}).encode()
    result: dict[str, Any] = {}

    def count() -> None:
        started = time.perf_counter()
        result["reply"] = send(port, "POST", "/tokenflex/count", JSON, body)
        result["seconds"] = time.perf_counter() - started

    worker = threading.Thread(target=count)
    worker.start()
    time.sleep(0.3)  # the body is in, counting has begun
    slowest = 0.0
    while worker.is_alive():
        started = time.perf_counter()
        assert send(port, "GET", "/tokenflex/health").status == 200
        slowest = max(slowest, time.perf_counter() - started)
        time.sleep(0.05)
    worker.join()
    assert result["reply"].status == 200 and result["reply"].json()["tokens"] > 500_000
    assert slowest < 0.5, f"/health took {slowest:.2f} s during a {result['seconds']:.2f} s count"


# -- long model names -----------------------------------------------------------------------


async def test_model_names_are_not_kept_without_bound(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tokenflex")

    async def no_discovery(base: str, name: str | None, key: str | None) -> None:
        raise RuntimeError("upstream down")

    app = create_app(ServerConfig.load(upstream="http://127.0.0.1:9"), discover=no_discovery)
    resolver: ModelResolver = app.state.proxy.models
    await asyncio.gather(*(resolver.resolve(f"m{i}-" + "x" * 10_000) for i in range(60)))
    await asyncio.gather(*(resolver.resolve(f"short-{i}") for i in range(60)))
    cached = resolver.cached
    assert sum(map(len, cached)) <= MAX_CACHED_BYTES
    assert sum(not m.known for m in cached.values()) <= MAX_CACHED_UNKNOWN
    assert any(n.startswith("short-") for n in cached)  # short names are still cached
    longest = max(len(r.getMessage()) for r in caplog.records)
    assert longest < 1_000, longest  # names are cut in the proxy's own log lines


def test_the_log_filter_cuts_client_values_not_our_messages() -> None:
    def filtered(arg: str) -> str:
        record = logging.LogRecord("tokenflex", logging.WARNING, __file__, 1, "x: %s", (arg,), None)
        RedactingFilter().filter(record)
        return record.getMessage()

    advice = "the registry entry is probably wrong; " * 8 + "check with tokenflex models --check"
    assert filtered(advice) == f"x: {advice}"  # a warning of ours keeps its fix
    assert len(filtered("m" * 1_000_000)) < 1_100  # a client's 1 MB model name does not
