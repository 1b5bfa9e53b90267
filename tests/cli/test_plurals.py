"""Counts read as English: "1 line", "2 lines", never "1 lines"."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from canary.cli.main import main

WRONG = re.compile(r"\b1 (lines|files|file\(s\)|guards|canaries|firings)\b")


def test_init_and_audit_count_one_line_as_one(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text("2026-11-30T10:00:00Z WARN CitationGuard: rejected url=http://x.example.org/\n")
    init = CliRunner().invoke(main, ["init", "--yes", "--logs", str(log), "--agent-url", "http://127.0.0.1:9/ask"])
    assert init.exit_code == 0, init.output
    audit = CliRunner().invoke(main, ["audit"])
    for output in (init.output, audit.output):
        assert not WRONG.search(output), WRONG.findall(output)
    assert "Read 1 line in 1 file (text)." in init.output
    assert "1 line in 1 file, all lines" in audit.output
    assert "citation           1 line   match" in init.output
