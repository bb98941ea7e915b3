"""What the previous plan of the same conversation did: where it cut the history, which
old tool results and reasoning it cleared, and the prefix it sent.

Cache-stable fitting (``cache_stable=True``) holds the previous cut while it fits, so
consecutive requests share a long prefix and provider prompt caches (and a server's KV
cache) hit. A :class:`~tokenflex.Conversation` remembers its own previous plan
(:class:`ObjectMemory`). Stateless callers — ``fit(list)`` called each turn, the proxy —
get the same stability without cooperating: :class:`StoreMemory` derives a key from the
tenant and the request's leading messages and keeps the cut, by index, in a
:mod:`state store <tokenflex.state>`, with what it takes to tell whether the next request
extends the one it was made for (only then is the cut held).
"""

from __future__ import annotations

import hashlib
import json
import operator
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from itertools import compress, count, repeat
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from ._types import Message
from .counting import MessageCounter
from .counting.messages import shared_prefix
from .state.tenant import tenant_view
from .tokenizers.base import native

__all__ = [
    "GROWTH_REQUESTS",
    "KEY_MESSAGES",
    "PROBE_LAST",
    "SESSION_TTL_S",
    "HistoryCut",
    "ObjectMemory",
    "Remembered",
    "SessionMemory",
    "StoreMemory",
    "fingerprint",
    "sized_fingerprint",
    "source_runs",
]

GROWTH_REQUESTS = 20
"""A cut's growth per request is the mean of at most this many recent requests (an
exponential mean past them), so a conversation that changes pace is followed."""
KEY_MESSAGES = 3
"""Leading messages that name a stateless conversation (with the tenant and the model)."""
PROBE_LAST = 2
"""The previous request's last messages a stateless conversation's next request must
repeat (with the message its cut fell on) for the cut to be held."""
SESSION_TTL_S = 24 * 3600.0
"""How long a stateless conversation's cut is remembered without a request."""


class HistoryCut(NamedTuple):
    """Where a plan cut its history, as indices into the caller's messages (a named
    tuple: made on every fit, and a tuple is made faster than a frozen dataclass)."""

    start: int
    """Index of the first history message kept (the history's end: none kept)."""
    cleared_before: int = 0
    """Tool results before this index were cleared (0: none)."""
    reasoning_before: int = 0
    """Reasoning before this index was dropped (0: none)."""
    truncated_before: int = 0
    """Over-long tool results before this index were truncated (0: none)."""
    summarized_before: int = 0
    """The plan's summary covers the history before this index (0: no summary)."""
    end: int = 0
    """The history's end at that plan: messages from here on were appended since."""
    growth: float = 0.0
    """Mean tokens appended to the history per request (over ``grown`` requests)."""
    grown: int = 0
    """Requests that appended to the history, counted in ``growth``."""
    at: float = 0.0
    """When the plan was made (``time.time()``; 0: not known)."""
    input_tokens: int = 0
    """The plan's input tokens (0: not known)."""

    def appended(self, end: int, tokens: int) -> HistoryCut:
        """This cut with ``tokens`` appended to the history up to ``end`` counted in its
        growth per request (unchanged when nothing was appended).

        >>> HistoryCut(0, end=4, growth=100.0, grown=1).appended(6, 300).growth
        200.0
        """
        if end <= self.end:
            return self
        _, growth, grown = self.grown_by(end, tokens)
        return HistoryCut(  # built directly, every field given
            self.start,
            cleared_before=self.cleared_before,
            reasoning_before=self.reasoning_before,
            truncated_before=self.truncated_before,
            summarized_before=self.summarized_before,
            end=end,
            growth=growth,
            grown=grown,
            at=self.at,
            input_tokens=self.input_tokens,
        )

    def grown_by(self, end: int, tokens: int) -> tuple[int, float, int]:
        """``(end, growth, grown)`` of :meth:`appended`, without the cut (a conversation's
        fast path reads them on every turn and writes one record).

        >>> HistoryCut(0, end=4, growth=100.0, grown=1).grown_by(6, 300)
        (6, 200.0, 2)
        """
        if end <= self.end:
            return self.end, self.growth, self.grown
        n = min(self.grown, GROWTH_REQUESTS - 1) + 1
        return end, self.growth + (tokens - self.growth) / n, self.grown + 1


