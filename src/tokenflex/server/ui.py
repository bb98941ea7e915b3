"""The page of recent plans: ``GET /tokenflex/ui`` and the list it reads,
``GET /tokenflex/plans``.

The page is one static HTML file with its script inline (``static/ui.html``, no build
step, nothing fetched from elsewhere). It holds no data: it asks ``/tokenflex/plans``
with the credentials the person gives it (a form, or the URL's fragment
``#key=KEY&x-api-key=KEY&proxy-key=KEY``, which browsers never send to a server), so it shows what
those credentials' requests made, like ``GET /tokenflex/plans/{id}``, and refreshes
itself. Each plan is drawn as the CLI's window bar and a table of the messages kept and
the runs dropped. The page is served without the proxy key (it is the same for everyone)
and with a Content-Security-Policy that lets only its own script run and only this proxy
be fetched.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.resources
import re
from collections.abc import Callable
from functools import cache
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .errors import ProxyError
from .plans import credential_hash

__all__ = ["LIST_BYTES", "LIST_LIMIT", "page", "recent_plans", "ui_routes"]

LIST_LIMIT = (10, 50)
"""Plans ``GET /tokenflex/plans`` returns by default, and at most (``?limit=N``)."""
LIST_BYTES = 16 * 1024 * 1024
"""Bytes of plan JSON one list answer carries at most (older plans are left out)."""
_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.S)


@cache
def page() -> tuple[bytes, str]:
    """The page's HTML and its Content-Security-Policy (the inline script by its hash)."""
    html = importlib.resources.files("tokenflex.server").joinpath("static/ui.html").read_bytes()
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(m[1]).digest()).decode() + "'"
        for m in _SCRIPT.finditer(html)
    )
    csp = (
        f"default-src 'none'; script-src {hashes}; style-src 'unsafe-inline'; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )
    return html, csp


async def ui_page(request: Request) -> Response:
    """``GET /tokenflex/ui``."""
    html, csp = page()
    return Response(
        html,
        media_type="text/html",
        headers={
            "content-security-policy": csp,
            "cache-control": "no-store",
            "x-content-type-options": "nosniff",
            "referrer-policy": "no-referrer",
        },
    )


def recent_plans(proxy: Any, request: Request) -> Response:
    """``GET /tokenflex/plans``: the caller's newest plans, newest first, as
    ``{"object": "list", "data": [{"id": ..., "plan": {...}}, ...]}`` (the stored JSON,
    not parsed again)."""
    if not proxy.keeps_plans:
        raise ProxyError(
            404,
            "This proxy does not keep plans (store_plans = false or plans_max = 0).",
            code="plan_not_found",
        )
    raw = request.query_params.get("limit", str(LIST_LIMIT[0]))
    if not raw.isdigit() or not 1 <= int(raw) <= LIST_LIMIT[1]:
        raise ProxyError(
            400,
            f"limit={raw[:20]!r} is not a number of plans from 1 to {LIST_LIMIT[1]}; "
            f"leave it out for the newest {LIST_LIMIT[0]}.",
            param="limit",
            code="invalid_value",
        )
    items: list[bytes] = []
    size = 0
    for plan_id, data in proxy.plans.recent(owner=credential_hash(request.headers), limit=int(raw)):
        size += len(data)
        if items and size > LIST_BYTES:
            break
        items.append(b'{"id":"' + plan_id.encode() + b'","plan":' + data + b"}")
    body = b'{"object":"list","data":[' + b",".join(items) + b"]}"
    return Response(body, media_type="application/json", headers={"cache-control": "no-store"})


def ui_routes(proxy: Any, endpoint: Callable[..., Any]) -> list[Route]:
    """The list route, and the page unless ``ui = false``; ``endpoint`` wraps each
    handler as the proxy's other routes (:meth:`~tokenflex.server.app.Proxy.endpoint`)."""
    methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

    async def plans(request: Request, route: str | None) -> Response:
        # stored plans are serialized when read: off the event loop
        return await anyio.to_thread.run_sync(recent_plans, proxy, request)

    async def ui(request: Request, route: str | None) -> Response:
        return await ui_page(request)

    routes = [Route("/tokenflex/plans", endpoint(plans, methods=("GET", "HEAD")), methods=methods)]
    if proxy.config.ui:
        routes.append(
            Route(
                "/tokenflex/ui",
                endpoint(ui, auth=False, methods=("GET", "HEAD")),
                methods=methods,
            )
        )
    return routes
