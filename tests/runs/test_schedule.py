"""When canaries run: due times with an injected clock, and the scheduler on a real store."""

from __future__ import annotations

import random
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from canary.config.definitions import GuardDef, load_definitions
from canary.locations import bundled_defs_dir
from canary.records import replace
from canary.runs.schedule import (
    MAX_JITTER,
    STARTUP_SPREAD,
    CanaryScheduler,
    Slot,
    jitter_for,
    load_last_runs,
    next_due,
)
from canary.store.engine import Store

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
CITATION: GuardDef = load_definitions(["citation.toml"], bundled_defs_dir())[0][0]


def slot(guard: str, canary: str, every: timedelta | None, cron: str | None) -> Slot:
    """A slot of the bundled citation canary, renamed and retimed."""
    defined = replace(CITATION.canaries[0], guard=guard, name=canary, every=every, cron=cron)
    return Slot(replace(CITATION, name=guard, canaries=(defined,)), defined)


SIX = slot("citation", "fake-url", timedelta(hours=6), None)


@pytest.mark.parametrize("seed", range(50))
def test_due_after_a_recent_run_is_every_plus_bounded_jitter(seed: int) -> None:
    rng = random.Random(seed)
    last = NOW - timedelta(hours=1)
    due = next_due(SIX, last, NOW, rng=rng)
    assert last + SIX.every <= due <= last + SIX.every + jitter_for(SIX)  # type: ignore[operator]
    assert jitter_for(SIX) == MAX_JITTER  # a tenth of 6h is 36m: capped


@pytest.mark.parametrize("seed", range(50))
def test_overdue_after_downtime_runs_once_soon(seed: int) -> None:
    rng = random.Random(seed)
    last = NOW - timedelta(days=3)  # twelve periods missed
    due = next_due(SIX, last, NOW, rng=rng)
    assert NOW <= due <= NOW + STARTUP_SPREAD


def test_never_run_starts_within_the_spread_and_jitter_is_small_for_short_periods() -> None:
    rng = random.Random(1)
    assert NOW <= next_due(SIX, None, NOW, rng=rng) <= NOW + STARTUP_SPREAD
    fast = slot("g", "c", timedelta(seconds=90), None)
    assert jitter_for(fast) == timedelta(seconds=9)
    assert next_due(fast, NOW, NOW, rng=rng) <= NOW + timedelta(seconds=99)


def test_cron_slots_follow_the_cron() -> None:
    rng = random.Random(2)
    hourly = slot("g", "c", None, "17 */6 * * *")
    due = next_due(hourly, datetime(2026, 11, 29, 6, 17, tzinfo=UTC), NOW, rng=rng)
    assert datetime(2026, 11, 29, 12, 17, tzinfo=UTC) <= due <= datetime(2026, 11, 29, 12, 23, tzinfo=UTC)
    overdue = next_due(hourly, datetime(2026, 11, 27, 0, 17, tzinfo=UTC), NOW, rng=rng)
    assert NOW <= overdue <= NOW + STARTUP_SPREAD


def test_scheduler_runs_each_slot_once_at_a_time_and_remembers(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    slots = [slot("a", "x", timedelta(hours=6), None), slot("b", "y", timedelta(hours=6), None)]
    running: dict[str, int] = {"a/x": 0, "b/y": 0}
    most: dict[str, int] = {"a/x": 0, "b/y": 0}
    calls: list[str] = []
    lock = threading.Lock()

    def run(due: Slot) -> None:
        with lock:
            running[due.key] += 1
            most[due.key] = max(most[due.key], running[due.key])
            calls.append(due.key)
        time.sleep(0.3)
        with lock:
            running[due.key] -= 1

    sched = CanaryScheduler(store, slots, run, rng=random.Random(0))
    # the spread is patched to zero through the rng: every first run is due at once
    due = sched.start()
    for key in due:
        sched.run_now(key)
        sched.run_now(key)  # asked twice while maybe running: still one at a time
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(load_last_runs(store)) < 2:
        time.sleep(0.05)
    sched.stop()
    assert set(load_last_runs(store)) == {"a/x", "b/y"}
    assert most == {"a/x": 1, "b/y": 1}
    # a restart reads the last runs back: nothing is due before last + every
    again = CanaryScheduler(store, slots, run, rng=random.Random(0))
    later = again.start()
    again.stop(wait=False)
    for key, when in later.items():
        assert when >= load_last_runs(store)[key] + timedelta(hours=6)
    store.close()
