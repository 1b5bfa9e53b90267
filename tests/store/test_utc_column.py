"""The UTC column type: stored times read back aware in UTC, with the schema on disk unchanged."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import DateTime, func, insert, select
from sqlmodel import SQLModel, col

from canary.store.engine import Store
from canary.store.tables import Mute, Run, Transition
from canary.store.types import UTCDateTime

DATA = Path(__file__).parent.parent / "data" / "store"
NOW = datetime(2026, 11, 29, 10, 30, 15, 250000, tzinfo=UTC)


def _utc_columns() -> set[tuple[str, str]]:
    """Columns of the store's own UTC type (not whatever a sqlmodel version maps datetime to)."""
    return {
        (table.name, column.name)
        for table in SQLModel.metadata.sorted_tables
        for column in table.columns
        if isinstance(column.type, UTCDateTime)
    }


def _declared(path: Path) -> dict[tuple[str, str], str]:
    """(table, column) -> declared SQL type, as the database file says."""
    with sqlite3.connect(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {
            (t, row[1]): row[2] for t in tables for row in conn.execute(f'PRAGMA table_info("{t}")')
        }


@pytest.fixture
def old_store(tmp_path: Path) -> Path:
    """A store file written by guard-canary before the UTC column type (schema version 3)."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.executescript((DATA / "v3.sql").read_text())
    return path


def test_every_stored_time_of_an_existing_store_reads_back_aware_in_utc(old_store: Path) -> None:
    store = Store(f"sqlite:///{old_store}")
    seen = 0
    with store.engine.connect() as conn:
        for table in SQLModel.metadata.sorted_tables:
            for row in conn.execute(select(table)).mappings():
                for key, value in row.items():
                    if isinstance(value, datetime):
                        assert value.tzinfo is UTC, (table.name, key, value)
                        seen += 1
    assert seen == 14  # every time the fixture holds
    with store.engine.connect() as conn:
        started = conn.execute(select(col(Run.started))).scalar_one()
        until = conn.execute(select(col(Mute.until))).scalar_one()
    assert started == datetime(2026, 11, 29, 10, 25, 15, 250000, tzinfo=UTC)
    assert until == datetime(2026, 11, 29, 12, 30, 15, 250000, tzinfo=UTC)
    store.close()


def test_the_schema_on_disk_keeps_its_datetime_columns(old_store: Path, tmp_path: Path) -> None:
    before = _declared(old_store)
    Store(f"sqlite:///{old_store}").close()
    fresh = tmp_path / "fresh.db"
    Store(f"sqlite:///{fresh}").close()
    after, new = _declared(old_store), _declared(fresh)
    datetimes = {k for k, v in before.items() if v == "DATETIME"}
    assert len(datetimes) == 18
    for key in datetimes:
        assert after[key] == "DATETIME" and new[key] == "DATETIME", key
    assert _utc_columns() >= datetimes
    # every time column of the schema, old or added since, is of the store's own UTC type
    times = {
        (table.name, column.name)
        for table in SQLModel.metadata.sorted_tables
        for column in table.columns
        if isinstance(column.type, DateTime) or isinstance(getattr(column.type, "impl", None), DateTime)
    }
    assert times == _utc_columns()


def test_a_time_in_another_zone_is_stored_as_its_utc_instant(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    store = Store(f"sqlite:///{path}")
    paris = timezone(timedelta(hours=1))
    local = datetime(2026, 11, 29, 11, 30, 15, 250000, tzinfo=paris)
    with store.engine.begin() as conn:
        conn.execute(insert(Transition).values(guard="g", at=local, status="alive", reason="r"))
    with sqlite3.connect(path) as raw:
        text = raw.execute("SELECT at FROM transitions").fetchone()[0]
    assert text == "2026-11-29 10:30:15.250000"  # the same text the store always wrote for UTC
    with store.engine.connect() as conn:
        at = conn.execute(select(col(Transition.at))).scalar_one()
        # a comparison with an aware time in another zone compares instants, not wall clocks
        later = conn.execute(
            select(func.count()).where(col(Transition.at) < datetime(2026, 11, 29, 11, 0, tzinfo=paris))
        ).scalar_one()
    assert at == NOW and at.tzinfo is UTC
    assert later == 0
    store.close()


def test_a_naive_time_is_taken_as_utc(open_store: Callable[..., Store]) -> None:
    store = open_store()
    with store.engine.begin() as conn:
        conn.execute(insert(Transition).values(guard="g", at=NOW.replace(tzinfo=None), status="new", reason="r"))
    with store.engine.connect() as conn:
        at = conn.execute(select(col(Transition.at))).scalar_one()
    assert at == NOW and at.tzinfo is UTC


def test_a_time_in_another_zone_compares_as_its_instant_on_every_back_end(open_store: Callable[..., Store]) -> None:
    store = open_store()
    paris = timezone(timedelta(hours=1))
    with store.engine.begin() as conn:
        conn.execute(insert(Transition).values(guard="g", at=datetime(2026, 11, 29, 11, 30, 15, 250000, tzinfo=paris),
                                               status="alive", reason="r"))
    with store.engine.connect() as conn:
        at = conn.execute(select(col(Transition.at))).scalar_one()
        later = conn.execute(
            select(func.count()).where(col(Transition.at) < datetime(2026, 11, 29, 11, 0, tzinfo=paris))
        ).scalar_one()
    assert at == NOW and at.tzinfo is UTC
    assert later == 0
