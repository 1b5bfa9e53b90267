"""The daemon's steps, each one unit of work a test can call alone: the store lock, logging,
the heartbeat, statuses and transitions, pruning, alerts."""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import os
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from canary import locations
from canary.config.settings import Config
from canary.config.urls import redact_url
from canary.errors import UnavailableError
from canary.terminal import SafeFormatter
from canary.vocabulary import as_utc

if TYPE_CHECKING:  # imported by the steps that use them: the daemon's start-up imports this module
    from canary.store.engine import Store

log = logging.getLogger("canary.daemon.loop")


def lock_path(store: Store, home: Path | None = None) -> Path:
    """The lock file of a store: beside a SQLite file, else in the project's folder ``home``
    (the state directory without one), so each project's daemon on a shared store has its own."""
    stem = store.stem
    if stem is not None:
        return stem.with_name(stem.name + ".lock")
    return (home or locations.state_dir()) / "store.lock"


@contextlib.contextmanager
def store_lock(store: Store, *, successor_of: int | None = None, wait: float = 0.0,
               home: Path | None = None) -> Iterator[Path]:
    """Hold the store's daemon lock, or raise UnavailableError naming the holder.

    A daemon taking over from ``successor_of`` waits up to ``wait`` seconds while that one holds
    the lock (it is draining); any other holder is refused at once.
    """
    import fcntl
    import time

    path = lock_path(store, home)
    locations.private_dir(path.parent, tighten=locations.is_owned(path.parent))
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + wait
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "another process"
                if successor_of is None or holder != str(successor_of) or time.monotonic() > deadline:
                    raise UnavailableError(
                        f"another daemon (pid {holder}) already runs on the store {redact_url(store.url)}; "
                        "stop it first, or send it SIGUSR2 to restart it in place"
                    ) from exc
                time.sleep(0.1)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield path
    finally:
        os.close(fd)


def setup_logging(path: Path | None = None, *, level: int = logging.INFO,
                  project: str = locations.DEFAULT_PROJECT) -> Path:
    """The daemon's own log (rotated at 5 MB), plus stderr; every line names the project."""
    if path is None:
        path = locations.project_log(None, project)
    locations.private_dir(path.parent, tighten=True)
    root = logging.getLogger("canary")
    root.setLevel(level)
    # Messages may quote log lines or a webhook's answer: shown safely, in the file and on stderr.
    # A project name holds no `%` (locations.PROJECT_NAME), so it can stand in the format itself.
    fmt = SafeFormatter(f"%(asctime)s %(levelname)-5s [{project}] %(name)s %(message)s")
    file_handler = locations.PrivateRotatingFileHandler(path, maxBytes=5 << 20, backupCount=3)
    file_handler.setFormatter(fmt)
    stream = logging.StreamHandler()
    stream.setFormatter(fmt)
    root.handlers = [file_handler, stream]
    return path


# -- steps, each one unit of work --------------------------------------------


def beat(store: Store, *, pid: int, started: datetime, now: datetime, files: int,
         addresses: dict[str, str | None], stopped: datetime | None = None,
         tick: float | None = None) -> None:
    """Write the heartbeat row, and with it the daemon's ``tick`` and host (``canary.status.liveness``)."""
    from canary.store.tables import Heartbeat, Meta

    row = {
        "id": 1, "pid": pid, "started": as_utc(started), "beat": as_utc(now), "files": files,
        "proxy": addresses.get("proxy"), "fixtures": addresses.get("fixtures"),
        "control": addresses.get("control"), "stopped": as_utc(stopped) if stopped else None,
    }
    with store.engine.begin() as conn:
        store.upsert(conn, Heartbeat, [row], keys=["id"], set_={k: v for k, v in row.items() if k != "id"})
        if tick is not None:
            from canary.status.liveness import pace_row

            pace = pace_row(tick)
            store.upsert(conn, Meta, [pace], keys=["key"], set_={"value": pace["value"]})


def decide_statuses(
    store: Store, config: Config, *, now: datetime, readable: bool | None
) -> list[dict[str, Any]]:
    """Evaluate every guard and store each change of status as a transition."""
    from canary.status.overview import evaluate_all, record_transitions

    statuses = [status for _facts, status in evaluate_all(store, config, now=now, readable=readable)]
    changes = record_transitions(store, statuses, now=now)
    for change in changes:
        log.info("%s: %s -> %s: %s", change["guard"], change["previous"], change["status"], change["reason"])
    return changes


def prune(store: Store, *, older_than: timedelta, now: datetime) -> int:
    """Delete raw firing rows older than the retention, and the trace ids of runs started before
    it (a span of such a trace counts organic); hourly counts and runs stay. Return the firing
    rows deleted."""
    from sqlalchemy import delete, select
    from sqlmodel import col

    from canary.store.tables import Firing, Run, RunTrace

    cutoff = as_utc(now - older_than)
    old_runs = select(col(Run.id)).where(col(Run.started) < cutoff)
    with store.engine.begin() as conn:
        result = conn.execute(delete(Firing).where(col(Firing.ts) < cutoff))
        conn.execute(delete(RunTrace).where(col(RunTrace.run_id).in_(old_runs)))
        return int(result.rowcount or 0)


def alert_step(store: Store, config: Config, *, now: datetime) -> None:
    """Plan the alerts new transitions and reminders call for, and send what is due."""
    from canary.alerts.planning import deliver_pending, plan_alerts

    plan_alerts(store, config.alerts, now=now)
    deliver_pending(store, config.alerts, now=now)
