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

__all__ = ["CALIBRATION_HEADER", "calibration_figures", "observe_response"]

CALIBRATION_HEADER = "x-tokenflex-calibration"


def observe_response(calibration: Calibration, plan: Any, response: Response) -> None:
    """Record a buffered upstream answer; when it counted more than the plan predicted,
    say so in :data:`CALIBRATION_HEADER` (the log has it too)."""
    if response.status_code != 200:
        return
    try:
        usage = json.loads(bytes(response.body)).get("usage") or {}
        reported = int(usage["prompt_tokens"])
    except (ValueError, TypeError, KeyError, AttributeError):
        return
    obs = calibration.observe_plan(plan, reported)
    if obs.under:
        text = obs.message().encode("ascii", "backslashreplace").decode("ascii")
        response.headers[CALIBRATION_HEADER] = text


async def calibration_figures(calibration: Calibration, request: Request) -> Response:
    """``GET /tokenflex/calibration``: per model, its factor and the figures behind it."""
    return JSONResponse(
        {"object": "tokenflex.calibration", "models": calibration.snapshot()},
    )
