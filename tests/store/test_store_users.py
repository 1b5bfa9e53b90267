"""A store's file is moved or re-opened only once every connection to it is back and closed.

A connection still open on a file moved aside would open the new store's ``-wal`` and
``-shm`` by their names (see ``canary.store.users``); these tests hold real connections in
other threads while the store is set aside.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.pool import NullPool

from canary.daemon import storewatch
from canary.daemon.storewatch import StoreWatch
from canary.errors import StoreError
from canary.store.engine import Store
from tests.store.conftest import PG_URL

NOW = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
CORRUPT = "the store at sqlite:///x could not be used: database disk image is malformed"


def hold(store: Store, seconds: float, released: list[float]) -> threading.Thread:
    """A thread that reads through a connection and keeps it for ``seconds``."""
    ready = threading.Event()

    def run() -> None:
        with store.engine.connect() as conn:
            conn.exec_driver_sql("SELECT count(*) FROM firings").scalar()
            ready.set()
            time.sleep(seconds)
            released.append(time.monotonic())

    thread = threading.Thread(target=run)
    thread.start()
    ready.wait(10)
    return thread


def test_a_corrupt_store_is_moved_aside_only_once_every_connection_is_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'canary.db'}")
    watch = StoreWatch(store)
    moved: list[float] = []
    real_replace = storewatch.os.replace

    def replace(src: Path, dst: Path) -> None:
        moved.append(time.monotonic())
        real_replace(src, dst)

    monkeypatch.setattr(storewatch.os, "replace", replace)
    released: list[float] = []
    holder = hold(store, 0.5, released)
    watch.failed(CORRUPT, NOW)
    holder.join()
    assert released and moved and moved[0] >= released[0]
    assert len(list(tmp_path.glob("canary.db.corrupt-*"))) == 1
    assert store.count_firings() == 0  # the new store works
    store.close()


def test_a_store_corrupt_again_is_moved_aside_again(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'canary.db'}")
    watch = StoreWatch(store)
    watch.failed(CORRUPT, NOW)
    watch.failed(CORRUPT, NOW)  # the same reason, in the same second
    assert len(list(tmp_path.glob("canary.db.corrupt-*"))) == 2
    assert store.count_firings() == 0
    store.close()


def test_a_stopped_store_hands_out_no_connection_until_it_is_re_opened(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'canary.db'}")
    assert store.stop(1.0)
    with pytest.raises(StoreError, match="being re-opened"):
        store.count_firings()
    store.reopen()
    assert store.count_firings() == 0
    store.close()


def test_stopping_waits_for_a_connection_in_use_and_says_when_it_did_not_come_back(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'canary.db'}")
    released: list[float] = []
    holder = hold(store, 0.6, released)
    assert not store.stop(0.1)  # still in use: nothing is closed
    assert store.users.in_use == 1
    assert store.stop(10.0)
    assert released
    holder.join()
    store.reopen()
    holder = hold(store, 0.6, released)
    with pytest.raises(StoreError, match="still in use"):
        store.reopen(0.1)
    holder.join()
    store.close()


def files_open(path: Path) -> list[str]:
    """This process's open files that are the SQLite store ``path`` or its -wal and -shm."""
    name = str(path.resolve())
    found = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed since it was listed
        if target.startswith(name):
            found.append(target)
    return found


def backends_alive(pid: int) -> int:
    """How many server processes ``pid`` names in ``pg_stat_activity``, once a backend whose client
    closed it has had up to 5s to exit."""
    engine = create_engine(PG_URL, poolclass=NullPool)
    try:
        deadline = time.monotonic() + 5.0
        while True:
            with engine.connect() as conn:
                alive = int(conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE pid = :p"),
                                         {"p": pid}).scalar_one())
            if alive == 0 or time.monotonic() >= deadline:
                return alive
            time.sleep(0.05)
    finally:
        engine.dispose()


