"""The dashboard's named queries over the store; no SQL lives in a widget or a screen.

Every function takes the engine and returns plain rows, so each one can be
timed alone (``tests/bench/bench_dashboard.py``) and called from a thread.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Engine, func, select
from sqlmodel import col

from canary.store import as_utc
from canary.tables import Delivery, Firing, HourlyCount, Run, Transition

__all__ = [
    "AlertRow",
    "DeliveryRow",
    "FiringRow",
    "RunRow",
    "TransitionRow",
    "alert_history",
    "firing_hours",
    "firing_minutes",
    "guard_transitions",
    "recent_firings",
    "recent_runs",
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


def _minute_bucket(dialect: str) -> ColumnElement[Any] | None:
    """The SQL expression for a firing's minute, where the backend has one."""
    if dialect == "sqlite":
        return func.strftime("%Y-%m-%d %H:%M:00", col(Firing.ts))
    if dialect == "postgresql":
        return func.date_trunc("minute", col(Firing.ts))
    return None


def _as_minute(value: object) -> datetime:
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return as_utc(moment).replace(second=0, microsecond=0)


def firing_minutes(engine: Engine, since: datetime, until: datetime) -> list[tuple[str, datetime, bool, int]]:
    """(guard, minute, organic, firings) for the firing rows with ``since <= ts < until``.

    Grouped in the database where it can bucket by minute (SQLite, PostgreSQL), so a
    burst of firings costs a few rows, not one per firing.
    """
    ts = col(Firing.ts)
    organic = col(Firing.run_id).is_(None)
    bucket = _minute_bucket(engine.dialect.name)
    where = (ts >= as_utc(since), ts < as_utc(until))
    with engine.connect() as conn:
        if bucket is not None:
            stmt = (
                select(col(Firing.guard), bucket, organic, func.count())
                .where(*where)
                .group_by(col(Firing.guard), bucket, organic)
            )
            return [(g, _as_minute(m), bool(o), int(n)) for g, m, o, n in conn.execute(stmt)]
        counted: dict[tuple[str, datetime, bool], int] = {}
        for guard, moment, is_organic in conn.execute(select(col(Firing.guard), ts, organic).where(*where)):
            key = (guard, _as_minute(moment), bool(is_organic))
            counted[key] = counted.get(key, 0) + 1
    return [(g, m, o, n) for (g, m, o), n in counted.items()]


def firing_hours(engine: Engine, since_hour: datetime) -> list[tuple[str, datetime, str, int]]:
    """(guard, hour, source, count) from the hourly counts, for hours starting at or after ``since_hour``."""
    stmt = select(
        col(HourlyCount.guard), col(HourlyCount.hour), col(HourlyCount.source), col(HourlyCount.count)
    ).where(col(HourlyCount.hour) >= as_utc(since_hour))
    with engine.connect() as conn:
        return [(g, as_utc(h), s, int(n)) for g, h, s, n in conn.execute(stmt)]


def recent_firings(engine: Engine, guard: str, limit: int = 50) -> list[FiringRow]:
    """A guard's latest firings, newest first (a range on the (guard, ts) index)."""
    stmt = (
        select(col(Firing.ts), col(Firing.path), col(Firing.offset), col(Firing.line), col(Firing.run_id))
        .where(col(Firing.guard) == guard)
        .order_by(col(Firing.ts).desc(), col(Firing.id).desc())
        .limit(limit)
    )
    with engine.connect() as conn:
        return [FiringRow(as_utc(ts), p, int(o), line, r) for ts, p, o, line, r in conn.execute(stmt)]


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
        rows = conn.execute(stmt).all()
    return [
        RunRow(
            id=int(r.id), canary=r.canary, variant=int(r.variant), expect=r.expect, verdict=r.verdict,
            started=as_utc(r.started), duration_s=r.duration_s, trace=_trace(r.trace), leaked=r.leaked,
            firings=int(r.firings or 0), evidence=r.evidence, injected_text=r.injected_text or "",
            leak_text=r.leak_text, answer=r.answer, error=r.error,
        )
        for r in rows
    ]


def _transition(row: Any) -> TransitionRow:
    return TransitionRow(
        id=int(row.id), guard=row.guard, at=as_utc(row.at), status=row.status, previous=row.previous,
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

