"""Lean reads of the store: named queries as plain SQL over raw rows, no ORM objects.

The status facts are read here, by the daemon, the dashboard and ``canary
status`` alike. A ``Reader`` runs the SQL either on a raw ``sqlite3``
connection (``open_sqlite``: ``canary status`` never imports SQLAlchemy) or on
a SQLAlchemy connection (``Reader.over``), for any store URL. Times are
compared as the text SQLAlchemy writes to SQLite, or as datetimes elsewhere,
and come back aware in UTC.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from canary.records import frozen
from canary.vocabulary import CONCLUSIVE, as_utc

if TYPE_CHECKING:
    from sqlalchemy import Connection

#: The schema version these queries read: ``canary.store.migrations.SCHEMA_VERSION`` (a test checks).
SCHEMA_VERSION = 12

Execute = Callable[[str, dict[str, Any]], Sequence[Sequence[Any]]]

_SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"
_CONCLUSIVE = ", ".join(f"'{v}'" for v in sorted(str(v) for v in CONCLUSIVE))


def _parse_time(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return as_utc(value)
    return datetime.fromisoformat(str(value)).replace(tzinfo=UTC)


class Reader:
    """Runs the named queries on one open connection."""

    def __init__(self, execute: Execute, *, sqlite: bool) -> None:
        self._execute = execute
        self.sqlite = sqlite  # times are kept as text, and SQLite's own SQL may be used

    @classmethod
    def over(cls, conn: Connection) -> Reader:
        """A reader on an open SQLAlchemy connection (any backend)."""
        if conn.dialect.name == "sqlite":
            # The pooled sqlite3 connection itself: SQLAlchemy's per-statement cost would be
            # most of a status's time (thousands of tiny indexed queries at 100 guards).
            raw = conn.connection.driver_connection
            assert isinstance(raw, sqlite3.Connection)
            return cls(lambda sql, params: raw.execute(sql, params).fetchall(), sqlite=True)
        from sqlalchemy import text

        def execute(sql: str, params: dict[str, Any]) -> Sequence[Sequence[Any]]:
            return conn.execute(text(sql), params).all()

        return cls(execute, sqlite=False)

    def rows(self, sql: str, **params: Any) -> Sequence[Sequence[Any]]:
        """The rows of ``sql``; datetime parameters are bound as the store keeps times."""
        bound = {k: self._time(v) if isinstance(v, datetime) else v for k, v in params.items()}
        return self._execute(sql, bound)

    def _time(self, moment: datetime) -> Any:
        utc = as_utc(moment)
        return utc.strftime(_SQLITE_TIME) if self.sqlite else utc

    time = staticmethod(_parse_time)


def sqlite_path(url: str) -> Path | None:
    """The database file of a ``sqlite:///`` URL with no query options; None for anything else."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or "?" in url:
        return None
    path = unquote(url[len(prefix):])
    if path in ("", ":memory:"):
        return None
    return Path(path).expanduser()


@contextmanager
def open_sqlite(url: str) -> Iterator[Reader | None]:
    """A reader on the raw SQLite file, or None when the URL is not a plain SQLite file, the
    file does not exist yet, or its schema is not the one these queries read (the caller then
    opens the full ``Store``, which creates or migrates it)."""
    path = sqlite_path(url)
    if path is None or not path.is_file():
        yield None
        return
    try:
        conn = sqlite3.connect(path, timeout=30, check_same_thread=False)
    except sqlite3.Error:
        yield None
        return
    try:
        conn.execute("PRAGMA busy_timeout=30000")
        reader = Reader(lambda sql, params: conn.execute(sql, params).fetchall(), sqlite=True)
        try:
            version = reader.rows("SELECT value FROM meta WHERE key = 'schema_version'")
        except sqlite3.Error:
            version = []
        yield reader if version and version[0][0] == str(SCHEMA_VERSION) else None
    finally:
        conn.close()


# -- the status facts -----------------------------------------------------------


@frozen
class RunRow:
    """One finished run, as the status reads it."""

    guard: str
    canary: str
    variant: int
    expect: str
    verdict: str
    started: datetime
    evidence: str | None
    leaked_turn: int | None = None  # multi-turn: the first turn whose answer held the leak
    error: str | None = None  # what failed, for a run that ended in error
    run_id: int | None = None


