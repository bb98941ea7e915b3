"""The SQLite state store: one file that several processes on one machine share."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from .store import DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT_S, DEFAULT_TTL_S

__all__ = ["SQLiteStore"]


class SQLiteStore:
    """A :class:`~tokenflex.state.StateStore` in a SQLite file (WAL mode, so readers in
    other processes do not wait on a writer). Expired entries are skipped on read and
    deleted when the store is over ``max_bytes``, then the least recently written go.
    Every entry expires (``default_ttl_s`` when the caller gives no TTL).

    Each call gives up after ``timeout_s``: waiting for a file another process holds
    locked raises ``sqlite3.OperationalError`` ("database is locked"), waiting for this
    process's other threads a ``TimeoutError``. The file is opened on first use, so a
    file locked at startup does not stop the process.

    >>> s = SQLiteStore(":memory:")
    >>> s.set("k", b"v", ttl_s=60)
    >>> s.get("k")
    b'v'
    """

    def __init__(
        self,
        path: str,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        default_ttl_s: float = DEFAULT_TTL_S,
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.default_ttl_s = default_ttl_s
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """The connection, held by this thread for at most ``timeout_s`` of waiting."""
        if not self._lock.acquire(timeout=self.timeout_s):
            raise TimeoutError(
                f"SQLite state store {self.path}: another call held it for over "
                f"{self.timeout_s:g} s"
            )
        try:
            if self._db is None:
                db = sqlite3.connect(self.path, check_same_thread=False, timeout=self.timeout_s)
                try:
                    with db:
                        if self.path != ":memory:":
                            db.execute("PRAGMA journal_mode=WAL")
                        db.execute(
                            "CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value "
                            "BLOB NOT NULL, expires REAL, size INTEGER NOT NULL, written REAL "
                            "NOT NULL)"
                        )
                        db.execute("CREATE INDEX IF NOT EXISTS state_written ON state (written)")
                except BaseException:
                    db.close()
                    raise
                self._db = db
            yield self._db
        finally:
            self._lock.release()

    def get(self, key: str) -> bytes | None:
        with self._connection() as db:
            row = db.execute("SELECT value, expires FROM state WHERE key = ?", (key,)).fetchone()
        if row is None or (row[1] is not None and row[1] <= time.time()):
            return None
        return bytes(row[0])

    def set(self, key: str, value: bytes, *, ttl_s: float | None = None) -> None:
        now = time.time()
        ttl = self.default_ttl_s if ttl_s is None else min(ttl_s, self.default_ttl_s)
        size = len(key.encode()) + len(value)
        with self._connection() as db, db:
            if size > self.max_bytes:
                db.execute("DELETE FROM state WHERE key = ?", (key,))
                return
            db.execute(
                "INSERT OR REPLACE INTO state (key, value, expires, size, written) "
                "VALUES (?, ?, ?, ?, ?)",
                (key, value, now + ttl, size, now),
            )
            (total,) = db.execute("SELECT COALESCE(SUM(size), 0) FROM state").fetchone()
            if total > self.max_bytes:
                db.execute("DELETE FROM state WHERE expires IS NOT NULL AND expires <= ?", (now,))
                self._evict(db)

    def _evict(self, db: sqlite3.Connection) -> None:
        (total,) = db.execute("SELECT COALESCE(SUM(size), 0) FROM state").fetchone()
        over = total - self.max_bytes
        for k, size in db.execute("SELECT key, size FROM state ORDER BY written").fetchall():
            if over <= 0:
                break
            db.execute("DELETE FROM state WHERE key = ?", (k,))
            over -= size

    def delete(self, key: str) -> None:
        with self._connection() as db, db:
            db.execute("DELETE FROM state WHERE key = ?", (key,))

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
