"""Who is using an engine's connections, so that the store can be stopped before its file is moved.

A SQLite connection open on a file that was moved aside still names the file by its old path:
used again, it opens the new store's ``-wal`` and ``-shm`` as if they were its own (and
truncates the shared memory under the connections mapping it, which kills the process with
SIGBUS); closed last, it deletes them. So before a store's file is moved or replaced, every
connection is taken back and closed: ``Users.stop`` hands out no more and waits for those in use.

A connection counts as in use until its engine's pool has taken it back, not merely until
SQLAlchemy's ``checkin`` event, which fires just before: a pool disposed of in between misses the
connection and leaves it open. So the engine is made with ``poolclass=counted_pool(url)``, whose
pool tells the ``Users`` once it has taken a connection back.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import URL, Engine, event
from sqlalchemy.pool import ConnectionPoolEntry, Pool

from canary.errors import StoreError

if TYPE_CHECKING:
    from sqlalchemy.engine.default import DefaultDialect

__all__ = ["Users", "counted_pool"]

#: ``ConnectionRecord.info`` key: the ``Users`` that counted this checkout.
_COUNTED = "canary_counted"


class _ToldOnReturn(Pool):
    """A pool that tells the ``Users`` who counted a connection once it has taken it back."""

    def _do_return_conn(self, record: ConnectionPoolEntry) -> None:
        users = record.info.pop(_COUNTED, None)
        try:
            super()._do_return_conn(record)
        finally:
            if isinstance(users, Users):
                users.returned()


#: Each pool class a dialect picks, as a ``_ToldOnReturn``.
_TOLD: dict[type[Pool], type[Pool]] = {}


def counted_pool(url: URL) -> type[Pool]:
    """The pool class an engine of ``url`` would have, telling its ``Users`` once a connection is back."""
    dialect = cast("type[DefaultDialect]", url.get_dialect())
    plain = dialect.get_pool_class(url)
    if plain not in _TOLD:
        # Named in its parent's module, it logs as SQLAlchemy's own pools do (to ``sqlalchemy.pool``),
        # never its bookkeeping into the daemon's ``canary`` log.
        _TOLD[plain] = type(f"Counted{plain.__name__}", (_ToldOnReturn, plain),
                            {"__module__": plain.__module__})
    return _TOLD[plain]


class Users:
    """Counts the connections of one engine in use; once stopped, hands out no more."""

    def __init__(self, engine: Engine, url: str) -> None:
        """Count the checkouts of ``engine``, made with ``poolclass=counted_pool(url)``."""
        self.url = url
        self._cond = threading.Condition()
        self._out = 0
        self._stopped = False
        event.listen(engine, "checkout", self._checkout)

    def _checkout(self, _dbapi: Any, record: Any, _proxy: Any) -> None:
        with self._cond:
            if self._stopped:
                raise StoreError(f"the store at {self.url} is being re-opened; try again", url=self.url)
            self._out += 1
            record.info[_COUNTED] = self

    def returned(self) -> None:
        """A connection this counted was taken back by its pool."""
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