_RUN_COLUMNS = ("id, guard, canary, variant, expect, verdict, started, evidence, leaked_turn, definition, "
                "error")
#: Which runs are evidence of the canary as defined now: those stamped with its fingerprint, and
#: those made before runs were stamped, until the canary's first stamped run.
_CURRENT = "(definition = :definition OR (definition IS NULL AND :legacy = 1))"
#: The variants a canary has run, walked on the (guard, canary, variant, started) index.
_VARIANTS = """
WITH RECURSIVE v(x) AS (
  SELECT MIN(variant) FROM runs WHERE guard = :guard AND canary = :canary
  UNION ALL
  SELECT (SELECT MIN(variant) FROM runs WHERE guard = :guard AND canary = :canary AND variant > v.x)
  FROM v WHERE v.x IS NOT NULL
)
SELECT x FROM v WHERE x IS NOT NULL
"""
#: The stamp of a canary's latest run: once runs are stamped, every later run is (on the
#: (guard, started) index, newest first, so it reads a few rows however long the history).
_STAMPED = ("SELECT definition FROM runs WHERE guard = :guard AND canary = :canary "
            "ORDER BY started DESC LIMIT 1")
#: One (canary, variant)'s latest conclusive run, and its latest finished run of any verdict, under
#: the canary's current definition.
_PAIR = f"""
SELECT * FROM (SELECT {_RUN_COLUMNS} FROM runs
  WHERE guard = :guard AND canary = :canary AND variant = :variant AND verdict IN ({_CONCLUSIVE})
  AND {_CURRENT} ORDER BY started DESC, id DESC LIMIT 1) AS conclusive
UNION ALL
SELECT * FROM (SELECT {_RUN_COLUMNS} FROM runs
  WHERE guard = :guard AND canary = :canary AND variant = :variant AND verdict IS NOT NULL
  AND {_CURRENT} ORDER BY started DESC, id DESC LIMIT 1) AS finished
"""
_PAIR_ANY = _PAIR.replace(_CURRENT, "1 = 1")
_WINDOW = f"""
SELECT {_RUN_COLUMNS} FROM runs WHERE guard = :guard AND started >= :since AND verdict IS NOT NULL
"""


@frozen
class Evidence:
    """Which runs of one canary are evidence of its definition now."""

    definition: str | None  # its fingerprint; None: every run is
    latest: str | None = None  # the stamp of its latest run (None: unstamped, or no run)

    @property
    def legacy(self) -> bool:
        """Whether runs made before runs were stamped still count: no stamped run yet."""
        return self.latest is None

    @property
    def redefined(self) -> bool:
        """Whether its latest run was made under an earlier definition."""
        return self.definition is not None and self.latest not in (None, self.definition)

    def holds(self, stamp: str | None) -> bool:
        """Whether a run with this stamp is evidence."""
        return self.definition is None or stamp == self.definition or (stamp is None and self.legacy)


def evidence(reader: Reader, guard: str, canaries: Mapping[str, str | None]) -> dict[str, Evidence]:
    """Per canary (and its definition's fingerprint), which of its runs are evidence."""
    found = {}
    for canary, definition in canaries.items():
        latest = reader.rows(_STAMPED, guard=guard, canary=canary) if definition is not None else []
        found[canary] = Evidence(definition, str(latest[0][0]) if latest and latest[0][0] else None)
    return found


