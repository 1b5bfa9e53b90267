"""Runs in the store: the schema step that adds attribution."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select

from canary.store.engine import Store
from canary.store.migrations import SCHEMA_VERSION
from canary.store.tables import Run
from collectors.tailer import FileState

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
