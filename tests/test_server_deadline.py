"""The upstream's and the body's deadline (``tokenflex.server.deadline``) against
``asyncio.timeout_at``, which does the same with an exception: every combination of two
nested deadlines, a block that waits or not, and a cancellation from outside."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import anyio
import pytest

from tokenflex.server.deadline import Deadline

SOON, WAIT, NEVER = 0.02, 0.5, 60.0
"""A deadline a waiting block passes, how long it waits, and a deadline it never reaches:
far apart, so the outcome does not depend on the machine's speed."""


async def _scenario(kind: str, outer: float, inner: float, wait: bool, cancel: str) -> Any:
    """What happened, as a tuple: which deadline cut its block short, whether a
    cancellation left the task, and which lines ran. ``cancel``: none, "early" (from
    outside, before either deadline) or "same" (from outside, at the first deadline's
    moment, after it: both reach the task before it runs again)."""
    loop = asyncio.get_running_loop()
    ran: list[str] = []
    cut: list[str] = []

    async def body() -> None:
        t0 = loop.time()
        me = asyncio.current_task()
        assert me is not None
        if kind == "ours":
            with Deadline(t0 + outer) as o:
                with Deadline(t0 + inner) as i:
                    if cancel == "same":
                        loop.call_at(t0 + min(outer, inner), me.cancel)
                    await asyncio.sleep(WAIT if wait else 0)
                    ran.append("inner body")
                ran.append("after inner")
                cut.extend(["inner"] if i.expired else [])
            ran.append("after outer")
            cut.extend(["outer"] if o.expired else [])
        else:
            try:
                async with asyncio.timeout_at(t0 + outer):
                    try:
                        async with asyncio.timeout_at(t0 + inner):
                            if cancel == "same":
                                loop.call_at(t0 + min(outer, inner), me.cancel)
                            await asyncio.sleep(WAIT if wait else 0)
                            ran.append("inner body")
                    except TimeoutError:
                        cut.append("inner")
                    ran.append("after inner")
            except TimeoutError:
                cut.append("outer")
            ran.append("after outer")

    task = asyncio.ensure_future(body())
    if cancel == "early":
        await asyncio.sleep(SOON / 4)  # before either deadline
        task.cancel()
    try:
        await asyncio.wait_for(task, 5)
        escaped = False
    except asyncio.CancelledError:
        escaped = True
    return tuple(cut), escaped, tuple(ran)


CASES = list(
    itertools.product((SOON, NEVER), (SOON, NEVER), (True, False), ("none", "early", "same"))
)


@pytest.mark.parametrize(("outer", "inner", "wait", "cancel"), CASES)
def test_a_deadline_does_what_asyncio_timeout_does(
    outer: float, inner: float, wait: bool, cancel: str
) -> None:
    ours = asyncio.run(_scenario("ours", outer, inner, wait, cancel))
    reference = asyncio.run(_scenario("asyncio", outer, inner, wait, cancel))
    assert ours == reference
    if wait and cancel == "none" and SOON in (outer, inner):
        assert ours[0]  # (the cases can go red: a deadline was passed here)
    if wait and cancel == "same" and SOON in (outer, inner):
        assert ours[1]  # the cancellation from outside was not taken for the deadline's


def test_a_deadline_passes_an_anyio_cancellation_to_its_scope() -> None:
    # the proxy's exchange cancels its work with an anyio scope when the client hangs up;
    # a deadline inside it must not take that cancellation for its own
    async def main() -> tuple[bool, bool, bool]:
        loop = asyncio.get_running_loop()
        with anyio.CancelScope() as scope:
            loop.call_later(SOON / 4, scope.cancel)
            with Deadline(loop.time() + SOON) as d:
                await asyncio.sleep(NEVER)
        await asyncio.sleep(SOON * 2)  # the deadline's timer was cancelled with its block
        return scope.cancelled_caught, d.expired, asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]

    assert asyncio.run(main()) == (True, False, True)


def test_a_deadline_already_past_cuts_at_the_first_wait() -> None:
    async def main() -> tuple[bool, list[str]]:
        ran: list[str] = []
        with Deadline(asyncio.get_running_loop().time() - 1) as d:
            ran.append("before")
            await asyncio.sleep(NEVER)
            ran.append("after")
        return d.expired, ran

    assert asyncio.run(main()) == (True, ["before"])


def test_a_deadline_needs_a_task() -> None:
    with pytest.raises(RuntimeError, match="inside a task"), Deadline(0.0):
        pass
