"""``canary demo`` with the dashboard: the real demo agent, model, daemon and traffic, the app headless."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from canary.demo.receiver import ALERTS_FILE, received
from canary.demo.stage import DEMO_EVERY, demo_config
from canary.locations import ENV_STATE_DIR
from canary.vocabulary import Status
from dashboard.app import DashboardApp, run_dashboard
from dashboard.demo import run_demo_dashboard
from dashboard.model import AlertHistory, Overview, load_alerts

DEAD = {"version", "date"}
LIVE = {"citation", "quote", "number", "denial"}


def settled(overview: Overview | None) -> bool:
    """Every canary has spoken, and the organic traffic has fired some guard."""
    if overview is None or overview.read_only:
        return False
    status = {r.guard: r.status.status for r in overview.rows}
    return (
        all(status.get(g) == Status.ASLEEP for g in DEAD)
        and all(status.get(g) in (Status.ALIVE, Status.QUIET) for g in LIVE)
        and any(r.organic for r in overview.rows)
    )


def test_the_demo_dashboard_shows_the_dead_guards_asleep_and_the_live_ones_awake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Overview] = []
    history: list[AlertHistory] = []
    state_before = os.environ.get(ENV_STATE_DIR)
    inbox = tmp_path / "demo" / ALERTS_FILE

    def alerted() -> bool:
        return {str(a["guard"]) for a in received(inbox) if a.get("status") == "asleep"} >= DEAD

    async def watch(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, DashboardApp)
        deadline = time.monotonic() + 90
        while not (settled(app.overview) and alerted()) and time.monotonic() < deadline:
            await pilot.pause(0.25)
        if app.overview is not None:
            seen.append(app.overview)
        history.append(load_alerts(app.store, now=datetime.now(UTC)))
        app.exit()

    original = DashboardApp.run

    def headless(self: DashboardApp, **_kw: Any) -> Any:
        return original(self, headless=True, auto_pilot=watch, size=(160, 45))

    monkeypatch.setattr(DashboardApp, "run", headless)
    assert run_demo_dashboard(tmp_path / "demo") == 0
    assert seen and settled(seen[0]), seen[0].rows if seen else "no overview"
    overview = seen[0]
    assert overview.window.label == "1h"
    assert {r.guard for r in overview.rows[:2]} == DEAD  # the asleep ones first
    assert os.environ.get(ENV_STATE_DIR) == state_before  # the demo's state dir was only borrowed
    assert list((tmp_path / "demo" / "state" / "projects").glob("*/control.token"))  # the demo project's
    assert "stopped" in (tmp_path / "demo" / "daemon.log").read_text(encoding="utf-8")
    # The alert pipeline really sent to the demo's receiver, and the history shows those rows.
    assert alerted(), received(inbox)
    sent = {(a.transition.guard, a.transition.status) for a in history[0].rows
            for d in a.deliveries if d.channel == "webhook" and d.state == "sent"}
    assert {(g, "asleep") for g in DEAD} <= sent, history[0]


def test_the_demo_runs_its_canaries_every_few_minutes(tmp_path: Path) -> None:
    from tests.dashboard.test_dashboard_data import write_config

    config = demo_config(write_config(tmp_path))
    assert {c.every for g in config.guards for c in g.canaries} == {DEMO_EVERY}
    assert all(c.cron is None for g in config.guards for c in g.canaries)


def test_run_dashboard_reports_a_store_it_cannot_open(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.dashboard.test_dashboard_data import write_config

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("", encoding="utf-8")
    config = write_config(tmp_path)
    assert run_dashboard(config, store_url=f"sqlite:///{blocker}/canary.db") == 3
    assert "cannot open the store" in capsys.readouterr().err
