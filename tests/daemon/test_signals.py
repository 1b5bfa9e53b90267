"""A real daemon sent a burst of SIGTERM and SIGINT stops within its stop timeout, and a new one starts.

A second signal may arrive while the first one's handler runs; the daemon must neither hang
nor keep the store's lock.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.daemon.projects import CANARY, make_project, start_daemon, wait_for

pytestmark = pytest.mark.slow

#: The daemon's own stop timeout (``canary.daemon.loop.STOP_WAIT``) and some slack for a loaded machine.
STOP_WITHIN = 45.0


def beat_of(db: Path) -> tuple[int, str] | None:
    """The heartbeat's pid and beat, once a daemon has beaten."""
    try:
        with sqlite3.connect(db, timeout=30) as conn:
            row = conn.execute("SELECT pid, beat FROM heartbeat WHERE stopped IS NULL").fetchone()
    except sqlite3.Error:
        return None
    return (int(row[0]), str(row[1])) if row else None


def burst(pid: int, seconds: float) -> int:
    """SIGTERM and SIGINT, alternately and as fast as they go, for ``seconds``; how many were sent."""
    sent = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, signal.SIGTERM if sent % 2 == 0 else signal.SIGINT)
        except ProcessLookupError:
            break
        sent += 1
    return sent


@pytest.mark.parametrize("attempt", range(3))
def test_a_burst_of_stop_signals_stops_the_daemon_and_a_new_one_starts(tmp_path: Path, attempt: int) -> None:
    db = tmp_path / "store.db"
    project = make_project(tmp_path, "signals", store_url=f"sqlite:///{db}")
    first = start_daemon(project, tmp_path / "first.err", tick=0.05)
    second: subprocess.Popen[bytes] | None = None
    try:
        wait_for(lambda: beat_of(db), 60, "the first daemon's heartbeat")
        burst(first.pid, 2.0)
        try:
            first.wait(STOP_WITHIN)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the daemon hung after a burst of stop signals (attempt {attempt})")
        second = start_daemon(project, tmp_path / "second.err", tick=0.05)
        wait_for(lambda: (b := beat_of(db)) is not None and b[0] == second.pid, 60,
                 "the second daemon's heartbeat")
        assert second.poll() is None, (tmp_path / "second.err").read_text()
        assert "Traceback" not in (tmp_path / "first.err").read_text()
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_burst_of_stop_signals_stops_canary_collect_with_its_last_counts(tmp_path: Path) -> None:
    project = make_project(tmp_path, "collecting")
    err = tmp_path / "collect.err"
    with err.open("ab") as sink:
        proc = subprocess.Popen([CANARY, "--config", str(project.config), "collect", "--every", "0.05"],
                                cwd=project.folder, stdout=subprocess.PIPE, stderr=sink)
    try:
        wait_for(lambda: "following" in err.read_text(), 60, "canary collect to start following")
        burst(proc.pid, 2.0)
        try:
            out, _ = proc.communicate(timeout=STOP_WITHIN)
        except subprocess.TimeoutExpired:
            pytest.fail("canary collect hung after a burst of stop signals")
        # The burst goes on while the interpreter exits, which puts the default dispositions back.
        assert proc.returncode in (0, -signal.SIGTERM, -signal.SIGINT), err.read_text()
        assert b"citation=" in out.splitlines()[-1]  # its last counts, printed as it stopped
        assert "Traceback" not in err.read_text() and "Aborted" not in err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
