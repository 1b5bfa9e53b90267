"""What the commands print shows control characters of outside text, and only click's colours are ESC."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from canary.cli import printers
from canary.logs.audit import AuditReport, FileAudit, GuardAudit

ATTACK = "\x1b]0;PWNED\x07\x1b]52;c;cHduZWQ=\x07\x1b[2J\x9b2J"
SGR = re.compile(r"\x1b\[[0-9;]*m")


def raw_controls(text: str) -> set[str]:
    """Control characters left once click.style's own colour codes are taken out (newlines are ours)."""
    return {c for c in SGR.sub("", text) if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0}


def test_the_run_table_and_its_explanations() -> None:
    runs = [
        printers.RunDocument({"guard": "citation", "canary": "fake-url", "verdict": "caught",
                              "trace": {"sent": 0.0, "fired": 0.5}, "evidence": f"{ATTACK} CitationGuard"}),
        printers.RunDocument({"guard": "quote", "canary": "q", "verdict": "error", "trace": {},
                              "error": f"the agent answered HTTP 500: {ATTACK}"}),
        printers.RunDocument({"guard": "date", "canary": "d", "verdict": "leaked", "trace": {},
                              "leak_text": ATTACK}),
    ]
    text = printers.runs_table(runs) + "\n" + "\n".join(printers.explain(r) for r in runs[1:])
    assert raw_controls(text) == set(), text
    assert "\\x1b]0;PWNED\\x07" in text and "\\x9b2J" in text


def test_the_status_table() -> None:
    doc = {"guards": [{"guard": "citation", "status": "asleep", "reason": f"the line was {ATTACK}",
                       "organic_firings": 0, "canary_firings": 0, "kill_rate": None,
                       "last_verdict": "leaked", "last_run": None, "muted_until": None}]}
    text = printers.status_table(doc)
    assert raw_controls(text) == set(), text
    assert "\\x1b]52;c;cHduZWQ=" in text


def test_the_audit_table() -> None:
    report = AuditReport(since=None, until=datetime(2026, 11, 29, tzinfo=UTC),
                         guards=[GuardAudit(f"x{ATTACK}")], files=[FileAudit("/a.log", lines=3)])
    text = printers.audit_table(report)
    assert raw_controls(text) == set(), text
