"""Every guard's status from the store: gather the facts, evaluate, report.

Statuses are decided by ``canary.status.evaluate.evaluate`` alone; the facts come
from ``canary.status.facts`` and changes are written by ``canary.status.transitions``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select

from canary.config.settings import Config
from canary.status.evaluate import GuardFacts, GuardStatus, evaluate
from canary.status.facts import gather
from canary.status.mutes import is_muted
from canary.status.transitions import record_transitions
from canary.store.engine import Store
from canary.store.health import read_problem
from canary.store.tables import Heartbeat
from canary.vocabulary import iso

__all__ = ["DaemonInfo", "daemon_info", "evaluate_all", "gather", "record_transitions", "status_document"]

#: A heartbeat older than this many daemon ticks means the daemon is not running.
HEARTBEAT_STALE = timedelta(seconds=90)


def evaluate_all(store: Store, config: Config, *, now: datetime, readable: bool | None = None) -> list[
    tuple[GuardFacts, GuardStatus]
]:
    """Facts and status of every guard, in definition order."""
    return [(f, evaluate(f, now=now)) for f in gather(store, config, now=now, readable=readable)]


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
    beat = row.beat
    running = error is not None or (row.stopped is None and now - beat <= HEARTBEAT_STALE)
    return DaemonInfo(
        running=running, pid=row.pid, since=row.started, beat=beat, files=row.files,
        proxy=row.proxy, fixtures=row.fixtures, control=row.control, error=error,
    )


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
                "last_run": iso(status.last_run),
                "muted_until": iso(facts.muted_until) if is_muted(facts.muted_until, now) else None,
            }
        )
    return {
        "daemon": {"running": info.running, "since": iso(info.since) if info.running else None,
                   "files": info.files if info.running else 0, "heartbeat": iso(info.beat),
                   "error": info.error},
        "guards": guards,
    }
