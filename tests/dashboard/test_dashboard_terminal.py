"""Escape sequences in log lines, evidence, errors and reasons: drawn visibly, never sent to the terminal."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from sqlalchemy import insert
from textual.pilot import Pilot

from canary.store.tables import Delivery, Firing, Transition
from dashboard.app import DashboardApp
from dashboard.screens import AlertsScreen, DetailScreen
from tests.dashboard.test_dashboard_data import NOW, Seeded, add_run, seed

pytestmark = pytest.mark.anyio
ESCAPES = "\x1b]0;PWNED\x07\x1b]52;c;cHduZWQ=\x07\x1b[2J"
SIZE = (200, 60)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[Seeded]:
    """The seeded story, plus a run, a firing, a transition and a delivery error full of escapes."""
    data = seed(tmp_path)
    at = NOW - timedelta(minutes=1)
    run_id = add_run(data.store, guard="citation", canary="fake-url", verdict="error", at=at,
                     injected=f"{ESCAPES} injected", answer=f"{ESCAPES} answer", leak="example.org",
                     evidence=f"{ESCAPES} CitationGuard: rejected https://k3v9.example.org/permit")
    with data.store.engine.begin() as conn:
        conn.execute(insert(Firing).values(
            guard="citation", ts=at, ts_from_line=True, read_at=at, path=str(data.log), file_key="1:1",
            offset=99_000, line=f"{ESCAPES} CitationGuard: rejected https://k3v9.example.org/x",
            run_id=run_id))
        tid = conn.execute(insert(Transition).values(
            guard="citation", at=at, status="degraded", previous="alive",
            reason=f"canary fake-url: {ESCAPES} the agent answered HTTP 500")).inserted_primary_key
        assert tid is not None
        conn.execute(insert(Delivery).values(
            transition_id=int(tid[0]), guard="citation", kind="change", channel="webhook", state="failed",
            attempts=3, next_try=NOW, created=NOW, sent_at=None, last_error=f"HTTP 502 {ESCAPES}"))
    yield data
    data.store.close()


async def settle(pilot: Pilot[Any]) -> None:
    for _ in range(3):
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def terminal_bytes(app: DashboardApp) -> str:
    """What the driver would write to the terminal for the whole screen now."""
    update = app.screen._compositor.render_full_update()
    return update.render_segments(Console(width=SIZE[0], color_system="truecolor", force_terminal=True))


def control_sequences(output: str) -> set[str]:
    """Every escape the output carries, less the cursor moves and colours Textual writes itself."""
    rest = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output)
    return {c for c in rest if c in "\x1b\x07\x9b\x9d"}


async def test_the_detail_screen_shows_escapes_and_never_sends_them(hostile: Seeded) -> None:
    app = DashboardApp(hostile.config, store=hostile.store, clock=lambda: NOW, readable=True,
                       refresh_every=3600)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.push_screen(DetailScreen("citation"))
        await settle(pilot)
        output = terminal_bytes(app)
        assert "\\x1b]52;c;cHduZWQ=" in output  # the evidence and the firing line, visible ...
        assert "PWNED" in output
        assert control_sequences(output) == set()  # ... and no OSC, BEL or C1 reaches the terminal
        assert "\x1b[2J" not in output
        await pilot.press("escape")
        await pilot.press("a")
        await settle(pilot)
        assert isinstance(app.screen, AlertsScreen)
        output = terminal_bytes(app)
        assert "\\x1b]0;PWNED" in output  # the transition's reason and the delivery error
        assert control_sequences(output) == set()
        assert "\x1b[2J" not in output
