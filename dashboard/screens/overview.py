"""The overview: the daemon's health, then every guard, the unhealthy first."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input

from canary.config.commandline import no_guards
from canary.status.problems import broken_guards
from dashboard.model import Overview
from dashboard.screens._owner import dashboard_app
from dashboard.screens.detail import DetailScreen
from dashboard.widgets import DaemonBar, DefinitionProblems, GuardsTable, GuardSummary, RecentRuns


class OverviewScreen(Screen[None]):
    """Which guards are awake: one row per guard."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "run_selected", "Run"),
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("m", "mute", "Mute"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    filter_text: reactive[str] = reactive("")

    def compose(self) -> ComposeResult:
        bar = DaemonBar(id="daemon")
        bar.start = dashboard_app(self).start_daemon
        yield bar
        yield DefinitionProblems(id="definitions")
        yield GuardsTable(id="guards").data_bind(filter_text=OverviewScreen.filter_text)
        yield GuardSummary(id="summary")
        yield RecentRuns(id="recent")
        yield Input(placeholder="filter by guard, status or reason — Enter keeps it, Esc clears it",
                    id="filter", classes="-hidden")
        yield Footer()

    def on_mount(self) -> None:
        app = dashboard_app(self)
        broken = app.config.broken
        self.query_one(DefinitionProblems).show(
            broken, broken_guards(app.config) if broken else [],
            none_defined=None if app.config.guards else no_guards(app.config.path),
        )
        self.watch(app, "overview", self._show)
        self.watch(app, "pending", self._pending)
        self.query_one(RecentRuns).border_title = "latest canary runs, every guard"
        self.query_one(GuardsTable).focus()

    def _show(self, overview: Overview | None) -> None:
        self.query_one(DaemonBar).overview = overview
        table = self.query_one(GuardsTable)
        table.overview = overview
        summary = self.query_one(GuardSummary)
        summary.overview = overview
        summary.guard = table.selected
        self.query_one(RecentRuns).overview = overview

    def _pending(self, pending: frozenset[str]) -> None:
        self.query_one(GuardsTable).pending = pending

    def selected_guard(self) -> str | None:
        """The guard under the cursor."""
        return self.query_one(GuardsTable).selected

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.query_one(GuardSummary).guard = str(event.row_key.value)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.app.push_screen(DetailScreen(str(event.row_key.value)))

    def action_run_selected(self) -> None:
        """Run the selected guard's canaries now, through the daemon."""
        guard = self.selected_guard()
        if guard is not None:
            dashboard_app(self).request_run([guard])

    def action_mute(self) -> None:
        """Mute the selected guard's alerts for a chosen time."""
        guard = self.selected_guard()
        if guard is not None:
            dashboard_app(self).request_mute(guard)

    def action_filter(self) -> None:
        """Show the filter box."""
        box = self.query_one("#filter", Input)
        box.remove_class("-hidden")
        box.focus()

    def action_clear_filter(self) -> None:
        """Clear and hide the filter box."""
        box = self.query_one("#filter", Input)
        box.value = ""
        self.filter_text = ""
        box.add_class("-hidden")
        self.query_one(GuardsTable).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value

    def on_input_submitted(self, event: Input.Submitted) -> None:
        box = self.query_one("#filter", Input)
        if not box.value:
            box.add_class("-hidden")
        self.query_one(GuardsTable).focus()
