"""``canary audit``, as the console script runs it, over rotated copies whose compression is corrupt:
each is named with what was wrong, the other files are counted, and no traceback is shown."""

from __future__ import annotations

import gzip
import json
import lzma
from pathlib import Path

import pytest

from tests.cli.test_status_entry import console
from tests.collectors.test_compressed_siblings import flipped
from tests.logs.test_audit import write_setup

LINES = b"".join(b"2026-12-01T10:00:%02dZ CitationGuard: rejected url=https://x.example/%d\n" % (i % 60, i)
                 for i in range(2000))


@pytest.mark.parametrize(("name", "packed"), [
    ("agent.log.1.gz", flipped(gzip.compress(LINES), 12)),  # zlib: invalid code lengths set
    ("agent.log.1.gz", flipped(gzip.compress(LINES), 100)),  # zlib: invalid distance too far back
    ("agent.log.1.xz", flipped(lzma.compress(LINES), 80)),  # lzma: corrupt input data
], ids=["gzip-header", "gzip-stream", "xz"])
def test_a_corrupt_rotated_copy_is_named_and_the_rest_counted(tmp_path: Path, name: str, packed: bytes) -> None:
    config = write_setup(tmp_path)
    (tmp_path / "logs" / "agent.log").write_bytes(b"2026-12-01T11:00:00Z DateGuard: rejected date=1999\n")
    (tmp_path / "logs" / name).write_bytes(packed)
    result = console(["--config", str(config), "audit", "--json"])
    assert "Traceback" not in result.stderr, result.stderr
    doc = json.loads(result.stdout)
    files = {Path(f["path"]).name: f for f in doc["files"]}
    assert files["agent.log"]["lines"] == 1 and files["agent.log"]["error"] is None
    assert files[name]["error"], files[name]
    assert f"could not read {tmp_path / 'logs' / name}" in result.stderr, result.stderr
    assert {g["guard"]: g["firings"] for g in doc["guards"]}["date"] == 1
