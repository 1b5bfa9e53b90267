"""The alert history: every status change, newest first, and what was sent for it."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Static

from dashboard.messages import AlertsLoaded
from dashboard.model import Overview, load_alerts
from dashboard.screens._owner import dashboard_app
from dashboard.stores import project_rows
from dashboard.widgets import AlertsTable


class AlertsScreen(Screen[None]):
    """Status changes of every guard and the alerts planned from them."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "Back")]

    def compose(self) -> ComposeResult:
        yield Static("Alert history: every change of status, newest first, and what was sent for it.",
                     id="alerts-head")
        yield AlertsTable(id="alerts")
        yield Footer()

    def on_mount(self) -> None:
        self.watch(dashboard_app(self), "overview", self._overview_changed)
        self.query_one(AlertsTable).focus()

    def _overview_changed(self, overview: Overview | None) -> None:
        app = dashboard_app(self)
        store, now = app.store, app.clock()

        def job() -> Message:
            with project_rows(store) as rows:
                return AlertsLoaded(load_alerts(rows, now=now))

        app.read("alerts", job, self, again=True)

    def on_alerts_loaded(self, message: AlertsLoaded) -> None:
        self.query_one(AlertsTable).history = message.history
