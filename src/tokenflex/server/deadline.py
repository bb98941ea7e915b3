"""A deadline for a block of a task's work, on asyncio's own cancellation.

``anyio.CancelScope(deadline=...)`` costs about 33,000 instructions a use (its task
state, its timer, the delivery machinery of level-triggered cancellation), and an
upstream exchange opened three of them a request, and one for every chunk it streamed.
:class:`Deadline` does what those blocks need, as ``asyncio.timeout_at`` does it (one
timer; at the deadline the task is cancelled once, and the ``CancelledError`` that brings
is taken back at the block's end) in a plain ``with``: about a quarter of the time.

It is for blocks that await I/O on the event loop (an upstream's answer, a request's
body). Where work runs in a thread, or a cancellation must be held back (a shielded
close), anyio's scopes stay: an asyncio cancellation is delivered once, at the first
await, and does not wait for a thread.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

__all__ = ["Deadline"]


class Deadline:
    """Cancel the current task's block at ``when`` (the event loop's clock).

    A block cut short by it ends without an error; ``expired`` then says so (check it
    after the block: the work it did not finish is not there). A cancellation that comes
    from elsewhere passes through, as it would without the deadline.

    >>> import asyncio
    >>> async def demo() -> tuple[bool, bool]:
    ...     loop = asyncio.get_running_loop()
    ...     with Deadline(loop.time() + 0.01) as slow:
    ...         await asyncio.sleep(10)
    ...     with Deadline(loop.time() + 10) as quick:
    ...         await asyncio.sleep(0)
    ...     return slow.expired, quick.expired
    >>> asyncio.run(demo())
    (True, False)
    """

    __slots__ = ("_cancelling", "_fired", "_handle", "_task", "expired", "when")

    def __init__(self, when: float) -> None:
        self.when = when
        self.expired = False
        """The deadline cut the block short (its ``CancelledError`` was taken back)."""
        self._fired = False

    def __enter__(self) -> Deadline:
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no running loop
            task = None
        if task is None:
            raise RuntimeError("Deadline is used inside a task (a coroutine the loop runs)")
        self._task = task
        self._cancelling = task.cancelling()
        self._handle = task.get_loop().call_at(self.when, self._fire)
        return self

    def _fire(self) -> None:
        self._fired = True
        self._task.cancel()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self._handle.cancel()
        # as asyncio.timeout does: a fired deadline's cancellation is taken back (whether
        # or not the block saw it), and the block's CancelledError is ours when no other
        # cancellation was asked for since the block began
        if (
            self._fired
            and self._task.uncancel() <= self._cancelling
            and exc_type is asyncio.CancelledError
        ):
            self.expired = True
            return True
        return False
