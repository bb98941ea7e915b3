"""A bounded in-memory store of recent plans, for ``GET /tokenflex/plans/{id}`` (and a
caller's recent ones, ``GET /tokenflex/plans``).

Plans hold the conversation, so each one is kept as its serialized JSON bytes (not as
live objects: a plan's dicts cost ten times its JSON) and the store is bounded twice, by
count and by those bytes; the oldest plans go first. Each plan is bound to the
credentials of the client that made it (a hash of its ``Authorization``, ``x-api-key``,
``api-key`` and ``x-tokenflex-key`` headers): a request with other credentials, or none,
gets the same answer as for an unknown id. Ids are random (``plan_`` + 24 hex digits).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["CREDENTIAL_HEADERS", "PlanLike", "PlanStore", "credential_hash", "new_plan_id"]

CREDENTIAL_HEADERS = ("authorization", "x-api-key", "api-key", "x-tokenflex-key")
"""Request headers whose values own a plan."""


class PlanLike(Protocol):
    """What the store needs from a plan: its JSON form."""

    def to_dict(self) -> dict[str, Any]: ...


def new_plan_id() -> str:
    """A fresh, unguessable plan id."""
    return "plan_" + secrets.token_hex(12)


def credential_hash(headers: Mapping[str, str]) -> str:
    """A digest of the credentials a request carries ('' hashes too: no credentials).

    >>> a = credential_hash({"authorization": "Bearer a"})
    >>> a == credential_hash({"Authorization": "Bearer a"})
    True
    >>> credential_hash({"authorization": "Bearer a"}) == credential_hash({})
    False
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    h = hashlib.sha256(b"tokenflex-plan-owner")
    for name in CREDENTIAL_HEADERS:
        h.update(b"\0" + name.encode() + b"\0" + lowered.get(name, "").encode())
    return h.hexdigest()


def serialize(data: Mapping[str, Any]) -> bytes:
    """A plan's JSON bytes, as stored and served."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()


class PlanStore:
    """The last ``max_plans`` plans, at most ``max_bytes`` of their JSON in all.

    >>> store = PlanStore(max_plans=2)
    >>> store.put("plan_a", b'{"x": 1}', owner="me")
    True
    >>> store.get("plan_a", owner="me"), store.get("plan_a", owner="you")
    (b'{"x": 1}', None)
    """

    def __init__(self, *, max_plans: int = 1000, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_plans = max_plans
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def size(self) -> int:
        """The bytes of JSON held now (never more than ``max_bytes``)."""
        return self._bytes

    def put(self, plan_id: str, plan: PlanLike | bytes, *, owner: str = "") -> bool:
        """Keep ``plan`` (a plan, or its JSON bytes) under ``plan_id`` for ``owner``
        (a :func:`credential_hash`). False when it was not kept: the store is off, or the
        plan alone is over ``max_bytes``."""
        data = plan if isinstance(plan, bytes) else serialize(plan.to_dict())
        if self.max_plans <= 0 or len(data) > self.max_bytes:
            return False
        with self._lock:
            old = self._items.pop(plan_id, None)
            if old is not None:
                self._bytes -= len(old[1])
            self._items[plan_id] = (owner, data)
            self._bytes += len(data)
            while self._items and (
                len(self._items) > self.max_plans or self._bytes > self.max_bytes
            ):
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= len(dropped)
        return True

    def recent(self, *, owner: str, limit: int = 20) -> list[tuple[str, bytes]]:
        """``owner``'s newest plans, newest first: at most ``limit`` (id, JSON) pairs.

        >>> store = PlanStore()
        >>> for n in range(3):
        ...     _ = store.put(f"plan_{n}", b"{}", owner="me" if n != 1 else "you")
        >>> [plan_id for plan_id, _ in store.recent(owner="me")]
        ['plan_2', 'plan_0']
        """
        out: list[tuple[str, bytes]] = []
        with self._lock:
            for plan_id, (who, data) in reversed(self._items.items()):
                if len(out) >= limit:
                    break
                if hmac.compare_digest(who, owner):
                    out.append((plan_id, data))
        return out

    def get(self, plan_id: str, *, owner: str = "") -> bytes | None:
        """The JSON of the plan kept under ``plan_id``; None when unknown, evicted or
        owned by other credentials (the caller cannot tell which)."""
        with self._lock:
            item = self._items.get(plan_id)
        if item is None or not hmac.compare_digest(item[0], owner):
            return None
        return item[1]
