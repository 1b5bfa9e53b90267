"""One guard in detail: its canary runs drawn stage by stage, its firings, its status changes."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import DataTable, Footer

from dashboard.messages import DetailLoaded
from dashboard.model import Detail, Overview, load_detail
from dashboard.screens._owner import dashboard_app
from dashboard.stores import project_rows
from dashboard.widgets import DetailHead, FiringsTable, RunPanel, RunsTable, TransitionsTable


class DetailScreen(Screen[None]):
    """Everything known about one guard."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("r", "run", "Run"),
        Binding("m", "mute", "Mute"),
    ]

    detail: reactive[Detail | None] = reactive(None)

    def __init__(self, guard: str) -> None:
        super().__init__()
        self.guard = guard

    def compose(self) -> ComposeResult:
        yield DetailHead(id="detail-head").data_bind(detail=DetailScreen.detail)
        with Horizontal(id="runs-row"):
            yield RunsTable(id="runs").data_bind(detail=DetailScreen.detail)
            with VerticalScroll(id="run-scroll"):
                yield RunPanel(id="run")
        with Horizontal(id="history-row"):
            yield FiringsTable(id="firings").data_bind(detail=DetailScreen.detail)
            yield TransitionsTable(id="transitions").data_bind(detail=DetailScreen.detail)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(RunsTable).border_title = "canary runs (Tab to move between panes)"
        self.query_one("#run-scroll").border_title = "the highlighted run"
        self.query_one(FiringsTable).border_title = "recent firings"
        self.query_one(TransitionsTable).border_title = "status changes"
        self.watch(dashboard_app(self), "overview", self._overview_changed)
        self.query_one(RunsTable).focus()

    def _overview_changed(self, overview: Overview | None) -> None:
        self.query_one(DetailHead).overview = overview
        self.reload()

    def reload(self) -> None:
        """Read the guard's firings, runs and transitions again, in a thread."""
        app = dashboard_app(self)
        store, config, guard, now = app.store, app.config, self.guard, app.clock()

        def job() -> Message:
            with project_rows(store) as rows:
                return DetailLoaded(load_detail(rows, config, guard, now=now))

        app.read("detail", job, self, again=True)

    def on_detail_loaded(self, message: DetailLoaded) -> None:
        detail = message.detail
        self.detail = detail
        self._show_run()
        counts = (
            (RunsTable, len(detail.runs), "run", "no canary run yet"),
            (FiringsTable, len(detail.firings), "firing", "none recorded"),
            (TransitionsTable, len(detail.transitions), "change", "none yet"),
        )
        for widget, n, noun, none in counts:
            plural = "" if n == 1 else "s"
            self.query_one(widget).border_subtitle = none if n == 0 else f"latest {n} {noun}{plural}"

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table is self.query_one(RunsTable):
            self._show_run()

    def _show_run(self) -> None:
        """The highlighted run in the panel, with the agent's log lines stored for it."""
        run, panel = self.query_one(RunsTable).selected, self.query_one(RunPanel)
        panel.lines = self.detail.run_lines.get(run.id, ()) if run and self.detail else ()
        panel.run = run
        panel.refresh(layout=True)

    def selected_guard(self) -> str | None:
        """The guard this screen is about."""
        return self.guard

    def action_run(self) -> None:
        """Run this guard's canaries now, through the daemon."""
        dashboard_app(self).request_run([self.guard])

    def action_mute(self) -> None:
        """Mute this guard's alerts for a chosen time."""
        dashboard_app(self).request_mute(self.guard)

