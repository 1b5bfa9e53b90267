"""Whether anything was written to the store since the last look, cheaply enough to ask every second.

A SQLite store is asked for its write counter (``PRAGMA data_version``) on a connection of
its own, which changes whenever another connection commits; the file's identity and the
daemon's problem file beside it are part of the answer, so a store set aside or replaced
counts as a change too, and ``take_replaced`` says so: connections still open on the old
file would go on reading it. Any other store has no such counter here: every look is a change.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from pathlib import Path

from canary.store.health import problem_path

__all__ = ["StoreChanges"]

Token = tuple[object, ...]


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size


class StoreChanges:
    """Says whether the store changed since the last call of ``changed``.

    ``changed`` runs in a worker thread while the app may ``close`` from its own: a lock keeps
    the connection from being closed under a query in flight, which crashes the process.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._file: tuple[int, int] | None = None  # the database file the connection is open on
        self._seen: tuple[int, int] | None = None  # the database file last seen at the path
        self._last: Token | None = None
        #: The file was moved aside or replaced since it was first seen: connections open on the
        #: old one read the old one (``take_replaced`` says so once).
        self._replaced = False
        self._lock = threading.RLock()

    def changed(self) -> bool:
        """True on the first call, when the store has no counter, and when something was written."""
        with self._lock:
            token = self._token()
        if token is None:
            return True
        seen, self._last = self._last, token
        return token != seen

    def _token(self) -> Token | None:
        if self.path is None:
            return None
        db = _identity(self.path)
        problem = _identity(problem_path(self.path))
        if db is None:
            self.close()
            return ("no store", problem)
        if self._conn is None or self._file != db[:2]:
            if self._seen is not None and self._seen != db[:2]:
                self._replaced = True
            self._seen = db[:2]
            self.close()  # never keep reading a file that was moved aside or replaced
            try:
                self._conn = sqlite3.connect(self.path, timeout=1.0, isolation_level=None,
                                             check_same_thread=False)
            except sqlite3.Error:
                return None
            self._file = db[:2]
        try:
            version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error:
            self.close()
            return None  # a store that cannot be read now: look again in full
        return (self._file, version, problem)

    def take_replaced(self) -> bool:
        """True once after the store's file was moved aside or replaced (its connections should go)."""
        replaced, self._replaced = self._replaced, False
        return replaced

    def close(self) -> None:
        """Close the connection (the next call opens it again)."""
        with self._lock:
            if self._conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.close()
            self._conn = None
            self._file = None
