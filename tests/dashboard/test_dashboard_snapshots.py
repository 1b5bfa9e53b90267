"""Screenshots of the key screens over the seeded store, at a fixed clock, size and time zone.

Update after a deliberate change with ``uv run pytest tests/dashboard/test_dashboard_snapshots.py --snapshot-update``
and look at the SVGs in ``tests/__snapshots__/test_dashboard_snapshots/``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from dashboard.app import DashboardApp
from tests.dashboard.test_dashboard_data import NOW, seed

SIZE = (160, 45)
Compare = Callable[..., bool]


@pytest.fixture(autouse=True)
def utc_local_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Times on screen are local; pin the zone so the pictures are the same everywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def app_over(tmp_path: Path, **kw: Any) -> DashboardApp:
    data = seed(tmp_path, **kw)
    return DashboardApp(data.config, store=data.store, clock=lambda: NOW, readable=True, refresh_every=3600)


async def settled(pilot: Pilot[Any], *keys: str) -> None:
    for _ in range(3):
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
    for key in keys:
        await pilot.press(key)
        for _ in range(3):
            await pilot.pause()
            await pilot.app.workers.wait_for_complete()


def test_overview(snap_compare: Compare, tmp_path: Path) -> None:
    """Six guards, the unhealthy first; the daemon's health above, the highlighted guard's reason below."""
    assert snap_compare(app_over(tmp_path), terminal_size=SIZE, run_before=settled)


def test_overview_read_only(snap_compare: Compare, tmp_path: Path) -> None:
    """The daemon stopped 10 minutes ago: a read-only notice, and healthy statuses marked '?'."""
    assert snap_compare(app_over(tmp_path, daemon="stopped"), terminal_size=SIZE, run_before=settled)


def test_detail_of_a_degraded_guard(snap_compare: Compare, tmp_path: Path) -> None:
    """denial: its leaked run highlighted, drawn stage by stage, with its firings and status changes."""

    async def open_denial(pilot: Pilot[Any]) -> None:
        await settled(pilot, "down", "down", "enter", "down")

    assert snap_compare(app_over(tmp_path), terminal_size=SIZE, run_before=open_denial)
