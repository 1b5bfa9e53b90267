"""The detail screen's widgets: a guard's runs drawn stage by stage, its firings, its status changes."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text
from textual.reactive import reactive
from textual.widgets import DataTable, Static

from canary.sentences import AMBIGUOUS_ADVICE
from canary.store.nonces import SIGNAL_PATH
from canary.terminal import safe
from canary.vocabulary import Status
from dashboard.model import AlertHistory, Detail, Overview
from dashboard.queries import FiringRow, RunRow
from dashboard.render import (
    badge,
    clock,
    family_line,
    highlight,
    one_line,
    stage_glyphs,
    timeline,
    verdict_style,
    verdict_text,
)
from dashboard.widgets.overview import as_of_note

__all__ = ["AlertsTable", "DetailHead", "FiringsTable", "RunPanel", "RunsTable", "TransitionsTable"]


class DetailHead(Static):
    """The guard the detail screen is about, with its current status."""

    # layout=True: the families below the status take a line each, so the height is measured again.
    detail: reactive[Detail | None] = reactive(None, layout=True)
    overview: reactive[Overview | None] = reactive(None, layout=True)

    def render(self) -> RenderableType:
        detail = self.detail
        overview = self.overview
        if detail is None:
            return Text("reading the store…")
        row = overview.row(detail.guard) if overview is not None else None
        head = Text.assemble((safe(detail.guard), "bold"), f" — {safe(detail.description)}")
        if row is None or overview is None:
            return head
        note = as_of_note(overview) if overview.read_only else ""
        parts: list[RenderableType] = [
            head, Text.assemble(badge(row.status.status, stale=overview.read_only), " ", note,
                                safe(row.status.reason)),
        ]
        if row.families:
            parts.append(Text("kill rate per variant family, in the guard's window", style="bold underline"))
            parts += [family_line(f) for f in row.families]
        return Group(*parts)


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

    def watch_detail(self, detail: Detail | None) -> None:
        if detail is None:
            return
        keep = None
        if self.row_count:
            keep = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        self.clear()
        for run in detail.runs:
            self.add_row(
                Text(clock(run.started, detail.now)),
                Text(run.canary),
                Text(str(run.variant)),
                verdict_text(run),
                stage_glyphs(run),
                Text(f"{run.duration_s:.1f}s" if run.duration_s is not None else "-"),
                key=str(run.id),
            )
        if keep is not None and any(str(r.id) == keep for r in detail.runs):
            self.move_cursor(row=self.get_row_index(keep), animate=False)


_MARKS = {
    "trace": "the trace id of one of the run's model calls (its traceparent) on the guard's span",
    "nonce": "the run's nonce in the guard's line",
    "task": "the run's task id in the guard's line ([logs] correlate)",
    "value": "the run's fabricated value in the guard's line",
    "time": "time alone: the guard fired in the run's span and the agent did no other work",
}


def tied_by(run: RunRow) -> str | None:
    """Which mark tied the firing to the run; for an ambiguous run, the foreign calls counted."""
    if run.verdict == "ambiguous":
        return (f"nothing: the guard's lines carry no mark of the run, and {run.foreign_calls} "
                f"model call(s) without the nonce came through meanwhile; {AMBIGUOUS_ADVICE}")
    return _MARKS.get(run.attribution or "")


class RunPanel(Static):
    """One run in full: its timeline, the injected text and the final answer, the leak highlighted."""

    run: reactive[RunRow | None] = reactive(None, layout=True)
    #: The agent's log lines stored as the run's firings; set before ``run``.
    lines: tuple[FiringRow, ...] = ()

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
            Text(""),
            Text("injected", style="bold underline"),
            highlight(run.injected_text or "-", run.leak_text, "underline"),
        ]
        answer_label = "final answer" + (
            " (the grounded value must reach it)" if control else " (the leak text must not reach it)"
        )
        parts += [
            Text(""),
            Text(answer_label, style="bold underline"),
            highlight(run.answer or "-", run.leak_text, leak_style),
            Text(""),
        ]
        if run.leak_text:
            parts.append(Text.assemble(("grounded " if control else "leak text ", "bold"),
                                       safe(run.leak_text)))
        if run.evidence:
            parts.append(Text.assemble(("evidence ", "bold"), safe(run.evidence)))
        tied = tied_by(run)
        if tied:
            parts.append(Text.assemble(("tied by ", "bold"), tied))
        if run.error:
            parts.append(Text.assemble(("error ", "bold red"), safe(run.error)))
        parts += [Text(""), Text("the agent's log lines of this run", style="bold underline")]
        if not self.lines:
            parts.append(Text("none stored: no line of the agent's log was a firing of this run",
                              style="italic"))
        for line in self.lines:
            parts.append(Text.assemble((f"{where(line.path, line.offset)} ", "dim"), safe(line.line)))
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
            self.add_row(Text(clock(firing.ts, detail.now)), Text(where(name, firing.offset, firing.path)),
                         source, Text(one_line(firing.line, 160)), key=str(i))


def where(shown: str, offset: int, path: str | None = None) -> str:
    """Where a firing was read: ``file@offset``, or the trace receiver for one seen in a span or an OTLP
    log record (stored under ``SIGNAL_PATH``, with no offset)."""
    if (path if path is not None else shown) == SIGNAL_PATH:
        return RECEIVER
    return safe(f"{shown}@{offset}")


#: How the dashboard names where a span's or an OTLP log record's firing came from.
RECEIVER = "trace receiver (OTLP)"


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
            self.add_row(Text(clock(t.at, detail.now)), _change(t.previous, t.status), Text(safe(t.reason)),
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
            self.add_row(Text(clock(t.at, history.now)), Text(safe(t.guard)), _change(t.previous, t.status),
                         Text(safe(sent)), Text(safe(t.reason)), key=str(t.id))
