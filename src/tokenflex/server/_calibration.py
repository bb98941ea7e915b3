"""The proxy's side of calibration (:mod:`tokenflex.calibration`): each buffered chat
answer's ``usage.prompt_tokens`` against the plan's prediction, the
``x-tokenflex-calibration`` header when the upstream counted more, and
``GET /tokenflex/calibration`` with every model's figures.

Streamed answers are not observed (their usage comes only with ``stream_options``).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..calibration import Calibration

__all__ = [
    "CALIBRATION_HEADER",
    "calibration_figures",
    "observe_response",
    "reported_prompt_tokens",
]

CALIBRATION_HEADER = "x-tokenflex-calibration"


def observe_response(calibration: Calibration, plan: Any, response: Response) -> None:
    """Record a buffered upstream answer; when it counted more than the plan predicted,
    say so in :data:`CALIBRATION_HEADER` (the log has it too)."""
    if response.status_code != 200:
        return
    reported = reported_prompt_tokens(bytes(response.body), plan.model.context_window)
    if reported is None:
        return
    obs = calibration.observe_plan(plan, reported)
    if obs.under:
        text = obs.message().encode("ascii", "backslashreplace").decode("ascii")
        response.headers[CALIBRATION_HEADER] = text


def reported_prompt_tokens(body: bytes, window: int) -> int | None:
    """The answer's ``usage.prompt_tokens`` when it is a plausible count: a JSON integer
    from 1 to 4 times the model's window. None for anything else (absent, ``1e308``,
    ``Infinity``, ``-1``, a string, a body that is not JSON): a hostile or broken upstream's
    usage is ignored, never a 500 and never a calibration step.

    >>> reported_prompt_tokens(b'{"usage": {"prompt_tokens": 11}}', 8192)
    11
    >>> [reported_prompt_tokens(b, 8192) for b in (b'{"usage": {"prompt_tokens": 1e308}}',
    ...     b'{"usage": {"prompt_tokens": Infinity}}', b'{"usage": {"prompt_tokens": -1}}')]
    [None, None, None]
    """
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    usage = data.get("usage") if isinstance(data, dict) else None
    value = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 < value <= 4 * window else None


async def calibration_figures(calibration: Calibration, request: Request) -> Response:
    """``GET /tokenflex/calibration``: per model, its factor and the figures behind it."""
    return JSONResponse(
        {"object": "tokenflex.calibration", "models": calibration.snapshot()},
    )
