"""The Redis state store: one store for several proxy replicas (the ``redis`` extra)."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError

__all__ = ["RedisStore"]

_PREFIX = "tokenflex:"


class RedisStore:
    """A :class:`~tokenflex.state.StateStore` on a Redis server. Keys are prefixed with
    ``tokenflex:``; the server's ``maxmemory`` and eviction policy bound what it holds
    (``allkeys-lru`` is the one that matches the other stores)."""

    def __init__(self, url: str, *, client: Any = None) -> None:
        if client is None:
            try:
                import redis
            except ImportError:  # pragma: no cover - the extra is installed in tests
                raise ConfigError(
                    f"state_store={url!r} needs the redis client: pip install 'tokenflex[redis]'."
                ) from None
            client = redis.Redis.from_url(url)
        self.url = url
        self._client = client

    def get(self, key: str) -> bytes | None:
        value = self._client.get(_PREFIX + key)
        return None if value is None else bytes(value)

    def set(self, key: str, value: bytes, *, ttl_s: float | None = None) -> None:
        px = None if ttl_s is None else max(1, int(ttl_s * 1000))
        self._client.set(_PREFIX + key, value, px=px)

    def delete(self, key: str) -> None:
        self._client.delete(_PREFIX + key)

    def close(self) -> None:
        self._client.close()
