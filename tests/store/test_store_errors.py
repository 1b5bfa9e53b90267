"""Every database error of a store is one StoreError (exit 3) with a one-line message."""

from __future__ import annotations

import sqlite3
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import insert

from canary.errors import StoreError
from canary.status.mutes import mute
from canary.store import engine as store_engine
from canary.store.engine import Store
from canary.store.tables import Firing
from canary.vocabulary import EXIT_UNAVAILABLE

NOW = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def test_a_full_database_is_a_store_error(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'canary.db'}")
    row = {"guard": "citation", "ts": NOW, "ts_from_line": True, "read_at": NOW, "path": "/a.log",
           "file_key": "1:1", "offset": 0, "line": "x" * 2000, "run_id": None}
    with pytest.raises(StoreError) as raised, store.engine.begin() as conn:
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar_one()
        conn.exec_driver_sql(f"PRAGMA max_page_count = {pages + 2}")  # as good as a full disk
        conn.execute(insert(Firing), [dict(row, offset=i) for i in range(200)])
    assert raised.value.exit_code == EXIT_UNAVAILABLE
    message = str(raised.value)
    assert "\n" not in message and "full" in message and str(tmp_path) in message
    store.close()


def test_a_write_on_a_locked_store_is_a_store_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_engine, "BUSY_TIMEOUT_S", 0.2)
    store = Store(f"sqlite:///{tmp_path / 'canary.db'}")
    holder = sqlite3.connect(tmp_path / "canary.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match=r"database is locked.*more than 0\.2s"):
            mute(store, "citation", timedelta(hours=1), now=NOW)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    mute(store, "citation", timedelta(hours=1), now=NOW)  # the lock gone, the same store works again
    store.close()


def test_a_store_that_cannot_be_created_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="cannot open the store"):
        Store(f"sqlite:///{blocker / 'canary.db'}")


def test_a_state_dir_an_older_version_left_open_is_tightened_with_its_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import stat

    from canary import locations

    state = tmp_path / "old-state"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)
    (state / "canary.db").write_bytes(b"")
    os.chmod(state / "canary.db", 0o644)
    monkeypatch.setenv("CANARY_STATE_DIR", str(state))
    Store(locations.default_store_url()).close()
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE((state / "canary.db").stat().st_mode) == 0o600
    # A folder of the user's that merely holds a store is left as it is; the file is still private.
    mine = tmp_path / "project"
    mine.mkdir(mode=0o755)
    os.chmod(mine, 0o755)
    Store(f"sqlite:///{mine / 'canary.db'}").close()
    assert stat.S_IMODE(mine.stat().st_mode) == 0o755
    assert stat.S_IMODE((mine / "canary.db").stat().st_mode) == 0o600


def test_connections_opening_a_new_store_at_once_all_open_it(tmp_path: Path) -> None:
    # Two connections switching a new database to WAL at once deadlock, and SQLite fails one of
    # them without waiting (the demo's daemon and dashboard open the store at the same moment).
    failures: list[str] = []
    for round_ in range(25):
        url = f"sqlite:///{tmp_path / f'canary{round_}.db'}"
        start = threading.Barrier(6)

        def open_store(url: str = url, start: threading.Barrier = start) -> None:
            start.wait()
            try:
                Store(url).close()
            except StoreError as exc:
                failures.append(str(exc))

        threads = [threading.Thread(target=open_store) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []


def test_a_lock_sqlite_gives_up_on_at_once_is_not_said_to_have_been_waited_for(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'canary.db'}")
    writer = sqlite3.connect(tmp_path / "canary.db", isolation_level=None)
    started = time.monotonic()
    with pytest.raises(StoreError) as raised, store.engine.begin() as conn:
        conn.exec_driver_sql("BEGIN")
        conn.exec_driver_sql("SELECT count(*) FROM firings").scalar_one()  # a read snapshot...
        writer.execute("INSERT INTO meta (key, value) VALUES ('other', 'writer')")  # ...made stale
        conn.exec_driver_sql("INSERT INTO meta (key, value) VALUES ('mine', 'reader')")
    assert time.monotonic() - started < store_engine.BUSY_TIMEOUT_S / 2
    assert "gave up without waiting" in str(raised.value) and "more than" not in str(raised.value)
    writer.close()
    store.close()
