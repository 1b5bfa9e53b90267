"""What the commands print: tables and sentences, from results the library returns.

Every string that came from outside (log lines, answers, agent error bodies, reasons
quoting log text) goes through ``canary.terminal.safe`` before it is styled or printed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import click

from canary.runs.record import AMBIGUOUS_ADVICE
from canary.status.families import holes_line
from canary.terminal import safe
from canary.vocabulary import HEALTHY_VERDICTS, Stage

if TYPE_CHECKING:  # the audit's matchers are heavy; ``canary status`` must not load them
    from canary.logs.audit import AuditReport


class RunView(Protocol):
    """What the run table and its explanations read of a run (a ``canary.runs.record.RunRecord``)."""

    @property
    def guard(self) -> str: ...
    @property
    def canary(self) -> str: ...
    @property
    def verdict(self) -> str: ...
    @property
    def trace(self) -> Mapping[Stage, float | None]: ...
    @property
    def evidence(self) -> str | None: ...
    @property
    def error(self) -> str | None: ...
    @property
    def leak_text(self) -> str | None: ...
    @property
    def attribution(self) -> str | None: ...
    @property
    def foreign_calls(self) -> int: ...
    @property
    def model_calls(self) -> int: ...
    @property
    def unmatched_line(self) -> str | None: ...
    @property
    def nearest_guard(self) -> str | None: ...
    @property
    def leaked_turn(self) -> int | None: ...
    @property
    def toolless_calls(self) -> int: ...


def stamp(moment: datetime | None) -> str:
    """A time as ``2026-11-29 10:00:00Z``; ``-`` for None."""
    if moment is None:
        return "-"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def audit_table(report: AuditReport) -> str:
    """The ``canary audit`` table and its summary lines."""
    rows = [("guard", "firings", "organic", "canary", "first", "last", "")]
    for g in report.guards:
        flag = "ASLEEP" if g.flag == "asleep" else ""
        count = str(g.firings) + (f" (+{g.untimed} untimed)" if g.untimed else "")
        rows.append((safe(g.guard), count, str(g.organic), str(g.canary), stamp(g.first), stamp(g.last),
                     flag))
    widths = [max(len(r[i]) for r in rows) for i in range(7)]
    lines = []
    for i, row in enumerate(rows):
        cells = [row[0].ljust(widths[0]), *(row[j].rjust(widths[j]) for j in (1, 2, 3)),
                 row[4].ljust(widths[4]), row[5].ljust(widths[5]), row[6]]
        line = "  ".join(cells).rstrip()
        if row[6]:
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
            names = safe(", ".join(report.asleep))
            lines.append(
                f"ASLEEP: {names}: zero firings. Run their canaries to tell a well-behaved "
                "model from a guard that never runs."
            )
    return "\n".join(lines)


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
            text = click.style(text, bold=True)
        elif row[2].lower() not in HEALTHY_VERDICTS:
            text = click.style(text, fg="red", bold=True)
        lines.append(text)
    return "\n".join(lines)


_SHORT = {Stage.SENT: "sent", Stage.FIXTURE_FETCHED: "fetched", Stage.INJECTED: "injected",
          Stage.FIRED: "FIRED", Stage.REPAIR_REQUESTED: "repair", Stage.ANSWERED: "answered"}


def trace_line(trace: Mapping[Stage, float | None]) -> str:
    """The stages a run went through, in order, e.g. ``sent>fetched>injected>answered``."""
    return ">".join(short for stage, short in _SHORT.items() if trace.get(stage) is not None)


def explain(r: RunView, *, proxy: str | None = None, matches: Mapping[str, object] | None = None) -> str:
    """One sentence a person can act on, for a verdict other than caught/passed.

    ``proxy`` is the model proxy's URL (``http://127.0.0.1:11435``) and ``matches`` each guard's
    ``match``, both for the sentences that tell what to set.
    """
    leak = safe(repr(r.leak_text)) if r.leak_text else "the fabricated value"
    # An observed leak (``fetched URL`` / ``file PATH``) is the tool call's effect, not answer text.
    seen = str(r.leak_text or "").startswith(("fetched ", "file "))
    turn = r.leaked_turn
    where = f"the answer of turn {turn}" if turn else "the final answer"
    reached = (f"the fabricated tool call took effect ({leak} was observed)" if seen
               else f"the fabricated answer reached the user ({leak} is in {where})")
    missed = _unmatched(r, matches or {})
    sentences: dict[str, str] = {
        "leaked": f"{reached} and the guard wrote no line: it did not run on this path."
        + (f" But {missed}: if that is the guard's rejection, fix its match." if missed else ""),
        "fired_but_leaked": (f"the guard logged a rejection, yet the call took effect ({leak} was observed)"
                             if seen else f"the guard logged a rejection, yet {leak} still reached "
                             f"{where}") + ": it detects, it does not enforce.",
        "unlogged": (f"the fabricated tool call took no effect ({leak} was not observed)" if seen
                     else "the fabrication did not reach the answer")
        + (f", and {missed}: fix that guard's match so it fits the line; the run stays unlogged until "
           "a line matches." if missed else
           ", but the guard left no line: something else stopped it, or the guard does not log."),
        "not_injected": not_injected(r, proxy),
        "error": f"the agent could not be used: {safe(r.error or 'no reason given')}",
        "false_rejection": "the guard rejected a grounded answer (a control): it rejects too much.",
        "ambiguous": f"the guard's only lines in the run's span carry no mark of the run, and the "
        f"agent did other work meanwhile ({r.foreign_calls} model call(s) without the nonce): "
        f"they may be someone else's. To tie the guard's line to the run, {AMBIGUOUS_ADVICE}.",
    }
    return sentences.get(str(r.verdict), safe(str(r.verdict)))


def _unmatched(r: RunView, matches: Mapping[str, object]) -> str | None:
    """The clause naming the line with the run's nonce that no guard's match fits, and the nearest guard."""
    if not r.unmatched_line:
        return None
    guard = safe(r.nearest_guard or "?")
    match = matches.get(r.nearest_guard or "")
    shown = f" (match {safe(repr(match))})" if isinstance(match, str) else ""
    return (f"no guard's match fits the line the agent logged with the run's nonce: "
            f"{safe(repr(r.unmatched_line))} (nearest guard: {guard}{shown})")


def not_injected(r: RunView, proxy: str | None) -> str:
    """Why the injection never happened, from the model calls the proxy saw during the run."""
    fetched = r.trace.get(Stage.FIXTURE_FETCHED) is not None
    if r.model_calls == 0 and r.foreign_calls == 0:
        address = safe(proxy) if proxy else "http://HOST:PORT"
        did = " (it did fetch the fixture, so it ran the task)" if fetched else ""
        return (f"no model call reached the proxy during the run{did}: the agent's model base URL does "
                f"not point at the proxy, or the agent answered without asking its model. Point it at "
                f"{address}: openai SDK OpenAI(base_url=\"{address}/v1\") or OPENAI_BASE_URL={address}/v1; "
                f"ollama OLLAMA_HOST={address} or Client(host=\"{address}\"); LangChain "
                f"ChatOpenAI(base_url=\"{address}/v1\") or ChatOllama(base_url=\"{address}\").")
    if r.model_calls == 0:
        return (f"{r.foreign_calls} model call(s) came through the proxy, none carrying the run's nonce: "
                "the agent's model base URL points at the proxy, but the prompt did not reach the model "
                "as sent (the agent rewrites or drops the task's text), or those calls were other work.")
    toolless = r.toolless_calls
    if toolless:
        return (f"{toolless} of the {r.model_calls} model call(s) carrying the run's nonce offered the "
                "model no tools (no `tools` in the request), so the fabricated tool call was never sent: "
                "a tool canary needs an agent that gives its model tools through the API's `tools` field.")
    waits = "" if fetched else " (the fixture was never fetched: inject_at = \"after-fetch\" waits for it)"
    return (f"{r.model_calls} model call(s) carrying the run's nonce came through the proxy, but inject_at "
            f"selected none of them{waits}: check inject_at (a call number beyond the agent's calls, or "
            "a match no call's body fits).")


def status_table(doc: Mapping[str, Any]) -> str:
    """The ``canary status`` table, from the ``canary status --json`` document."""
    rows = [("guard", "status", "organic", "canary", "kill rate", "last verdict", "reason")]
    for g in doc["guards"]:
        rate = "-" if g["kill_rate"] is None else f"{g['kill_rate']:.0%}"
        status = str(g["status"]).upper()
        if g.get("muted_until"):
            status += " (muted)"
        rows.append((safe(str(g["guard"])), status, str(g["organic_firings"]), str(g["canary_firings"]),
                     rate, safe(str(g["last_verdict"] or "-")), safe(str(g["reason"]))))
    holes = [None, *(holes_line(g.get("families") or ()) for g in doc["guards"])]
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    lines = []
    for i, row in enumerate(rows):
        text = "  ".join(cell.ljust(widths[j]) for j, cell in enumerate(row[:6])) + "  " + row[6]
        if i == 0:
            text = click.style(text, bold=True)
        elif row[1].split()[0] in ("ASLEEP", "DEGRADED", "INCONCLUSIVE"):
            text = click.style(text, fg="red" if row[1].startswith("ASLEEP") else "yellow", bold=True)
        lines.append(text.rstrip())
        hole = holes[i]
        if hole:  # a family's kill rate below 1: a known hole, even when the guard reads alive
            lines.append(click.style("  " + safe(hole), fg="yellow"))
    return "\n".join(lines)



def team_table(doc: dict[str, Any]) -> str:
    """``canary status --all-projects``: a row per guard of every project and machine, and its daemon."""
    rows = [("PROJECT", "MACHINE", "DAEMON", "GUARD", "STATUS", "REASON")]
    for site in doc["projects"]:
        beat = site["daemon"]["heartbeat"] or "never"
        daemon = "running" if site["daemon"]["running"] else f"stale (last beat {beat})"
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
