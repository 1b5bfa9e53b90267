"""What the commands print: tables, from results the library returns (sentences: ``canary.sentences``).

Every string that came from outside (log lines, answers, agent error bodies, reasons
quoting log text) goes through ``canary.terminal.safe`` before it is styled or printed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from canary.cli.quick import paint
from canary.terminal import safe
from canary.vocabulary import HEALTHY_VERDICTS, Stage, counted, reached

if TYPE_CHECKING:  # the audit's matchers are heavy; ``canary status`` must not load them
    from canary.logs.audit import AuditReport
    from canary.sentences import RunView


def stamp(moment: datetime | None) -> str:
    """A time as ``2026-11-29 10:00:00Z``; ``-`` for None."""
    if moment is None:
        return "-"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def audit_table(report: AuditReport) -> str:
    """The ``canary audit`` table and its summary lines."""
    rows = [("guard", "firings", "organic", "canary", "first", "last", "")]
    for g in report.guards:
        flag = {"asleep": "ASLEEP", "unread": f"unread: {g.unread}", "idle": "idle: no agent activity"}.get(
            g.flag or "", "")
        count = str(g.firings) + (f" (+{g.untimed} untimed)" if g.untimed else "")
        rows.append((safe(g.guard), count, str(g.organic), str(g.canary), stamp(g.first), stamp(g.last),
                     flag))
    widths = [max(len(r[i]) for r in rows) for i in range(7)]
    lines = []
    for i, row in enumerate(rows):
        cells = [row[0].ljust(widths[0]), *(row[j].rjust(widths[j]) for j in (1, 2, 3)),
                 row[4].ljust(widths[4]), row[5].ljust(widths[5]), row[6]]
        line = "  ".join(cells).rstrip()
        if row[6] == "ASLEEP":
            line = paint(line, fg="red", bold=True)
        elif i == 0:
            line = paint(line, bold=True)
        lines.append(line)
    window = (
        f"from {stamp(report.since)} to {stamp(report.until)}" if report.since else "all lines"
    )
    files_ok = [f for f in report.files if f.error is None]
    summary = f"{counted(report.lines, 'line')} in {counted(len(files_ok), 'file')}, {window}"
    if report.activity_configured:
        summary += f"; agent activity: {report.activity}"
    lines.append("")
    lines.append(summary)
    return "\n".join(lines + _audit_findings(report))


def _audit_findings(report: AuditReport) -> list[str]:
    """What the audit's zeros mean: the guards asleep, and those whose zero proves nothing (not all
    they fire through was read, or the agent did no work)."""
    lines = []
    if report.asleep:
        names = safe(", ".join(report.asleep))
        lines.append(
            f"ASLEEP: {names}: zero firings. Run their canaries to tell a well-behaved "
            "model from a guard that never runs."
        )
    if report.idle:
        one = len(report.idle) == 1
        where = "this window" if report.since else "the audited lines"
        lines.append(f"Inconclusive: {safe(', '.join(report.idle))}: no agent activity in {where} (no line "
                     f"matched [logs] activity), so {'its' if one else 'their'} zero proves nothing "
                     "either way.")
    if report.unread:
        one = len(report.unread) == 1
        lines.append(f"Inconclusive: {safe(', '.join(report.unread))}: not all "
                     f"{'it fires' if one else 'they fire'} through was read, so "
                     f"{'its' if one else 'their'} zero proves nothing either way.")
    return lines


def tied_by(r: RunView) -> str:
    """Which mark tied the firing to the run; for an ambiguous run, the foreign calls it saw."""
    if r.verdict == "ambiguous":
        return f"{r.foreign_calls} foreign call(s)"
    return r.attribution or "-"


def runs_table(results: Sequence[RunView]) -> str:
    """The ``canary run`` table: one row per run, its trace, the mark that tied its firing, its evidence."""
    rows = [("guard", "canary", "verdict", "trace", "tied by", "evidence")]
    for r in results:
        evidence = safe(r.evidence or (r.error or ""))
        if len(evidence) > 90:
            evidence = evidence[:87] + "..."
        rows.append((safe(r.guard), safe(r.canary), str(r.verdict).upper(), trace_line(r.trace),
                     tied_by(r), evidence))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = []
    for i, row in enumerate(rows):
        text = "  ".join(cell.ljust(widths[j]) for j, cell in enumerate(row[:5])) + "  " + row[5]
        text = text.rstrip()
        if i == 0:
            text = paint(text, bold=True)
        elif row[2].lower() not in HEALTHY_VERDICTS:
            text = paint(text, fg="red", bold=True)
        lines.append(text)
    return "\n".join(lines)


_SHORT = {Stage.SENT: "sent", Stage.FIXTURE_FETCHED: "fetched", Stage.INJECTED: "injected",
          Stage.FIRED: "FIRED", Stage.REPAIR_REQUESTED: "repair", Stage.ANSWERED: "answered"}


def trace_line(trace: Mapping[Stage, float | None]) -> str:
    """The stages a run went through, in the order they happened, e.g. ``sent>fetched>injected>answered``."""
    return ">".join(_SHORT[stage] for stage in reached(trace))


def team_table(doc: dict[str, Any]) -> str:
    """``canary status --all-projects``: a row per guard of every project and machine, and its daemon."""
    rows = [("PROJECT", "MACHINE", "DAEMON", "GUARD", "STATUS", "REASON")]
    for site in doc["projects"]:
        beat, stopped = site["daemon"]["heartbeat"], site["daemon"].get("stopped")
        daemon = ("running" if site["daemon"]["running"] else f"stopped at {stopped}" if stopped
                  else f"stale (last beat {beat})" if beat else "none ran (no heartbeat)")
        none = [{"guard": "-", "status": "-", "reason": "no status decided yet"}]
        for guard in site["guards"] or none:
            rows.append((site["project"], site["machine"], daemon, guard["guard"], guard["status"],
                         guard["reason"]))
    if len(rows) == 1:
        return f"no project has written to the store at {doc['store']} yet"
    shown = [[safe(str(cell)) for cell in row] for row in rows]
    widths = [max(len(r[i]) for r in shown) for i in range(5)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  " + r[5]
                     for r in shown)
