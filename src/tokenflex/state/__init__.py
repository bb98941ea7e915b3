"""The state store: small values a session keeps between requests (where the last cut
fell, the summaries made so far), shared by every fit of a process or every proxy
replica.

:func:`open_store` opens one from a URL: ``memory://`` (in-process, the default),
``sqlite:///path/to/file.db`` (one machine, several processes) or
``redis://host:port/db`` (several proxy replicas; needs the ``redis`` extra). Every
backend is a :class:`StateStore`: ``get`` / ``set`` with a TTL, bounded in bytes.
:class:`TenantStore` is one tenant's view of a store: every key it uses names the tenant.
"""

from __future__ import annotations

from .memory import MemoryStore
from .store import DEFAULT_MAX_BYTES, StateStore, check_state_store, is_state_store
from .tenant import TenantStore
from .url import default_store, open_store

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MemoryStore",
    "StateStore",
    "TenantStore",
    "check_state_store",
    "default_store",
    "is_state_store",
    "open_store",
]