_FLOAT_FIELDS = frozenset({"growth", "at"})
# HistoryCut's fields but its start, as a state written by another process is read back
_SAVED_FIELDS = tuple(
    (name, float if name in _FLOAT_FIELDS else int)
    for name in HistoryCut._fields
    if name != "start"
)


# json.dumps(m, sort_keys=True, ensure_ascii=False, default=str) without a new encoder
# built on every call (the text, and so every stored fingerprint, is the same)
_FINGERPRINT_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=str).encode
_JSON_STRING = json.encoder.encode_basestring
"""How that encoder writes a string (``ensure_ascii=False``; C where the C module is)."""
_JSON_ASCII = json.encoder.encode_basestring_ascii
"""How :func:`json.dumps` writes a string by default (``ensure_ascii=True``)."""

_FAST_DUMPS: Callable[[Any], bytes] | None
try:  # the server extra's: a state is written on every request, ~14x json.dumps's speed
    import orjson

    _FAST_DUMPS = orjson.dumps
except ImportError:  # pragma: no cover - the library without the server extra
    _FAST_DUMPS = None


def _state_json(state: Mapping[str, Any]) -> bytes:
    """A state as it is stored: its JSON (compact, by orjson where it is installed)."""
    if _FAST_DUMPS is not None:
        try:
            return _FAST_DUMPS(state)
        except TypeError:  # pragma: no cover - an integer past 64 bits: the stdlib's
            pass
    return json.dumps(state).encode()


def state_key(model: str, lead: Sequence[str]) -> str:
    """The key of a stateless conversation: a hash of ``json.dumps([model, lead])``
    (``lead``: its opening messages' fingerprints, hex digits), that text written
    without the encoder's call (every version's keys are the same).

    >>> state_key("gpt-4o", ["ab", "cd"]) == "cut:" + hashlib.blake2b(
    ...     json.dumps(["gpt-4o", ["ab", "cd"]]).encode(), digest_size=16).hexdigest()
    True
    """
    asked = (model, *lead)
    known = _KEYS.get(asked)
    if known is None:
        quoted = ", ".join(['"' + h + '"' for h in lead])
        text = "[" + _JSON_ASCII(model) + ", [" + quoted + "]]"
        known = "cut:" + hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
        _KEYS.put(asked, known, len(model) + 32 * len(lead))
    return known


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Remembered(Generic[K, V]):
    """Answers this process made last, each a function of its key alone (so an entry is
    the answer), bounded by entries and by a weight (the characters an entry holds; one
    past a sixteenth of the bound is not kept); the oldest go first."""

    def __init__(self, entries: int, weight: int = 0) -> None:
        self.entries = entries
        self.weight = weight
        self._items: dict[K, tuple[V, int]] = {}
        self._held = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        item = self._items.get(key)
        return None if item is None else item[0]

    def put(self, key: K, value: V, weight: int = 0) -> None:
        if self.weight and weight > self.weight // 16:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._held -= old[1]
            self._items[key] = (value, weight)
            self._held += weight
            while len(self._items) > self.entries or (self.weight and self._held > self.weight):
                self._held -= self._items.pop(next(iter(self._items)))[1]


_KEYS: Remembered[tuple[str, ...], str] = Remembered(4096, 4 * 1024 * 1024)
"""The :func:`state_key` of a model and opening messages' digests: a conversation's every
request asks for it again. Weighed by the characters of the model's name and digests."""

