"""``canary init`` reading the logs it proposes guards from: a corrupt rotated copy is listed as
unreadable (the rest is read), and a NUL inside a line is part of it, as the collectors read it."""

from __future__ import annotations

import gzip
import lzma
from pathlib import Path

import pytest

from canary.cli.init import scan_logs
from tests.collectors.test_compressed_siblings import flipped

LINES = b"".join(b"2026-12-01T10:00:00Z WARN CitationGuard: rejected url=https://x.example/%d\n" % i
                 for i in range(500))


@pytest.mark.parametrize(("name", "packed"), [
    ("agent.log.1.gz", flipped(gzip.compress(LINES), 12)),
    ("agent.log.1.xz", flipped(lzma.compress(LINES), 80)),
], ids=["gzip", "xz"])
def test_a_corrupt_rotated_copy_is_unreadable_and_the_rest_is_read(tmp_path: Path, name: str, packed: bytes) -> None:
    (tmp_path / "agent.log").write_bytes(LINES[:200])
    (tmp_path / name).write_bytes(packed)
    scan = scan_logs([str(tmp_path / "agent.log")], tmp_path)
    assert [p.name for p, _ in scan.unreadable] == [name]
    assert [p.name for p in scan.files] == ["agent.log"]


def test_a_nul_inside_a_line_keeps_the_line_and_a_hole_is_no_line(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_bytes(b"".join(b"2026-12-01T10:00:0%dZ WARN QuoteGuard: rejected quote=q%d \x00 tail\n" % (i, i)
                             for i in range(5)) + b"\x00" * 40 + b"2026-12-01T10:00:09Z after a hole\n")
    scan = scan_logs([str(log)], tmp_path)
    assert scan.lines == 6
    [proposal] = scan.proposals
    assert proposal.count == 5
    assert "QuoteGuard: rejected" in proposal.example and "\0" not in proposal.example
