"""The dashboard idles: it reads the store again only when something was written, and draws only
the cells that changed."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from canary.store.engine import Store
from dashboard import app as app_module
from dashboard.app import BUSY_LOOKS, DashboardApp
from dashboard.widgets import GuardsTable
from tests.dashboard.test_dashboard import SIZE, cell, make_app, settle, until
from tests.dashboard.test_dashboard_data import NOW, Seeded, add_run

pytestmark = pytest.mark.anyio


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every overview read from the store, counted."""
    counted: list[int] = []
    real = app_module.load_overview

    def load(*args: Any, **kwargs: Any) -> Any:
        counted.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(app_module, "load_overview", load)
    return counted


def land_a_verdict(data: Seeded, guard: str = "version") -> None:
    add_run(data.store, guard=guard, canary=f"fake-{guard}", verdict="caught",
            at=NOW - timedelta(seconds=5), injected="The amount is 9.9.9.", leak="9.9.9")


async def test_an_unchanged_store_is_not_read_again_and_a_write_is(seeded: Seeded, reads: list[int]) -> None:
    app: DashboardApp = make_app(seeded, refresh_every=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        before = len(reads)
        await pilot.pause(1.0)  # twenty looks at the store
        await settle(pilot)
        assert len(reads) == before
        land_a_verdict(seeded)
        await until(pilot, lambda: cell(app, "version", "verdict") == "caught 5s ago")
        assert len(reads) == before + 1


async def test_a_write_redraws_the_cells_that_changed_and_not_the_table(
    seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    app: DashboardApp = make_app(seeded, refresh_every=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(GuardsTable)
        assert cell(app, "number", "verdict") != "caught 5s ago"
        cleared: list[int] = []
        updated: list[tuple[str, str]] = []
        real_clear, real_update = table.clear, table.update_cell

        def clear(*args: Any, **kwargs: Any) -> Any:
            cleared.append(1)
            return real_clear(*args, **kwargs)

        def update(row: Any, column: Any, *args: Any, **kwargs: Any) -> None:
            updated.append((str(row), str(column)))
            real_update(row, column, *args, **kwargs)

        monkeypatch.setattr(table, "clear", clear)
        monkeypatch.setattr(table, "update_cell", update)
        selected = table.selected
        land_a_verdict(seeded, "number")  # still alive: its row stays where it is
        await until(pilot, lambda: cell(app, "number", "verdict") == "caught 5s ago")
        assert cleared == []
        assert ("number", "verdict") in updated
        assert {row for row, _column in updated} <= {"number"}
        assert table.selected == selected


async def test_a_store_written_all_the_time_is_read_every_few_looks(seeded: Seeded, reads: list[int]) -> None:
    from canary.daemon.steps import beat

    app: DashboardApp = make_app(seeded, refresh_every=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        before = len(reads)
        started = time.monotonic()
        n = 0
        while time.monotonic() - started < 3.0:  # a heartbeat every 50 ms: thirty looks see a change
            n += 1  # a beat that writes the same row again changes nothing SQLite would count
            beat(seeded.store, pid=4242, started=NOW - timedelta(hours=3),
                 now=NOW - timedelta(seconds=2, microseconds=n), files=1, addresses={})
            await pilot.pause(0.05)
        await settle(pilot)
        looks = (time.monotonic() - started) / 0.1
        assert 2 <= len(reads) - before <= looks / (BUSY_LOOKS - 0.5) + 1


async def test_a_store_set_aside_under_the_dashboard_is_followed_to_the_new_one(seeded: Seeded) -> None:
    app: DashboardApp = make_app(seeded, refresh_every=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert cell(app, "citation", "organic") != "0"
        db = seeded.store.path
        assert db is not None
        for suffix in ("", "-wal", "-shm"):  # as the daemon sets a corrupt store aside
            moved = Path(f"{db}{suffix}")
            if moved.exists():
                os.replace(moved, Path(f"{db}.corrupt-1{suffix}"))
        Store(seeded.config.store.url).close()  # and creates a new one
        await until(pilot, lambda: cell(app, "citation", "organic") == "0")
