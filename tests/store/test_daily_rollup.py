"""The daily rollup: firings per guard, UTC day and source, kept equal to the firing rows by
every write (commits, a run claiming firings, a recount), and the dashboard's long windows
read from it give the counts the raw rows give."""

from __future__ import annotations

import sqlite3
import tempfile
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from canary.store.engine import Store
from canary.store.runlog import RunLog
from collectors.matcher import Hit
from collectors.positions import Batch, FileState
from dashboard.model import WINDOWS, window_series

NOW = datetime(2026, 11, 29, 10, 30, tzinfo=UTC)
GUARDS = ("alpha", "beta", "gamma")
LONG = next(w for w in WINDOWS if w.label == "30d")


def raw_daily(db: Path) -> Counter[tuple[str, str, str]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT guard, substr(ts, 1, 10), CASE WHEN run_id IS NULL THEN 'organic' ELSE 'canary' END, "
            "count(*) FROM firings GROUP BY 1, 2, 3").fetchall()
    conn.close()
    return Counter({(g, d, s): n for g, d, s, n in rows})


def rollup(db: Path) -> Counter[tuple[str, str, str]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT guard, substr(day, 1, 10), source, count FROM daily_counts "
                            "WHERE count != 0").fetchall()
    conn.close()
    return Counter({(g, d, s): n for g, d, s, n in rows})


firing = st.tuples(st.sampled_from(GUARDS), st.integers(-45 * 24 * 60, 60), st.booleans(), st.booleans())
#: Firings around a 30 d window's first day, its last and the span between.
near_window = st.tuples(st.sampled_from(GUARDS), st.one_of(st.integers(-31 * 24 * 60, -29 * 24 * 60),
                                                           st.integers(-30 * 24 * 60, 60)),
                        st.booleans(), st.booleans())


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(firing, min_size=1, max_size=30), min_size=1, max_size=4),
       claim=st.integers(0, 5), recount_minutes=st.integers(0, 40 * 24 * 60))
def test_the_rollup_equals_the_firing_rows_after_every_kind_of_write(
    batches: list[list[tuple[str, int, bool, bool]]], claim: int, recount_minutes: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "c.db"
        store = Store(f"sqlite:///{db}", clock=lambda: NOW)
        try:
            store.attribute = lambda guard, hit: 7 if hit.text.endswith("canary") else None
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
                assert rollup(db) == raw_daily(db)
            organic = [(o, h) for o, h in hits_by_offset.items() if h.text.endswith("organic")][:claim]
            for o, h in organic:
                RunLog(store).claim(9, h.guards[0], [(o, h.text)], NOW - timedelta(days=1))
            assert rollup(db) == raw_daily(db)
            since = NOW - timedelta(minutes=recount_minutes)
            again = [("/l/a.log", "1:2", h) for h in list(hits_by_offset.values())[::2]]
            store.recount(["alpha", "beta"], since, again)
            assert rollup(db) == raw_daily(db)
            assert sum(raw_daily(db).values()) == store.count_firings()
        finally:
            store.close()


def expected_series(db: Path, now: datetime) -> dict[str, tuple[int, int, list[int]]]:
    """The 30 d window from the firing rows: from the hour the window starts in, a cell per UTC
    day ending today's, the first day's partial hours in the first cell."""
    start = (now - LONG.span).replace(minute=0, second=0, microsecond=0)
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    series = {g: (0, 0, [0] * LONG.cells) for g in GUARDS}
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT guard, ts, run_id FROM firings").fetchall()
    conn.close()
    for guard, ts, run_id in rows:
        moment = datetime.fromisoformat(ts).replace(tzinfo=UTC)
        if moment < start:
            continue
        day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
        index = min(max(LONG.cells - 1 - (today - day).days, 0), LONG.cells - 1)
        organic, canary, cells = series[guard]
        cells[index] += 1
        series[guard] = (organic + 1, canary, cells) if run_id is None else (organic, canary + 1, cells)
    return series


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(near_window, min_size=1, max_size=60), hour=st.integers(0, 23), minute=st.integers(0, 59))
def test_the_30_day_window_counts_what_the_firing_rows_count(
    batch: list[tuple[str, int, bool, bool]], hour: int, minute: int
) -> None:
    now = NOW.replace(hour=hour, minute=minute)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "c.db"
        store = Store(f"sqlite:///{db}", clock=lambda: now)
        try:
            store.attribute = lambda guard, hit: 7 if hit.text.endswith("canary") else None
            hits = [Hit(10 * i, f"{g} {'canary' if c else 'organic'}", (g,), False, now + timedelta(minutes=m))
                    for i, (g, m, c, _) in enumerate(batch)]
            store.commit(Batch(FileState("1:2", 1, 2, "/l/a.log", 1, 10, b"h" * 16, 1), hits, len(hits), 1))
            assert window_series(store, list(GUARDS), now=now, spec=LONG) == expected_series(db, now)
        finally:
            store.close()


def test_a_store_from_before_the_rollup_gets_it_filled_from_its_hourly_counts(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    store = Store(f"sqlite:///{db}", clock=lambda: NOW)
    hits = [Hit(i, "alpha rejected", ("alpha",), False, NOW - timedelta(hours=7 * i)) for i in range(40)]
    store.commit(Batch(FileState("1:2", 1, 2, "/l/a.log", 1, 10, b"h" * 16, 1), hits, 40, 1))
    store.close()
    with sqlite3.connect(db) as conn:  # as the previous version left it: no rollup, schema 6
        conn.executescript("DROP TRIGGER IF EXISTS daily_counts_insert; DROP TRIGGER IF EXISTS daily_counts_update;"
                           " DROP TRIGGER IF EXISTS daily_counts_delete; DROP TABLE IF EXISTS daily_counts;"
                           " UPDATE meta SET value = '6' WHERE key = 'schema_version';")
    conn.close()
    Store(f"sqlite:///{db}").close()
    assert rollup(db) == raw_daily(db) and sum(rollup(db).values()) == 40
