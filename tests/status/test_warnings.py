"""The collectors' warnings: kept by the daemon, written to a real store, read back by status."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from canary.status import warnings
from canary.status.overview import DaemonInfo
from canary.status.warnings import KEEP, Warnings
from canary.store.engine import Store
from canary.store.reads import Reader
from dashboard.model import latest_warning

NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


def read(store: Store) -> list[warnings.CollectorWarning]:
    with store.engine.connect() as conn:
        return warnings.load(Reader.over(conn))


def test_warnings_are_kept_distinct_newest_first_and_bounded(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'canary.db'}")
    clock = Clock()
    kept = Warnings(clock)
    kept.add("/logs/a.log", "/logs/a.log: a line at offset 10 was cut")
    clock.now += timedelta(minutes=1)
    kept.add("/logs/b.log", "/logs/b.log was truncated")
    clock.now += timedelta(minutes=1)
    kept.add("/logs/a.log", "/logs/a.log: a line at offset 10 was cut")
    kept.flush(store)
    got = read(store)
    assert [(w.file, w.count, w.last) for w in got] == [
        ("/logs/a.log", 2, NOW + timedelta(minutes=2)), ("/logs/b.log", 1, NOW + timedelta(minutes=1)),
    ]
    for i in range(KEEP + 5):
        kept.add(f"/logs/{i}.log", f"warning {i}")
    kept.flush(store)
    got = read(store)
    assert len(got) == KEEP and got[0].message == f"warning {KEEP + 4}"
    store.close()


def test_a_new_daemon_clears_the_warnings_of_the_last_one(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'canary.db'}")
    old = Warnings(Clock())
    old.add("/logs/a.log", "cut")
    old.flush(store)
    Warnings(Clock()).flush(store)  # the next daemon's first tick
    assert read(store) == []
    store.close()


def test_the_dashboard_shows_the_running_daemons_latest_warning_inert(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'canary.db'}")
    clock = Clock()
    kept = Warnings(clock)
    kept.add("/logs/a.log", "old one")
    clock.now += timedelta(minutes=5)
    kept.add("/logs/\x1b]0;pwned\x07.log", "/logs/\x1b]0;pwned\x07.log was truncated")
    kept.flush(store)
    running = DaemonInfo(running=True, since=NOW - timedelta(hours=1))
    shown = latest_warning(store, running)
    assert shown is not None and "\x1b" not in shown and "\x07" not in shown
    assert "was truncated" in shown and "+1 more" in shown
    assert latest_warning(store, DaemonInfo(running=False, since=None)) is None
    # warnings from before this daemon started are the last one's
    assert latest_warning(store, DaemonInfo(running=True, since=NOW + timedelta(hours=1))) is None
    store.close()


def test_a_refused_commit_is_shown_until_the_store_takes_the_lines_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real SQLite store locked by another writer refuses the tailer's commit; once the lock
    goes, the lines are committed and the warning leaves what status reads."""
    import sqlite3

    from canary.store import engine as store_engine
    from collectors.rules import Rule
    from collectors.scan import Matcher
    from collectors.tailer import Tailer

    monkeypatch.setattr(store_engine, "BUSY_TIMEOUT_S", 0.2)  # refused in 0.2 s, not after 30
    db = tmp_path / "canary.db"
    store = Store(f"sqlite:///{db}")
    log = tmp_path / "agent.log"
    log.write_bytes(b"a HIT one\n")
    kept = Warnings(Clock())
    tailer = Tailer([str(log)], Matcher([Rule.regex("g", "HIT")]), store,
                    on_error=kept.add, on_resolved=kept.drop)
    locker = sqlite3.connect(db, isolation_level=None)
    try:
        locker.execute("BEGIN IMMEDIATE")  # another writer holds the write lock
        tailer.poll()
        locker.execute("ROLLBACK")
        kept.flush(store)
        (warning,) = read(store)
        assert warning.file == str(log) and "cannot commit what was read from" in warning.message
        assert store.count_firings() == 0
        tailer.poll()
        kept.flush(store)
        assert store.count_firings() == 1
        assert read(store) == []  # the store took the lines: the warning no longer holds
    finally:
        locker.close()
        tailer.close()
        store.close()
