"""The dashboard's named queries over the store; no SQL lives in a widget or a screen.

Every function takes the engine and returns plain rows, so each one can be
timed alone (``tests/bench/bench_dashboard.py``) and called from a thread.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Engine, Integer, cast, func, select
from sqlmodel import col

from canary.store import rollup
from canary.store.tables import Delivery, Firing, HourlyCount, Run, Transition
from canary.vocabulary import as_utc, hour_floor

__all__ = [
    "AlertRow",
    "CellCount",
    "DeliveryRow",
    "FiringRow",
    "RunRow",
    "TransitionRow",
    "alert_history",
    "block_cells",
    "firing_cells",
    "guard_transitions",
    "hourly_cells",
    "latest_runs",
    "recent_firings",
    "recent_runs",
    "run_firings",
]


@dataclass(frozen=True)
class FiringRow:
    """One firing as the detail screen lists it."""

    ts: datetime
    path: str
    offset: int
    line: str
    run_id: int | None


@dataclass(frozen=True)
class RunRow:
    """One canary run with its trace (stage -> seconds after sent, or None)."""

    id: int
    guard: str
    canary: str
    variant: int
    expect: str
    verdict: str | None
    started: datetime
    duration_s: float | None
    trace: dict[str, float | None]
    leaked: bool | None
    firings: int
    evidence: str | None
    injected_text: str
    leak_text: str | None
    answer: str | None
    error: str | None
    attribution: str | None = None
    foreign_calls: int = 0
    definition: str | None = None  # the fingerprint of the definition it ran under; None: before stamps
    history: bool = False  # it ran under an earlier definition of its canary: history, not evidence


@dataclass(frozen=True)
class TransitionRow:
    """One change of a guard's status."""

    id: int
    guard: str
    at: datetime
    status: str
    previous: str | None
    reason: str


@dataclass(frozen=True)
class DeliveryRow:
    """One alert sent (or not) for a transition on one channel."""

    kind: str
    channel: str
    state: str
    attempts: int
    last_error: str | None


@dataclass(frozen=True)
class AlertRow:
    """A transition and the deliveries planned from it."""

    transition: TransitionRow
    deliveries: tuple[DeliveryRow, ...]


#: (guard, cell index, source, firings): one sparkline cell of one guard, organic or canary.
CellCount = tuple[str, int, str, int]


def _cell_index(column: Any, dialect: str, start: datetime, cell: timedelta) -> ColumnElement[Any] | None:
    """SQL for the index of the cell a time falls in (whole seconds, so no float rounding), where known."""
    if dialect != "sqlite":
        return None
    seconds = cast(func.strftime("%s", column), Integer) - int(start.timestamp())
    return cast(seconds / int(cell.total_seconds()), Integer)


def _hour_index(column: Any, dialect: str, start: datetime, cell: timedelta) -> ColumnElement[Any] | None:
    """SQL for the cell index of a whole-second time (an hour): ``julianday``, rounded to the
    second, costs a third less than ``strftime('%s')`` over a month of hourly rows."""
    if dialect != "sqlite":
        return None
    begin = as_utc(start).strftime("%Y-%m-%d %H:%M:%S.%f")
    seconds = cast(func.round((func.julianday(column) - func.julianday(begin)) * 86400), Integer)
    return cast(seconds / int(cell.total_seconds()), Integer)


