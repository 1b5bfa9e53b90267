"""The rollups: firings per guard, UTC block of hours and source, for the dashboard's long windows.

Two tables, one per block: ``daily_counts`` (UTC days) and ``quarter_day_counts`` (the UTC
blocks of six hours from midnight). SQLite triggers on ``hourly_counts`` keep both: every write
to an hourly count (a commit, a run claiming firings, a recount) moves its block's count by the
same amount in the same transaction, so a rollup never drifts from the hours it sums
(``tests/store/test_daily_rollup.py`` compares them with the firing rows after each kind of
write, on SQLite and on PostgreSQL). A 30-day window then reads about a twenty-fourth of the
rows, a 7-day one a sixth. PostgreSQL keeps the same two tables with one PL/pgSQL trigger
function (``block`` there is a ``timestamp with time zone``); other databases keep no rollup,
and their long windows read the hourly counts.
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


def _pg_block(row: str, hours: int) -> str:
    """PostgreSQL: the first hour (UTC) of the block ``row.hour`` falls in."""
    day = f"date_trunc('day', {row}.hour AT TIME ZONE 'UTC')"
    if hours == 24:
        return f"({day} AT TIME ZONE 'UTC')"
    hour = f"extract(hour FROM {row}.hour AT TIME ZONE 'UTC')"
    return f"(({day} + floor({hour} / {hours}) * {hours} * interval '1 hour') AT TIME ZONE 'UTC')"


def _pg_change(table: str, hours: int, row: str, sign: str) -> str:
    return (
        f"INSERT INTO {table} (guard, block, source, count) "
        f"VALUES ({row}.guard, {_pg_block(row, hours)}, {row}.source, {sign}{row}.count) "
        f"ON CONFLICT (block, guard, source) DO UPDATE SET count = {table}.count + excluded.count;"
    )


def _create_postgresql(conn: Connection) -> None:
    changes_old = " ".join(_pg_change(t, h, "OLD", "-") for h, t in TABLES.items())
    changes_new = " ".join(_pg_change(t, h, "NEW", "+") for h, t in TABLES.items())
    for table in TABLES.values():
        conn.exec_driver_sql(
            f"CREATE TABLE IF NOT EXISTS {table} (guard VARCHAR NOT NULL, block TIMESTAMP WITH TIME ZONE "
            "NOT NULL, source VARCHAR NOT NULL, count INTEGER NOT NULL, PRIMARY KEY (block, guard, source))")
    # The function resolves its tables in the schema it was made in, whoever calls it.
    conn.exec_driver_sql(
        "CREATE OR REPLACE FUNCTION canary_rollup() RETURNS trigger LANGUAGE plpgsql "
        "SET search_path FROM CURRENT AS $$ BEGIN "
        f"IF TG_OP IN ('UPDATE', 'DELETE') THEN {changes_old} END IF; "
        f"IF TG_OP IN ('INSERT', 'UPDATE') THEN {changes_new} END IF; "
        "RETURN NULL; END $$")
    conn.exec_driver_sql(
        "CREATE OR REPLACE TRIGGER hourly_counts_rollup AFTER INSERT OR UPDATE OR DELETE ON hourly_counts "
        "FOR EACH ROW EXECUTE FUNCTION canary_rollup()")
    for hours, table in TABLES.items():
        conn.exec_driver_sql(f"DELETE FROM {table}")
        conn.exec_driver_sql(
            f"INSERT INTO {table} (guard, block, source, count) SELECT guard, "
            f"{_pg_block('hourly_counts', hours)}, source, SUM(count) FROM hourly_counts GROUP BY 1, 2, 3")


def create(conn: Connection) -> None:
    """The rollup tables and what keeps them, filled from the hourly counts already stored
    (SQLite triggers, a PostgreSQL trigger function; nothing elsewhere)."""
    if conn.dialect.name == "postgresql":
        _create_postgresql(conn)
        return
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
