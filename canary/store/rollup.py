"""The rollups: firings per guard, UTC block of hours and source, for the dashboard's long windows.

Two tables, one per block: ``daily_counts`` (UTC days) and ``quarter_day_counts`` (the UTC
blocks of six hours from midnight). SQLite triggers on ``hourly_counts`` keep both: every write
to an hourly count (a commit, a run claiming firings, a recount) moves its block's count by the
same amount in the same transaction, so a rollup never drifts from the hours it sums
(``tests/store/test_daily_rollup.py`` compares them with the firing rows after each kind of
write). A 30-day window then reads about a twenty-fourth of the rows, a 7-day one a sixth.
Other databases keep no rollup; their long windows read the hourly counts.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Connection

#: Hours in a block -> its table. ``block`` is written as the store writes times
#: (``YYYY-MM-DD HH:00:00.000000``, UTC): the block's first hour.
TABLES = {24: "daily_counts", 6: "quarter_day_counts"}


def table_for(block: timedelta) -> str | None:
    """The rollup table of blocks of ``block``, or None if there is none."""
    hours, rest = divmod(block, timedelta(hours=1))
    return TABLES.get(hours) if not rest else None


def _key(row: str, hours: int) -> str:
    """SQL for the first hour of the block ``row.hour`` falls in."""
    if hours == 24:
        return f"substr({row}.hour, 1, 10) || ' 00:00:00.000000'"
    return (f"substr({row}.hour, 1, 11) || printf('%02d', CAST(substr({row}.hour, 12, 2) AS INTEGER) "
            f"/ {hours} * {hours}) || ':00:00.000000'")


def _change(table: str, hours: int, row: str, sign: str) -> str:
    return (
        f"INSERT INTO {table} (guard, block, source, count) "
        f"VALUES ({row}.guard, {_key(row, hours)}, {row}.source, {sign}{row}.count) "
        "ON CONFLICT (block, guard, source) DO UPDATE SET count = count + excluded.count;"
    )


def _ddl(table: str, hours: int) -> tuple[str, ...]:
    return (
        f"CREATE TABLE IF NOT EXISTS {table} (guard VARCHAR NOT NULL, block DATETIME NOT NULL, "
        "source VARCHAR NOT NULL, count INTEGER NOT NULL, PRIMARY KEY (block, guard, source)) WITHOUT ROWID",
        f"CREATE TRIGGER IF NOT EXISTS {table}_insert AFTER INSERT ON hourly_counts BEGIN "
        f"{_change(table, hours, 'NEW', '+')} END",
        f"CREATE TRIGGER IF NOT EXISTS {table}_update AFTER UPDATE ON hourly_counts BEGIN "
        f"{_change(table, hours, 'OLD', '-')} {_change(table, hours, 'NEW', '+')} END",
        f"CREATE TRIGGER IF NOT EXISTS {table}_delete AFTER DELETE ON hourly_counts BEGIN "
        f"{_change(table, hours, 'OLD', '-')} END",
    )


def create(conn: Connection) -> None:
    """The rollup tables and their triggers, filled from the hourly counts already stored (SQLite only)."""
    if conn.dialect.name != "sqlite":
        return
    for hours, table in TABLES.items():
        for statement in _ddl(table, hours):
            conn.exec_driver_sql(statement)
        conn.exec_driver_sql(f"DELETE FROM {table}")
        conn.exec_driver_sql(
            f"INSERT INTO {table} (guard, block, source, count) "
            f"SELECT guard, {_key('hourly_counts', hours)}, source, SUM(count) FROM hourly_counts "
            "GROUP BY 1, 2, 3"
        )
