"""One tenant's view of a state store (:class:`TenantStore`): every key it reads or
writes names the tenant, so what one client's conversations keep (cuts, summaries) is
never read, moved or reported to another."""

from __future__ import annotations

import functools
import hashlib

from .store import StateStore

__all__ = ["TenantStore", "tenant_view"]


class TenantStore:
    """A :class:`~tokenflex.state.StateStore` that keeps ``tenant``'s keys in ``store``:
    each key is prefixed with a digest of the tenant (``t:<digest>:``), so two tenants
    never share a key, whatever their requests hold.

    ``fit(..., cache_stable=True, state=TenantStore(store, user_id))`` keeps one user's
    cuts and summaries apart from every other user's. A plain store given to ``fit`` is
    the tenant ``""`` (this process, or every caller that passes that store); the proxy
    passes each request's credentials and route.

    >>> from tokenflex.state import MemoryStore
    >>> shared = MemoryStore()
    >>> alice, bob = TenantStore(shared, "alice"), TenantStore(shared, "bob")
    >>> alice.set("cut:1", b"10")
    >>> alice.get("cut:1"), bob.get("cut:1")
    (b'10', None)
    """

    def __init__(self, store: StateStore, tenant: str) -> None:
        self.store = store
        self.tenant = tenant
        self.prefix = _prefix(tenant)
        """What every key of this tenant starts with in ``store``."""

    def get(self, key: str) -> bytes | None:
        return self.store.get(self.prefix + key)

    def set(self, key: str, value: bytes, *, ttl_s: float | None = None) -> None:
        self.store.set(self.prefix + key, value, ttl_s=ttl_s)

    def delete(self, key: str) -> None:
        self.store.delete(self.prefix + key)

    def __repr__(self) -> str:
        return f"TenantStore({self.store!r}, prefix={self.prefix!r})"


@functools.lru_cache(maxsize=4096)  # (a proxy makes a view for each request)
def _prefix(tenant: str) -> str:
    digest = hashlib.blake2b(tenant.encode("utf-8", "surrogatepass"), digest_size=12)
    return f"t:{digest.hexdigest()}:"


def tenant_view(store: StateStore, tenant: str = "") -> TenantStore:
    """``store`` as a tenant's view: itself when it is one already (its tenant is the
    caller's choice), else the view of ``tenant``."""
    return store if isinstance(store, TenantStore) else TenantStore(store, tenant)
