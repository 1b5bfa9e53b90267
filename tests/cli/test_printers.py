"""What the commands print shows control characters of outside text, and only click's colours are ESC."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime

from canary.cli import printers, quick
from canary.logs.audit import AuditReport, FileAudit, GuardAudit
from canary.runs.record import RunRecord
from canary.sentences import explain
from canary.vocabulary import Verdict

ATTACK = "\x1b]0;PWNED\x07\x1b]52;c;cHduZWQ=\x07\x1b[2J\x9b2J"
SGR = re.compile(r"\x1b\[[0-9;]*m")


def raw_controls(text: str) -> set[str]:
    """Control characters left once click.style's own colour codes are taken out (newlines are ours)."""
    return {c for c in SGR.sub("", text) if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0}


def record(**fields: object) -> RunRecord:
    """A finished run with the fields a test cares about."""
    base = RunRecord(guard="g", canary="c", variant=0, expect="reject", verdict=Verdict.CAUGHT,
                     nonce="n", started=datetime(2026, 11, 29, tzinfo=UTC), duration_s=1.0, trace={},
                     leaked=False, firings=0, attribution=None, foreign_calls=0, evidence=None,
                     answer=None, error=None)
    return replace(base, **fields)  # type: ignore[arg-type]


def test_the_run_table_and_its_explanations() -> None:
    runs = [
        record(guard="citation", canary="fake-url", verdict=Verdict.CAUGHT,
               trace={"sent": 0.0, "fired": 0.5}, evidence=f"{ATTACK} CitationGuard"),
        record(guard="quote", canary="q", verdict=Verdict.ERROR,
               error=f"the agent answered HTTP 500: {ATTACK}"),
        record(guard="date", canary="d", verdict=Verdict.LEAKED, leak_text=ATTACK),
    ]
    text = printers.runs_table(runs) + "\n" + "\n".join(explain(r) for r in runs[1:])
    assert raw_controls(text) == set(), text
    assert "\\x1b]0;PWNED\\x07" in text and "\\x9b2J" in text


def test_the_status_table() -> None:
    doc = {"guards": [{"guard": "citation", "status": "asleep", "reason": f"the line was {ATTACK}",
                       "organic_firings": 0, "canary_firings": 0, "kill_rate": None,
                       "last_verdict": "leaked", "last_run": None, "muted_until": None}]}
    text = quick.status_table(doc)
    assert raw_controls(text) == set(), text
    assert "\\x1b]52;c;cHduZWQ=" in text


def test_the_audit_table() -> None:
    report = AuditReport(since=None, until=datetime(2026, 11, 29, tzinfo=UTC),
                         guards=[GuardAudit(f"x{ATTACK}")], files=[FileAudit("/a.log", lines=3)])
    text = printers.audit_table(report)
    assert raw_controls(text) == set(), text


def test_the_trace_column_shows_the_stages_in_the_order_they_happened() -> None:
    """``inject_at = "first"``: the fabrication went in before the agent read the page."""
    trace = {"sent": 0.0, "fixture_fetched": 0.343, "injected": 0.052, "fired": 0.076,
             "repair_requested": 0.5, "answered": 1.2}
    assert printers.trace_line(trace) == "sent>injected>FIRED>fetched>repair>answered"  # type: ignore[arg-type]
    assert printers.trace_line({"sent": 0.0, "fixture_fetched": 0.0, "injected": 0.0}) == "sent>fetched>injected"  # type: ignore[arg-type]


def test_the_live_and_finished_lines_follow_the_same_order() -> None:
    from canary.cli.progress import stages_of, trace_stages
    from canary.runs.inflight import ActiveRun, Claim

    run = ActiveRun(1, "citation", "n", "first", "x", None, "page", started=100.0, deadline=700.0)
    run.injected, run.fetched = 100.05, 100.34
    run.claims.append(Claim("citation", "nonce", 100.07, "CitationGuard: rejected"))
    assert stages_of(run) == ("sent", "injected", "fired", "fetched")
    assert trace_stages({"sent": 0.0, "fixture_fetched": 0.343, "injected": 0.052,  # type: ignore[dict-item]
                           "fired": 0.076, "answered": 1.2}) == ("sent", "injected", "fired", "fetched", "answered")
