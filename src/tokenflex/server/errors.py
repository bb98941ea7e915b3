"""OpenAI-shaped error responses: ``{"error": {"message", "type", "param", "code"}}``.

Every error the proxy produces itself goes through :func:`error_response`, so a client's
OpenAI SDK raises the matching exception (``BadRequestError``, ``AuthenticationError``,
``APIStatusError``) with our message. Upstream errors are passed back unchanged instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from starlette.responses import Response

__all__ = ["ProxyError", "error_body", "error_response"]


class ProxyError(Exception):
    """An error the proxy answers itself, with an HTTP status and OpenAI error fields."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.headers = dict(headers or {})
        self.status_code = status_code
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def to_response(self, headers: Mapping[str, str] | None = None) -> Response:
        """This error as an OpenAI-shaped JSON response (with its own headers)."""
        return error_response(
            self.status_code,
            self.message,
            type=self.type,
            param=self.param,
            code=self.code,
            headers={**self.headers, **(headers or {})},
        )


def error_body(
    message: str,
    *,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> bytes:
    """The JSON bytes of one OpenAI error object."""
    return json.dumps(
        {"error": {"message": message, "type": type, "param": param, "code": code}},
        ensure_ascii=False,
    ).encode()


def error_response(
    status_code: int,
    message: str,
    *,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """An OpenAI-shaped JSON error response.

    >>> error_response(400, "messages must be a list", param="messages").status_code
    400
    """
    return Response(
        error_body(message, type=type, param=param, code=code),
        status_code=status_code,
        headers=dict(headers or {}),
        media_type="application/json",
    )
