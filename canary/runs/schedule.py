"""When each canary runs next: one pure function, and a thin APScheduler wrapper around it.

Each canary is a self-rescheduling one-shot job: after a run, its next time is
computed from the time it ran, so overdue runs (the daemon was down, the
machine slept) collapse into one run soon after start instead of a stampede.
The last run of every canary is kept in the store, so a restart neither runs
everything at once nor forgets what was due.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlmodel import col

from canary.config.definitions import CanaryDef, GuardDef
from canary.config.settings import Config
from canary.store.engine import Store
from canary.store.tables import Schedule

log = logging.getLogger("canary.runs.schedule")

#: Overdue and never-run canaries start within this spread after start-up, not all at once.
STARTUP_SPREAD = timedelta(seconds=60)
#: The largest random delay added to a scheduled time.
MAX_JITTER = timedelta(minutes=5)


@dataclass(frozen=True)
class Slot:
    """One canary as the scheduler sees it: the definitions it runs, and when they run."""

    guard: GuardDef
    canary: CanaryDef

    @property
    def key(self) -> str:
        """``guard/canary``."""
        return self.canary.key

    @property
    def every(self) -> timedelta | None:
        """The canary's period, or None when a cron says when."""
        return self.canary.every

    @property
    def cron(self) -> str | None:
        """The canary's cron, or None."""
        return self.canary.cron

    @property
    def times(self) -> tuple[timedelta | None, str | None]:
        """When it runs: what a reload compares to know whether to reschedule."""
        return self.every, self.cron


def slots_of(config: Config) -> list[Slot]:
    """A slot for every canary of the config's guards, in definition order."""
    return [Slot(guard, canary) for guard in config.guards for canary in guard.canaries]


def jitter_for(slot: Slot) -> timedelta:
    """A tenth of the canary's period, at most ``MAX_JITTER``."""
    period = slot.every if slot.every is not None else timedelta(hours=1)
    return min(period / 10, MAX_JITTER)


def _next_cron(cron: str, after: datetime) -> datetime | None:
    from apscheduler.triggers.cron import CronTrigger

    trigger = CronTrigger.from_crontab(cron, timezone=UTC)
    fire: datetime | None = trigger.get_next_fire_time(None, after + timedelta(microseconds=1))
    return fire


def next_due(
    slot: Slot,
    last_run: datetime | None,
    now: datetime,
    *,
    rng: random.Random,
    spread: timedelta = STARTUP_SPREAD,
) -> datetime:
    """When a canary runs next, given when it last ran.

    Never run, or overdue: within ``spread`` from now (one run, however many were
    missed). Otherwise its next time (``last_run + every``, or the cron's next
    time after the last run) plus a random jitter of up to a tenth of its period.
    """
    if slot.every is not None:
        due = last_run + slot.every if last_run is not None else None
    else:
        assert slot.cron is not None
        due = _next_cron(slot.cron, last_run if last_run is not None else now)
        if last_run is None and due is not None:
            return due + jitter_for(slot) * rng.random()
    if due is None or due <= now:
        return now + spread * rng.random()
    return due + jitter_for(slot) * rng.random()


def load_last_runs(store: Store) -> dict[str, datetime]:
    """The stored time of every canary's last run."""
    with store.engine.connect() as conn:
        rows = conn.execute(select(col(Schedule.key), col(Schedule.last_run))).all()
    return {key: at for key, at in rows if at is not None}


def save_schedule(store: Store, key: str, *, last_run: datetime | None, next_due: datetime) -> None:
    """Remember when a canary ran and when it is due next."""
    row = {"key": key, "last_run": last_run, "next_due": next_due}
    update = {"next_due": row["next_due"]}
    if last_run is not None:
        update["last_run"] = row["last_run"]
    with store.engine.begin() as conn:
        store.upsert(conn, Schedule, [row], keys=["key"], set_=update)


RunCallback = Callable[[Slot], None]


class CanaryScheduler:
    """Runs every slot at its due time in a thread pool; each slot at most once at a time."""

    def __init__(
        self,
        store: Store,
        slots: Sequence[Slot],
        run: RunCallback,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        rng: random.Random | None = None,
        workers: int = 4,
        spread: timedelta = STARTUP_SPREAD,
    ) -> None:
        from apscheduler.executors.pool import ThreadPoolExecutor
        from apscheduler.schedulers.background import BackgroundScheduler

        self.store = store
        self.slots = {s.key: s for s in slots}
        self._run = run
        self._clock = clock
        self._rng = rng or random.Random()
        self._spread = spread
        self._lock = threading.Lock()
        self._stopping = False
        self.scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(workers)},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone=UTC,
        )

    def start(self) -> dict[str, datetime]:
        """Schedule every slot from its stored last run; return the first due times."""
        last = load_last_runs(self.store)
        now = self._clock()
        due = {}
        for key, slot in self.slots.items():
            due[key] = next_due(slot, last.get(key), now, rng=self._rng, spread=self._spread)
            save_schedule(self.store, key, last_run=None, next_due=due[key])
            self._add(slot, due[key])
        self.scheduler.start()
        return due

    def _add(self, slot: Slot, when: datetime) -> None:
        self.scheduler.add_job(
            self._fire, "date", run_date=when, args=[slot.key], id=slot.key, replace_existing=True
        )

    def _fire(self, key: str) -> None:
        slot = self.slots[key]
        started = self._clock()
        try:
            self._run(slot)
        except Exception:
            log.exception("the run of %s failed", key)
        with self._lock:
            if self._stopping:
                save_schedule(self.store, key, last_run=started, next_due=started)
                return
            due = next_due(slot, started, self._clock(), rng=self._rng, spread=self._spread)
            save_schedule(self.store, key, last_run=started, next_due=due)
            self._add(slot, due)

    def run_now(self, key: str) -> None:
        """Move a slot's next run to now."""
        self._add(self.slots[key], self._clock())

    def times(self) -> dict[str, tuple[timedelta | None, str | None]]:
        """When each slot runs, by key."""
        return {key: slot.times for key, slot in self.slots.items()}

    def renew(self, slots: Sequence[Slot]) -> None:
        """The same slots at the same times with new definitions: their next runs run these."""
        renewed = {s.key: s for s in slots}
        if {k: s.times for k, s in renewed.items()} != self.times():
            raise ValueError("renewed slots must keep their keys and times; reschedule instead")
        self.slots = renewed

    def stop(self, *, wait: bool = True) -> None:
        """Stop scheduling; with ``wait``, let runs in flight finish first."""
        with self._lock:
            self._stopping = True
        self.scheduler.shutdown(wait=wait)
