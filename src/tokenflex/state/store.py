"""What a state store is (:class:`StateStore`)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..errors import InvalidInputError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_VALUE_BYTES",
    "DEFAULT_TIMEOUT_S",
    "DEFAULT_TTL_S",
    "StateStore",
    "check_state_store",
    "is_state_store",
]

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
"""Default bound on what a memory or SQLite store holds (keys plus values)."""
DEFAULT_MAX_VALUE_BYTES = 1024 * 1024
"""Default bound on one value in a Redis store (larger ones are not stored)."""
DEFAULT_TTL_S = 24 * 3600.0
"""Default (and longest) time to live of a key in a Redis or SQLite store."""
DEFAULT_TIMEOUT_S = 1.0
"""Default deadline of one call to a Redis or SQLite store."""


@runtime_checkable
class StateStore(Protocol):
    """Bytes by key, each with an optional time to live; bounded in bytes (the oldest
    entries go first). Thread-safe."""

    def get(self, key: str) -> bytes | None:
        """The value under ``key``, or None when it is absent or expired."""
        ...

    def set(self, key: str, value: bytes, *, ttl_s: float | None = None) -> None:
        """Store ``value`` under ``key`` for ``ttl_s`` seconds (None: until evicted)."""
        ...

    def delete(self, key: str) -> None:
        """Forget ``key`` (nothing happens when it is absent)."""
        ...


_STORE_TYPES: set[type] = set()
"""Classes (that have the methods themselves) whose instances passed the check of
:func:`is_state_store` (a runtime protocol check walks the protocol's members: several
microseconds, on every cache-stable fit)."""


def is_state_store(value: object) -> bool:
    """Whether ``value`` has :class:`StateStore`'s ``get``, ``set`` and ``delete`` (the
    answer for its class is kept once it is yes; no is never kept).

    >>> from tokenflex.state import MemoryStore
    >>> is_state_store(MemoryStore()), is_state_store({})
    (True, False)
    """
    kind = type(value)
    if kind in _STORE_TYPES:
        return True
    if not isinstance(value, StateStore):
        return False
    if len(_STORE_TYPES) < 64 and all(
        callable(getattr(kind, name, None)) for name in ("get", "set", "delete")
    ):  # the class has them, not only this instance
        _STORE_TYPES.add(kind)
    return True


def check_state_store(state: object, caller: str = "") -> None:
    """Raise :class:`~tokenflex.errors.InvalidInputError` unless ``state`` is None or a
    state store; ``caller`` prefixes the message (``"Conversation(): "``)."""
    if state is not None and not is_state_store(state):
        raise InvalidInputError(
            f"{caller}state must be a tokenflex StateStore (get, set, delete), got "
            f"{type(state).__name__} {state!r:.80}. Pass tokenflex.state.open_store(url) "
            "or leave it out for the in-memory store."
        )
