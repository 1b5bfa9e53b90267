"""The rollups: firings per guard, UTC block (a day, six hours) and source, kept equal to the
firing rows by every write (commits, a run claiming firings, a recount), and the dashboard's
long windows read from them give the counts the raw rows give."""

from __future__ import annotations

import sqlite3
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from canary.runs.runlog import RunLog
from canary.store.engine import Store
from canary.store.rollup import TABLES
from collectors.matcher import Hit
from collectors.positions import Batch, FileState
from dashboard.model import WINDOWS, WindowSpec, window_series
from tests.helpers_store import TiedBy
from tests.profiles import examples
from tests.store.conftest import as_time, fresh_store

NOW = datetime(2026, 11, 29, 10, 30, tzinfo=UTC)
GUARDS = ("alpha", "beta", "gamma")
LONG = [w for w in WINDOWS if w.label in ("7d", "30d")]


def block_of(moment: datetime, hours: int) -> datetime:
    return moment.replace(hour=moment.hour // hours * hours, minute=0, second=0, microsecond=0)


def raw_blocks(store: Store) -> Counter[tuple[int, str, datetime, str]]:
    """(hours, guard, block, source) -> firings, counted from the firing rows."""
    with store.engine.connect() as conn:
        rows = conn.execute(text("SELECT guard, ts, run_id FROM firings")).all()
    counted: Counter[tuple[int, str, datetime, str]] = Counter()
    for guard, ts, run_id in rows:
        moment = as_time(ts)
        for hours in TABLES:
            counted[(hours, guard, block_of(moment, hours), "organic" if run_id is None else "canary")] += 1
    return counted


def rollup(store: Store) -> Counter[tuple[int, str, datetime, str]]:
    counted: Counter[tuple[int, str, datetime, str]] = Counter()
    with store.engine.connect() as conn:
        for hours, table in TABLES.items():
            for g, b, s, n in conn.execute(text(f"SELECT guard, block, source, count FROM {table} WHERE count != 0")):
                counted[(hours, g, as_time(b), s)] = n
    return counted


firing = st.tuples(st.sampled_from(GUARDS), st.integers(-45 * 24 * 60, 60), st.booleans(), st.booleans())
#: Firings around a 7 d or 30 d window's first block, its last and the span between.
near_window = st.tuples(st.sampled_from(GUARDS), st.one_of(st.integers(-31 * 24 * 60, -29 * 24 * 60),
                                                           st.integers(-8 * 24 * 60, -6 * 24 * 60),
                                                           st.integers(-30 * 24 * 60, 60)),
                        st.booleans(), st.booleans())


@settings(max_examples=examples(12), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(firing, min_size=1, max_size=30), min_size=1, max_size=4),
       claim=st.integers(0, 5), recount_minutes=st.integers(0, 40 * 24 * 60))
def test_the_rollup_equals_the_firing_rows_after_every_kind_of_write(
    backend: str, batches: list[list[tuple[str, int, bool, bool]]], claim: int, recount_minutes: int
) -> None:
    tied = TiedBy(7, lambda t: t.endswith("canary"))
    with fresh_store(backend, clock=lambda: NOW, attribution=tied) as store:
        if True:
            offset = 0
            hits_by_offset: dict[int, Hit] = {}
            for batch in batches:
                hits = []
                for guard, minutes, canary, dated in batch:
                    offset += 10
                    ts = NOW + timedelta(minutes=minutes) if dated else None
                    hit = Hit(offset, f"{guard} rejected {'canary' if canary else 'organic'}", (guard,), False, ts)
                    hits.append(hit)
                    hits_by_offset[offset] = hit
                store.commit(Batch(FileState("1:2", 1, 2, "/l/a.log", offset, 10, b"h" * 16, offset),
                                   hits, len(hits), offset))
                assert rollup(store) == raw_blocks(store)
            organic = [(o, h) for o, h in hits_by_offset.items() if h.text.endswith("organic")][:claim]
            for o, h in organic:
                RunLog(store).claim(9, [(o, h.text)], NOW - timedelta(days=1))
            assert rollup(store) == raw_blocks(store)
            since = NOW - timedelta(minutes=recount_minutes)
            again = [("/l/a.log", "1:2", h) for h in list(hits_by_offset.values())[::2]]
            store.recount(["alpha", "beta"], since, again)
            assert rollup(store) == raw_blocks(store)
            assert sum(raw_blocks(store).values()) == store.count_firings() * len(TABLES)


def expected_series(store: Store, now: datetime, spec: WindowSpec) -> dict[str, tuple[int, int, list[int]]]:
    """A long window from the firing rows: from the instant the window starts, a cell per UTC
    block ending with the current one, the first block's partial hours in the first cell; the
    window starts at its instant, as ``canary status`` counts."""
    hours = int(spec.cell / timedelta(hours=1))
    start = now - spec.span
    current = block_of(now, hours)
    series = {g: (0, 0, [0] * spec.cells) for g in GUARDS}
    with store.engine.connect() as conn:
        rows = conn.execute(text("SELECT guard, ts, run_id FROM firings")).all()
    for guard, ts, run_id in rows:
        moment = as_time(ts)
        if moment < start:
            continue
        back = (current - block_of(moment, hours)) // spec.cell
        index = min(max(spec.cells - 1 - back, 0), spec.cells - 1)
        organic, canary, cells = series[guard]
        cells[index] += 1
        series[guard] = (organic + 1, canary, cells) if run_id is None else (organic, canary + 1, cells)
    return series


@pytest.mark.parametrize("spec", LONG, ids=lambda w: w.label)
@settings(max_examples=examples(10), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(batch=st.lists(near_window, min_size=1, max_size=60), hour=st.integers(0, 23), minute=st.integers(0, 59))
def test_a_long_window_counts_what_the_firing_rows_count(
    backend: str, spec: WindowSpec, batch: list[tuple[str, int, bool, bool]], hour: int, minute: int
) -> None:
    now = NOW.replace(hour=hour, minute=minute)
    with fresh_store(backend, clock=lambda: now, attribution=TiedBy(7, lambda t: t.endswith("canary"))) as store:
        hits = [Hit(10 * i, f"{g} {'canary' if c else 'organic'}", (g,), False, now + timedelta(minutes=m))
                for i, (g, m, c, _) in enumerate(batch)]
        store.commit(Batch(FileState("1:2", 1, 2, "/l/a.log", 1, 10, b"h" * 16, 1), hits, len(hits), 1))
        assert window_series(store, list(GUARDS), now=now, spec=spec) == expected_series(store, now, spec)


def test_a_store_from_before_the_rollup_gets_it_filled_from_its_hourly_counts(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    store = Store(f"sqlite:///{db}", clock=lambda: NOW)
    hits = [Hit(i, "alpha rejected", ("alpha",), False, NOW - timedelta(hours=7 * i)) for i in range(40)]
    store.commit(Batch(FileState("1:2", 1, 2, "/l/a.log", 1, 10, b"h" * 16, 1), hits, 40, 1))
    store.close()
    with sqlite3.connect(db) as conn:  # as the previous version left it: no rollup, schema 6
        for table in TABLES.values():
            conn.executescript(f"DROP TRIGGER {table}_insert; DROP TRIGGER {table}_update;"
                               f" DROP TRIGGER {table}_delete; DROP TABLE {table};")
        conn.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
    conn.close()
    again = Store(f"sqlite:///{db}")
    try:
        assert rollup(again) == raw_blocks(again) and sum(rollup(again).values()) == 40 * len(TABLES)
    finally:
        again.close()
