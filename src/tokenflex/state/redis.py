"""The Redis state store: one store for several proxy replicas (the ``redis`` extra)."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from .store import DEFAULT_MAX_VALUE_BYTES, DEFAULT_TIMEOUT_S, DEFAULT_TTL_S

__all__ = ["RedisStore"]

_PREFIX = "tokenflex:"


class RedisStore:
    """A :class:`~tokenflex.state.StateStore` on a Redis server. Keys are prefixed with
    ``tokenflex:``; every key expires (``default_ttl_s`` when the caller gives no TTL)
    and a value over ``max_value_bytes`` is not stored (its key is deleted), so one
    conversation cannot take the server's memory. The server's ``maxmemory`` and eviction
    policy bound the rest (``allkeys-lru`` is the one that matches the other stores).

    Each call gives up after ``timeout_s`` (connecting, sending or reading; no retries):
    a server that is down or stalled raises ``redis`` errors at once or after that
    deadline, never holds the caller longer.
    """

    def __init__(
        self,
        url: str,
        *,
        client: Any = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        default_ttl_s: float = DEFAULT_TTL_S,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
    ) -> None:
        if client is None:
            try:
                import redis
                from redis.backoff import NoBackoff
                from redis.retry import Retry
            except ImportError:  # pragma: no cover - the extra is installed in tests
                raise ConfigError(
                    f"state_store={url!r} needs the redis client: pip install 'tokenflex[redis]'."
                ) from None
            client = redis.Redis.from_url(
                url,
                socket_timeout=timeout_s,
                socket_connect_timeout=timeout_s,
                retry=Retry(NoBackoff(), 0),
            )
        self.url = url
        self.default_ttl_s = default_ttl_s
        self.max_value_bytes = max_value_bytes
        self._client = client

    def get(self, key: str) -> bytes | None:
        value = self._client.get(_PREFIX + key)
        return None if value is None else bytes(value)

    def set(self, key: str, value: bytes, *, ttl_s: float | None = None) -> None:
        if len(value) > self.max_value_bytes:
            self._client.delete(_PREFIX + key)  # an older, smaller value is stale now
            return
        ttl = self.default_ttl_s if ttl_s is None else min(ttl_s, self.default_ttl_s)
        self._client.set(_PREFIX + key, value, px=max(1, int(ttl * 1000)))

    def delete(self, key: str) -> None:
        self._client.delete(_PREFIX + key)

    def close(self) -> None:
        self._client.close()
