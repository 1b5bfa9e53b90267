"""Every guard's status from the store: gather the facts, evaluate, report.

Statuses are decided by ``canary.status.evaluate.evaluate`` alone; the facts come
from ``canary.status.facts`` and changes are written by ``canary.status.transitions``.
This module imports no SQLAlchemy: ``status_for`` reads a SQLite store through the
raw connection and opens the full ``Store`` only when it must (another backend, a
store to create or migrate).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from canary.config.settings import Config
from canary.errors import StoreError
from canary.records import frozen
from canary.status.evaluate import GuardFacts, GuardStatus, evaluate, is_muted
from canary.status.facts import gather, variant_counts
from canary.status.families import families
from canary.status.liveness import DEFAULT_TICK, stale_after
from canary.store import reads
from canary.store.health import read_problem
from canary.store.reads import Reader
from canary.vocabulary import iso

if TYPE_CHECKING:
    from canary.store.engine import Store

__all__ = [
    "DaemonInfo", "daemon_info", "evaluate_all", "gather", "record_transitions", "status_document",
    "status_for",
]

#: How old the heartbeat of a daemon that names no tick may be while it runs (``canary.status.liveness``).
HEARTBEAT_STALE = stale_after(DEFAULT_TICK)


def record_transitions(store: Store, statuses: list[GuardStatus], *, now: datetime) -> list[dict[str, Any]]:
    """``canary.status.transitions.record_transitions`` (imported when called: it needs SQLAlchemy)."""
    from canary.status.transitions import record_transitions as record

    return record(store, statuses, now=now)


@contextmanager
def _reader(store: Store) -> Iterator[Reader]:
    with store.engine.connect() as conn:
        yield Reader.over(conn)


def evaluate_all(
    store: Store | Reader, config: Config, *, now: datetime, readable: bool | None = None
) -> list[tuple[GuardFacts, GuardStatus]]:
    """Facts and status of every guard, in definition order."""
    if isinstance(store, Reader):
        return [(f, evaluate(f, now=now)) for f in gather(store, config, now=now, readable=readable)]
    with _reader(store) as reader:
        return evaluate_all(reader, config, now=now, readable=readable)


@frozen
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
    gone: str | None = None  # why a daemon of this machine whose heartbeat is recent no longer runs


def daemon_info(store: Store | Reader, *, now: datetime, problem_at: Path | None = None) -> DaemonInfo:
    """The heartbeat row read back: running if it beat within its own ticks (``canary.status.liveness``),
    did not say it stopped and, on this machine, its process is there.

    A daemon that holds the store's lock and reported a store problem (beside the store file
    ``problem_at``) is running, in error, whatever its (frozen) heartbeat says.
    """
    if not isinstance(store, Reader):
        with _reader(store) as reader:
            return daemon_info(reader, now=now, problem_at=store.stem)
    problem = read_problem(problem_at) if problem_at is not None else None
    error = problem.sentence() if problem is not None else None
    row = reads.heartbeat(store)
    if row is None or row.beat is None:
        return DaemonInfo(running=error is not None, error=error)
    from canary.status import liveness

    pace = liveness.load(store)
    running = error is not None or (row.stopped is None and now - row.beat <= pace.stale)
    gone = liveness.gone(pace, row.pid) if running and error is None else None
    return DaemonInfo(
        running=running and gone is None, pid=row.pid, since=row.started, beat=row.beat, files=row.files,
        proxy=row.proxy, fixtures=row.fixtures, control=row.control, error=error, gone=gone,
    )


def status_document(
    store: Store | Reader, config: Config, *, now: datetime, readable: bool | None = None,
    problem_at: Path | None = None,
) -> dict[str, Any]:
    """The contract's ``canary status --json`` document (``problem_at``: the store's file)."""
    if not isinstance(store, Reader):
        with _reader(store) as reader:
            return status_document(reader, config, now=now, readable=readable, problem_at=store.stem)
    info = daemon_info(store, now=now, problem_at=problem_at)
    guards = []
    defined = {g.name: variant_counts(g) for g in config.guards}
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
                "families": [f.to_json() for f in families(facts, defined[facts.guard], now=now)],
            }
        )
    if config.broken:  # guards the daemon still runs on the definitions it loaded
        from canary.status.problems import broken_rows, broken_windows

        guards += broken_rows(store, broken_windows(config), now=now)
    from canary.status import upstream

    health = upstream.load(store) if info.running and config.model.upstream else None
    from canary.status import warnings

    # the collectors' warnings of the daemon running now: each says a count may be short
    noted = [w.to_json() for w in warnings.load(store)
             if info.running and info.since is not None and w.last >= info.since]
    from canary.status import receiver

    # the running daemon's trace receiver: its address, what it took in, the latest refusal
    traces = receiver.shown(receiver.load(store)) if info.running and config.traces is not None else None
    return {
        "daemon": {"running": info.running, "since": iso(info.since) if info.running else None,
                   "files": info.files if info.running else 0, "heartbeat": iso(info.beat),
                   "gone": info.gone, "error": info.error, "warnings": noted, "traces": traces},
        "guards": guards,
        # the model server as the running daemon's proxy sees it; null without a daemon or upstream
        "model": health.to_json() if health is not None else None,
    }


def status_for(config: Config, *, now: datetime) -> dict[str, Any]:
    """``status_document`` of the configured store, read the leanest way it can be.

    Raises ``canary.errors.StoreError`` when the store cannot be opened.
    """
    with reads.open_sqlite(config.store.url) as reader:
        if reader is not None:
            from canary.config.urls import redact_url
            from canary.store.owners import refuse

            refuse(reader, project=config.project, machine=config.store.machine, owner=config.path,
                   shown_url=redact_url(config.store.url))
            return status_document(reader, config, now=now, problem_at=reads.sqlite_path(config.store.url))
    from canary.store.engine import Store
    from canary.store.sites import Site

    local = config.state_folder / "store"
    try:
        store = Store.existing(config.store.url, site=Site(config.project, config.store.machine or ""),
                               local=local, owner=config.path)
    except StoreError as exc:
        problem = read_problem(local)  # the running daemon's word on it, kept in the project's folder
        if problem is None:
            raise
        told = "" if problem.reason in str(exc) else f"{exc}; "  # the daemon's words say it already
        raise StoreError(f"{told}the daemon of project {config.project} runs and {problem.sentence()}, "
                         "keeping its place in the logs to count them when the store is back",
                         url=config.store.url) from exc
    if store.absent:  # no daemon of the project ever ran on this machine: no rows to read
        store.close()
        store = Store("sqlite://", local=local)
    try:
        return status_document(store, config, now=now)
    finally:
        store.close()
