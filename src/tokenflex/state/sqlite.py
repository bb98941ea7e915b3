"""The SQLite state store: one file that several processes on one machine share."""

from __future__ import annotations

import sqlite3
import threading
import time

from .store import DEFAULT_MAX_BYTES

__all__ = ["SQLiteStore"]


class SQLiteStore:
    """A :class:`~tokenflex.state.StateStore` in a SQLite file (WAL mode, so readers in
    other processes do not wait on a writer). Expired entries are skipped on read and
    deleted when the store is over ``max_bytes``, then the least recently written go.

    >>> s = SQLiteStore(":memory:")
    >>> s.set("k", b"v", ttl_s=60)
    >>> s.get("k")
    b'v'
    """

    def __init__(self, path: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, timeout=10.0)
        with self._lock, self._db:
            if path != ":memory:":
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value BLOB NOT NULL, "
                "expires REAL, size INTEGER NOT NULL, written REAL NOT NULL)"
            )
            self._db.execute("CREATE INDEX IF NOT EXISTS state_written ON state (written)")

    def get(self, key: str) -> bytes | None:
        with self._lock:
            row = self._db.execute(
                "SELECT value, expires FROM state WHERE key = ?", (key,)
            ).fetchone()
        if row is None or (row[1] is not None and row[1] <= time.time()):
            return None
        return bytes(row[0])

    def set(self, key: str, value: bytes, *, ttl_s: float | None = None) -> None:
        now = time.time()
        expires = None if ttl_s is None else now + ttl_s
        size = len(key.encode()) + len(value)
        with self._lock, self._db:
            if size > self.max_bytes:
                self._db.execute("DELETE FROM state WHERE key = ?", (key,))
                return
            self._db.execute(
                "INSERT OR REPLACE INTO state (key, value, expires, size, written) "
                "VALUES (?, ?, ?, ?, ?)",
                (key, value, expires, size, now),
            )
            (total,) = self._db.execute("SELECT COALESCE(SUM(size), 0) FROM state").fetchone()
            if total > self.max_bytes:
                self._db.execute(
                    "DELETE FROM state WHERE expires IS NOT NULL AND expires <= ?", (now,)
                )
                self._evict()

    def _evict(self) -> None:
        (total,) = self._db.execute("SELECT COALESCE(SUM(size), 0) FROM state").fetchone()
        over = total - self.max_bytes
        for k, size in self._db.execute("SELECT key, size FROM state ORDER BY written").fetchall():
            if over <= 0:
                break
            self._db.execute("DELETE FROM state WHERE key = ?", (k,))
            over -= size

    def delete(self, key: str) -> None:
        with self._lock, self._db:
            self._db.execute("DELETE FROM state WHERE key = ?", (key,))

    def close(self) -> None:
        with self._lock:
            self._db.close()
