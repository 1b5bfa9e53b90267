"""The store: one SQLAlchemy engine (SQLite in WAL mode by default), its schema, its writes.

``Store.commit`` is the collectors' ``PositionStore``: the firings of a batch,
its hourly counts and the file's new read position go in one transaction, so
a SIGKILL at any moment neither loses nor doubles a firing after restart
(``tests/daemon/test_crash_restart.py`` kills a real collector mid-file to check it). Every database error
of a store's engine surfaces as one ``StoreError`` (exit 3), never a driver's own exception.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, event, func, select
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlmodel import SQLModel, col, create_engine

from canary import locations
from canary.config.urls import redact_url
from canary.errors import StoreError
from canary.store.attributing import Attributor, NoRunsInFlight, StoredRun
from canary.store.commits import commit, upsert
from canary.store.migrations import MIGRATIONS, SCHEMA_VERSION
from canary.store.nonces import nonce_candidates
from canary.store.positions import state_of
from canary.store.runlines import recount
from canary.store.sites import Site, claim_owner, claim_sqlite, quoted, register, search_site
from canary.store.tables import (
    FilePosition,
    Firing,
    Meta,
    Run,
    RunTrace,
)
from canary.store.users import Users, counted_pool
from canary.vocabulary import as_utc
from collectors.positions import Batch, FileState
from collectors.scan import Hit

if TYPE_CHECKING:
    from canary.config.settings import Config

#: Seconds a write waits for another process's lock before it fails with a StoreError.
BUSY_TIMEOUT_S = 30.0
#: Seconds ``Store.stop`` waits for the connections in use: a statement may wait out the busy timeout.
STOP_WAIT_S = BUSY_TIMEOUT_S + 5.0
#: How far back activity is kept per minute, unless the store is told: the default window and an hour.
MINUTES_KEPT = timedelta(hours=25)


def _private_database(path: Path) -> None:
    """The database's folder and file (and its -wal and -shm) owner-only, from their creation.

    SQLite creates -wal and -shm with the database file's own mode, so a 0600 database
    keeps them 0600 too; existing ones are tightened here in case an older version made them.
    """
    parent = path.parent
    locations.private_dir(parent, tighten=locations.is_owned(parent))
    locations.private_file(path)
    for suffix in ("-wal", "-shm"):
        locations.tighten_file(path.with_name(path.name + suffix))


#: ``Connection.info`` key: when the statement running began (monotonic), for the lock hint.
_STARTED = "canary_statement_started"


def _time_statements(conn: Connection, *_args: Any) -> None:
    conn.info[_STARTED] = time.monotonic()


def _into_wal(cursor: sqlite3.Cursor) -> None:
    """Put the database in WAL mode, waiting out other connections doing the same.

    Two connections switching a new database to WAL at once deadlock on its lock, and SQLite
    fails one of them at once, without waiting the busy timeout: it is tried again here until
    the busy timeout has passed.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    pause = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


def _as_store_error(url: str) -> Callable[[ExceptionContext], None]:
    """A ``handle_error`` hook: every database error of this store is raised as one StoreError."""

    def hook(context: ExceptionContext) -> None:
        if not isinstance(context.sqlalchemy_exception, DBAPIError):
            return  # not the database's error (a bug in a statement): let it show as it is
        original = context.original_exception
        first = (str(original).strip().splitlines() or [type(original).__name__])[0]
        hint = ""
        if "locked" in first or "busy" in first:
            started = context.connection.info.get(_STARTED) if context.connection is not None else None
            waited = time.monotonic() - started if started is not None else 0.0
            if waited >= BUSY_TIMEOUT_S * 0.9:
                hint = f" (another process held it for more than {BUSY_TIMEOUT_S:g}s)"
            else:
                hint = " (another connection held it, and SQLite gave up without waiting; try again)"
        shown = redact_url(url)
        raise StoreError(f"the store at {shown} could not be used: {first}{hint}", url=url) from original

    return hook


