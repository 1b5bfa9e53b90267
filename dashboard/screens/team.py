"""The team: every project's daemon on every machine of a shared store, with a project column."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from canary.status.team import team_view
from canary.terminal import safe
from canary.vocabulary import Status
from dashboard.messages import TeamLoaded
from dashboard.model import Overview
from dashboard.render import ago, badge
from dashboard.screens._owner import dashboard_app

COLUMNS = ("Project", "Machine", "Daemon", "Guard", "Status", "Since", "Reason")


class TeamScreen(Screen[None]):
    """A row per guard of every project and machine in the store; a stale daemon is named."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "Back")]

    def compose(self) -> ComposeResult:
        yield Static("Team: every project's daemon on every machine of this store, and its guards.",
                     id="team-head")
        yield DataTable(id="team", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns(*COLUMNS)
        self.watch(dashboard_app(self), "overview", self._overview_changed)
        self.query_one(DataTable).focus()

    def _overview_changed(self, overview: Overview | None) -> None:
        app = dashboard_app(self)
        store = app.store

        def job() -> Message:
            return TeamLoaded(team_view(store))

        app.read("team", job, self, again=True)

    def on_team_loaded(self, message: TeamLoaded) -> None:
        table = self.query_one(DataTable)
        table.clear()
        now = dashboard_app(self).clock()
        for site in message.sites:
            daemon = ("running" if site.running(now)
                      else f"stopped {ago(site.stopped, now)} ago" if site.stopped
                      else f"stale, last beat {ago(site.beat, now)}")
            for guard in site.guards or []:
                known = guard.status in Status._value2member_map_
                shown = badge(Status(guard.status), stale=not site.running(now)) if known else guard.status
                table.add_row(safe(site.project), safe(site.machine), daemon, safe(guard.guard), shown,
                              ago(guard.since, now), safe(guard.reason))
            if not site.guards:
                table.add_row(safe(site.project), safe(site.machine), daemon, "-", "-", "-", "no status yet")
