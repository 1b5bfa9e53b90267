"""The overview's widgets: the daemon's health, the guards table, the highlighted guard, the latest runs."""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

from rich.console import Group, RenderableType
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.widgets import DataTable, Static
from textual.widgets.data_table import RowDoesNotExist

from canary.terminal import safe
from canary.vocabulary import Status
from dashboard.model import ORDER, GuardRow, Overview
from dashboard.render import (
    BADGE_WIDTH,
    ago,
    badge,
    clock,
    count,
    guard_kill,
    guard_verdict,
    holes,
    one_line,
    outcome,
    span,
    sparkline,
    stage_glyphs,
    verdict_text,
)
from dashboard.widgets.tables import Column, Drawn, draw, seen_as

__all__ = ["DaemonBar", "GuardSummary", "GuardsTable", "RecentRuns", "as_of_note"]


def _address(url: str | None) -> str:
    return url.removeprefix("http://").removeprefix("https://") if url else "-"


def as_of_note(overview: Overview) -> str:
    """The words put before every reason when the daemon is not running."""
    beat = overview.daemon.beat
    if beat is None:
        return "no daemon has run on this store: "
    return f"as of {clock(beat, overview.now)}, daemon down: "


class DaemonBar(Static):
    """The daemon's health and the window shown; a read-only notice when no daemon runs."""

    overview: reactive[Overview | None] = reactive(None)
    #: The command that starts the daemon of the config shown (the app sets it).
    start: str = "canary daemon"

    def watch_overview(self, overview: Overview | None) -> None:
        self.set_class(overview is not None and overview.read_only, "-read-only")
        self.set_class(overview is not None and bool(overview.model), "-model-down")
        self.set_class(overview is not None and not overview.read_only and bool(overview.warning), "-warned")

    def render(self) -> RenderableType:
        overview = self.overview
        if overview is None:
            return Text("guard-canary  reading the store…", style="bold")
        now, info = overview.now, overview.daemon
        window = f"window {overview.window.label} (a bar per {span(overview.window.cell)})"
        summary = _summary(overview)
        if info.error:
            first = Text.assemble((" DAEMON ERROR ", "bold white on red3"), "  ", info.error)
            return Group(first, Text.assemble("statuses may be stale · ", window, " · ", summary))
        if overview.read_only:
            if overview.missing_site is not None:
                site = overview.missing_site
                first = Text.assemble(
                    (" READ-ONLY ", "bold white on red3"),
                    f"  no daemon has written the rows of project {safe(site.project)} on machine "
                    f"{safe(site.machine)} to this shared store yet: nothing is being checked, and canaries "
                    "cannot be run",
                )
                second = f"start one with `{self.start}`; its rows show here once it has written them"
            elif info.beat is None:
                first = Text.assemble(
                    (" READ-ONLY ", "bold white on red3"),
                    "  no daemon has run on this store: nothing is being checked, and canaries cannot be run",
                )
                second = f"statuses are computed from what the store holds; start it with `{self.start}`"
            else:
                first = Text.assemble(
                    (" READ-ONLY ", "bold white on red3"),
                    f"  the daemon is not running: last heartbeat {clock(info.beat, now)} "
                    f"({ago(info.beat, now)} ago); nothing is being checked, and canaries cannot be run",
                )
                second = (
                    f"statuses are as of {clock(info.beat, now)}; healthy ones are marked '?'; "
                    f"start it with `{self.start}`"
                )
            return Group(first, Text.assemble(second, " · ", window, " · ", summary))
        up = f"up since {clock(info.since, now)} ({ago(info.since, now)})" if info.since else "up"
        beat = f"heartbeat {ago(info.beat, now)} ago" if info.beat else "no heartbeat"
        files = f"{info.files} file{'s' if info.files != 1 else ''} followed"
        first = Text.assemble(
            ("guard-canary", "bold"), "  ", ("● daemon", "bold green"),
            f" {up} · pid {info.pid} · {beat} · {files}",
        )
        second_line = Text.assemble(
            f"proxy {_address(info.proxy)} · fixtures {_address(info.fixtures)} · ", (window, "bold"), " · ",
            summary,
        )
        lines = [first, second_line]
        if overview.model:
            lines.append(Text(f"● {overview.model}", style="bold red"))
        if overview.warning:
            lines.append(Text(f"▲ collector warning: {overview.warning}", style="yellow"))
        return Group(*lines)


def _summary(overview: Overview) -> Text:
    counts = {s: sum(r.status.status == s for r in overview.rows) for s in ORDER}
    text = Text()
    for status, n in counts.items():
        if n:
            if text:
                text.append(", ")
            style = "bold red" if status == Status.ASLEEP else ""
            text.append(f"{n} {status.value}", style=style)
    return text or Text("no guards")