class Store:
    """The store of one guard-canary installation."""

    def __init__(self, url: str, *, clock: Callable[[], datetime] | None = None,
                 attribution: Attributor | None = None, site: Site | None = None,
                 local: Path | None = None, owner: Path | None = None,
                 minutes_kept: timedelta = MINUTES_KEPT, create: bool = True) -> None:
        self.url = url
        #: False for a reader: no site is made in a shared store and no claim is written (another's
        #: store is still refused), and a site not there yet is ``absent``.
        self.create = create
        self.absent = False
        #: The config whose rows these are: another config of the same site is refused.
        self.owner = str(owner.resolve()) if owner is not None else None
        #: For a server's store: the project's own file stem for the daemon's lock and its word on
        #: the store (``canary.store.health``), which a SQLite store keeps beside its file.
        self.local = local
        self.clock = clock or (lambda: datetime.now(UTC))
        #: Which run each committed firing belongs to (``canary.store.attributing``).
        self.attribution: Attributor = attribution if attribution is not None else NoRunsInFlight()
        self.home: Path | None = None
        #: Whose rows these are (``canary.store.sites``): a project's, on this machine.
        self.claimed = site is not None
        self.site = site if site is not None else Site()
        #: How far back activity is kept per minute: where the longest window may begin.
        self.minutes_kept = minutes_kept
        #: The hour the minutes kept were last pruned in (``canary.store.commits.add_minutes``).
        self.minutes_pruned: datetime | None = None
        self.engine, self.users = self._open()

    @classmethod
    def of(cls, config: Config, **kwargs: Any) -> Store:
        """The configured store, as the site of the config's project on this machine."""
        if config.guards:
            kwargs.setdefault("minutes_kept", max(g.window for g in config.guards) + timedelta(hours=1))
        return cls(config.store.url, site=Site(config.project, config.store.machine or ""),
                   local=config.state_folder / "store", owner=config.path, **kwargs)

    # -- setup --------------------------------------------------------------

    def _open(self) -> tuple[Engine, Users]:
        url = self.url
        try:
            engine = self._create_engine(url, self.site)
            event.listen(engine, "handle_error", _as_store_error(url))
            event.listen(engine, "before_cursor_execute", _time_statements)
            users = Users(engine, redact_url(url))
            try:
                self._migrate(engine)
            except BaseException:
                engine.dispose()  # a store refused or broken keeps no connection open
                raise
            return engine, users
        except (SQLAlchemyError, OSError) as exc:
            raise StoreError(redact_url(f"cannot open the store at {url}: {exc}"), url=url) from exc
        except ImportError as exc:  # the URL names a driver that is not installed
            raise StoreError(
                f"cannot open the store at {redact_url(url)}: its driver is not installed ({exc}); for "
                "PostgreSQL install guard-canary[postgres] (psycopg)", url=url) from exc

    @staticmethod
    def _create_engine(url: str, site: Site) -> Engine:
        parsed = make_url(url)
        if parsed.get_backend_name() != "sqlite":
            engine = create_engine(url, pool_pre_ping=True, poolclass=counted_pool(parsed))
            if engine.dialect.name == "postgresql":
                search_site(engine, site)
            return engine
        database = parsed.database
        if database and database != ":memory:" and not database.startswith("file:"):
            _private_database(Path(database).expanduser())
        engine = create_engine(url, poolclass=counted_pool(parsed),
                               connect_args={"check_same_thread": False, "timeout": BUSY_TIMEOUT_S})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            _into_wal(cursor)
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
            cursor.close()

        return engine

    def _migrate(self, engine: Engine) -> None:
        with engine.begin() as conn:
            if engine.dialect.name == "sqlite":
                # Take the write lock before reading the version: two processes opening a new
                # store at once then migrate one after the other, never both.
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            elif engine.dialect.name == "postgresql":
                if not self.create:
                    meta = f"{quoted(self.site.schema)}.meta"
                    if conn.exec_driver_sql("SELECT to_regclass(%(t)s)", {"t": meta}).scalar() is None:
                        self.absent = True
                        return
                else:
                    register(conn, self.site, as_utc(self.clock()))  # the site's schema, under a lock
            Meta.__table__.create(conn, checkfirst=True)  # type: ignore[attr-defined]
            row = conn.execute(select(col(Meta.value)).where(col(Meta.key) == "schema_version")).first()
            current = int(row[0]) if row else 0
            if current > SCHEMA_VERSION:
                raise StoreError(
                    f"the store at {redact_url(self.url)} has schema version {current}, newer than this "
                    f"guard-canary knows ({SCHEMA_VERSION}); upgrade guard-canary",
                    url=self.url,
                )
            for step in MIGRATIONS[current:]:
                step(conn)
            if current != SCHEMA_VERSION:
                self.upsert(
                    conn, Meta, [{"key": "schema_version", "value": str(SCHEMA_VERSION)}],
                    keys=["key"], set_={"value": str(SCHEMA_VERSION)},
                )
            if self.claimed and engine.dialect.name == "sqlite":
                claim_sqlite(conn, self.site.project, redact_url(self.url), write=self.create)
            if self.owner is not None:
                claim_owner(conn, self.owner, self.site, redact_url(self.url), write=self.create)

    def close(self) -> None:
        """Release every connection."""
        self.engine.dispose()

    def stop(self, wait: float = STOP_WAIT_S) -> bool:
        """Stop every user of the store before its file is moved: no connection is handed out any
        more (asking for one raises a StoreError), those in use are waited for, up to ``wait``
        seconds, then all are closed. False, closing nothing, if some are still in use."""
        if not self.users.stop(wait):
            return False
        self.engine.dispose()
        return True

    def reopen(self, wait: float = STOP_WAIT_S) -> None:
        """Stop every user of the store (``stop``), then open its file again (a new one if it was
        deleted) and migrate it. A StoreError if a connection stayed in use ``wait`` seconds."""
        if not self.stop(wait):
            raise StoreError(f"the store at {redact_url(self.url)} could not be re-opened: a connection "
                             f"was still in use after {wait:g}s", url=self.url)
        self.engine, self.users = self._open()  # only once migrated: other threads use it at once

    @classmethod
    def joining(cls, config: Config) -> Store:
        """The configured store for a command that writes beside the daemon (a mute, the dashboard):
        a SQLite file as the daemon opens it, a shared store as a reader that never makes the
        project's site (``absent`` until its daemon has made it)."""
        if make_url(config.store.url).get_backend_name() == "sqlite":
            return cls.of(config)
        return cls.existing(config.store.url, site=Site(config.project, config.store.machine or ""),
                            local=config.state_folder / "store", owner=config.path)

    @classmethod
    def existing(cls, url: str, *, site: Site | None = None, local: Path | None = None,
                 owner: Path | None = None) -> Store:
        """The store at ``url``, never created nor claimed, and refused when it is another project's
        or ``owner`` config's: a SQLite file not there yet reads as an empty store in memory (whose
        ``path`` still names the file), and a site a shared store does not hold yet is ``absent``."""
        parsed = make_url(url)
        database = parsed.database
        if parsed.get_backend_name() == "sqlite" and database not in (None, "", ":memory:"):
            file = Path(os.path.expanduser(str(database)))
            if not file.exists():
                store = cls("sqlite://", site=site)
                store.home = file
                return store
        return cls(url, site=site, local=local, owner=owner, create=False)

    @property
    def stem(self) -> Path | None:
        """The file beside which the daemon keeps its lock and problem: the SQLite file, else ``local``."""
        return self.path if self.path is not None else self.local

    @property
    def path(self) -> Path | None:
        """The database file, for SQLite stores."""
        if self.home is not None:
            return self.home
        parsed = make_url(self.url)
        if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
            return Path(os.path.expanduser(str(parsed.database)))
        return None

    # -- the collectors' PositionStore ---------------------------------------

    def position(self, key: str) -> FileState | None:
        """The committed state of a followed file."""
        with self.engine.connect() as conn:
            row = conn.execute(select(FilePosition).where(col(FilePosition.key) == key)).first()
        return state_of(row) if row else None

    def positions(self) -> list[FileState]:
        """Every committed file state."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(FilePosition)).all()
        return [state_of(row) for row in rows]

    def forget(self, key: str) -> None:
        """Drop a file that is gone for good."""
        with self.engine.begin() as conn:
            conn.execute(FilePosition.__table__.delete().where(col(FilePosition.key) == key))  # type: ignore[attr-defined]

    def stored_run(self, text: str) -> StoredRun | None:
        """The stored run (past or in flight) whose nonce ``text`` carries, or None."""
        candidates = nonce_candidates(text)
        if not candidates:
            return None
        table = Run.__table__  # type: ignore[attr-defined]
        stmt = (select(table.c.id, table.c.verdict.is_not(None))
                .where(table.c.nonce.in_(sorted(candidates))).order_by(table.c.id).limit(1))
        with self.engine.connect() as conn:
            row = conn.execute(stmt).first()
        return StoredRun(int(row[0]), bool(row[1])) if row is not None else None

    def traced_runs(self, trace_ids: Iterable[str]) -> dict[str, StoredRun]:
        """The stored run each of ``trace_ids`` is a trace of (``RunLog.traced``); the latest when two."""
        wanted = sorted(set(trace_ids))
        if not wanted:
            return {}
        traces, runs = RunTrace.__table__, Run.__table__  # type: ignore[attr-defined]
        stmt = (select(traces.c.trace_id, runs.c.id, runs.c.verdict.is_not(None))
                .join(runs, runs.c.id == traces.c.run_id).where(traces.c.trace_id.in_(wanted))
                .order_by(runs.c.id))
        with self.engine.connect() as conn:
            return {str(t): StoredRun(int(i), bool(f)) for t, i, f in conn.execute(stmt)}

    def recount(self, guards: Sequence[str], since: datetime, hits: Iterable[tuple[str, str, Hit]]) -> int:
        """Replace the organic log firings of ``guards`` from the hour of ``since`` on by ``hits``
        (path, file key, hit) read again from the logs; return how many were stored
        (``canary.store.runlines.recount``)."""
        return recount(self, guards, since, hits, now=as_utc(self.clock()))

    def commit(self, batch: Batch) -> None:
        """Firings, hourly counts, activity and the new position, in one transaction
        (``canary.store.commits``)."""
        commit(self, batch)

    # -- helpers ------------------------------------------------------------

    def upsert(self, conn: Connection, model: type[SQLModel], rows: Sequence[dict[str, Any]], *,
               keys: Iterable[str], set_: dict[str, Any]) -> None:
        """Insert ``rows``, or where ``keys`` are taken, update the row by ``set_``."""
        upsert(conn, model, rows, keys=keys, set_=set_)

    def count_firings(self) -> int:
        """How many firing rows the store holds."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(Firing)).scalar_one())

