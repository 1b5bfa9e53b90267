"""What the commands print: tables and sentences, from results the library returns."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click


def stamp(moment: datetime | None) -> str:
    if moment is None:
        return "-"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def audit_table(report: Any) -> str:
    rows = [("guard", "firings", "first", "last", "")]
    for g in report.guards:
        flag = "ASLEEP" if g.flag == "asleep" else ""
        count = str(g.firings) + (f" (+{g.untimed} untimed)" if g.untimed else "")
        rows.append((g.guard, count, stamp(g.first), stamp(g.last), flag))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = []
    for i, row in enumerate(rows):
        cells = [row[0].ljust(widths[0]), row[1].rjust(widths[1]), row[2].ljust(widths[2]),
                 row[3].ljust(widths[3]), row[4]]
        line = "  ".join(cells).rstrip()
        if row[4]:
            line = click.style(line, fg="red", bold=True)
        elif i == 0:
            line = click.style(line, bold=True)
        lines.append(line)
    window = (
        f"from {stamp(report.since)} to {stamp(report.until)}" if report.since else "all lines"
    )
    files_ok = [f for f in report.files if f.error is None]
    summary = f"{report.lines} lines in {len(files_ok)} file(s), {window}"
    if report.activity_configured:
        summary += f"; agent activity: {report.activity}"
    lines.append("")
    lines.append(summary)
    if report.asleep:
        if report.activity_configured and report.activity == 0:
            lines.append(
                "No agent activity in this window: zero firings prove nothing either way."
            )
        else:
            names = ", ".join(report.asleep)
            lines.append(
                f"ASLEEP: {names}: zero firings. Run their canaries to tell a well-behaved "
                "model from a guard that never runs."
            )
    return "\n".join(lines)


def runs_table(results: list[Any]) -> str:
    rows = [("guard", "canary", "verdict", "trace", "evidence")]
    for r in results:
        evidence = r.evidence or (r.error or "")
        if len(evidence) > 90:
            evidence = evidence[:87] + "..."
        rows.append((r.guard, r.canary, r.verdict.upper(), trace_line(r.trace), evidence))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for i, row in enumerate(rows):
        text = "  ".join(cell.ljust(widths[j]) for j, cell in enumerate(row[:4])) + "  " + row[4]
        text = text.rstrip()
        if i == 0:
            text = click.style(text, bold=True)
        elif row[2] not in ("CAUGHT", "PASSED"):
            text = click.style(text, fg="red", bold=True)
        lines.append(text)
    return "\n".join(lines)


_SHORT = {"sent": "sent", "fixture_fetched": "fetched", "injected": "injected", "fired": "FIRED",
          "repair_requested": "repair", "answered": "answered"}


def trace_line(trace: dict[str, float | None]) -> str:
    """The stages a run went through, in order, e.g. ``sent>fetched>injected>answered``."""
    return ">".join(short for stage, short in _SHORT.items() if trace.get(stage) is not None)


def explain(r: Any) -> str:
    """One sentence a person can act on, for a verdict other than caught/passed."""
    leak = f"{r.leak_text!r}" if r.leak_text else "the fabricated value"
    # An observed leak (``fetched URL`` / ``file PATH``) is the tool call's effect, not answer text.
    seen = str(r.leak_text or "").startswith(("fetched ", "file "))
    reached = (f"the fabricated tool call took effect ({leak} was observed)" if seen
               else f"the fabricated answer reached the user ({leak} is in the final answer)")
    sentences: dict[str, str] = {
        "leaked": f"{reached} and the guard wrote no line: it did not run on this path.",
        "fired_but_leaked": (f"the guard logged a rejection, yet the call took effect ({leak} was observed)"
                             if seen else f"the guard logged a rejection, yet {leak} still reached the "
                             "final answer") + ": it detects, it does not enforce.",
        "unlogged": (f"the fabricated tool call took no effect ({leak} was not observed)" if seen
                     else "the fabrication did not reach the answer") + ", but the guard left no line: "
        "something else stopped it, or the guard does not log.",
        "not_injected": "the model call chosen by inject_at never came through the proxy "
        + ("(the fixture was fetched: check inject_at)" if r.trace.get("fixture_fetched") is not None
           else "(the fixture was never fetched: does the agent's model base URL point at the proxy?)"),
        "error": f"the agent could not be used: {r.error}",
        "false_rejection": "the guard rejected a grounded answer (a control): it rejects too much.",
    }
    return sentences.get(str(r.verdict), str(r.verdict))


def status_table(doc: dict[str, Any]) -> str:
    rows = [("guard", "status", "organic", "canary", "kill rate", "last verdict", "reason")]
    for g in doc["guards"]:
        rate = "-" if g["kill_rate"] is None else f"{g['kill_rate']:.0%}"
        status = g["status"].upper()
        if g.get("muted_until"):
            status += " (muted)"
        rows.append((g["guard"], status, str(g["organic_firings"]), str(g["canary_firings"]), rate,
                     g["last_verdict"] or "-", g["reason"]))
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    lines = []
    for i, row in enumerate(rows):
        text = "  ".join(cell.ljust(widths[j]) for j, cell in enumerate(row[:6])) + "  " + row[6]
        if i == 0:
            text = click.style(text, bold=True)
        elif row[1].split()[0] in ("ASLEEP", "DEGRADED", "INCONCLUSIVE"):
            text = click.style(text, fg="red" if row[1].startswith("ASLEEP") else "yellow", bold=True)
        lines.append(text.rstrip())
    return "\n".join(lines)