def status_runs(reader: Reader, guard: str, canaries: Mapping[str, str | None] | Sequence[str],
                since: datetime, *, current: Mapping[str, Evidence] | None = None) -> list[RunRow]:
    """The runs of a guard's canaries its status can rest on, newest first.

    Each (canary, variant)'s latest conclusive run and latest finished run, and every finished
    run since ``since``: what ``canary.status.evaluate`` reads of a canary's history, found
    through the indexes in a few rows each, never the whole history. ``canaries`` maps each
    canary to its definition's fingerprint (``canary.config.fingerprints``): a run stamped with
    another is history, not evidence, and is left out, and so is a run made before runs were
    stamped once the canary has a stamped run. A canary given as a bare name keeps every run.
    ``current`` is ``evidence`` of the same canaries, when the caller read it already.
    """
    wanted = canaries if isinstance(canaries, Mapping) else dict.fromkeys(canaries)
    current = current if current is not None else evidence(reader, guard, wanted)
    by_id: dict[int, Sequence[Any]] = {}
    for canary, now in current.items():
        for (variant,) in reader.rows(_VARIANTS, guard=guard, canary=canary):
            for row in reader.rows(_PAIR if now.definition else _PAIR_ANY, guard=guard, canary=canary,
                                   variant=variant, definition=now.definition or "", legacy=int(now.legacy)):
                by_id[int(row[0])] = row
    for row in reader.rows(_WINDOW, guard=guard, since=since):
        held = current.get(str(row[2]))
        if held is not None and held.holds(row[9]):
            by_id[int(row[0])] = row
    runs = []
    for rid, g, c, v, e, verdict, started, ev, turn, _stamp, error in by_id.values():
        at = reader.time(started)
        assert at is not None
        leaked = int(turn) if turn is not None else None
        run = RunRow(str(g), str(c), int(v), str(e), str(verdict), at, ev, leaked, error, int(rid))
        runs.append((at, int(rid), run))
    runs.sort(key=lambda t: (t[0], t[1]), reverse=True)
    return [r for _at, _id, r in runs]


_LATE = """
SELECT r.finished, (SELECT MIN(f.ts) FROM firings f WHERE f.run_id = r.id AND f.guard = r.guard)
FROM runs r WHERE r.id = :run
"""


def late_firing(reader: Reader, run_id: int) -> timedelta | None:
    """How long after a run's verdict the first firing of its guard stored with it came; None when
    none did, or none came after the verdict."""
    rows = reader.rows(_LATE, run=run_id)
    if not rows:
        return None
    finished, first = (reader.time(value) for value in rows[0])
    if finished is None or first is None or first <= finished:
        return None
    return first - finished


def window_counts(reader: Reader, guard: str, hour: datetime) -> tuple[int, int]:
    """(organic, canary) firings of a guard in the hourly counts from ``hour`` on."""
    rows = reader.rows(
        "SELECT source, SUM(count) FROM hourly_counts WHERE guard = :guard AND hour >= :hour GROUP BY source",
        guard=guard, hour=hour,
    )
    by = {str(source): int(total or 0) for source, total in rows}
    return by.get("organic", 0), by.get("canary", 0)


_WINDOW_FIRINGS = """
SELECT source, SUM(n) FROM (
  SELECT source, "count" AS n FROM hourly_counts WHERE guard = :guard AND hour >= :next
  UNION ALL
  SELECT CASE WHEN run_id IS NULL THEN 'organic' ELSE 'canary' END AS source, 1 AS n FROM firings
  WHERE guard = :guard AND ts >= :since AND ts < :next
) AS w GROUP BY source
"""


def window_firings(reader: Reader, guard: str, since: datetime) -> tuple[int, int]:
    """(organic, canary) firings of a guard from ``since`` on, to the instant, as ``canary audit
    --window`` counts them: the hourly counts of the whole hours after ``since``, and the firing
    rows of the hour ``since`` falls in (an indexed range on (guard, ts)), in one query."""
    start = as_utc(since)
    first = start.replace(minute=0, second=0, microsecond=0)
    if first == start:
        return window_counts(reader, guard, first)
    rows = reader.rows(_WINDOW_FIRINGS, guard=guard, next=first + timedelta(hours=1), since=start)
    by = {str(source): int(total or 0) for source, total in rows}
    return by.get("organic", 0), by.get("canary", 0)


_WINDOW_ACTIVITY = """
SELECT SUM(activity), SUM(lines) FROM (
  SELECT activity, lines FROM hourly_activity WHERE hour >= :next
  UNION ALL
  SELECT activity, lines FROM minute_activity WHERE minute >= :minute AND minute < :next
) AS w
"""


