"""A bounded in-memory store of recent plans, for ``GET /tokenflex/plans/{id}`` (and a
caller's recent ones, ``GET /tokenflex/plans``).

Plans hold the conversation, so each one is kept as bytes, not as live objects (a plan's
dicts cost ten times its JSON), and the store is bounded twice, by count and by those
bytes; the oldest plans go first. The proxy keeps a plan as a :class:`DeferredPlan`: the
request's own body (already in memory), the plan without its conversation, and which of
the request's messages it sent; the JSON is made only when the plan is asked for, so
keeping a plan costs what the plan changed, not a serialization of the conversation.

The plan's dict itself (``plan.to_dict()`` without the conversation: its costs, its
dropped items listed and counted, ``full_input_tokens``, a tokenizer pass over every
message the fit never had to read) waits until the plan is asked for, which most plans
never are: the :class:`DeferredPlan` keeps the plan stripped of its conversation and how
to read its dropped items again from the request body (:class:`Later`), so the store
holds none of the request's parsed objects: a long-running proxy's garbage collector
would walk them on every full collection (an agent's 2,000-message request spent a third
of its CPU there with the store full). Where they cannot be read again (an item sent
shrunk: what shrinking saved is known only from the plan's copy), a plan that left out
many items (more than :data:`LAZY_DROPPED`: a long conversation cut to fit) is kept as
the plan itself (:class:`LivePlan`), charged an upper estimate of the request's parsed
objects (:func:`held_bytes`) against the store's byte bound; one that left out fewer has
its dict made when it is kept.

Each plan is bound to the credentials of the client that made it (a hash of its
``Authorization``, ``x-api-key``, ``api-key`` and ``x-tokenflex-key`` headers): a request
with other credentials, or none, gets the same answer as for an unknown id. Ids are
random (``plan_`` + 24 hex digits).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..message.objects import plain
from ..plan import DroppedItems
from ..session import source_runs
from ._validate import dump_json

__all__ = [
    "CREDENTIAL_HEADERS",
    "HEADERS_SCOPE_KEY",
    "LAZY_DROPPED",
    "OWNER_SCOPE_KEY",
    "DeferredPlan",
    "KeptPlan",
    "Later",
    "LivePlan",
    "PlanLike",
    "PlanStore",
    "credential_hash",
    "defer",
    "held_bytes",
    "new_plan_id",
    "request_owner",
    "scope_headers",
    "serialize",
    "serialize_list",
]

CREDENTIAL_HEADERS = ("authorization", "x-api-key", "api-key", "x-goog-api-key", "x-tokenflex-key")
"""Request headers whose values own a plan."""
LAZY_DROPPED = 64
"""A plan whose dropped items cannot be read again from its request (an item sent shrunk)
and that left out more items than this is kept as a :class:`LivePlan` (its dropped items
listed and counted when it is asked for); one that left out fewer has its dict made when
it is kept (a few items cost less than holding the request's parsed messages)."""


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
    h = _OWNER_HASH.copy()  # (a copy of the started hash: OpenSSL's look-up made once)
    get = lowered.get
    h.update(b"".join([b"\0" + name + b"\0" + get(text, "").encode() for name, text in _NAMED]))
    return h.hexdigest()


_OWNER_HASH = hashlib.sha256(b"tokenflex-plan-owner")
_NAMED = [(name.encode(), name) for name in CREDENTIAL_HEADERS]


OWNER_SCOPE_KEY = "tokenflex.owner"
"""The ASGI scope key under which the request's :func:`credential_hash` is kept once it
is made (the per-client limit makes it first), so a request hashes its credentials once."""


HEADERS_SCOPE_KEY = "tokenflex.headers"
"""The ASGI scope key under which :func:`scope_headers` keeps the request's headers."""


def scope_headers(scope: MutableMapping[str, Any]) -> dict[str, str]:
    """The request's headers by name, as Starlette's ``Headers.get`` answers them (names
    as the server gives them, lowercased by ASGI; values read as latin-1; of a name given
    twice the first), made once per request and kept in the scope: a request's checks
    look up a dozen names, and each lookup in Starlette's headers scans them all and
    raises (and catches) a KeyError for a name the request does not carry.

    >>> scope = {"headers": [(b"origin", b"a"), (b"origin", b"b"), (b"x-api-key", b"k")]}
    >>> scope_headers(scope), scope_headers(scope) is scope[HEADERS_SCOPE_KEY]
    ({'origin': 'a', 'x-api-key': 'k'}, True)
    """
    found = scope.get(HEADERS_SCOPE_KEY)
    if type(found) is not dict:
        found = {}
        for key, value in scope.get("headers", ()):
            name = key.decode("latin-1")
            if name not in found:
                found[name] = value.decode("latin-1")
        scope[HEADERS_SCOPE_KEY] = found
    return found


def request_owner(scope: MutableMapping[str, Any], headers: Mapping[str, str]) -> str:
    """The :func:`credential_hash` of the request whose scope is ``scope`` and headers
    ``headers``: the one kept in the scope, else made (and kept) now.

    >>> scope: dict[str, str] = {}
    >>> request_owner(scope, {"authorization": "Bearer a"}) == scope[OWNER_SCOPE_KEY]
    True
    """
    owner = scope.get(OWNER_SCOPE_KEY)
    if type(owner) is not str:
        owner = scope[OWNER_SCOPE_KEY] = credential_hash(headers)
    return owner


def serialize(data: Mapping[str, Any]) -> bytes:
    """A plan's JSON bytes, as stored and served (compact UTF-8, orjson where it can:
    kept on every request's path, :func:`~tokenflex.server._validate.dump_json`)."""
    return dump_json(data)


def defer(
    plan: Any,
    meta: Mapping[str, Any] | None,
    given: Sequence[Any],
    system: Any,
    raw: bytes,
    parse: Callable[[bytes], tuple[Sequence[Any], Any]],
    *,
    later: Later | None = None,
) -> DeferredPlan:
    """``plan`` (made for the request ``raw`` whose messages are ``given``, its system
    prompt ``system``) as a :class:`DeferredPlan`; ``meta`` is its dict without the
    conversation, or None with ``later``: made when the plan is asked for. Costs the
    plan's messages found as runs of the request's by identity
    (:func:`~tokenflex.session.source_runs`) and a serialization of the messages the
    plan made, not of the conversation."""
    order: list[int] = []
    copies: list[Any] = []
    messages = plan.messages
    for i, j, k in source_runs(given, messages):
        if j is None:
            order.append(-1 - len(copies))
            copies.append(messages[i])
        else:
            order.extend(range(j, j + k))
    own = plan.system is not None and plan.system is system
    data = dict(meta or {})
    if plan.system is not None and not own:
        data["system"] = plain(plan.system)
    return DeferredPlan(
        raw,
        serialize(data) if data else _EMPTY_DICT,
        tuple(order),
        serialize_list(plain(copies)) if copies else _EMPTY_LIST,
        parse,
        own,
        later,
    )


_EMPTY_DICT, _EMPTY_LIST = b"{}", b"[]"
"""What :func:`defer` keeps for no data and no copies: shared, not an allocation each."""


def serialize_list(items: Sequence[Any]) -> bytes:
    """A list's JSON bytes (as :func:`serialize`)."""
    return dump_json(items)


@dataclass(frozen=True, slots=True)
class DeferredPlan:
    """A plan kept for ``GET /tokenflex/plans/{id}`` and serialized when it is asked for.

    >>> import json
    >>> raw = b'{"messages": [{"role": "user", "content": "hi"}]}'
    >>> kept = DeferredPlan(raw, b'{"n":1}', (0, -1), b'[{"role":"user","content":"[cut]"}]',
    ...                     parse=lambda b: (json.loads(b)["messages"], None))
    >>> kept.render()
    b'{"n":1,"messages":[{"role":"user","content":"hi"},{"role":"user","content":"[cut]"}]}'
    """

    raw: bytes
    """The request body as the client sent it."""
    meta: bytes
    """``plan.to_dict(include_messages=False)`` as JSON (warnings redacted), with the
    plan's ``system`` when it is not the request's own."""
    order: tuple[int, ...]
    """The plan's messages: ``i >= 0`` is the request's message ``i``, ``-1 - k`` the
    ``k``-th of ``copies`` (a message the plan made: a summary, a cleared copy)."""
    copies: bytes
    """The JSON list of the messages the plan made."""
    parse: Callable[[bytes], tuple[Sequence[Any], Any]]
    """The request's messages and system prompt from ``raw``, as the route parsed them
    for the fit."""
    own_system: bool = False
    """The plan sent the request's own system prompt (else ``meta`` has the plan's)."""
    later: Later | None = None
    """The rest of ``plan.to_dict()``, made when the plan is asked for (``meta`` then
    has only the plan's ``system``, if any)."""

    @property
    def nbytes(self) -> int:
        """What keeping it costs, about (the store's byte bound counts this)."""
        size = len(self.raw) + _buffer(self.meta) + _buffer(self.copies) + 8 * len(self.order)
        return size + (self.later.nbytes if self.later is not None else 0)

    def render(self) -> bytes:
        """The plan's JSON, as ``plan.to_dict()`` would write it."""
        given, system = self.parse(self.raw)
        copies = json.loads(self.copies)
        messages = [given[i] if i >= 0 else copies[-1 - i] for i in self.order]
        data = json.loads(self.meta)
        if self.later is not None:
            data = self.later.meta(messages, given, system) | data
        data["messages"] = plain(messages)
        if self.own_system and system is not None:
            data["system"] = plain(system)
        return serialize(data)


_NONE_DROPPED = DroppedItems((), {}, None)
"""The dropped items of a plan stripped of its request (none: nothing to look up)."""


@dataclass(frozen=True, slots=True)
class Later:
    """What a :class:`DeferredPlan` keeps to write its plan's dict when it is asked for,
    without the request's parsed objects: the plan stripped of its conversation and how
    to read its dropped items again from the request
    (:func:`tokenflex.roundtrip.replay`), which are then listed and counted."""

    plan: Any
    """The plan without its messages, system prompt, tools or dropped items."""
    replay: Any
    """A :class:`~tokenflex.roundtrip.Replay` of its dropped items."""
    finish: Callable[[dict[str, Any]], dict[str, Any]] = lambda data: data
    """Applied to the plan's dict before it is served (the proxy redacts warnings)."""

    @classmethod
    def of(
        cls, plan: Any, replay: Any, finish: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> Later:
        """``plan``, stripped of what refers to its request, and its ``replay``."""
        stripped = plan.evolved(messages=[], system=None, tools=(), dropped=_NONE_DROPPED)
        return cls(stripped, replay, finish)

    @property
    def nbytes(self) -> int:
        """What it holds, about: the plan's warnings, extras and summary, the runs, and
        room."""
        p = self.plan
        size = sum(len(str(w)) for w in p.warnings) + len(dump_json(p.extras or {}))
        if p.summary is not None:
            size += len(p.summary.text)
        return 4096 + 4 * size + 64 * len(self.replay.runs)

    def meta(self, messages: Sequence[Any], given: Sequence[Any], system: Any) -> dict[str, Any]:
        """``plan.to_dict(include_messages=False)``, its dropped items read from the
        request parsed again (``given`` and ``system``); ``messages``: the plan's."""
        dropped = self.replay.dropped(given, system)
        plan = self.plan.evolved(messages=messages, dropped=dropped)
        return self.finish(plan.to_dict(include_messages=False))


def held_bytes(raw: bytes, messages: int) -> int:
    """An upper estimate of the memory a :class:`LivePlan` holds: the objects parsed from
    the request body ``raw`` (each character at up to four bytes, one for an ASCII body;
    each string, object and array at more than Python's cost for it) and the fit's own
    records of its ``messages`` (fingerprints, groups, counts), with room to spare.
    Counted at C speed (a few ``bytes.count``); ``tests/test_server_config.py`` checks it
    against what ``tracemalloc`` sees for bodies of long, tiny, multi-part and non-ASCII
    messages.

    >>> held_bytes(b'{"messages": [{"role": "user", "content": "hi"}]}', 1) > 1000
    True
    """
    width = 1 if raw.isascii() else 4
    strings = raw.count(b'"') // 2
    containers = raw.count(b"{") + raw.count(b"[")
    return width * len(raw) + 112 * strings + 256 * containers + 768 * messages


@dataclass(frozen=True, slots=True)
class LivePlan:
    """A plan kept as the object itself; ``plan.to_dict()`` is made when it is asked for
    (see the module's docstring)."""

    plan: Any
    """The plan (its messages and dropped items still refer to the request's)."""
    nbytes: int
    """What keeping it costs, at most (:func:`held_bytes`; the store's byte bound counts
    this)."""
    finish: Callable[[dict[str, Any]], dict[str, Any]] = lambda data: data
    """Applied to ``plan.to_dict()`` before it is served (the proxy redacts warnings)."""

    def render(self) -> bytes:
        """The plan's JSON, as ``plan.to_dict()`` writes it (then :attr:`finish`)."""
        return serialize(self.finish(self.plan.to_dict()))


KeptPlan = DeferredPlan | LivePlan
"""A plan the store serializes when it is asked for."""


class PlanStore:
    """The last ``max_plans`` plans, at most ``max_bytes`` of their JSON in all (a
    request body that several plans hold, the very object, counted once).

    >>> store = PlanStore(max_plans=2)
    >>> store.put("plan_a", b'{"x": 1}', owner="me")
    True
    >>> store.get("plan_a", owner="me"), store.get("plan_a", owner="you")
    (b'{"x": 1}', None)
    """

    def __init__(self, *, max_plans: int = 1000, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_plans = max_plans
        self.max_bytes = max_bytes
        # plan id -> (owner, the plan, what it holds but its request's body: counted
        # once, when it is put)
        self._items: OrderedDict[str, tuple[str, bytes | KeptPlan, int]] = OrderedDict()
        # the request bodies the plans hold, by the object's id: (it, how many hold it);
        # a body sent again is one object (ChatRequest.raw), counted once
        self._bodies: dict[int, tuple[bytes, int]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def size(self) -> int:
        """The bytes of JSON held now (never more than ``max_bytes``)."""
        return self._bytes

    def put(self, plan_id: str, plan: PlanLike | bytes | KeptPlan, *, owner: str = "") -> bool:
        """Keep ``plan`` (a plan, its JSON bytes, or a :data:`KeptPlan`) under
        ``plan_id`` for ``owner`` (a :func:`credential_hash`). False when it was not kept:
        the store is off, or the plan alone is over ``max_bytes``."""
        data = plan if isinstance(plan, bytes | KeptPlan) else serialize(plan.to_dict())
        body = data.raw if isinstance(data, DeferredPlan) else None
        whole = _size(data)  # (once: a deferred plan's size serializes its extras)
        if self.max_plans <= 0 or whole > self.max_bytes:
            return False
        size = whole - (len(body) if body is not None else 0)
        with self._lock:
            old = self._items.pop(plan_id, None)
            if old is not None:
                self._let_go(old)
            self._items[plan_id] = (owner, data, size)
            self._bytes += size
            if body is not None:
                held = self._bodies.get(id(body))
                count = held[1] if held is not None and held[0] is body else 0
                self._bodies[id(body)] = (body, count + 1)
                if not count:
                    self._bytes += len(body)
            while self._items and (
                len(self._items) > self.max_plans or self._bytes > self.max_bytes
            ):
                self._let_go(self._items.popitem(last=False)[1])
        return True

    def _let_go(self, item: tuple[str, bytes | KeptPlan, int]) -> None:
        """Uncount ``item`` (taken out; the lock held): its own bytes, and its request's
        body once no other plan holds that."""
        _, data, size = item
        self._bytes -= size
        if isinstance(data, DeferredPlan):
            body = data.raw
            _, count = self._bodies[id(body)]
            if count > 1:
                self._bodies[id(body)] = (body, count - 1)
            else:
                del self._bodies[id(body)]
                self._bytes -= len(body)

    def recent(self, *, owner: str, limit: int = 20) -> list[tuple[str, bytes]]:
        """``owner``'s newest plans, newest first: at most ``limit`` (id, JSON) pairs.

        >>> store = PlanStore()
        >>> for n in range(3):
        ...     _ = store.put(f"plan_{n}", b"{}", owner="me" if n != 1 else "you")
        >>> [plan_id for plan_id, _ in store.recent(owner="me")]
        ['plan_2', 'plan_0']
        """
        out: list[tuple[str, bytes | KeptPlan]] = []
        with self._lock:
            for plan_id, (who, data, _) in reversed(self._items.items()):
                if len(out) >= limit:
                    break
                if hmac.compare_digest(who, owner):
                    out.append((plan_id, data))
        return [(i, d if isinstance(d, bytes) else d.render()) for i, d in out]

    def get(self, plan_id: str, *, owner: str = "") -> bytes | None:
        """The JSON of the plan kept under ``plan_id``; None when unknown, evicted or
        owned by other credentials (the caller cannot tell which)."""
        with self._lock:
            item = self._items.get(plan_id)
        if item is None or not hmac.compare_digest(item[0], owner):
            return None
        data = item[1]
        return data if isinstance(data, bytes) else data.render()


def _buffer(data: bytes) -> int:
    """What ``data``, made by :func:`serialize`, holds: orjson's output is an allocation
    of at least 4 KiB however short the JSON (``tracemalloc`` sees about 4,100 bytes for
    ``[]``); a longer one's allocation is larger than the JSON, but the pages past its
    end are never touched, so not resident; the shared empty ones hold nothing."""
    return 0 if data is _EMPTY_DICT or data is _EMPTY_LIST else max(len(data), 4096)


def _size(data: bytes | KeptPlan) -> int:
    return len(data) if isinstance(data, bytes) else data.nbytes
