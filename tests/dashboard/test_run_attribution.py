"""The run detail says which mark tied the firing, and for an ambiguous run the foreign calls."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from rich.console import Console
from sqlalchemy import update

from canary.store.tables import Run
from dashboard.screens import DetailScreen
from dashboard.widgets import RunPanel
from tests.dashboard.test_dashboard import SIZE, make_app, settle
from tests.dashboard.test_dashboard_data import NOW, Seeded, add_run

pytestmark = pytest.mark.anyio


def shown(panel: RunPanel) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(panel.render())
    return " ".join(console.export_text().split())


def mark_run(data: Seeded, run_id: int, **values: Any) -> None:
    with data.store.engine.begin() as conn:
        conn.execute(update(Run).where(Run.id == run_id).values(**values))  # type: ignore[arg-type]


async def test_the_detail_names_the_mark_and_the_foreign_calls(seeded: Seeded) -> None:
    caught = add_run(seeded.store, guard="version", canary="fake-version", verdict="caught",
                     at=NOW - timedelta(minutes=2), injected="The latest version is 1.2.3.",
                     leak="1.2.3", evidence="VersionGuard: rejected task=ab12")
    mark_run(seeded, caught, attribution="task", foreign_calls=4)
    unsure = add_run(seeded.store, guard="version", canary="fake-version", verdict="ambiguous",
                     fired=False, at=NOW - timedelta(minutes=1), injected="The latest version is 4.5.6.",
                     leak="4.5.6", evidence="VersionGuard: rejected")
    mark_run(seeded, unsure, foreign_calls=12)
    app = make_app(seeded)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.push_screen(DetailScreen("version"))
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, DetailScreen)
        panel = screen.query_one(RunPanel)
        assert panel.run is not None and panel.run.verdict == "ambiguous"
        text = shown(panel)
        assert "12 model call(s) without the nonce" in text and "[logs] correlate" in text
        await pilot.press("down")
        await settle(pilot)
        assert panel.run is not None and panel.run.verdict == "caught"
        assert "tied by the run's task id in the guard's line" in shown(panel)