def _index(moment: datetime, start: datetime, cell: timedelta) -> int:
    return int((moment - start) // cell)


def firing_cells(
    engine: Engine, start: datetime, until: datetime, cell: timedelta, *, in_sql: bool = True
) -> list[CellCount]:
    """Firings with ``start <= ts < until`` per guard, cell of ``cell`` from ``start``, and source.

    Counted from the firing rows through an indexed range on ``ts``, and grouped in the
    database where it can compute the cell (SQLite), so a burst costs a few rows.
    """
    start = as_utc(start)
    ts = col(Firing.ts)
    organic = col(Firing.run_id).is_(None)
    where = (ts >= start, ts < until)
    index = _cell_index(ts, engine.dialect.name, start, cell) if in_sql else None
    with engine.connect() as conn:
        if index is not None:
            stmt = select(col(Firing.guard), index, organic, func.count()).where(*where).group_by(
                col(Firing.guard), index, organic
            )
            rows = [(g, int(i), "organic" if o else "canary", int(n)) for g, i, o, n in conn.execute(stmt)]
            return rows
        counted: Counter[tuple[str, int, str]] = Counter()
        for guard, moment, is_organic in conn.execute(select(col(Firing.guard), ts, organic).where(*where)):
            counted[(guard, _index(moment, start, cell), "organic" if is_organic else "canary")] += 1
    return [(g, i, s, n) for (g, i, s), n in counted.items()]


def hourly_cells(engine: Engine, start: datetime, cell: timedelta, *, in_sql: bool = True) -> list[CellCount]:
    """The hourly counts from ``start``'s hour on, summed per guard, cell from ``start`` and source.

    The hour ``start`` falls in began before it: its index is 0 or below.
    """
    start = as_utc(start)
    hour = col(HourlyCount.hour)
    where = hour >= hour_floor(start)
    index = _hour_index(hour, engine.dialect.name, start, cell) if in_sql else None
    with engine.connect() as conn:
        if index is not None:
            stmt = (
                select(
                    col(HourlyCount.guard), index, col(HourlyCount.source), func.sum(col(HourlyCount.count))
                )
                .where(where)
                .group_by(col(HourlyCount.guard), index, col(HourlyCount.source))
            )
            return [(g, int(i), src, int(n or 0)) for g, i, src, n in conn.execute(stmt)]
        counted: Counter[tuple[str, int, str]] = Counter()
        stmt_rows = select(col(HourlyCount.guard), hour, col(HourlyCount.source), col(HourlyCount.count))
        for guard, moment, source, n in conn.execute(stmt_rows.where(where)):
            counted[(guard, _index(moment, start, cell), source)] += int(n)
    return [(g, i, src, n) for (g, i, src), n in counted.items()]


def block_cells(
    engine: Engine, start: datetime, now: datetime, cells: int, block: timedelta
) -> list[CellCount] | None:
    """A window of ``cells`` UTC blocks of ``block`` (a day, or six hours from midnight) ending
    with the one ``now`` is in: per guard, cell and source, from the hour ``start`` falls in on.
    The first block's partial hours (from the hourly counts) go in cell 0 with the block after
    them; every whole block is one row of a rollup (``canary.store.rollup``). None where the
    store keeps no rollup of such blocks.
    """
    table = rollup.table_for(block)
    if engine.dialect.name not in ("sqlite", "postgresql") or table is None:
        return None
    first = hour_floor(as_utc(start))
    midnight = first.replace(hour=0)
    next_block = midnight + (first - midnight) // block * block + block
    today = as_utc(now).replace(hour=0, minute=0, second=0, microsecond=0)
    current = today + (as_utc(now) - today) // block * block
    shift = cells - 1 - (current - next_block) // block  # the cell of next_block: the current one is last
    if engine.dialect.name == "postgresql":
        return _pg_block_cells(engine, table, first, next_block, block=block, shift=shift)
    text = "%Y-%m-%d %H:%M:%S.%f"
    per_day = timedelta(days=1) / block
    with engine.connect() as conn:
        partial = conn.exec_driver_sql(
            "SELECT guard, source, SUM(count) FROM hourly_counts WHERE hour >= ? AND hour < ? "
            "GROUP BY guard, source", (first.strftime(text), next_block.strftime(text)),
        ).all()
        whole = conn.exec_driver_sql(
            f"SELECT guard, CAST(round((julianday(block) - julianday(?)) * {per_day}) AS INTEGER), "
            f"source, count FROM {table} WHERE block >= ? AND count != 0",
            (next_block.strftime(text), next_block.strftime(text)),
        ).all()
    return [(g, 0, src, int(n or 0)) for g, src, n in partial] + [
        (g, int(i) + shift, src, int(n)) for g, i, src, n in whole
    ]


def _pg_block_cells(engine: Engine, table: str, first: datetime, next_block: datetime, *, block: timedelta,
                    shift: int) -> list[CellCount]:
    """``block_cells`` on PostgreSQL, whose blocks are times: the same rows, the cell counted here."""
    from sqlalchemy import text

    with engine.connect() as conn:
        partial = conn.execute(text(
            "SELECT guard, source, SUM(count) FROM hourly_counts WHERE hour >= :first AND hour < :next "
            "GROUP BY guard, source"), {"first": first, "next": next_block}).all()
        whole = conn.execute(text(
            f"SELECT guard, block, source, count FROM {table} WHERE block >= :next AND count != 0"),
            {"next": next_block}).all()
    return [(g, 0, src, int(n or 0)) for g, src, n in partial] + [
        (g, int((as_utc(b) - next_block) // block) + shift, src, int(n)) for g, b, src, n in whole
    ]


def run_firings(engine: Engine, run_ids: list[int], limit: int = 20) -> dict[int, tuple[FiringRow, ...]]:
    """The agent's log lines stored as each run's firings (at most ``limit`` a run), oldest first."""
    found: dict[int, list[FiringRow]] = {}
    if not run_ids:
        return {}
    stmt = (
        select(col(Firing.ts), col(Firing.path), col(Firing.offset), col(Firing.line), col(Firing.run_id))
        .where(col(Firing.run_id).in_(run_ids))
        .order_by(col(Firing.ts), col(Firing.id))
    )
    with engine.connect() as conn:
        for ts, p, o, line, r in conn.execute(stmt):
            if r is None:
                continue  # the query only asks for a run's firings; an organic row cannot come back
            rows = found.setdefault(int(r), [])
            if len(rows) < limit:
                rows.append(FiringRow(ts, p, int(o), line, r))
    return {r: tuple(rows) for r, rows in found.items()}


def recent_firings(engine: Engine, guard: str, limit: int = 50) -> list[FiringRow]:
    """A guard's latest firings, newest first (a range on the (guard, ts) index)."""
    stmt = (
        select(col(Firing.ts), col(Firing.path), col(Firing.offset), col(Firing.line), col(Firing.run_id))
        .where(col(Firing.guard) == guard)
        .order_by(col(Firing.ts).desc(), col(Firing.id).desc())
        .limit(limit)
    )
    with engine.connect() as conn:
        return [FiringRow(ts, p, int(o), line, r) for ts, p, o, line, r in conn.execute(stmt)]


def _trace(text: str | None) -> dict[str, float | None]:
    try:
        doc = json.loads(text or "{}")
    except ValueError:
        return {}
    if not isinstance(doc, dict):
        return {}
    return {str(k): float(v) if isinstance(v, (int, float)) else None for k, v in doc.items()}


def recent_runs(engine: Engine, guard: str, limit: int = 30) -> list[RunRow]:
    """A guard's latest canary runs, newest first, in flight ones included."""
    stmt = select(Run).where(col(Run.guard) == guard).order_by(col(Run.started).desc()).limit(limit)
    with engine.connect() as conn:
        return [_run(r) for r in conn.execute(stmt).all()]


def _run(r: Any) -> RunRow:
    return RunRow(
        id=int(r.id), guard=r.guard, canary=r.canary, variant=int(r.variant), expect=r.expect,
        verdict=r.verdict, started=r.started, duration_s=r.duration_s, trace=_trace(r.trace),
        leaked=r.leaked, firings=int(r.firings or 0), evidence=r.evidence,
        injected_text=r.injected_text or "", leak_text=r.leak_text, answer=r.answer, error=r.error,
        attribution=r.attribution, foreign_calls=int(r.foreign_calls or 0), definition=r.definition,
    )


def latest_runs(engine: Engine, limit: int = 20) -> list[RunRow]:
    """The latest canary runs of every guard, newest first."""
    stmt = select(Run).order_by(col(Run.started).desc(), col(Run.id).desc()).limit(limit)
    with engine.connect() as conn:
        return [_run(r) for r in conn.execute(stmt).all()]


def _transition(row: Any) -> TransitionRow:
    return TransitionRow(
        id=int(row.id), guard=row.guard, at=row.at, status=row.status, previous=row.previous,
        reason=row.reason,
    )


def guard_transitions(engine: Engine, guard: str, limit: int = 50) -> list[TransitionRow]:
    """A guard's latest status changes, newest first."""
    stmt = (
        select(Transition)
        .where(col(Transition.guard) == guard)
        .order_by(col(Transition.at).desc(), col(Transition.id).desc())
        .limit(limit)
    )
    with engine.connect() as conn:
        return [_transition(r) for r in conn.execute(stmt).all()]


def alert_history(engine: Engine, limit: int = 200) -> list[AlertRow]:
    """The latest transitions of every guard with the deliveries planned from each, newest first."""
    with engine.connect() as conn:
        transitions = [
            _transition(r)
            for r in conn.execute(
                select(Transition).order_by(col(Transition.id).desc()).limit(limit)
            ).all()
        ]
        ids = [t.id for t in transitions]
        deliveries: dict[int, list[DeliveryRow]] = {}
        if ids:
            stmt = (
                select(
                    col(Delivery.transition_id), col(Delivery.kind), col(Delivery.channel),
                    col(Delivery.state), col(Delivery.attempts), col(Delivery.last_error),
                )
                .where(col(Delivery.transition_id).in_(ids))
                .order_by(col(Delivery.id))
            )
            for tid, kind, channel, state, attempts, error in conn.execute(stmt):
                row = DeliveryRow(kind, channel, state, int(attempts), error)
                deliveries.setdefault(int(tid), []).append(row)
    return [AlertRow(t, tuple(deliveries.get(t.id, ()))) for t in transitions]

