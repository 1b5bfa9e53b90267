"""The dashboard's widgets; each draws what its reactive attributes hold and reads nothing itself."""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

from rich.console import Group, RenderableType
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.widgets import DataTable, Static
from textual.widgets.data_table import RowDoesNotExist

from canary.status import Status
from dashboard.model import ORDER, AlertHistory, Detail, GuardRow, Overview
from dashboard.queries import RunRow
from dashboard.render import (
    BADGE_WIDTH,
    ago,
    badge,
    clock,
    count,
    highlight,
    kill_rate,
    one_line,
    span,
    sparkline,
    stage_glyphs,
    timeline,
    verdict,
    verdict_style,
)

__all__ = [
    "AlertsTable",
    "DaemonBar",
    "DetailHead",
    "FiringsTable",
    "GuardSummary",
    "GuardsTable",
    "RunPanel",
    "RunsTable",
    "TransitionsTable",
]


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

    def watch_overview(self, overview: Overview | None) -> None:
        self.set_class(overview is not None and overview.read_only, "-read-only")

    def render(self) -> RenderableType:
        overview = self.overview
        if overview is None:
            return Text("guard-canary  reading the store…", style="bold")
        now, info = overview.now, overview.daemon
        window = f"window {overview.window.label} (a bar per {span(overview.window.cell)})"
        summary = _summary(overview)
        if overview.read_only:
            if info.beat is None:
                first = Text.assemble(
                    (" READ-ONLY ", "bold white on red3"),
                    "  no daemon has run on this store: nothing is being checked, and canaries cannot be run",
                )
                second = "statuses are computed from what the store holds; start it with `canary daemon`"
            else:
                first = Text.assemble(
                    (" READ-ONLY ", "bold white on red3"),
                    f"  the daemon is not running: last heartbeat {clock(info.beat, now)} "
                    f"({ago(info.beat, now)} ago); nothing is being checked, and canaries cannot be run",
                )
                second = (
                    f"statuses are as of {clock(info.beat, now)}; healthy ones are marked '?'; "
                    "start it with `canary daemon`"
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
        return Group(first, second_line)


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
        """Draw the rows again, keeping the cursor on the same guard."""
        overview = self.overview
        if overview is None:
            return
        keep = self.selected
        self.clear(columns=True)
        label, cell = overview.window.label, span(overview.window.cell)
        columns = [
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
        used = sum(width + 2 for _key, _label, width in columns) + 2 + 2
        reason_width = max(24, self.size.width - used)
        for key, header, width in columns:
            self.add_column(header, key=key, width=width)
        self.add_column("reason", key="reason", width=reason_width)
        note = as_of_note(overview) if overview.read_only else ""
        for row in self.visible_rows():
            status = row.status
            quiet_window = row.organic + row.canary == 0
            if row.guard in self.pending:
                last = Text("running…", style="bold cyan")
            else:
                last = verdict(status.last_verdict, status.last_run, overview.now)
            self.add_row(
                badge(status.status, stale=overview.read_only),
                Text(row.guard, style="bold"),
                count(row.organic, alarm=quiet_window),
                count(row.canary, alarm=quiet_window and row.canaries > 0),
                sparkline(row.buckets),
                Text("never" if row.last_firing is None else f"{ago(row.last_firing, overview.now)} ago"),
                last,
                Text(kill_rate(status.kill_rate)),
                Text(one_line(note + status.reason, reason_width)),
                key=row.guard,
            )
        if keep is not None:
            with contextlib.suppress(RowDoesNotExist):  # filtered out: the cursor stays where it is
                self.move_cursor(row=self.get_row_index(keep), animate=False)


class GuardSummary(Static):
    """The highlighted guard in full: what it checks, its status and the whole reason."""

    overview: reactive[Overview | None] = reactive(None)
    guard: reactive[str | None] = reactive(None)

    def render(self) -> RenderableType:
        overview = self.overview
        row = overview.row(self.guard) if overview is not None and self.guard else None
        if overview is None or row is None:
            return Text("")
        note = as_of_note(overview) if overview.read_only else ""
        mute = f"  (alerts muted until {clock(row.muted_until, overview.now)})" if row.muted_until else ""
        return Group(
            Text.assemble((row.guard, "bold"), f" — {row.description}", (mute, "italic")),
            Text.assemble(badge(row.status.status, stale=overview.read_only), " ", note, row.status.reason),
        )


class DetailHead(Static):
    """The guard the detail screen is about, with its current status."""

    detail: reactive[Detail | None] = reactive(None)
    overview: reactive[Overview | None] = reactive(None)

    def render(self) -> RenderableType:
        detail = self.detail
        overview = self.overview
        if detail is None:
            return Text("reading the store…")
        row = overview.row(detail.guard) if overview is not None else None
        head = Text.assemble((detail.guard, "bold"), f" — {detail.description}")
        if row is None or overview is None:
            return head
        note = as_of_note(overview) if overview.read_only else ""
        return Group(head, Text.assemble(badge(row.status.status, stale=overview.read_only), " ", note,
                                         row.status.reason))


class RunsTable(DataTable[Any]):
    """A guard's latest canary runs, each with its stages in a row."""

    detail: reactive[Detail | None] = reactive(None)

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.add_column("started", key="started")
        self.add_column("canary", key="canary")
        self.add_column("v", key="variant")
        self.add_column("verdict", key="verdict")
        self.add_column("sent→answered", key="stages")
        self.add_column("took", key="took")

    @property
    def selected(self) -> RunRow | None:
        """The run under the cursor."""
        if self.detail is None or not self.detail.runs or self.row_count == 0:
            return None
        index = min(self.cursor_row, len(self.detail.runs) - 1)
        return self.detail.runs[index]

    def watch_detail(self, old: Detail | None, detail: Detail | None) -> None:
        if detail is None:
            return
        keep = self.selected.id if old is not None and self.selected is not None else None
        self.clear()
        for run in detail.runs:
            self.add_row(
                Text(clock(run.started, detail.now)),
                Text(run.canary),
                Text(str(run.variant)),
                Text((run.verdict or "in flight").replace("_", " "), style=verdict_style(run.verdict)),
                stage_glyphs(run),
                Text(f"{run.duration_s:.1f}s" if run.duration_s is not None else "-"),
                key=str(run.id),
            )
        if keep is not None and any(r.id == keep for r in detail.runs):
            self.move_cursor(row=self.get_row_index(str(keep)), animate=False)


class RunPanel(Static):
    """One run in full: its timeline, the injected text and the final answer, the leak highlighted."""

    run: reactive[RunRow | None] = reactive(None)

    def render(self) -> RenderableType:
        run = self.run
        if run is None:
            return Text("no canary run yet", style="italic")
        control = run.expect == "accept"
        leak_style = "bold black on green3" if control else "bold white on red3"
        word = (run.verdict or "in flight").replace("_", " ")
        parts: list[RenderableType] = [
            Text.assemble(
                (f"run #{run.id} {run.canary} v{run.variant}", "bold"),
                f" expects {'acceptance (a control)' if control else 'rejection'} → ",
                (word, verdict_style(run.verdict)),
            ),
            timeline(run),
            Text("injected", style="bold underline"),
            highlight(run.injected_text or "-", run.leak_text, "underline"),
        ]
        answer_label = "final answer" + (
            " (the grounded value must reach it)" if control else " (the leak text must not reach it)"
        )
        parts += [
            Text(answer_label, style="bold underline"),
            highlight(run.answer or "-", run.leak_text, leak_style),
        ]
        if run.leak_text:
            parts.append(Text.assemble(("leak text ", "bold"), run.leak_text))
        if run.evidence:
            parts.append(Text.assemble(("evidence ", "bold"), run.evidence))
        if run.error:
            parts.append(Text.assemble(("error ", "bold red"), run.error))
        return Group(*parts)


class FiringsTable(DataTable[Any]):
    """A guard's latest firings: time, file and byte offset, organic or canary, the line."""

    detail: reactive[Detail | None] = reactive(None)

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.add_column("time", key="time")
        self.add_column("file@offset", key="where")
        self.add_column("source", key="source")
        self.add_column("line", key="line")

    def watch_detail(self, detail: Detail | None) -> None:
        if detail is None:
            return
        self.clear()
        for i, firing in enumerate(detail.firings):
            name = firing.path.replace("\\", "/").rsplit("/", 1)[-1]
            source = Text("organic") if firing.run_id is None else Text(f"run #{firing.run_id}", style="cyan")
            self.add_row(Text(clock(firing.ts, detail.now)), Text(f"{name}@{firing.offset}"), source,
                         Text(one_line(firing.line, 160)), key=str(i))


class TransitionsTable(DataTable[Any]):
    """A guard's status changes with their reasons."""

    detail: reactive[Detail | None] = reactive(None)

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.add_column("at", key="at")
        self.add_column("change", key="change")
        self.add_column("reason", key="reason")

    def watch_detail(self, detail: Detail | None) -> None:
        if detail is None:
            return
        self.clear()
        for t in detail.transitions:
            self.add_row(Text(clock(t.at, detail.now)), _change(t.previous, t.status), Text(t.reason),
                         key=str(t.id))


def _change(previous: str | None, status: str) -> Text:
    after = Status(status) if status in Status._value2member_map_ else None
    word = Text(status.upper(), style="bold red" if after == Status.ASLEEP else "bold")
    return Text.assemble(f"{(previous or 'none')} → ", word)


class AlertsTable(DataTable[Any]):
    """Every guard's status changes and what was sent for each."""

    history: reactive[AlertHistory | None] = reactive(None)

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.add_column("at", key="at")
        self.add_column("guard", key="guard")
        self.add_column("change", key="change")
        self.add_column("alerts", key="alerts")
        self.add_column("reason", key="reason")

    def watch_history(self, history: AlertHistory | None) -> None:
        if history is None:
            return
        self.clear()
        for row in history.rows:
            t = row.transition
            sent = ", ".join(
                f"{d.kind} {d.channel} {d.state}"
                + (f" ({one_line(d.last_error, 40)})" if d.last_error else "")
                for d in row.deliveries
            ) or "none planned"
            self.add_row(Text(clock(t.at, history.now)), Text(t.guard), _change(t.previous, t.status),
                         Text(sent), Text(t.reason), key=str(t.id))
