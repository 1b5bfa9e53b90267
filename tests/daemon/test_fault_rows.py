"""The fault matrix's hard rows, as a test: copytruncate, and rotation while the daemon is down
(compressed too).

Each row runs ``tests/bench/bench_faults.py``'s cell: a writer, the real logrotate (or a
logging handler), a real ``canary daemon`` SIGKILLed once; nothing may be doubled, and
nothing lost but the lines copytruncate itself destroyed (in no file on disk).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.bench.bench_faults import Cell

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("logrotate") is None and not Path("/usr/sbin/logrotate").exists(),
                       reason="logrotate is not installed"),
]


@pytest.mark.parametrize(
    ("mode", "glob"),
    [
        ("copytruncate", "agent.log"),
        ("copytruncate", "agent.log*"),
        ("stopped: create", "agent.log"),
        ("stopped: copytruncate", "agent.log"),
        ("stopped: compress", "agent.log"),
    ],
)
def test_no_line_doubled_and_none_lost_beyond_copytruncate(tmp_path: Path, mode: str, glob: str) -> None:
    row = Cell(tmp_path / "cell", mode, glob, 5000, 2.5, 0.5, settle=2.5).run()
    assert row["doubled"] == 0, row
    assert row["lost on disk"] == 0, row
    assert row["tracebacks"] == 0, row
    if not mode.endswith("copytruncate"):
        assert row["copytruncate's own"] == 0, row
