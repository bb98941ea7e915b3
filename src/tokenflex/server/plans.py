"""A bounded in-memory store of recent plans, for ``GET /tokenflex/plans/{id}``.

Plans hold the fitted messages, so the store is bounded twice: by count and by the
approximate bytes of the requests they came from. The oldest plans go first. Ids are
random (``plan_`` + 24 hex digits), so one client cannot guess another's plan.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from typing import Any, Protocol

__all__ = ["PlanLike", "PlanStore", "new_plan_id"]


class PlanLike(Protocol):
    """What the store needs from a plan: its JSON form."""

    def to_dict(self) -> dict[str, Any]: ...


def new_plan_id() -> str:
    """A fresh, unguessable plan id."""
    return "plan_" + secrets.token_hex(12)


class PlanStore:
    """The last ``max_plans`` plans, holding at most about ``max_bytes`` of requests.

    >>> store = PlanStore(max_plans=2)
    >>> store.max_plans
    2
    """

    def __init__(self, *, max_plans: int = 1000, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_plans = max_plans
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, tuple[PlanLike, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, plan_id: str, plan: PlanLike, *, size: int = 0) -> None:
        """Keep ``plan`` under ``plan_id``; ``size`` is its request's bytes (for the bound)."""
        if self.max_plans <= 0 or size > self.max_bytes:
            return
        with self._lock:
            old = self._items.pop(plan_id, None)
            if old is not None:
                self._bytes -= old[1]
            self._items[plan_id] = (plan, size)
            self._bytes += size
            while self._items and (
                len(self._items) > self.max_plans or self._bytes > self.max_bytes
            ):
                _, (_, dropped_size) = self._items.popitem(last=False)
                self._bytes -= dropped_size

    def get(self, plan_id: str) -> PlanLike | None:
        """The plan kept under ``plan_id``, or None when unknown or evicted."""
        with self._lock:
            item = self._items.get(plan_id)
        return item[0] if item is not None else None
