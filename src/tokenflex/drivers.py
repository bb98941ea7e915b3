"""Drivers of sans-I/O flows: a sequence written once, run sync or async.

A flow is a generator that yields the steps it cannot take itself (a page of history, a
summarizer call, work for a tokenizer that may call a server) and receives each step's
answer; its return value is the result. :func:`drive` answers the steps with a plain
function, :func:`adrive` with a coroutine function, so the two forms of a sequence differ
only in how a step is answered (``history.read_newest_first`` / ``aread_newest_first``,
``summarize_span`` / ``asummarize_span``, ``engine.fit_layout`` / ``afit_layout``).

>>> def doubled(n):
...     total = 0
...     for i in range(n):
...         total += yield i
...     return total
>>> drive(doubled(3), lambda i: 2 * i)
6
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

__all__ = ["adrive", "drive"]

Step = TypeVar("Step")
Result = TypeVar("Result")


def drive(flow: Generator[Step, Any, Result], answer: Callable[[Step], Any]) -> Result:
    """Run ``flow`` to its end, answering each step it yields with ``answer(step)``."""
    reply: Any = None
    while True:
        try:
            step = flow.send(reply)
        except StopIteration as done:
            result: Result = done.value
            return result
        reply = answer(step)


async def adrive(
    flow: Generator[Step, Any, Result], answer: Callable[[Step], Awaitable[Any]]
) -> Result:
    """Run ``flow`` to its end, answering each step it yields with ``await answer(step)``."""
    reply: Any = None
    while True:
        try:
            step = flow.send(reply)
        except StopIteration as done:
            result: Result = done.value
            return result
        reply = await answer(step)
