"""``canary audit``, as the console script runs it, over lines holding NUL bytes a writer wrote."""

from __future__ import annotations

import json
from pathlib import Path

from canary.logs.parts import READ
from tests.cli.test_status_entry import console
from tests.logs.test_audit import write_setup


def test_audit_counts_a_line_with_a_nul_inside_once_and_never_a_hole(tmp_path: Path) -> None:
    config = write_setup(tmp_path)
    first = b"2026-12-01T10:00:00Z CitationGuard: rejected url=https://x.example/a \x00 trailing\n"
    second = b"2026-12-01T10:00:01Z WARN DateGuard: rejected date=1999 \x00\x00 x\n"
    at_nul = second.index(b"\0")
    room = READ - len(first) - at_nul  # the filler puts the second line's NUL just after a read
    filler = b"y" * 99 + b"\n"
    body = (
        first + filler * (room // len(filler) - 1) + b"z" * (room % len(filler) + len(filler) - 1)
        + b"\n" + second
        # a hole a truncation left under a writer without O_APPEND: never a line
        + b"\0" * 64 + b"2026-12-01T10:00:02Z WARN CitationGuard: rejected after a hole\n"
    )
    assert body.index(second) + at_nul == READ
    (tmp_path / "logs" / "agent.log").write_bytes(body)
    result = console(["--config", str(config), "audit", "--json"])
    doc = json.loads(result.stdout)
    assert {g["guard"]: g["firings"] for g in doc["guards"]} == {"citation": 2, "date": 1}
    assert doc["lines"] == body.count(b"\n")
    assert result.returncode == 0, result.stderr  # no guard asleep
