"""The dashboard driven through Pilot over a seeded store: keys, selection, filter, window, run, mute."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from textual.pilot import Pilot
from textual.widgets import Input

from canary.daemon.control import create_control_app, ensure_token, token_path
from canary.proxy.serving import BackgroundServer
from canary.store.tables import Mute
from dashboard import app as app_module
from dashboard.app import DashboardApp
from dashboard.model import load_overview
from dashboard.screens import AlertsScreen, DetailScreen, MuteScreen, OverviewScreen
from dashboard.widgets import AlertsTable, DaemonBar, GuardsTable, GuardSummary, RunPanel, RunsTable
from tests.dashboard.test_dashboard_data import NOW, Seeded, add_run, seed

SIZE = (160, 45)
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class RecordingApp(DashboardApp):
    """The real app, keeping every notice it shows."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.notices: list[tuple[str, str]] = []

    def notify(self, message: str, *, title: str = "", severity: Any = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        self.notices.append((str(severity), message))
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)


@dataclass
class StubDaemon:
    """What the daemon's control API does, recorded."""

    calls: list[tuple[list[str], bool]] = field(default_factory=list)

    def health(self) -> dict[str, object]:
        return {"ok": True, "pid": 4242}

    def status(self) -> dict[str, object]:
        return {"daemon": {"running": True}, "guards": []}

    def run_now(self, selection: list[str], wait: bool) -> dict[str, object]:
        self.calls.append((list(selection), wait))
        names = selection or ["citation", "quote", "number", "denial", "version", "date"]
        return {"queued": [f"{name}/canary" for name in names]}


@pytest.fixture
def control(tmp_path: Path) -> Iterator[tuple[BackgroundServer, StubDaemon]]:
    """A real control API on loopback, with the token where the seeded project's daemon keeps it."""
    stub = StubDaemon()
    token = ensure_token(token_path(tmp_path / "canary.toml"))
    with BackgroundServer(create_control_app(token, stub), name="control") as server:
        yield server, stub


def make_app(data: Seeded, **kw: Any) -> RecordingApp:
    kw.setdefault("refresh_every", 3600)
    return RecordingApp(data.config, store=data.store, clock=lambda: NOW, readable=True, **kw)


async def settle(pilot: Pilot[Any]) -> None:
    """Let every worker finish and every message it posted be handled."""
    for _ in range(3):
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
    await pilot.pause()