_PLAIN: Remembered[tuple[str, str], str] = Remembered(4096, 4 * 1024 * 1024)
"""The fingerprints of plain ``{"role", "content"}`` messages, by role and text: a
conversation's opening messages (its key) and the turn its cut falls on are fingerprinted
again on every request, each time from a copy of the text (a proxy parses every request
afresh). Weighed by the characters of the role and the text."""


def fingerprint(message: Any) -> str:
    """A short, stable hash of one message's content."""
    return sized_fingerprint(message)[0]


def sized_fingerprint(message: Any) -> tuple[str, int]:
    """:func:`fingerprint` and the characters it hashed (about what the message holds)."""
    if type(message) is dict and len(message) == 2:
        # a plain {"role", "content"} message: the encoder's own text, without the
        # encoder's call (the fingerprints stored by every version are the same)
        role, content = message.get("role"), message.get("content")
        if type(role) is str and type(content) is str:
            key = (role, content)
            size = len(role) + len(content)
            known = _PLAIN.get(key)
            if known is not None:
                return known, size
            text = f'{{"content": {_JSON_STRING(content)}, "role": {_JSON_STRING(role)}}}'
            digest = hashlib.blake2b(
                text.encode("utf-8", "surrogatepass"), digest_size=12
            ).hexdigest()
            _PLAIN.put(key, digest, size)
            return digest, size
    try:
        text = _FINGERPRINT_JSON(message)
    except (TypeError, ValueError):  # pragma: no cover - exotic keys
        text = repr(message)
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()
    return digest, len(text)


def _identity(message: Any) -> str:
    """The :func:`fingerprint` of a message as one turn of its conversation: without
    ``cache_control`` markers, which clients move to the newest messages every request."""
    if (
        type(message) is dict
        and "cache_control" not in message
        and not isinstance(message.get("content"), list)
    ):
        return fingerprint(message)  # nothing to take out
    if isinstance(message, Mapping):
        bare = {k: v for k, v in message.items() if k != "cache_control"}
        content = bare.get("content")
        if isinstance(content, list):
            bare["content"] = [
                {k: v for k, v in part.items() if k != "cache_control"}
                if isinstance(part, Mapping)
                else part
                for part in content
            ]
        message = bare
    return fingerprint(message)


class SessionMemory(Protocol):
    """The previous plan of one conversation, as the engine needs it."""

    def previous_cut(self, source: Sequence[Message]) -> HistoryCut | None:
        """The previous plan's cut, valid for ``source`` (None: no previous plan, or the
        messages it cut at are not there any more)."""
        ...

    def remember(
        self,
        source: Sequence[Message],
        cut: HistoryCut,
        messages: Sequence[Message],
        counter: MessageCounter,
    ) -> int | None:
        """Record a new plan (its cut and the messages it sends); returns the tokens of
        its leading messages that the previous plan sent too (None: no previous plan)."""
        ...


