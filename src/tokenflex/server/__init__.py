"""``tokenflex serve``: an OpenAI-compatible proxy that makes every chat request fit.

Needs the ``server`` extra (``pip install 'tokenflex[server]'``: starlette, uvicorn).

>>> from tokenflex.server import ServerConfig, create_app
>>> app = create_app(ServerConfig.load(upstream="http://127.0.0.1:8080/v1"))
"""

from __future__ import annotations

try:
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "tokenflex.server needs the server extra: pip install 'tokenflex[server]'."
    ) from exc

from .app import Proxy, create_app
from .config import ServerConfig
from .errors import ProxyError, error_response
from .plans import PlanStore

__all__ = ["PlanStore", "Proxy", "ProxyError", "ServerConfig", "create_app", "error_response"]
