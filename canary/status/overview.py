"""Every guard's status from the store: gather the facts, evaluate, record transitions.

Window counts come from the hourly counts, never from scanning firing rows.
Statuses are decided by ``canary.status.evaluate.evaluate`` alone; this module only
reads what it needs and writes a transition row whenever a status changes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, insert, select
from sqlmodel import col

from canary.config.definitions import CanaryDef
from canary.config.settings import Config
from canary.status.evaluate import CanaryFact, GuardFacts, GuardStatus, RunFact, evaluate
from canary.store.engine import Store
from canary.store.health import read_problem
from canary.store.queries import window_activity, window_counts
from canary.store.tables import Firing, Heartbeat, HourlyActivity, Mute, Run, Transition
from canary.vocabulary import as_utc
from collectors.files import expand

#: Runs looked at per guard: enough for every canary's latest and the window's kill rate.
RUNS_PER_GUARD = 500
#: A heartbeat older than this many daemon ticks means the daemon is not running.
HEARTBEAT_STALE = timedelta(seconds=90)


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


def gather(store: Store, config: Config, *, now: datetime, readable: bool | None = None) -> list[GuardFacts]:
    """The facts ``evaluate`` needs for every declared guard."""
    engine = store.engine
    readable = logs_readable(config) if readable is None else readable
    mutes: dict[str, Any] = {}
    with engine.connect() as conn:
        for name, until, reason in conn.execute(select(col(Mute.guard), col(Mute.until), col(Mute.reason))):
            mutes[name] = (as_utc(until), reason)
        first_read = conn.execute(
            select(func.min(col(HourlyActivity.hour))).where(col(HourlyActivity.lines) > 0)
        ).scalar()
    watched_since = as_utc(first_read) if first_read is not None else None
    facts = []
    by_window: dict[timedelta, tuple[dict[str, Any], tuple[int, int]]] = {}
    for guard in config.guards:
        since = now - guard.window
        if guard.window not in by_window:  # guards mostly share one window: ask once
            by_window[guard.window] = (window_counts(engine, since), window_activity(engine, since))
        all_counts, (activity, lines) = by_window[guard.window]
        counts = all_counts.get(guard.name)
        with engine.connect() as conn:
            rows = conn.execute(
                select(col(Run.canary), col(Run.variant), col(Run.expect), col(Run.verdict), col(Run.started))
                .where(col(Run.guard) == guard.name, col(Run.verdict).is_not(None))
                .order_by(col(Run.started).desc())
                .limit(RUNS_PER_GUARD)
            ).all()
            last_firing = conn.execute(
                select(func.max(col(Firing.ts))).where(col(Firing.guard) == guard.name)
            ).scalar()
        canaries = [
            CanaryFact(
                c.name,
                canary_period(c, now),
                tuple(RunFact(r[0], r[1], r[2], str(r[3]), as_utc(r[4])) for r in rows if r[0] == c.name),
            )
            for c in guard.canaries
        ]
        muted = mutes.get(guard.name)
        facts.append(
            GuardFacts(
                guard=guard.name,
                window=guard.window,
                grace=guard.grace,
                canaries=canaries,
                organic=counts.organic if counts else 0,
                canary_firings=counts.canary if counts else 0,
                activity=activity if config.logs.activity is not None else None,
                lines=lines,
                watched_since=watched_since,
                logs_readable=readable,
                last_firing=as_utc(last_firing) if last_firing is not None else None,
                muted_until=muted[0] if muted else None,
                mute_reason=muted[1] if muted else None,
            )
        )
    return facts


def evaluate_all(store: Store, config: Config, *, now: datetime, readable: bool | None = None) -> list[
    tuple[GuardFacts, GuardStatus]
]:
    """Facts and status of every guard, in definition order."""
    return [(f, evaluate(f, now=now)) for f in gather(store, config, now=now, readable=readable)]


def latest_statuses(store: Store) -> dict[str, str]:
    """Each guard's status as last recorded in a transition."""
    latest = (
        select(col(Transition.guard), func.max(col(Transition.id)).label("id"))
        .group_by(col(Transition.guard))
        .subquery()
    )
    stmt = select(col(Transition.guard), col(Transition.status)).join(
        latest, col(Transition.id) == latest.c.id
    )
    with store.engine.connect() as conn:
        return {str(row[0]): str(row[1]) for row in conn.execute(stmt)}


def record_transitions(store: Store, statuses: list[GuardStatus], *, now: datetime) -> list[dict[str, Any]]:
    """Insert a transition for every guard whose status differs from its last recorded one."""
    previous = latest_statuses(store)
    rows = []
    for s in statuses:
        before = previous.get(s.guard)
        if before == s.status.value:
            continue
        rows.append(
            {
                "guard": s.guard,
                "at": as_utc(now),
                "status": s.status.value,
                "previous": before,
                "reason": s.reason,
                "evidence": s.evidence.get("line") if s.evidence else None,
            }
        )
    if rows:
        with store.engine.begin() as conn:
            conn.execute(insert(Transition), rows)
    return rows


@dataclass(frozen=True)
class DaemonInfo:
    """What the store says about the daemon."""

    running: bool
    pid: int | None = None
    since: datetime | None = None
    beat: datetime | None = None
    files: int = 0
    proxy: str | None = None
    fixtures: str | None = None
    control: str | None = None
    error: str | None = None  # the store cannot be written: what, and since when


def daemon_info(store: Store, *, now: datetime) -> DaemonInfo:
    """The heartbeat row read back: running if it beat recently and did not say it stopped.

    A daemon that holds the store's lock and reported a store problem is running, in error,
    whatever its (frozen) heartbeat says.
    """
    problem = read_problem(store.path) if store.path is not None else None
    error = problem.sentence() if problem is not None else None
    with store.engine.connect() as conn:
        row = conn.execute(select(Heartbeat)).first()
    if row is None:
        return DaemonInfo(running=error is not None, error=error)
    beat = as_utc(row.beat)
    running = error is not None or (row.stopped is None and now - beat <= HEARTBEAT_STALE)
    return DaemonInfo(
        running=running, pid=row.pid, since=as_utc(row.started), beat=beat, files=row.files,
        proxy=row.proxy, fixtures=row.fixtures, control=row.control, error=error,
    )


def _iso(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z") if moment else None


def status_document(
    store: Store, config: Config, *, now: datetime, readable: bool | None = None
) -> dict[str, Any]:
    """The contract's ``canary status --json`` document."""
    info = daemon_info(store, now=now)
    guards = []
    for facts, status in evaluate_all(store, config, now=now, readable=readable):
        guards.append(
            {
                "guard": status.guard,
                "status": status.status.value,
                "reason": status.reason,
                "organic_firings": facts.organic,
                "canary_firings": facts.canary_firings,
                "kill_rate": status.kill_rate,
                "last_verdict": status.last_verdict,
                "last_run": _iso(status.last_run),
                "muted_until": (
                    _iso(facts.muted_until) if facts.muted_until and facts.muted_until > now else None
                ),
            }
        )
    return {
        "daemon": {"running": info.running, "since": _iso(info.since) if info.running else None,
                   "files": info.files if info.running else 0, "heartbeat": _iso(info.beat),
                   "error": info.error},
        "guards": guards,
    }