class ObjectMemory:
    """A :class:`SessionMemory` held by one object (a :class:`~tokenflex.Conversation`):
    messages compare by identity, then by value (cleared copies are new objects)."""

    def __init__(self, counts: tuple[MessageCounter, Mapping[int, int]] | None = None) -> None:
        # a counter and the counts it made of live messages, by id (a Conversation's, kept
        # at append): the shared prefix is summed from them, not recounted
        self._counts = counts
        self._cut: HistoryCut | None = None
        self._cut_message: Any = None
        self._sent: list[Message] | None = None
        self._sent_cum: list[int] = [0]  # tokens of _sent[:k], as far as counted
        self._counter: MessageCounter | None = None  # the counter of _sent_cum
        self._lock = threading.Lock()

    def previous_cut(self, source: Sequence[Message]) -> HistoryCut | None:
        with self._lock:
            cut, at = self._cut, self._cut_message
        if cut is None:
            return None
        if cut.start < len(source) and source[cut.start] is not at:
            return None  # the conversation was rebuilt: start over
        return cut

    def remember(
        self,
        source: Sequence[Message],
        cut: HistoryCut,
        messages: Sequence[Message],
        counter: MessageCounter,
    ) -> int | None:
        sent = list(messages)
        with self._lock:
            previous, cum = self._sent, self._sent_cum
            if counter is not self._counter:
                cum = [0]
            self._cut = cut
            self._cut_message = source[cut.start] if cut.start < len(source) else None
            self._sent, self._counter = sent, counter
            if previous is None:
                self._sent_cum = [0]
                return None
            # O(what changed): the shared prefix is found at C speed, and its tokens are
            # counted once, as far as a plan shares it (kept, prefix sums, for the next).
            k = shared_prefix(previous, sent)
            del cum[k + 1 :]  # (this memory's own list: cut in place, not copied)
            message = counter.message
            known = self._counts[1] if self._counts and self._counts[0] is counter else {}
            for m in sent[len(cum) - 1 : k]:
                t = known.get(id(m))
                cum.append(cum[-1] + (message(m) if t is None else t))
            self._sent_cum = cum
        return cum[k]


class _Written(NamedTuple):
    """A state this process wrote, with what it was written from: its fields need no
    check or conversion when it is read back."""

    raw: bytes
    state: dict[str, Any]
    cut: HistoryCut
    probes: list[tuple[int, str]]


_DECODED: Remembered[int, _Written] = Remembered(256)
"""The states this process wrote last, decoded, by the identity of the bytes object
written (held in the entry, so the id is not reused while it is kept): a store that keeps
the object it was given (the memory store) hands the same one back on the conversation's
next request, which is then not parsed again; a state is found only for the very bytes
it was written as (:func:`_written`). The states are never changed once written."""


def _written(raw: bytes) -> _Written | None:
    """The state this process wrote as ``raw`` (that object), else None."""
    item = _DECODED.get(id(raw))
    return item if item is not None and item.raw is raw else None


