"""Runs in the store: the schema step that adds attribution, and firings claimed at the verdict."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select

from canary.store.engine import CORRELATE_RULE, Store
from canary.store.migrations import SCHEMA_VERSION
from canary.store.queries import window_counts
from canary.store.runlog import RunLog
from canary.store.tables import Firing, Run
from collectors.scan import Hit
from collectors.tailer import Batch, FileState

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


def test_claimed_firings_move_from_organic_to_the_run(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'c.db'}", clock=lambda: NOW)
    runs = RunLog(store)
    run_id = runs.start(guard="g", canary="c", variant=0, expect="reject", nonce="n1",
                        started=NOW - timedelta(seconds=5), injected_text="x", leak_text=None)
    hits = [Hit(0, "G: rejected", ("g",), False, NOW), Hit(20, "G: rejected", ("g",), False, NOW),
            Hit(40, "task=7 fetched", (CORRELATE_RULE,), False, NOW)]
    store.commit(Batch(state(60), hits, 3, 60))
    assert runs.claim(run_id, "g", [(20, "G: rejected")], NOW - timedelta(seconds=5)) == 1
    assert runs.claim(run_id, "g", [(20, "G: rejected")], NOW - timedelta(seconds=5)) == 0  # once
    counts = window_counts(store.engine, NOW)["g"]
    assert (counts.organic, counts.canary) == (1, 1)
    with store.engine.connect() as conn:
        rows = conn.execute(select(Firing.offset, Firing.run_id, Firing.guard)).all()
    assert sorted(tuple(r) for r in rows) == [(0, None, "g"), (20, run_id, "g")]  # no correlate row
    store.close()
