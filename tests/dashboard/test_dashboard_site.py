"""The store the dashboard opens: on a shared store it never creates a project's site, on SQLite
it follows a daemon started after it.

A project whose daemon never wrote to a shared (PostgreSQL) store has no site there yet: the
dashboard opens on it all the same, says that no daemon has written the project's rows and what
to run, refuses to mute (there is no place for a mute, and only the daemon makes one), and shows
the project's rows once its daemon has made the site.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from textual.pilot import Pilot

from canary.cli.main import main
from canary.config.commandline import command_line
from canary.config.settings import Config, load_config
from canary.store.engine import Store
from canary.store.sites import Site
from dashboard import app as app_module
from dashboard.app import DashboardApp
from dashboard.model import load_overview
from dashboard.screens import AlertsScreen, DetailScreen, OverviewScreen
from dashboard.screens.team import TeamScreen
from dashboard.widgets import DaemonBar
from tests.cli.test_status_claims import daemon_ran, site_mutes, site_tables, write_config
from tests.dashboard.test_dashboard import SIZE, RecordingApp, keys, mute_for_six_hours, settle, until
from tests.store.conftest import pg_url

pytestmark = pytest.mark.anyio

Autopilot = Callable[[Pilot[Any]], Coroutine[Any, Any, None]]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"



def bar_text(app: DashboardApp) -> str:
    rendered = app.screen.query_one(DaemonBar).render()
    return " ".join(str(getattr(line, "plain", line)) for line in getattr(rendered, "renderables", [rendered]))


def dashboard_command(monkeypatch: pytest.MonkeyPatch, config: Path, pilot: Autopilot) -> Result:
    """``canary dashboard --config config`` through the CLI, the real app headless, driven by ``pilot``."""
    original = DashboardApp.run

    def headless(self: DashboardApp, **_kw: Any) -> Any:
        return original(self, headless=True, auto_pilot=pilot, size=SIZE)

    monkeypatch.setattr(DashboardApp, "run", headless)
    return CliRunner().invoke(main, ["dashboard", "--config", str(config)])


def start_command(config: Path) -> str:
    """The advice to start the config's daemon, as the dashboard words it from the current folder."""
    return f"`{command_line('canary daemon', config)}`"


def test_the_dashboard_of_a_project_whose_daemon_never_ran_creates_no_site(
    tmp_path: Path, pg_site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_config(tmp_path / "gamma", project=pg_site.project, url=pg_url(), machine="m1")
    seen: list[tuple[list[str], str, bool]] = []

    async def look(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, DashboardApp)
        await settle(pilot)
        await until(pilot, lambda: keys(app) != [])
        seen.append((keys(app), bar_text(app), app.screen.query_one(DaemonBar).has_class("-read-only")))
        app.exit()

    result = dashboard_command(monkeypatch, config, look)
    assert result.exit_code == 0, result.output
    assert seen, "the dashboard never showed"
    assert site_tables(pg_site) == (False, False, None)  # no schema, not listed
    guards, bar, read_only = seen[0]
    assert guards == ["cite"] and read_only
    assert (f"no daemon has written the rows of project {pg_site.project} on machine m1 to this shared "
            "store yet") in bar
    assert f"start one with {start_command(config)}" in bar


async def test_muting_before_the_projects_daemon_wrote_says_why_and_its_rows_show_once_it_has(
    tmp_path: Path, pg_site: Site
) -> None:
    path = write_config(tmp_path / "delta", project=pg_site.project, url=pg_url(), machine="m1")
    app = RecordingApp(load_config(str(path)), refresh_every=0.1, readable=True)  # it opens the store itself
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert keys(app) == ["cite"]
            await pilot.press("m")
            await settle(pilot)
            assert isinstance(app.screen, OverviewScreen)  # no mute dialog
            assert [text for severity, text in app.notices if severity == "warning"] == [
                f"Cannot mute: no daemon of project {pg_site.project} on machine m1 has written to this "
                "shared store yet, so it holds none of the project's rows to keep a mute in (only the daemon "
                f"creates them). Start one with {start_command(path)}."]
            for key, screen in (("enter", DetailScreen), ("a", AlertsScreen), ("t", TeamScreen)):
                await pilot.press(key)  # the guard's detail, the alerts, the team: empty, not failing
                await settle(pilot)
                assert isinstance(app.screen, screen)
                await pilot.press("escape")
                await settle(pilot)
            assert [text for severity, text in app.notices if severity == "error"] == []
            assert site_tables(pg_site) == (False, False, None)

            daemon_ran(path)  # the project's daemon makes its site and beats
            await until(pilot, lambda: app.overview is not None and not app.overview.read_only)
            assert "no daemon has written" not in bar_text(app)
            await mute_for_six_hours(pilot, app)
            assert [text for severity, text in app.notices if severity == "error"] == []
    finally:
        app.store.close()
    assert site_mutes(pg_site) == [("cite", "deploying")]
    assert site_tables(pg_site) == (True, True, str(path))  # the daemon's site, the daemon's claim


async def test_a_sqlite_dashboard_started_before_any_daemon_follows_the_daemon_once_it_starts(
    tmp_path: Path,
) -> None:
    path = write_config(tmp_path / "eps", project="eps", url=f"sqlite:///{tmp_path / 'store' / 'canary.db'}")
    app = RecordingApp(load_config(str(path)), refresh_every=0.1, readable=True)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert keys(app) == ["cite"]
            assert "no daemon has run on this store" in bar_text(app)
            await pilot.press("m")
            await settle(pilot)
            assert [text for severity, text in app.notices if text.startswith("Read-only")] == [
                "Read-only: the daemon is not running, so canaries cannot be run and guards cannot be "
                f"muted from here. Start it with {start_command(path)}."]

            daemon_ran(path)
            await until(pilot, lambda: app.overview is not None and not app.overview.read_only)
            assert "● daemon" in bar_text(app)
            assert [text for severity, text in app.notices if severity == "error"] == []
    finally:
        app.store.close()


async def test_quitting_during_a_read_closes_the_connection_the_read_held(
    pg_site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(pg_url(), site=pg_site)
    held: list[Any] = []
    entered = threading.Event()

    def slow(rows: Store, *args: Any, **kwargs: Any) -> Any:
        with rows.engine.connect() as conn:
            held.append(conn.connection.dbapi_connection)
            entered.set()
            time.sleep(0.5)  # quit comes while the connection is out
        return load_overview(rows, *args, **kwargs)

    app = RecordingApp(Config(), store=store, refresh_every=3600, readable=True)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            monkeypatch.setattr(app_module, "load_overview", slow)
            app.refresh_overview()
            await until(pilot, entered.is_set)
            app.exit()
        assert held and held[0].closed  # given back, then closed: not left open until collected
    finally:
        store.close()