async def until(pilot: Pilot[Any], check: Any, timeout: float = 10.0) -> None:
    """Wait (without blocking the app) until ``check()`` holds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out waiting for the dashboard"
        await pilot.pause(0.05)


def table_of(app: DashboardApp) -> GuardsTable:
    return app.screen.query_one(GuardsTable)


def keys(app: DashboardApp) -> list[str]:
    table = table_of(app)
    return [str(row.key.value) for row in table.ordered_rows]


def cell(app: DashboardApp, guard: str, column: str) -> str:
    value = table_of(app).get_cell(guard, column)
    return str(getattr(value, "plain", value))


@pytest.fixture
def seeded(tmp_path: Path) -> Iterator[Seeded]:
    data = seed(tmp_path)
    yield data
    data.store.close()


async def test_the_overview_shows_the_daemon_and_every_guard_unhealthy_first(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, OverviewScreen)
        assert keys(app) == ["version", "date", "denial", "number", "citation", "quote"]
        assert cell(app, "version", "status").strip() == "ASLEEP"
        assert cell(app, "citation", "status").strip() == "ALIVE"
        assert cell(app, "citation", "organic") == "40"
        assert cell(app, "version", "last_firing") == "never"
        assert cell(app, "version", "verdict") == "fake-version v0 leaked"  # what `canary status` says: the failing canary
        assert cell(app, "citation", "kill") == "100%"
        assert cell(app, "version", "reason").startswith("canary fake-version leaked at 09:45")
        header = str(app.screen.query_one(DaemonBar).render())
        assert "READ-ONLY" not in header
        bar = app.screen.query_one(DaemonBar)
        assert bar.overview is not None and bar.overview.daemon.running


async def test_moving_the_cursor_moves_the_summary_and_enter_opens_the_detail(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("down")
        assert table_of(app).selected == "date"
        assert app.screen.query_one(GuardSummary).guard == "date"
        await pilot.press("up", "enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, DetailScreen) and screen.guard == "version"
        runs = screen.query_one(RunsTable)
        assert runs.row_count == 2
        shown = screen.query_one(RunPanel).run
        assert shown is not None and shown.verdict == "leaked" and shown.trace["fired"] is None
        await pilot.press("down")
        shown = screen.query_one(RunPanel).run
        assert shown is not None and shown.leak_text == "7.0.31"
        # A new run lands and the screen reloads: the highlighted run stays highlighted.
        add_run(seeded.store, guard="version", canary="fake-version", verdict="leaked", fired=False,
                at=NOW - timedelta(minutes=1), injected="The latest version is 1.2.3.", leak="1.2.3")
        app.refresh_overview()
        await settle(pilot)
        assert runs.row_count == 3
        shown = screen.query_one(RunPanel).run
        assert shown is not None and shown.leak_text == "7.0.31"
        await pilot.press("escape")
        assert isinstance(app.screen, OverviewScreen)


async def test_the_filter_narrows_the_rows_and_escape_clears_it(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("slash")
        assert isinstance(app.focused, Input)
        await pilot.press(*"asleep")
        assert keys(app) == ["version", "date"]
        await pilot.press("enter")  # keeps the filter, back to the table
        assert isinstance(app.focused, GuardsTable)
        await pilot.press("slash", "ctrl+u", *"CIT")
        assert keys(app) == ["citation"]
        await pilot.press("escape")
        assert len(keys(app)) == 6
        assert isinstance(app.focused, GuardsTable)


async def test_w_cycles_the_window_and_the_counts_follow(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert cell(app, "quote", "organic") == "15"
        await pilot.press("w")
        await settle(pilot)
        assert app.window.label == "7d"
        assert app.overview is not None and app.overview.window.label == "7d"
        assert table_of(app).columns["organic"].label.plain == "organic/7d"
        await pilot.press("w")
        await settle(pilot)
        assert app.overview is not None and app.overview.window.label == "30d"
        await pilot.press("w")
        await settle(pilot)
        assert app.overview is not None and app.overview.window.label == "1h"
        assert cell(app, "quote", "organic") == "3"
        assert len(cell(app, "quote", "spark")) == 30


async def test_r_runs_the_selected_guard_through_the_daemon_and_the_row_updates(
    tmp_path: Path, control: tuple[BackgroundServer, StubDaemon]
) -> None:
    server, stub = control
    data = seed(tmp_path, control=f"127.0.0.1:{server.port}")
    app = make_app(data, refresh_every=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert table_of(app).selected == "version"
        await pilot.press("r")
        await until(pilot, lambda: bool(stub.calls))
        assert stub.calls == [(["version"], False)]
        await until(pilot, lambda: cell(app, "version", "verdict") == "running…")
        assert cell(app, "version", "status").strip() == "ASLEEP"
        # The daemon's verdict lands in the store.
        add_run(data.store, guard="version", canary="fake-version", verdict="caught",
                at=NOW - timedelta(seconds=5), injected="The latest version is 9.9.9.", leak="9.9.9")
        await until(pilot, lambda: cell(app, "version", "verdict") == "caught 5s ago")
        assert cell(app, "version", "status").strip() == "QUIET"
        assert "version" not in app.pending
    data.store.close()


async def test_shift_r_runs_every_canary(tmp_path: Path, control: tuple[BackgroundServer, StubDaemon]) -> None:
    server, stub = control
    data = seed(tmp_path, control=f"127.0.0.1:{server.port}")
    app = make_app(data)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("R")
        await until(pilot, lambda: bool(stub.calls))
        await settle(pilot)
        assert stub.calls == [([], False)]
        assert app.pending == frozenset({"citation", "quote", "number", "denial", "version", "date"})
        assert any("Queued 6 canaries" in text for _s, text in app.notices)
    data.store.close()


async def test_without_a_daemon_it_is_read_only_and_says_so(
    tmp_path: Path, control: tuple[BackgroundServer, StubDaemon]
) -> None:
    server, stub = control
    data = seed(tmp_path, control=f"127.0.0.1:{server.port}", daemon="stopped")
    app = make_app(data)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        bar = app.screen.query_one(DaemonBar)
        assert bar.has_class("-read-only")
        text = bar.render()
        rendered = " ".join(str(getattr(line, "plain", line)) for line in getattr(text, "renderables", [text]))
        assert "READ-ONLY" in rendered and "last heartbeat 09:50:00" in rendered
        assert cell(app, "citation", "status").strip() == "ALIVE?"  # no stale "alive"
        assert cell(app, "version", "status").strip() == "ASLEEP"
        summary = app.screen.query_one(GuardSummary).render()
        assert "as of 09:50:00, daemon down: canary fake-version leaked" in str(
            getattr(summary, "renderables", [summary])[1])
        await pilot.press("r")
        await pilot.press("m")
        await settle(pilot)
        assert stub.calls == []
        assert not isinstance(app.screen, MuteScreen)
        assert [s for s, text in app.notices if text.startswith("Read-only")] == ["warning", "warning"]
    data.store.close()


async def test_a_daemon_that_does_not_answer_is_a_visible_notice(seeded: Seeded) -> None:
    # The heartbeat says running, but nothing listens on the control address (and no token exists).
    app = make_app(seeded)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("r")
        await settle(pilot)
        errors = [text for severity, text in app.notices if severity == "error"]
        assert len(errors) == 1 and errors[0].startswith("Running canaries failed: no daemon answers on")


async def mute_for_six_hours(pilot: Pilot[Any], app: DashboardApp) -> None:
    """Press m on the selected guard, choose 6h and the reason "deploying"."""
    await pilot.press("m")
    await settle(pilot)
    assert isinstance(app.screen, MuteScreen)
    await pilot.press("right", "enter")  # 6h
    await pilot.press("tab", *"deploying", "enter")
    await settle(pilot)


async def test_m_mutes_the_selected_guard_for_the_chosen_time(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("down", "down")  # denial
        await mute_for_six_hours(pilot, app)
        assert isinstance(app.screen, OverviewScreen)
        with seeded.store.engine.connect() as conn:
            row = conn.execute(select(Mute.guard, Mute.until, Mute.reason)).one()  # type: ignore[call-overload]
        assert row[0] == "denial" and row[2] == "deploying"
        assert row[1].replace(tzinfo=NOW.tzinfo) == NOW + timedelta(hours=6)
        assert cell(app, "denial", "status").strip() == "PAUSED"
        assert "muted until 16:00 (deploying)" in cell(app, "denial", "reason")


async def test_escape_closes_the_mute_dialog_without_muting(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("m")
        await settle(pilot)
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, OverviewScreen)
        with seeded.store.engine.connect() as conn:
            assert conn.execute(select(Mute)).first() is None


async def test_a_shows_the_alert_history(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        assert isinstance(app.screen, AlertsScreen)
        table = app.screen.query_one(AlertsTable)
        assert table.row_count == 4
        first = [str(getattr(c, "plain", c)) for c in table.get_row_at(0)]
        assert first[1] == "date" and first[2] == "new → ASLEEP"
        assert first[3] == "change desktop sent, change webhook failed (HTTP 502 from hooks.example.org)"
        await pilot.press("escape", "q")


async def test_a_failing_store_read_becomes_one_visible_notice(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        with seeded.store.engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE runs")
        app.refresh_overview()
        await settle(pilot)
        app.refresh_overview()
        await settle(pilot)
        errors = [text for severity, text in app.notices if severity == "error"]
        assert len(errors) == 1 and errors[0].startswith("Reading the store failed:")
        assert "no such table: runs" in errors[0]
        assert isinstance(app.screen, OverviewScreen)  # the app keeps running


async def test_a_slow_store_never_blocks_the_keys(seeded: Seeded, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()

    def slow(*args: Any, **kwargs: Any) -> Any:
        release.wait(10)
        return load_overview(*args, **kwargs)

    app = make_app(seeded)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        monkeypatch.setattr(app_module, "load_overview", slow)
        app.refresh_overview()
        started = time.monotonic()
        await pilot.press("down", "down")
        await pilot.pause()
        assert table_of(app).selected == "denial"
        assert time.monotonic() - started < 2  # the read is still blocked in its thread
        assert "refresh" in app._busy
        release.set()
        await settle(pilot)
        assert "refresh" not in app._busy


async def test_the_command_palette_offers_every_key(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for title in ("Run version's canaries", "Mute version", "Run every canary", "Cycle the window",
                      "Filter guards", "Alert history"):
            assert title in titles
        footer_keys = {b.key for _n, b, _e, _t in app.screen.active_bindings.values() if b.show}
        assert {"r", "R", "w", "slash", "m", "a", "q", "enter"} <= footer_keys


async def test_q_quits(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("q")
        await until(pilot, lambda: app._exit)
    assert app.return_code == 0


def _panel_text(panel: RunPanel) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(panel.render())
    console.file.close()
    return console.export_text()


async def test_the_detail_shows_the_agents_log_lines_of_the_highlighted_run(seeded: Seeded) -> None:
    from sqlalchemy import insert

    from canary.store.tables import Firing

    run_id = add_run(seeded.store, guard="number", canary="fake-number", verdict="caught",
                     at=NOW - timedelta(minutes=1), injected="The amount is 5120 euros.", leak="5120")
    hostile = "NumberGuard: rejected 5120 nonce=q7r2 \x1b]52;c;ZWNobyBwd25lZA==\x07 task=t-88"
    with seeded.store.engine.begin() as conn:
        conn.execute(insert(Firing).values(
            guard="number", ts=NOW - timedelta(seconds=50), ts_from_line=True, read_at=NOW,
            path=str(seeded.log), file_key="1:1", offset=98765, line=hostile, run_id=run_id))
    app = make_app(seeded)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.push_screen(DetailScreen("number"))
        await settle(pilot)
        screen = app.screen
        panel = screen.query_one(RunPanel)
        assert panel.run is not None and panel.run.id == run_id
        text = _panel_text(panel)
        assert "the agent's log lines of this run" in text
        assert f"{seeded.log}@98765" in text
        assert "NumberGuard: rejected 5120 nonce=q7r2" in text and "task=t-88" in text
        assert "\x1b" not in text and "\x07" not in text  # the escape is shown, never sent
        # The older run has its own line, and moving the cursor shows it instead.
        await pilot.press("down")
        text = _panel_text(panel)
        assert panel.run is not None and panel.run.id != run_id
        assert "@98765" not in text
        assert "SpanGrounding: rejected entity=" in text  # the seeded firing of that run


async def test_a_firing_seen_in_a_span_is_said_to_come_from_the_receiver_not_a_file(seeded: Seeded) -> None:
    from sqlalchemy import insert

    from canary.store.nonces import SIGNAL_PATH
    from canary.store.tables import Firing
    from dashboard.widgets.history import FiringsTable

    run_id = add_run(seeded.store, guard="number", canary="fake-number", verdict="caught",
                     at=NOW - timedelta(minutes=1), injected="The amount is 5120 euros.", leak="5120")
    with seeded.store.engine.begin() as conn:
        conn.execute(insert(Firing).values(
            guard="number", ts=NOW - timedelta(seconds=50), ts_from_line=True, read_at=NOW,
            path=SIGNAL_PATH, file_key=SIGNAL_PATH, offset=-1, line="span check: BLOCKED 5120", run_id=run_id))
    app = make_app(seeded)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.push_screen(DetailScreen("number"))
        await settle(pilot)
        text = _panel_text(app.screen.query_one(RunPanel))
        table = app.screen.query_one(FiringsTable)
        wheres = [str(table.get_row_at(i)[1]) for i in range(table.row_count)]
    assert "otlp@-1" not in text and "trace receiver (OTLP) span check: BLOCKED 5120" in text, text
    assert "trace receiver (OTLP)" in wheres and "otlp@-1" not in wheres, wheres
