"""Runs in the store: the schema step that adds attribution."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select

from canary.runs.runlog import RunLog
from canary.store import reads
from canary.store.engine import Store
from canary.store.migrations import SCHEMA_VERSION
from canary.store.reads import Reader
from canary.store.tables import Run
from collectors.tailer import FileState
from tests.helpers_store import record

NOW = datetime(2026, 11, 29, 10, 30, tzinfo=UTC)


def state(offset: int) -> FileState:
    return FileState("1:2", 1, 2, "/logs/a.log", offset, 10, b"h" * 16, offset)


def test_a_store_from_before_attribution_gains_its_columns(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    Store(f"sqlite:///{path}").close()
    with sqlite3.connect(path) as conn:  # the runs table as version 4 wrote it
        conn.execute("ALTER TABLE runs DROP COLUMN attribution")
        conn.execute("ALTER TABLE runs DROP COLUMN foreign_calls")
        conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
        conn.execute("INSERT INTO runs (guard, canary, variant, expect, nonce, started, trace, "
                     "firings, injected_text, verdict) VALUES ('g', 'c', 0, 'reject', 'n1', "
                     "'2026-11-29 10:00:00', '{}', 1, 'x', 'caught')")
    store = Store(f"sqlite:///{path}")
    with store.engine.connect() as conn:
        row = conn.execute(select(Run.verdict, Run.attribution, Run.foreign_calls)).one()
    assert tuple(row) == ("caught", None, 0)
    with sqlite3.connect(path) as conn:
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert int(version[0]) == SCHEMA_VERSION
    store.close()


def test_runs_are_stamped_and_a_store_from_before_stamps_keeps_its_runs(
        backend: str, open_store: Callable[..., Store]) -> None:
    """Schema 10 adds each run's definition fingerprint; the runs stored before it keep theirs as
    null, and count as evidence until the canary's first stamped run, after which only runs of the
    definition asked for do (SQLite and PostgreSQL alike)."""
    store = open_store()
    with store.engine.begin() as conn:  # the runs table as version 9 wrote it
        conn.exec_driver_sql("ALTER TABLE runs DROP COLUMN definition")
        conn.exec_driver_sql("UPDATE meta SET value = '9' WHERE key = 'schema_version'")
        conn.exec_driver_sql(
            "INSERT INTO runs (guard, canary, variant, expect, nonce, started, trace, firings, "
            "injected_text, verdict, attribution, foreign_calls) VALUES ('g', 'c', 0, 'reject', "
            "'n1', '2026-11-29 10:00:00', '{}', 0, 'x', 'unlogged', NULL, 0)")
    store.close()
    store = open_store()
    with store.engine.connect() as conn:
        assert conn.execute(select(Run.verdict, Run.definition)).one() == ("unlogged", None)
        version = conn.exec_driver_sql("SELECT value FROM meta WHERE key = 'schema_version'").scalar_one()
    assert int(version) == SCHEMA_VERSION
    since = NOW - timedelta(days=1)

    def verdicts(definition: str) -> list[str]:
        with store.engine.connect() as conn:
            return [r.verdict for r in reads.status_runs(Reader.over(conn), "g", {"c": definition}, since)]

    assert verdicts("aaaa") == ["unlogged"]  # no stamped run yet: the old run still counts
    runs = RunLog(store)
    for n, definition in enumerate(["aaaa", "bbbb"]):
        rid = runs.start(guard="g", canary="c", variant=0, expect="reject", nonce=f"s{n}",
                         started=NOW - timedelta(minutes=10 - n), injected_text="x", leak_text=None,
                         definition=definition)
        runs.finish(rid, record("caught" if definition == "bbbb" else "leaked"), finished=NOW)
    assert verdicts("bbbb") == ["caught"]
    assert verdicts("aaaa") == ["leaked"]
    with store.engine.connect() as conn:  # a bare name keeps every run
        assert len(reads.status_runs(Reader.over(conn), "g", ["c"], since)) == 3
