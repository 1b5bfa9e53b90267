"""The fault matrix's hard rows, as a test: copytruncate (under a writer without O_APPEND too),
and rotation while the daemon is down (compressed too).

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
        ("copytruncate, no O_APPEND", "agent.log"),
        ("copytruncate, no O_APPEND", "agent.log*"),
        ("stopped: copytruncate, no O_APPEND", "agent.log*"),
        ("stopped: create", "agent.log"),
        ("stopped: copytruncate", "agent.log"),
        ("stopped: compress", "agent.log"),
    ],
)
def test_no_line_doubled_and_none_lost_beyond_copytruncate(tmp_path: Path, mode: str, glob: str) -> None:
    # A copy that may be its live file's twin (a NUL-headed copy always may) is held unread for
    # up to the daemon's rotate_wait (5 s) after it is first seen: the cell waits longer.
    row = Cell(tmp_path / "cell", mode, glob, 5000, 2.5, 0.5).run()
    assert row["doubled"] == 0, row
    assert row["lost on disk"] == 0, row
    assert row["tracebacks"] == 0, row
    if "copytruncate" not in mode:
        assert row["copytruncate's own"] == 0, row
