"""The proxy's side of calibration (:mod:`tokenflex.calibration`): each answer's input
token ``usage`` against the plan's prediction, the ``x-tokenflex-calibration`` header when
the upstream counted more, and ``GET /tokenflex/calibration``.

Usage is read from every route, buffered or streamed: chat's ``usage.prompt_tokens``
(streamed only when the client asked ``stream_options.include_usage``), Anthropic's
``usage`` (``input_tokens`` plus the cache reads and writes; streamed in
``message_start``, updated by ``message_delta``) and the Responses API's
``usage.input_tokens`` (streamed in ``response.completed``). A usage figure that is not a
finite, non-negative integer is ignored. A streamed answer is observed once it ended
complete (its headers are gone: the log has the warning). Observing counts the plan's
text, so it runs in a worker thread.
"""

from __future__ import annotations

import functools
import json
import logging
import math
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
from starlette.responses import Response

from ..calibration import Calibration, Observation

_loads: Callable[[bytes], Any]
try:  # the answer's usage is read on every request: orjson's parse, several times faster
    import orjson

    _loads = orjson.loads
except ImportError:  # pragma: no cover - the server extra installs it
    _loads = json.loads

__all__ = [
    "CALIBRATION_HEADER",
    "UsageTap",
    "calibration_figures",
    "observe_response",
    "reported_input",
]

log = logging.getLogger("tokenflex")

CALIBRATION_HEADER = "x-tokenflex-calibration"
_MAX_TOKENS = 10**9  # no request has more input tokens: a larger figure is a broken usage
_MAX_EVENT = 1024 * 1024  # a usage event is small: longer SSE lines are not parsed
# Where an answer (or a stream event) keeps its usage: chat, Anthropic and Responses
# answers at the top; Anthropic's message_start under "message"; Responses events under
# "response".
_USAGE_AT = ((), ("message",), ("response",))
# Anthropic counts cache reads and writes apart from input_tokens; OpenAI includes them.
_ANTHROPIC_EXTRA = ("cache_creation_input_tokens", "cache_read_input_tokens")


def _count(value: Any) -> int | None:
    """A token count from JSON: a finite, non-negative whole number under 10**9."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0 or value > _MAX_TOKENS or value != int(value):
        return None
    return int(value)


def reported_input(answer: Any) -> int | None:
    """The input tokens an answer (or a stream event) reports; None when it has none or a
    figure is not a count.

    >>> reported_input({"usage": {"prompt_tokens": 12, "completion_tokens": 3}})
    12
    >>> reported_input({"type": "message_start", "message": {"usage": {"input_tokens": 5,
    ...     "cache_read_input_tokens": 100}}})
    105
    >>> reported_input({"usage": {"prompt_tokens": float("inf")}}) is None
    True
    """
    for path in _USAGE_AT:
        node = answer
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        usage = node.get("usage") if isinstance(node, dict) else None
        if not isinstance(usage, dict):
            continue
        if "prompt_tokens" in usage:
            return _count(usage["prompt_tokens"])
        if "input_tokens" not in usage:
            continue
        total = _count(usage["input_tokens"])
        for extra in _ANTHROPIC_EXTRA:
            if total is not None and usage.get(extra) is not None:
                more = _count(usage[extra])
                total = None if more is None else total + more
        return total
    return None


def _observe(
    calibration: Calibration, plan: Any, reported: int, upstream: str, owner: str
) -> Observation | None:
    if not 0 < reported <= 4 * plan.model.context_window:
        return None  # no request the model could take counts that: a broken usage
    # (a proxy's plan: the objects of a request's parse and the messages its plan
    # made, which no one edits; the next turn's plan repeats them)
    return calibration.observe_plan(plan, reported, upstream=upstream, owner=owner, read_once=True)


async def observe_response(
    calibration: Calibration,
    plan: Any,
    response: Response,
    *,
    upstream: str,
    owner: str,
    run: Callable[[Callable[[], Observation | None]], Any],
) -> None:
    """Record a buffered upstream answer (``run`` takes the work off the event loop);
    when it counted more than the plan predicted, say so in :data:`CALIBRATION_HEADER`
    (the log has it too)."""
    if response.status_code != 200:
        return
    try:
        reported = reported_input(_loads(bytes(response.body)))
    except (ValueError, RecursionError):
        return
    if reported is None:
        return
    try:
        obs: Observation | None = await run(
            functools.partial(_observe, calibration, plan, reported, upstream, owner)
        )
    except Exception:  # the answer goes back whatever calibration makes of it
        log.exception("tokenflex calibration: an answer could not be observed")
        return
    if obs is not None and obs.under:
        text = obs.message().encode("ascii", "backslashreplace").decode("ascii")
        response.headers[CALIBRATION_HEADER] = text[:1000]


class UsageTap:
    """Reads the usage out of a streamed answer as it passes (server-sent events), and
    observes it once the stream ended complete.

    Only ``data:`` lines that mention ``"usage"`` are parsed; the last usage seen wins
    (Anthropic's ``message_delta`` may update ``message_start``'s)."""

    def __init__(
        self,
        calibration: Calibration,
        plan: Any,
        *,
        upstream: str,
        owner: str,
        limiter: anyio.CapacityLimiter,
    ) -> None:
        self.calibration = calibration
        self.plan = plan
        self.upstream = upstream
        self.owner = owner
        self.limiter = limiter
        self.reported: int | None = None
        self._partial = b""
        self._skipping = False  # inside a line too long to be a usage event

    def feed(self, chunk: bytes) -> None:
        """Look at the next bytes of the stream."""
        lines = chunk.split(b"\n")
        lines[0] = self._partial + lines[0]
        self._partial = lines.pop()
        if len(self._partial) > _MAX_EVENT:
            self._partial, self._skipping = b"", True
        for i, line in enumerate(lines):
            if i == 0 and self._skipping:
                self._skipping = False
                continue
            if line.startswith(b"data:") and b'"usage"' in line:
                self._read(line[5:])

    def _read(self, data: bytes) -> None:
        try:
            event = json.loads(data)
        except ValueError:
            return
        reported = reported_input(event)
        if reported is not None:
            self.reported = reported

    async def finish(self) -> None:
        """The stream ended complete: observe the usage it reported (if any)."""
        if self._partial and not self._skipping:
            self.feed(b"\n")
        if self.reported is None:
            return
        work = functools.partial(
            _observe, self.calibration, self.plan, self.reported, self.upstream, self.owner
        )
        try:
            await anyio.to_thread.run_sync(work, limiter=self.limiter)
        except Exception:  # never into the client's stream
            log.exception("tokenflex calibration: a streamed answer could not be observed")


async def calibration_figures(
    calibration: Calibration, upstream: str, owner: str, limiter: anyio.CapacityLimiter
) -> Response:
    """``GET /tokenflex/calibration``: the models this caller's requests were observed
    for, each with its factor and the caller's own figures, and how many models and
    observations there are in all (no other tenant's model names or volumes). Built in a
    worker thread; bounded by the calibration's ``max_models``."""

    def build() -> bytes:
        body = {
            "object": "tokenflex.calibration",
            "models": calibration.snapshot(owner=owner, upstream=upstream),
            "total": calibration.totals(),
        }
        return json.dumps(body, ensure_ascii=True, separators=(",", ":")).encode()

    data = await anyio.to_thread.run_sync(build, limiter=limiter)
    return Response(data, media_type="application/json")
