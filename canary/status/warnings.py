"""What the collectors warned of while the daemon ran: a line cut, a pattern over its time
budget, a truncation that destroyed unread lines, a file that cannot be opened.

The daemon keeps the latest distinct warnings (``KEEP`` of them, each with how often and when
it last came) and writes them to the store with its heartbeat; ``canary status`` shows those
of the daemon running now, since each of them says a count may be short (but a refused commit,
whose lines are read again). A file that cannot be opened, or whose lines the store refused, is
warned of until it opens again or the store takes them: then its warning is dropped.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from canary.records import frozen
from canary.vocabulary import as_utc, iso

if TYPE_CHECKING:  # status reads without SQLAlchemy: only the daemon's flush needs the store
    from canary.store.engine import Store
    from canary.store.reads import Reader

__all__ = ["KEEP", "META_KEY", "CollectorWarning", "Warnings", "load"]

#: Distinct warnings kept, newest first.
KEEP = 10
#: The ``meta`` row that holds them.
META_KEY = "collector_warnings"
#: Characters of one message kept.
MESSAGE_KEEP = 400


@frozen
class CollectorWarning:
    """One distinct warning: the file, what was wrong, how often, when last."""

    file: str
    message: str
    count: int
    last: datetime

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "message": self.message, "count": self.count, "last": iso(self.last)}


class Warnings:
    """The daemon's latest distinct collector warnings (safe from any thread)."""

    def __init__(self, clock: Any) -> None:
        import threading  # only the daemon keeps warnings; ``canary status`` reads them

        self._clock = clock
        self._lock = threading.Lock()
        self._items: dict[tuple[str, str], CollectorWarning] = {}
        self._dirty = True  # written once at start, so a previous daemon's warnings are cleared

    def add(self, path: str, message: str) -> None:
        """Keep a warning the collectors gave about ``path``."""
        text = message[:MESSAGE_KEEP]
        key = (path, text)
        now = as_utc(self._clock())
        with self._lock:
            old = self._items.pop(key, None)
            self._items[key] = CollectorWarning(path, text, (old.count if old else 0) + 1, now)
            while len(self._items) > KEEP:
                del self._items[next(iter(self._items))]
            self._dirty = True

    def drop(self, path: str, message: str) -> None:
        """Forget a warning about ``path`` that no longer holds (the file opens again, the store
        took what it refused)."""
        with self._lock:
            if self._items.pop((path, message[:MESSAGE_KEEP]), None) is not None:
                self._dirty = True

    def latest(self) -> list[CollectorWarning]:
        """The warnings kept, newest first."""
        with self._lock:
            return list(reversed(self._items.values()))

    def flush(self, store: Store) -> None:
        """Write the warnings to the store if they changed since the last flush."""
        from canary.store.tables import Meta

        with self._lock:
            if not self._dirty:
                return
            value = json.dumps([w.to_json() for w in reversed(self._items.values())])
            self._dirty = False
        try:
            with store.engine.begin() as conn:
                store.upsert(conn, Meta, [{"key": META_KEY, "value": value}], keys=["key"],
                             set_={"value": value})
        except Exception:
            with self._lock:
                self._dirty = True  # written on a later tick
            raise


def load(reader: Reader) -> list[CollectorWarning]:
    """The warnings the daemon last wrote, newest first (none if unreadable)."""
    rows = reader.rows("SELECT value FROM meta WHERE key = :key", key=META_KEY)
    if not rows:
        return []
    try:
        items = json.loads(str(rows[0][0]))
        return [
            CollectorWarning(str(i["file"]), str(i["message"]), int(i["count"]),
                             as_utc(datetime.fromisoformat(str(i["last"]))))
            for i in items
        ]
    except (ValueError, KeyError, TypeError):
        return []
