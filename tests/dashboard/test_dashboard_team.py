"""The dashboard's team screen: a project column over a shared store, and whose daemon is stale."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from textual.widgets import DataTable

from canary.config.settings import Config
from canary.daemon.steps import beat
from canary.store.engine import Store
from canary.store.sites import Site
from dashboard.app import DashboardApp
from dashboard.screens.team import TeamScreen
from tests.dashboard.test_dashboard import NOW, SIZE, settle
from tests.status.test_team import _daemon_was_here
from tests.store.conftest import drop_site, pg_url

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def rows(app: DashboardApp) -> list[tuple[str, ...]]:
    table = app.screen.query_one(DataTable)
    return [tuple(str(getattr(c, "plain", c)).strip() for c in table.get_row_at(i)) for i in range(table.row_count)]


async def test_the_team_screen_has_a_row_per_guard_of_every_project_and_machine() -> None:
    url = pg_url()
    tag = uuid.uuid4().hex[:6]
    mine, theirs = Site(f"billing{tag}", "laptop"), Site(f"research{tag}", "ci-runner")
    quit_ = Site(f"ops{tag}", "nas")
    other = Store(url, site=theirs)
    store = Store(url, site=mine)
    stopped = Store(url, site=quit_)
    try:
        _daemon_was_here(store, at=NOW, statuses={"citation": "alive"})
        _daemon_was_here(other, at=NOW - timedelta(hours=3), statuses={"quote": "alive", "date": "asleep"})
        _daemon_was_here(stopped, at=NOW - timedelta(hours=2), statuses={"span": "alive"})
        beat(stopped, pid=7, started=NOW - timedelta(hours=3), now=NOW - timedelta(hours=2), files=1,
             addresses={}, stopped=NOW - timedelta(hours=2))
        app = DashboardApp(Config(), store=store, clock=lambda: NOW, readable=True, refresh_every=3600)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await pilot.press("t")
            await settle(pilot)
            assert isinstance(app.screen, TeamScreen)
            found: dict[Any, tuple[str, ...]] = {(r[0], r[3]): r for r in rows(app)}
            assert found[(mine.project, "citation")][1:3] == ("laptop", "running")
            assert found[(theirs.project, "quote")][1:3] == ("ci-runner", "stale, last beat 3h")
            assert found[(theirs.project, "quote")][4] == "ALIVE?"  # a stale daemon's healthy word is doubted
            assert found[(theirs.project, "date")][4] == "ASLEEP"
            assert found[(quit_.project, "span")][1:3] == ("nas", "stopped 2h ago")  # said, not called stale
    finally:
        store.close()
        other.close()
        stopped.close()
        drop_site(mine)
        drop_site(theirs)
        drop_site(quit_)