def test_stopping_closes_a_connection_that_was_on_its_way_back_to_the_pool(
    backend: str, open_store: Callable[..., Store]
) -> None:
    store = open_store()
    entered, gate = threading.Event(), threading.Event()
    pids: list[int] = []

    # Runs on the return path after the store's own accounting, before the connection is back in
    # the pool: a thread descheduled at that point, made to last here.
    def slow_return(_dbapi: Any, _record: Any) -> None:
        if threading.current_thread() is holder:
            entered.set()
            gate.wait(10)

    event.listen(store.engine, "checkin", slow_return)

    def use() -> None:
        with store.engine.connect() as conn:
            if backend == "postgresql":
                pids.append(int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()))
            else:
                conn.exec_driver_sql("SELECT count(*) FROM firings").scalar()

    holder = threading.Thread(target=use)
    holder.start()
    assert entered.wait(10)
    # The pool the connection goes back to, kept here so that the garbage collector cannot close
    # a connection left in it before it is looked for.
    pool = store.engine.pool
    stopped: list[bool] = []
    stopper = threading.Thread(target=lambda: stopped.append(store.stop(10.0)))
    stopper.start()
    stopper.join(1.0)  # a stop that does not wait for the connection disposes of the pool by now
    gate.set()
    holder.join(10)
    stopper.join(10)
    assert stopped == [True]
    if backend == "postgresql":
        assert backends_alive(pids[0]) == 0
    else:
        assert store.path is not None
        assert files_open(store.path) == []
    del pool
    store.reopen()
    assert store.count_firings() == 0


def test_one_outage_is_one_alert_whose_since_holds_while_its_reason_changes(tmp_path: Path) -> None:
    """A database server going away says "terminating connection", then "connection refused": one
    outage, told once, since its first failure; over, it is told once."""
    from datetime import timedelta

    from canary.store.health import StoreProblem

    store = Store(f"sqlite:///{tmp_path / 'canary.db'}")
    told: list[StoreProblem] = []
    over: list[StoreProblem] = []
    watch = StoreWatch(store, alert=told.append, recovered=lambda problem, _at: over.append(problem))
    watch.failed("terminating connection due to administrator command", NOW)
    watch.failed("connection refused", NOW + timedelta(seconds=10))
    watch.failed("connection refused", NOW + timedelta(seconds=20))
    assert [p.since for p in told] == [NOW]
    assert watch.problem == StoreProblem(NOW, "connection refused")  # the latest reason, the first since
    watch.worked(NOW + timedelta(seconds=30))
    assert over == [StoreProblem(NOW, "connection refused")]
    store.close()


def test_the_pool_keeps_its_bookkeeping_out_of_the_daemons_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The daemon logs ``canary.*`` at INFO: a pool named under it would print "Pool disposed. Pool size:
    5 ..." on every store outage; it logs as SQLAlchemy's own pools do (warnings only)."""
    import logging

    from sqlalchemy import make_url

    from canary.store.users import counted_pool

    caplog.set_level(logging.INFO, logger="canary")
    url = f"sqlite:///{tmp_path / 'x.db'}"
    engine = create_engine(url, poolclass=counted_pool(make_url(url)))
    with engine.connect() as conn:
        conn.exec_driver_sql("SELECT 1")
    engine.dispose()
    assert [r.getMessage() for r in caplog.records if "Pool" in r.getMessage()] == []


def test_a_store_created_again_stays_an_error_ten_minutes_after_it_works(tmp_path: Path) -> None:
    """Its runs and statuses are gone: a glance at ``canary status`` within 10 minutes still sees why."""
    from datetime import timedelta

    store = Store(f"sqlite:///{tmp_path / 'canary.db'}")
    over: list[datetime] = []
    watch = StoreWatch(store, recovered=lambda _problem, at: over.append(at))
    for suffix in ("", "-wal", "-shm"):
        Path(str(tmp_path / "canary.db") + suffix).unlink(missing_ok=True)
    watch.check(NOW)
    assert watch.problem is not None and "deleted" in watch.problem.reason
    assert store.count_firings() == 0  # created again, and it works
    watch.worked(NOW + timedelta(minutes=9))
    assert watch.problem is not None and over == []
    watch.worked(NOW + timedelta(minutes=10))
    assert watch.problem is None and over == [NOW + timedelta(minutes=10)]
    store.close()
