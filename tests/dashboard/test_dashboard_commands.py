"""The dashboard's advice to start the daemon names the config it shows, when it is not the default."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from dashboard.widgets import DaemonBar
from tests.dashboard.test_dashboard import SIZE, make_app, settle
from tests.dashboard.test_dashboard_data import seed

pytestmark = pytest.mark.anyio


def _bar_text(bar: DaemonBar) -> str:
    text = bar.render()
    return " ".join(str(getattr(line, "plain", line)) for line in getattr(text, "renderables", [text]))


@pytest.mark.parametrize("daemon", ["never", "stopped"])
async def test_read_only_says_how_to_start_the_daemon_for_this_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, daemon: str
) -> None:
    data = seed(tmp_path, daemon=daemon)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the seeded canary.toml is no longer the one found without --config
    assert data.config.path is not None
    start = f"`canary daemon --config {shlex.quote(str(data.config.path))}`"
    app = make_app(data)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            bar = app.screen.query_one(DaemonBar)
            assert bar.has_class("-read-only")
            assert f"start it with {start}" in _bar_text(bar)
            await pilot.press("r")
            await settle(pilot)
            assert [text for _s, text in app.notices if text.startswith("Read-only")] == [
                "Read-only: the daemon is not running, so canaries cannot be run and guards cannot be muted "
                f"from here. Start it with {start}."]
    finally:
        data.store.close()


async def test_with_the_default_config_the_advice_is_the_bare_command(tmp_path: Path) -> None:
    data = seed(tmp_path, daemon="never")  # the current directory holds the seeded canary.toml
    app = make_app(data)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert "start it with `canary daemon` " in _bar_text(app.screen.query_one(DaemonBar))
    finally:
        data.store.close()
