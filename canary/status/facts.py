"""The facts ``evaluate`` needs, gathered from the store and the config.

Window counts come from the hourly counts, never from scanning firing rows.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, bindparam, func, select
from sqlmodel import col

from canary.config.definitions import CanaryDef, GuardDef
from canary.config.settings import Config
from canary.status.evaluate import CanaryFact, GuardFacts, RunFact
from canary.status.mutes import active_mutes
from canary.store.engine import Store
from canary.store.queries import WindowCounts, window_activity, window_counts
from canary.store.tables import Firing, Heartbeat, HourlyActivity, Run
from collectors.files import expand

#: Runs looked at per guard: enough for every canary's latest and the window's kill rate.
RUNS_PER_GUARD = 500


def canary_period(canary: CanaryDef, now: datetime) -> timedelta:
    """How often a canary runs: its ``every``, or the gap between its next two cron times."""
    if canary.every is not None:
        return canary.every
    from apscheduler.triggers.cron import CronTrigger

    assert canary.cron is not None
    trigger = CronTrigger.from_crontab(canary.cron, timezone=UTC)
    first = trigger.get_next_fire_time(None, now)
    second = trigger.get_next_fire_time(first, first + timedelta(seconds=1)) if first else None
    if first is None or second is None:
        return timedelta(days=365)
    gap: timedelta = second - first
    return gap


def logs_readable(config: Config) -> bool:
    """Whether at least one log file matches and every match can be opened."""
    paths = expand(config.logs.paths)
    if not paths:
        return False
    return all(os.access(p, os.R_OK) for p in paths)


_RUNS = (
    select(col(Run.canary), col(Run.variant), col(Run.expect), col(Run.verdict), col(Run.started),
           col(Run.evidence))
    .where(col(Run.guard) == bindparam("guard"), col(Run.verdict).is_not(None))
    .order_by(col(Run.started).desc(), col(Run.id).desc())
    .limit(RUNS_PER_GUARD)
)
_LAST_FIRING = select(func.max(col(Firing.ts))).where(col(Firing.guard) == bindparam("guard"))
_LAST_ORGANIC_LINE = (
    select(col(Firing.line))
    .where(col(Firing.guard) == bindparam("guard"), col(Firing.run_id).is_(None))
    .order_by(col(Firing.ts).desc(), col(Firing.id).desc())
    .limit(1)
)


def _runs(conn: Connection, guard: str) -> list[RunFact]:
    """The guard's latest finished runs, newest first."""
    rows = conn.execute(_RUNS, {"guard": guard}).all()
    return [RunFact(r[0], r[1], r[2], str(r[3]), r[4], r[5]) for r in rows]


def _last_firings(conn: Connection, guard: str) -> tuple[datetime | None, str | None]:
    """When the guard last fired (any source), and the line of its latest organic firing."""
    last = conn.execute(_LAST_FIRING, {"guard": guard}).scalar()
    line = conn.execute(_LAST_ORGANIC_LINE, {"guard": guard}).scalar()
    return last, line


def _window(store: Store, since: datetime, cache: dict[timedelta, Any], window: timedelta) -> Any:
    """Firing counts and (activity, lines) of one window; guards mostly share one, so ask once."""
    if window not in cache:
        cache[window] = (window_counts(store.engine, since), window_activity(store.engine, since))
    return cache[window]


def gather(store: Store, config: Config, *, now: datetime, readable: bool | None = None) -> list[GuardFacts]:
    """The facts ``evaluate`` needs for every declared guard."""
    readable = logs_readable(config) if readable is None else readable
    with store.engine.connect() as conn:
        mutes = active_mutes(conn, now)
        watched_since = conn.execute(
            select(func.min(col(HourlyActivity.hour))).where(col(HourlyActivity.lines) > 0)
        ).scalar()
        daemon_since = conn.execute(select(col(Heartbeat.started))).scalar()
    cache: dict[timedelta, Any] = {}
    facts = []
    for guard in config.guards:
        all_counts, (activity, lines) = _window(store, now - guard.window, cache, guard.window)
        with store.engine.connect() as conn:
            runs = _runs(conn, guard.name)
            last_firing, organic_line = _last_firings(conn, guard.name)
        until, mute_reason = mutes.get(guard.name, (None, None))
        facts.append(
            GuardFacts(
                guard=guard.name,
                window=guard.window,
                grace=guard.grace,
                canaries=_canaries(guard, runs, now),
                organic=_count(all_counts.get(guard.name), "organic"),
                canary_firings=_count(all_counts.get(guard.name), "canary"),
                activity=activity if config.logs.activity is not None else None,
                lines=lines,
                watched_since=watched_since,
                daemon_since=daemon_since,
                logs_readable=readable,
                last_firing=last_firing,
                last_organic_line=organic_line,
                muted_until=until,
                mute_reason=mute_reason,
            )
        )
    return facts


def _canaries(guard: GuardDef, runs: list[RunFact], now: datetime) -> list[CanaryFact]:
    return [
        CanaryFact(c.name, canary_period(c, now), tuple(r for r in runs if r.canary == c.name))
        for c in guard.canaries
    ]


def _count(counts: WindowCounts | None, source: str) -> int:
    if counts is None:
        return 0
    return counts.organic if source == "organic" else counts.canary
