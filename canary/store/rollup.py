"""The daily rollup: firings per guard, UTC day and source, for the dashboard's long windows.

``daily_counts`` is kept by SQLite triggers on ``hourly_counts``: every write to an hourly
count (a commit, a run claiming firings, a recount) moves its day's count by the same amount
in the same transaction, so the rollup never drifts from the hours it sums
(``tests/store/test_daily_rollup.py`` compares it with the firing rows after each kind of write).
A 30-day window then reads about a twenty-fourth of the rows. Other databases keep no
rollup; their long windows read the hourly counts.
"""

from __future__ import annotations

from sqlalchemy import Connection

TABLE = "daily_counts"

#: ``day`` is written as the store writes times: ``YYYY-MM-DD 00:00:00.000000`` (UTC).
_DAY = "substr({row}.hour, 1, 10) || ' 00:00:00.000000'"


def _change(row: str, sign: str) -> str:
    return (
        f"INSERT INTO {TABLE} (guard, day, source, count) "
        f"VALUES ({row}.guard, {_DAY.format(row=row)}, {row}.source, {sign}{row}.count) "
        "ON CONFLICT (day, guard, source) DO UPDATE SET count = count + excluded.count;"
    )


DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (guard VARCHAR NOT NULL, day DATETIME NOT NULL, "
    "source VARCHAR NOT NULL, count INTEGER NOT NULL, PRIMARY KEY (day, guard, source)) WITHOUT ROWID",
    f"CREATE TRIGGER IF NOT EXISTS {TABLE}_insert AFTER INSERT ON hourly_counts BEGIN "
    f"{_change('NEW', '+')} END",
    f"CREATE TRIGGER IF NOT EXISTS {TABLE}_update AFTER UPDATE ON hourly_counts BEGIN "
    f"{_change('OLD', '-')} {_change('NEW', '+')} END",
    f"CREATE TRIGGER IF NOT EXISTS {TABLE}_delete AFTER DELETE ON hourly_counts BEGIN "
    f"{_change('OLD', '-')} END",
)


def create(conn: Connection) -> None:
    """The rollup table and its triggers, filled from the hourly counts already stored (SQLite only)."""
    if conn.dialect.name != "sqlite":
        return
    for statement in DDL:
        conn.exec_driver_sql(statement)
    conn.exec_driver_sql(f"DELETE FROM {TABLE}")
    conn.exec_driver_sql(
        f"INSERT INTO {TABLE} (guard, day, source, count) "
        f"SELECT guard, {_DAY.format(row='hourly_counts')}, source, SUM(count) FROM hourly_counts "
        "GROUP BY 1, 2, 3"
    )
