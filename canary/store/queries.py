"""Named queries over the store, shared by the commands, the daemon and the dashboard."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, func, select
from sqlmodel import col

from canary.store.tables import HourlyCount, Run
from canary.vocabulary import hour_floor


@dataclass(frozen=True)
class WindowCounts:
    """Firings of one guard in a window, organic and canary apart."""

    guard: str
    organic: int
    canary: int


def window_counts(engine: Engine, since: datetime) -> dict[str, WindowCounts]:
    """Firings per guard from the hourly counts, for the hours starting at or after ``since``'s hour."""
    hour = hour_floor(since)
    stmt = (
        select(col(HourlyCount.guard), col(HourlyCount.source), func.sum(col(HourlyCount.count)))
        .where(col(HourlyCount.hour) >= hour)
        .group_by(col(HourlyCount.guard), col(HourlyCount.source))
    )
    totals: dict[str, dict[str, int]] = {}
    with engine.connect() as conn:
        for guard, source, total in conn.execute(stmt):
            totals.setdefault(guard, {})[source] = int(total or 0)
    return {
        guard: WindowCounts(guard, by.get("organic", 0), by.get("canary", 0))
        for guard, by in totals.items()
    }


def run_count(engine: Engine, guard: str, canary: str) -> int:
    """How many runs of one canary the store holds (the next variant is this modulo variants)."""
    stmt = select(func.count()).select_from(Run).where(col(Run.guard) == guard, col(Run.canary) == canary)
    with engine.connect() as conn:
        return int(conn.execute(stmt).scalar_one())


@dataclass(frozen=True)
class RunProgress:
    """Where one run stands: in flight (no verdict yet) or finished with its trace."""

    guard: str
    canary: str
    started: datetime
    verdict: str | None
    trace: str  # JSON: stage -> seconds after sent, or null ("{}" while in flight)
    duration_s: float | None


def runs_since(engine: Engine, since: datetime) -> list[RunProgress]:
    """The runs started at or after ``since``, oldest first (a live display of the daemon's runs)."""
    stmt = (select(col(Run.guard), col(Run.canary), col(Run.started), col(Run.verdict), col(Run.trace),
                   col(Run.duration_s)).where(col(Run.started) >= since).order_by(col(Run.id)))
    with engine.connect() as conn:
        return [RunProgress(*row) for row in conn.execute(stmt)]