class GuardsTable(DataTable[Any]):
    """Every guard, the unhealthy first: badge, window counts, sparkline, last firing, last verdict."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "select_cursor", "Details")]

    overview: reactive[Overview | None] = reactive(None)
    filter_text: reactive[str] = reactive("")
    pending: reactive[frozenset[str]] = reactive(frozenset())
    _drawn: Drawn | None = None  # what the table shows now

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True

    @property
    def selected(self) -> str | None:
        """The guard under the cursor."""
        if self.row_count == 0:
            return None
        key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        return str(key.value) if key.value is not None else None

    def visible_rows(self) -> list[GuardRow]:
        """The rows the filter lets through (name, status word or reason, any case)."""
        if self.overview is None:
            return []
        needle = self.filter_text.strip().lower()
        rows = list(self.overview.rows)
        if needle:
            rows = [
                r for r in rows
                if needle in r.guard.lower()
                or needle in r.status.status.value
                or needle in r.status.reason.lower()
            ]
        return rows

    def watch_overview(self) -> None:
        self.rebuild()

    def watch_filter_text(self) -> None:
        self.rebuild()

    def watch_pending(self) -> None:
        self.rebuild()

    def on_resize(self) -> None:
        self.rebuild()

    def rebuild(self) -> None:
        """Draw what changed in the rows, keeping the cursor on the same guard."""
        overview = self.overview
        if overview is None:
            return
        keep = self.selected
        label, cell = overview.window.label, span(overview.window.cell)
        columns: list[Column] = [
            ("status", "status", BADGE_WIDTH),
            ("guard", "guard", max([5, *(len(r.guard) for r in overview.rows)])),
            ("organic", f"organic/{label}", len(f"organic/{label}")),
            ("canary", "canary", 6),
            ("spark", f"firings per {cell}", max(overview.window.cells, len(f"firings per {cell}"))),
            ("last_firing", "last firing", 11),
            ("verdict", "last verdict", 24),
            ("kill", "kill", 4),
        ]
        # Every column has a cell padding of 1 on each side; the rest of the width is the reason's.
        used = sum((width or 0) + 2 for _key, _label, width in columns) + 2 + 2
        reason_width = max(24, self.size.width - used)
        columns.append(("reason", "reason", reason_width))
        self._drawn = draw(self, columns, [(row.guard, self._cells(row, overview, reason_width))
                                           for row in self.visible_rows()], self._drawn)
        if keep is not None and self.selected != keep:
            with contextlib.suppress(RowDoesNotExist):  # filtered out: the cursor stays where it is
                self.move_cursor(row=self.get_row_index(keep), animate=False)

    def _cells(self, row: GuardRow, overview: Overview, reason_width: int) -> list[Text]:
        status = row.status
        quiet_window = row.organic + row.canary == 0
        if row.guard in self.pending:
            last = Text("running…", style="bold cyan")
        else:
            last = guard_verdict(status.status, status.last_verdict, status.last_run, row.families,
                                 overview.now)
        return [
            badge(status.status, stale=overview.read_only),
            Text(row.guard, style="bold"),
            count(row.organic, alarm=quiet_window),
            count(row.canary, alarm=quiet_window and row.canaries > 0),
            sparkline(row.buckets),
            Text("never" if row.last_firing is None else f"{ago(row.last_firing, overview.now)} ago"),
            last,
            guard_kill(status.kill_rate, row.families),
            Text(one_line(status.reason, reason_width)),
        ]


#: The latest runs' columns, each as wide as its cells.
RUN_COLUMNS: tuple[Column, ...] = (
    ("started", "started", None), ("guard", "guard", None), ("canary", "canary", None),
    ("verdict", "verdict", None), ("stages", "sent→answered", None), ("outcome", "what happened", None),
)


class RecentRuns(DataTable[Any]):
    """The latest canary runs of every guard: where each one ended."""

    overview: reactive[Overview | None] = reactive(None)
    _drawn: Drawn | None = None  # what the table shows now

    def on_mount(self) -> None:
        self.cursor_type = "none"
        self._drawn = draw(self, RUN_COLUMNS, [], None)

    def watch_overview(self, overview: Overview | None) -> None:
        if overview is None:
            return
        rows = [
            (str(run.id), [
                Text(clock(run.started, overview.now)),
                Text(run.guard, style="bold"),
                Text(run.canary),
                verdict_text(run),
                stage_glyphs(run),
                Text(one_line(outcome(run), 100)),
            ])
            for run in overview.runs
        ]
        self._drawn = draw(self, RUN_COLUMNS, rows, self._drawn)
        self.border_subtitle = "no canary run yet" if not overview.runs else f"latest {len(overview.runs)}"


class GuardSummary(Static):
    """The highlighted guard in full: what it checks, its status and the whole reason."""

    overview: reactive[Overview | None] = reactive(None)
    guard: reactive[str | None] = reactive(None)
    _shown: tuple[Any, ...] | None = None  # what it shows now
    _content: RenderableType = Text("")

    def watch_overview(self) -> None:
        self._show()

    def watch_guard(self) -> None:
        self._show()

    def _show(self) -> None:
        """Draw the summary again only when its words changed (a longer reason may take more lines)."""
        lines = self._lines()
        seen = tuple(seen_as(line) for line in lines)
        if seen != self._shown:
            self._shown = seen
            self._content = Group(*lines) if lines else Text("")
            self.refresh(layout=True)

    def render(self) -> RenderableType:
        return self._content

    def _lines(self) -> list[Text]:
        overview = self.overview
        row = overview.row(self.guard) if overview is not None and self.guard else None
        if overview is None or row is None:
            return []
        note = as_of_note(overview) if overview.read_only else ""
        mute = f"  (alerts muted until {clock(row.muted_until, overview.now)})" if row.muted_until else ""
        lines = [
            Text.assemble((safe(row.guard), "bold"), f" — {safe(row.description)}", (mute, "italic")),
            Text.assemble(badge(row.status.status, stale=overview.read_only), " ", note,
                          safe(row.status.reason)),
        ]
        hole = holes(row.families)
        return [*lines, hole] if hole is not None else lines