class StoreMemory:
    """A :class:`SessionMemory` in a state store, for callers that keep no state.

    The key names the tenant (``store`` is seen through a
    :class:`~tokenflex.state.TenantStore`; a plain store is the tenant ``""``) and the
    conversation: a hash of the model and the request's first :data:`KEY_MESSAGES`
    messages. Other conversations of one tenant may open the same way (a regenerate, an
    edit branch, the sessions of a templated app), so the state also keeps the previous
    request's length and the fingerprints of its last :data:`PROBE_LAST` messages and
    of the message its cut fell on. The cut is held only for a request that extends
    that one: at least as long, with those messages at the same places. A shorter
    request, or one that differs at any of them, is fitted as if there were no previous
    cut, and its plan becomes the stored one.

    The check costs a few fingerprints, not one per message (the cost model: a
    conversation that grew by one message is re-fitted in O(that message)). What it
    cannot see is a request of the same tenant and lead that repeats those few messages
    at the same places but differs between them: a client that rewrites an old message
    in place, or two sessions whose turns differ only there. Sessions of a branch or of
    a templated app differ in their newest turns (the assistant's answers, tool-call
    ids), which are the ones checked.
    """

    def __init__(self, store: Any, model: str, source: Sequence[Message]) -> None:
        self.store = tenant_view(store)
        self.key = state_key(model, [fingerprint(m) for m in source[:KEY_MESSAGES]])
        self._loaded: dict[str, Any] | None = None
        self._written: _Written | None = None  # _loaded, when this process wrote it
        self._read = False  # the store was read (a miss is not read again)
        # (state, source, _extends(state, source)): the last answer, by the objects asked
        self._extended: tuple[Any, Any, bool] | None = None
        # the probed messages' identities, made once per request (a fit probes the same
        # few messages several times: the held cut, each recall attempt, the record)
        self._identities: dict[int, tuple[Any, str]] = {}

    def _identity_at(self, source: Sequence[Message], i: int) -> str:
        """:func:`_identity` of ``source[i]``, made once for that message object."""
        m = source[i]
        known = self._identities.get(i)
        if known is not None and known[0] is m:
            return known[1]
        h = _identity(m)
        self._identities[i] = (m, h)
        return h

    def _load(self) -> dict[str, Any] | None:
        if self._loaded is None and not self._read:
            self._read = True
            raw = self.store.get(self.key)
            if raw is None:
                return None
            written = _written(raw)
            loaded = written.state if written is not None else None
            self._written = written
            if loaded is None:
                try:
                    loaded = json.loads(raw)
                except ValueError:
                    return None
            if not isinstance(loaded, dict):
                return None
            self._loaded = loaded
        return self._loaded

    def _extends(self, state: Mapping[str, Any], source: Sequence[Message]) -> bool:
        """Whether ``source`` extends the request ``state`` was written for: at least as
        long, with its probed messages at the same places (a few fingerprints). Read once
        per state: the held cut and the record ask it of the same one."""
        known = self._extended
        if known is not None and known[0] is state and known[1] is source:
            return known[2]
        extends = self._probe(state, source)
        self._extended = (state, source, extends)
        return extends

    def _own(self, state: Mapping[str, Any]) -> _Written | None:
        """What ``state`` was written from, when it is the one this process wrote (read
        back as the very bytes): its fields need no check."""
        written = self._written
        return written if written is not None and written.state is state else None

    def _probe(self, state: Mapping[str, Any], source: Sequence[Message]) -> bool:
        written = self._own(state)
        if written is not None:
            n, probes = written.state["n"], written.probes
        else:
            try:
                n = int(state["n"])
                probes = [(int(i), str(h)) for i, h in state["probes"]]
            except (KeyError, TypeError, ValueError):  # a state written by another version
                return False
        if n > len(source):
            return False  # a shorter request (a regenerate, an edit branch)
        if n and (n - 1) not in {i for i, _ in probes}:
            return False  # pragma: no cover - every state written keeps the last message
        return all(0 <= i < n and self._identity_at(source, i) == h for i, h in probes)

    def previous_cut(self, source: Sequence[Message]) -> HistoryCut | None:
        state = self._load()
        if state is None:
            return None
        written = self._own(state)
        if written is not None:  # (its fields as written)
            return written.cut if self._extends(state, source) else None
        try:
            start, n = int(state["start"]), int(state["n"])
            saved: dict[str, Any] = {
                name: kind(state[name]) for name, kind in _SAVED_FIELDS if name in state
            }
        except (KeyError, TypeError, ValueError):  # a state written by another version
            return None
        if not 0 <= start <= n or not self._extends(state, source):
            return None  # not the request the cut was made for: no previous cut
        return HistoryCut(start, **saved)

    def remember(
        self,
        source: Sequence[Message],
        cut: HistoryCut,
        messages: Sequence[Message],
        counter: MessageCounter,
    ) -> int | None:
        previous = self._load()
        extends = previous is not None and self._extends(previous, source)
        if previous is None:
            old = []
        elif self._own(previous) is not None:
            old = previous["sent"]  # (as this process wrote it)
        else:
            old = sent_items(previous.get("sent"))
        sent = describe_sent(source, messages, counter, old if extends else [], cut.start)
        n = len(source)
        probed = [i for i in range(max(0, n - PROBE_LAST), n)]
        if cut.start < n and cut.start not in probed:
            probed.insert(0, cut.start)  # (before the last ones: the order stored)
        probes = [(i, self._identity_at(source, i)) for i in probed]
        state: dict[str, Any] = cut._asdict()
        state["n"] = n
        state["probes"] = [list(p) for p in probes]
        state["sent"] = sent
        raw = _state_json(state)
        self.store.set(self.key, raw, ttl_s=SESSION_TTL_S)
        written = _Written(raw, state, cut, probes)
        _DECODED.put(id(raw), written)
        self._loaded, self._written = state, written
        if previous is None:
            return None
        # The request extends the previous one: its messages before ``n`` are taken to be
        # the previous request's (the trust that holds the cut). Otherwise only the
        # leading KEY_MESSAGES (they name the conversation) are known to be the same.
        trusted = n if extends else min(n, KEY_MESSAGES)
        return shared_tokens(old, sent, source, messages, counter, trusted)


