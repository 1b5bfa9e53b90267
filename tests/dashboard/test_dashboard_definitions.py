"""A broken definition file: the dashboard opens all the same, shows the other guards, and shows each
broken file's error (file, key, problem) with its control characters drawn, never sent; the broken
file's guard is shown by the status the store last recorded of it, as ``canary status`` shows it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert
from textual.pilot import Pilot

from canary.config.commandline import no_guards
from canary.store.engine import Store
from canary.store.tables import Transition
from dashboard.app import DashboardApp
from dashboard.screens import DetailScreen
from dashboard.widgets import DefinitionProblems
from tests.dashboard.test_dashboard import cell, keys, settle, until
from tests.dashboard.test_dashboard_site import dashboard_command
from tests.dashboard.test_dashboard_terminal import control_sequences, terminal_bytes

GOOD = "[guard]\nname = 'cite'\nmatch = 'CitationGuard: rejected'\n"
#: A key whose name carries a terminal title escape: the error names it.
BAD_KEY = "[guard]\nname = 'quote'\nmatch = 'QuoteGuard'\n\"\\u001b]0;PWNED\\u0007\" = 1\n"
BAD_TOML = "[guard\nname = 'number'\n"


def project(folder: Path) -> Path:
    """A config of three definition files: one good, one with an unknown key, one that is not TOML."""
    (folder / "defs").mkdir(parents=True)
    for name, body in (("cite", GOOD), ("quote", BAD_KEY), ("number", BAD_TOML)):
        (folder / "defs" / f"{name}.toml").write_text(body, encoding="utf-8")
    (folder / "agent.log").write_text("", encoding="utf-8")
    path = folder / "canary.toml"
    path.write_text(
        f"defs = ['defs/*.toml']\n[logs]\npaths = [{str(folder / 'agent.log')!r}]\n[alerts]\ndesktop = false\n"
        f"[store]\nurl = {'sqlite:///' + str(folder / 'canary.db')!r}\n",
        encoding="utf-8",
    )
    return path


def test_a_broken_definition_file_is_shown_beside_the_other_guards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = project(tmp_path / "agent")
    store = Store(f"sqlite:///{tmp_path / 'agent' / 'canary.db'}")  # what the daemon last decided of quote
    with store.engine.begin() as conn:
        conn.execute(insert(Transition), [{
            "guard": "quote", "at": datetime.now(UTC) - timedelta(hours=2), "status": "asleep",
            "previous": "alive", "reason": "no firing in the last 1d", "evidence": None}])
    store.close()
    seen: list[tuple[list[str], str, set[str], str, str]] = []

    async def look(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, DashboardApp)
        await settle(pilot)
        await until(pilot, lambda: keys(app) != [])
        panel = app.screen.query_one(DefinitionProblems)
        assert panel.display
        overview = app.overview
        assert overview is not None
        row = overview.row("quote")
        seen.append((keys(app), panel.render().plain, control_sequences(terminal_bytes(app)),
                     row.status.reason if row is not None else "", cell(app, "quote", "status")))
        await pilot.press("enter")  # its detail opens as any guard's does
        await settle(pilot)
        assert isinstance(app.screen, DetailScreen) and app.screen.guard == "quote"
        app.exit()

    result = dashboard_command(monkeypatch, config, look)
    assert result.exit_code == 0, result.output
    assert seen, f"the dashboard never showed: {result.output}"
    guards, shown, escapes, reason, badge = seen[0]
    assert guards == ["quote", "cite"]  # the asleep first
    assert reason.startswith("its definition file has an error (above); last recorded: asleep at "), reason
    assert "ASLEEP" in badge, badge
    defs = tmp_path / "agent" / "defs"
    assert shown.splitlines() == [
        "2 problems in the definitions: the guard quote is shown below by the status the store last "
        "recorded of it (a running daemon keeps the definitions it loaded until they are fixed)",
        f"{defs / 'number.toml'}:1: invalid TOML: Expected ']' at the end of a table declaration (column 7)",
        f"{defs / 'quote.toml'}:1: guard.\\x1b]0;PWNED\\x07: unknown key; known keys here: name, description, "
        "match, span, event, window, grace",
    ]
    assert escapes == set()  # the escape in the key is drawn as text, never sent


def test_without_broken_definitions_no_panel_shows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = project(tmp_path / "agent")
    for name in ("quote", "number"):
        (tmp_path / "agent" / "defs" / f"{name}.toml").unlink()
    seen: list[bool] = []

    async def look(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        seen.append(pilot.app.screen.query_one(DefinitionProblems).display)
        pilot.app.exit()

    result = dashboard_command(monkeypatch, config, look)
    assert result.exit_code == 0, result.output
    assert seen == [False]


def test_an_error_in_canary_toml_itself_still_stops_the_dashboard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = project(tmp_path / "agent")
    config.write_text(config.read_text(encoding="utf-8") + "colour = 'red'\n", encoding="utf-8")
    opened: list[bool] = []

    async def look(pilot: Pilot[Any]) -> None:
        opened.append(True)
        pilot.app.exit()

    result = dashboard_command(monkeypatch, config, look)
    assert result.exit_code == 2 and opened == []
    assert f"{config}:" in result.stderr and "colour" in result.stderr


def test_a_project_with_no_guard_says_nothing_is_watched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As ``canary status`` says it: an empty table alone would read as nothing wrong."""
    config = project(tmp_path / "agent")
    config.write_text(config.read_text(encoding="utf-8").replace("defs = ['defs/*.toml']", "defs = []"),
                      encoding="utf-8")
    seen: list[tuple[bool, str]] = []

    async def look(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        panel = pilot.app.screen.query_one(DefinitionProblems)
        seen.append((panel.display, panel.render().plain))
        pilot.app.exit()

    result = dashboard_command(monkeypatch, config, look)
    assert result.exit_code == 0, result.output
    assert seen == [(True, no_guards(config))]
