"""Who is using an engine's connections, so that the store can be stopped before its file is moved.

A SQLite connection open on a file that was moved aside still names the file by its old path:
used again, it opens the new store's ``-wal`` and ``-shm`` as if they were its own (and
truncates the shared memory under the connections mapping it, which kills the process with
SIGBUS); closed last, it deletes them. So before a store's file is moved or replaced, every
connection is taken back and closed: ``Users.stop`` hands out no more and waits for those in use.
"""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import Engine, event

from canary.errors import StoreError

__all__ = ["Users"]

#: ``ConnectionRecord.info`` key: this checkout was counted.
_COUNTED = "canary_counted"


class Users:
    """Counts the connections of one engine in use; once stopped, hands out no more."""

    def __init__(self, engine: Engine, url: str) -> None:
        self.url = url
        self._cond = threading.Condition()
        self._out = 0
        self._stopped = False
        event.listen(engine, "checkout", self._checkout)
        event.listen(engine, "checkin", self._checkin)

    def _checkout(self, _dbapi: Any, record: Any, _proxy: Any) -> None:
        with self._cond:
            if self._stopped:
                raise StoreError(f"the store at {self.url} is being re-opened; try again", url=self.url)
            self._out += 1
            record.info[_COUNTED] = True

    def _checkin(self, _dbapi: Any, record: Any) -> None:
        if record is None or not record.info.pop(_COUNTED, False):
            return
        with self._cond:
            self._out -= 1
            self._cond.notify_all()

    @property
    def in_use(self) -> int:
        """How many connections are checked out now."""
        with self._cond:
            return self._out

    def stop(self, timeout: float) -> bool:
        """Hand out no more connections and wait up to ``timeout`` seconds for those in use to come
        back; True once none is in use."""
        with self._cond:
            self._stopped = True
            return self._cond.wait_for(lambda: self._out == 0, timeout)