# -- what a plan sent, cheaply --------------------------------------------------------------
#
# A stateless caller's next request is compared with what the previous plan sent. Hashing
# every sent message on every request made re-fitting a grown conversation O(all of it),
# so a plan's messages are kept as items: ``[j, k, tokens]`` for ``source[j:j + k]`` sent
# as the caller's own objects, ``[fingerprint, tokens]`` for one message the plan made (a
# summary, a cleared or truncated copy). A run that extends the previous plan's run (same
# start, the request extends the previous one) takes its tokens from it and counts only
# the new messages: the cost is proportional to what changed.

Item = list[Any]
_SCANS = 4  # messages looked for by a scan of the source before it is indexed
_FIND_SAME: Callable[[list[Any], Any, int], int] | None = native("find_same")  # None: no C
_SAME_RUN: Callable[[list[Any], int, list[Any], int], int] | None = native("same_run")


def sent_items(raw: Any) -> list[Item]:
    """The stored items of a state ([] for one written by another version)."""
    if not isinstance(raw, list) or not all(map(_is_item, raw)):
        return []
    return raw


def _is_item(item: Any) -> bool:
    if not isinstance(item, list):
        return False
    if len(item) == 3:
        return all(type(x) is int for x in item)
    return len(item) == 2 and type(item[0]) is str and type(item[1]) is int


def describe_sent(
    source: Sequence[Message],
    messages: Sequence[Message],
    counter: MessageCounter,
    previous: Sequence[Item],
    hint: int,
) -> list[Item]:
    """``messages`` as items over ``source`` (see above); ``previous``: the items of the
    plan this request extends ([] when it does not); ``hint``: where a run likely starts
    (the cut)."""
    runs = {int(it[0]): it for it in previous if len(it) == 3}
    out: list[Item] = []
    for i, j, k in source_runs(source, messages, hint):
        if j is None:
            m = messages[i]
            out.append([fingerprint(m), counter.message(m)])
            continue
        before = runs.get(j)
        if before is not None and 0 < int(before[1]) <= k:
            done, tokens = int(before[1]), int(before[2])
        else:
            done, tokens = 0, 0
        tokens += counter.total(source[j + done : j + k])  # (plain chat: one C loop)
        out.append([j, k, tokens])
    return out


def source_runs(
    source: Sequence[Any], messages: Sequence[Any], hint: int = 0
) -> Iterator[tuple[int, int | None, int]]:
    """``messages`` as runs of ``source``'s objects, in order: ``(i, j, k)`` when
    ``messages[i:i + k]`` are ``source[j:j + k]`` (the same objects), ``(i, None, 1)`` for
    a message in no place of ``source`` (one a plan made: a cut note, a summary, a
    cleared copy).

    A run is looked for where the previous one ended, then at ``hint`` (where a cut
    likely starts); the first few messages found in neither place are looked for by a
    scan of ``source`` at C speed, later ones in an index of it made once. A plan that
    sends a suffix of the source with a note before it costs O(its messages), not a
    Python walk of the whole source.

    >>> a, b, c, note = {"n": 1}, {"n": 2}, {"n": 3}, {"n": 0}
    >>> list(source_runs([a, b, c], [note, b, c], hint=1))
    [(0, None, 1), (1, 1, 2)]
    """
    where: dict[int, int] | None = None
    scans = 0
    i, end, n = 0, len(messages), len(source)
    expect = 0
    while i < end:
        m = messages[i]
        if expect < n and source[expect] is m:
            j: int | None = expect
        elif hint < n and source[hint] is m:
            j = hint
        else:
            j = None
        if j is None and scans < _SCANS:
            scans += 1
            if _FIND_SAME is not None and type(source) is list:  # (by identity, in C)
                found = _FIND_SAME(source, m, 0)
                j = found if found >= 0 else None
            else:
                j = next(compress(count(), map(operator.is_, source, repeat(m))), None)
        elif j is None:
            if where is None:
                where = {id(x): idx for idx, x in enumerate(source)}
            j = where.get(id(m))
        if j is None or source[j] is not m:
            yield i, None, 1
            i += 1
            continue
        k = run_length(messages, i, source, j)
        yield i, j, k
        i, expect = i + k, j + k