def window_activity(reader: Reader, since: datetime) -> tuple[int, int]:
    """Activity lines and lines scanned from ``since`` on, and none from before it: the hourly
    rows of the whole hours after ``since``, and the rows of the whole minutes after it in the
    hour it falls in (a minute that began before ``since`` is left out)."""
    start = as_utc(since)
    first = start.replace(minute=0, second=0, microsecond=0)
    if first == start:
        rows = reader.rows("SELECT SUM(activity), SUM(lines) FROM hourly_activity WHERE hour >= :hour",
                           hour=first)
    else:
        minute = start.replace(second=0, microsecond=0)
        if minute != start:
            minute += timedelta(minutes=1)
        rows = reader.rows(_WINDOW_ACTIVITY, next=first + timedelta(hours=1), minute=minute)
    ((activity, lines),) = rows
    return int(activity or 0), int(lines or 0)


def last_firing(reader: Reader, guard: str) -> datetime | None:
    """When the guard last fired, organic or canary."""
    ((ts,),) = reader.rows("SELECT MAX(ts) FROM firings WHERE guard = :guard", guard=guard)
    return reader.time(ts)


def last_organic_line(reader: Reader, guard: str) -> str | None:
    """The line of the guard's latest organic firing."""
    # ``+run_id`` keeps the planner off the run_id index (every organic row) and on (guard, ts).
    rows = reader.rows(
        "SELECT line FROM firings WHERE guard = :guard AND +run_id IS NULL ORDER BY ts DESC, id DESC LIMIT 1",
        guard=guard,
    )
    return str(rows[0][0]) if rows else None


_FIRST_MINUTE = "SELECT MIN(minute) FROM minute_activity WHERE lines > 0 AND minute < :next"


def watched_since(reader: Reader) -> datetime | None:
    """An instant by which log lines had been read (None if none ever was): the end of the first
    minute in which some were, or, once that hour's minutes are pruned (they are kept as far back as
    the longest window begins), the end of the first hour. Never earlier than the first read: a
    window that began before it was not watched whole."""
    ((hour,),) = reader.rows("SELECT MIN(hour) FROM hourly_activity WHERE lines > 0")
    first = reader.time(hour)
    if first is None:
        return None
    ((minute,),) = reader.rows(_FIRST_MINUTE, next=first + timedelta(hours=1))
    within = reader.time(minute)
    return within + timedelta(minutes=1) if within is not None else first + timedelta(hours=1)


def active_mutes(reader: Reader, now: datetime) -> dict[str, tuple[datetime, str | None]]:
    """Guard -> (end, reason) of every mute that holds at ``now``."""
    rows = reader.rows('SELECT guard, "until", reason FROM mutes WHERE "until" > :now', now=now)
    out: dict[str, tuple[datetime, str | None]] = {}
    for guard, until, reason in rows:
        end = reader.time(until)
        assert end is not None
        out[str(guard)] = (end, reason)
    return out


@frozen
class HeartbeatRow:
    """The daemon's heartbeat row."""

    pid: int
    started: datetime | None
    beat: datetime | None
    files: int
    proxy: str | None
    fixtures: str | None
    control: str | None
    stopped: datetime | None


def heartbeat(reader: Reader) -> HeartbeatRow | None:
    """The daemon's heartbeat, if it ever beat."""
    rows = reader.rows(
        "SELECT pid, started, beat, files, proxy, fixtures, control, stopped FROM heartbeat LIMIT 1"
    )
    if not rows:
        return None
    pid, started, beat, files, proxy, fixtures, control, stopped = rows[0]
    t = reader.time
    return HeartbeatRow(int(pid), t(started), t(beat), int(files or 0), proxy, fixtures, control, t(stopped))


def latest_transition(reader: Reader, guard: str) -> tuple[str, str, datetime | None] | None:
    """The guard's latest stored change of status: (status, reason, at), or None."""
    rows = reader.rows(
        "SELECT status, reason, at FROM transitions WHERE guard = :guard ORDER BY at DESC, id DESC LIMIT 1",
        guard=guard,
    )
    if not rows:
        return None
    status, reason, at = rows[0]
    return str(status), str(reason), reader.time(at)
