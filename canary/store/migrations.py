"""The schema's versions, oldest first: a store at version N runs N+1.. in order."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection, inspect
from sqlmodel import SQLModel

from canary.store import rollup
from canary.store.tables import (
    Delivery,
    FilePosition,
    Firing,
    Heartbeat,
    HourlyActivity,
    HourlyCount,
    Meta,
    MinuteActivity,
    Mute,
    Run,
    RunTrace,
    Schedule,
    Transition,
)


def _v1(conn: Connection) -> None:
    """Firings, hourly counts, activity, read positions."""
    tables = [Meta, Firing, HourlyCount, HourlyActivity, FilePosition]
    SQLModel.metadata.create_all(conn, tables=[t.__table__ for t in tables])  # type: ignore[attr-defined]


def _v2(conn: Connection) -> None:
    """Canary runs."""
    SQLModel.metadata.create_all(conn, tables=[Run.__table__])  # type: ignore[attr-defined]


def _v3(conn: Connection) -> None:
    """Status transitions, mutes, alert deliveries, schedules and the daemon's heartbeat."""
    tables = [Transition, Mute, Delivery, Schedule, Heartbeat]
    SQLModel.metadata.create_all(conn, tables=[t.__table__ for t in tables])  # type: ignore[attr-defined]


def _v4(conn: Connection) -> None:
    """An index of runs by (guard, canary, variant, started), so a status reads a few rows per pair."""
    for index in Run.__table__.indexes:  # type: ignore[attr-defined]
        if index.name == "ix_runs_pair_started":
            index.create(conn, checkfirst=True)


def _v5(conn: Connection) -> None:
    """Each run's attribution (the mark that tied its firing) and the foreign calls it saw."""
    # _v2 creates the runs table from today's model, so a new store already has both columns.
    have = {column["name"] for column in inspect(conn).get_columns("runs")}
    if "attribution" not in have:
        conn.exec_driver_sql("ALTER TABLE runs ADD COLUMN attribution VARCHAR")
    if "foreign_calls" not in have:
        conn.exec_driver_sql("ALTER TABLE runs ADD COLUMN foreign_calls INTEGER NOT NULL DEFAULT 0")


def _v6(conn: Connection) -> None:
    """Read positions proved by the bytes before the offset, and the state before a truncation."""
    # _v1 creates the positions table from today's model, so a new store already has them.
    columns = {column["name"] for column in inspect(conn).get_columns("file_positions")}
    for name, kind in (
        ("head", "BLOB NOT NULL DEFAULT x''"), ("tail_len", "INTEGER NOT NULL DEFAULT 0"),
        ("tail_hash", "BLOB NOT NULL DEFAULT x''"), ("prior", "BLOB"),
    ):
        if name not in columns:
            conn.exec_driver_sql(f"ALTER TABLE file_positions ADD COLUMN {name} {kind}")


def _v7(conn: Connection) -> None:
    """Firings per guard per UTC day, kept from the hourly counts by triggers (SQLite)."""
    rollup.create(conn)


def _v8(conn: Connection) -> None:
    """The turn whose answer held a multi-turn canary's leak."""
    # _v2 creates the runs table from today's model, so a new store already has the column.
    if "leaked_turn" not in {column["name"] for column in inspect(conn).get_columns("runs")}:
        conn.exec_driver_sql("ALTER TABLE runs ADD COLUMN leaked_turn INTEGER")


def _v9(conn: Connection) -> None:
    """An index of firings by file key: a span sent again is found among the stored ones."""
    for index in Firing.__table__.indexes:  # type: ignore[attr-defined]
        if index.name == "ix_firings_file_key":
            index.create(conn, checkfirst=True)


def _v10(conn: Connection) -> None:
    """Each run's definition fingerprint: a run made under an older definition is history."""
    # _v2 creates the runs table from today's model, so a new store already has the column.
    if "definition" not in {column["name"] for column in inspect(conn).get_columns("runs")}:
        conn.exec_driver_sql("ALTER TABLE runs ADD COLUMN definition VARCHAR")


def _v11(conn: Connection) -> None:
    """The trace ids of each run's model calls."""
    SQLModel.metadata.create_all(conn, tables=[RunTrace.__table__])  # type: ignore[attr-defined]


def _v12(conn: Connection) -> None:
    """Activity and lines read per minute, for the first, partial hour of a window."""
    SQLModel.metadata.create_all(conn, tables=[MinuteActivity.__table__])  # type: ignore[attr-defined]


#: The schema's versions, oldest first. A store at version N runs N+1.. in order.
MIGRATIONS: list[Callable[[Connection], None]] = [
    _v1, _v2, _v3, _v4, _v5, _v6, _v7, _v8, _v9, _v10, _v11, _v12,
]
SCHEMA_VERSION = len(MIGRATIONS)