def run_length(a: Sequence[Any], i: int, b: Sequence[Any], j: int) -> int:
    """How many items from ``a[i]`` on are ``b[j]`` on (the same objects): compared in
    doubling blocks, so a run costs O(its length), not O(the rest of the list)."""
    if _SAME_RUN is not None and type(a) is list and type(b) is list:
        return _SAME_RUN(a, i, b, j)  # (in C)
    k, block = 0, 8
    limit = min(len(a) - i, len(b) - j)
    while k < limit:
        step = min(block, limit - k)
        same = list(map(operator.is_, a[i + k : i + k + step], b[j + k : j + k + step]))
        if not all(same):
            return k + same.index(False)
        k += step
        block *= 2
    return k


def shared_tokens(
    old: Sequence[Item],
    new: Sequence[Item],
    source: Sequence[Message],
    messages: Sequence[Message],
    counter: MessageCounter,
    trusted: int,
) -> int:
    """Tokens of the leading ``messages`` (described by ``new``) that the previous plan
    (``old``) sent too, compared by value as a provider's cache compares them.

    Runs over the same place of ``source`` are equal as wholes (their tokens are kept);
    past the first other item, messages are compared one by one until one differs: a
    previous run's message is ``source[j]`` (known only below ``trusted``), a message
    the previous plan made by its fingerprint."""
    shared, at, x = 0, 0, 0
    while x < min(len(old), len(new)):
        a, b = old[x], new[x]
        if len(a) == 2 or len(b) == 2 or int(a[0]) != int(b[0]):
            break
        j, ka, kb = int(b[0]), int(a[1]), int(b[1])
        k = min(ka, kb, max(0, trusted - j))
        if k == kb:
            shared += int(b[2])
        elif k == ka:
            shared += int(a[2])
        else:
            shared += counter.total(source[j : j + k])
        at += k
        if k != ka or k != kb:
            if k == ka and k < kb:  # the previous run ended here: the rest one by one
                return shared + _one_by_one(old[x + 1 :], messages[at:], source, counter, trusted)
            return shared
        x += 1
    return shared + _one_by_one(old[x:], messages[at:], source, counter, trusted)


def _one_by_one(
    old: Sequence[Item],
    messages: Sequence[Message],
    source: Sequence[Message],
    counter: MessageCounter,
    trusted: int,
) -> int:
    shared, p = 0, 0
    for item in old:
        if len(item) == 2:
            before: Any = [(None, str(item[0]))]
        else:
            j, k = int(item[0]), int(item[1])
            if j + k <= trusted and run_length(messages, p, source, j) >= k:
                shared += int(item[2])  # the same objects: the run's kept tokens
                p += k
                continue
            before = ((source[i], None) if i < trusted else (None, None) for i in range(j, j + k))
        for value, digest in before:
            if p >= len(messages):
                return shared
            m = messages[p]
            if value is not None:
                same = value is m or value == m
            else:
                same = digest is not None and fingerprint(m) == digest
            if not same:
                return shared
            shared += counter.message(m)
            p += 1
    return shared
