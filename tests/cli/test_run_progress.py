"""``canary run`` on a terminal shows a live line per canary and a summary; a pipe gets neither.

``canary run`` runs as a subprocess with stdout on a pseudo-terminal, then on a pipe, against a
small real agent and model server (``tests/cli/small_agent.py``): one canary is caught, one never
reaches the proxy.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from canary.cli.progress import DaemonRuns
from canary.demo.live import free_port
from canary.errors import StoreError
from canary.proxy.serving import BackgroundServer
from canary.runs.runlog import RunLog
from canary.store.engine import Store
from canary.store.queries import RunProgress, runs_since
from tests.cli.small_agent import agent_app, canary, model_app
from tests.helpers_store import record

CANARY = str(Path(sys.executable).parent / "canary")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
GUARD = "[guard]\nname = \"citation\"\nmatch = 'CitationGuard: rejected'\n" + canary("caught", "caught") \
    + canary("direct", "direct")


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    log = tmp_path / "agent.log"
    log.touch()
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "citation.toml").write_text(GUARD)
    proxy, fixtures = free_port(), free_port()
    with BackgroundServer(model_app()) as model, \
            BackgroundServer(agent_app(model.url, f"http://127.0.0.1:{proxy}", log)) as agent:
        (tmp_path / "canary.toml").write_text(
            f'defs = ["defs/*.toml"]\n[agent]\nurl = "{agent.url}/ask"\ntimeout = "5s"\n'
            f'[model]\nlisten = "127.0.0.1:{proxy}"\nupstream = "{model.url}"\n'
            f'[fixtures]\nlisten = "127.0.0.1:{fixtures}"\n[logs]\npaths = ["{log}"]\n'
        )
        yield tmp_path


def environment() -> dict[str, str]:
    return {**os.environ, "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "40"}


def on_a_terminal(root: Path) -> tuple[int, str]:
    """Run ``canary run`` with stdout on a pseudo-terminal; return its exit code and what the terminal got."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    chunks: list[bytes] = []
    try:
        with subprocess.Popen([CANARY, "run"], cwd=root, stdout=slave, stderr=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL, env=environment()) as proc:
            os.close(slave)
            slave = -1
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                ready, _, _ = select.select([master], [], [], 0.5)
                if ready:
                    try:
                        data = os.read(master, 65536)
                    except OSError:  # EIO: every end of the terminal's other side is closed
                        break
                    if not data:
                        break
                    chunks.append(data)
                elif proc.poll() is not None:
                    break
            if proc.poll() is None:
                proc.kill()
            code = proc.wait(10)
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    return code, ANSI.sub("", b"".join(chunks).decode("utf-8", "replace"))


@pytest.mark.slow
def test_a_terminal_gets_live_lines_and_a_summary_and_a_pipe_gets_neither(project: Path) -> None:
    code, screen = on_a_terminal(project)
    assert code == 1, screen
    # A line while a run is in flight, with the time it has taken so far ...
    assert re.search(r"citation/(caught|direct)\s+sent[ >a-z]*\s+\(\d+\.\d s\)", screen), screen
    # ... and the caught one's line once it finished, every stage it went through.
    assert re.search(r"citation/caught\s+sent > fetched > injected > fired > answered\s+CAUGHT in \d", screen)
    assert re.search(r"citation/direct\s+sent > fetched > answered\s+NOT_INJECTED in \d", screen), screen
    assert re.search(r"1 caught, 1 not_injected in \d+\.\d s", screen), screen
    assert "CAUGHT" in screen and "no model call reached the proxy" in screen  # the table and reasons too

    piped = subprocess.run([CANARY, "run"], cwd=project, capture_output=True, text=True, env=environment(),
                           timeout=60, check=False)
    assert piped.returncode == 1, piped.stdout + piped.stderr
    assert "CAUGHT" in piped.stdout and "NOT_INJECTED" in piped.stdout
    for out in (piped.stdout, piped.stderr):
        assert "\x1b[" not in out and "citation/caught" not in out and " in " not in out.splitlines()[-1]
        assert not re.search(r"\d+ caught", out)


def test_the_daemons_runs_are_read_from_the_stores_run_rows(tmp_path: Path) -> None:
    """Through the daemon, a run in flight shows ``sent``; a finished one the stages its trace holds."""
    since = datetime.now(UTC) - timedelta(seconds=1)
    store = Store(f"sqlite:///{tmp_path / 'canary.db'}")
    try:
        runs = RunLog(store)
        old = runs.start(guard="citation", canary="old", variant=0, expect="reject", nonce="n0",
                         started=since - timedelta(hours=1), injected_text="x", leak_text=None)
        first = runs.start(guard="citation", canary="fake-url", variant=0, expect="reject", nonce="n1",
                           started=datetime.now(UTC), injected_text="x", leak_text=None)
        source = DaemonRuns(lambda t: runs_since(store.engine, t), since, every=0.0)
        assert {k: (v.stages, v.verdict) for k, v in source.lines().items()} == {
            ("citation", "fake-url"): (("sent",), None)}
        trace = {"sent": 0.0, "fixture_fetched": 0.2, "injected": 0.3, "fired": 0.5, "answered": 1.0}
        runs.finish(first, record("caught", trace=trace, duration_s=1.2), finished=datetime.now(UTC))
        line = source.lines()[("citation", "fake-url")]
        assert (line.stages, line.verdict, line.duration_s) == (
            ("sent", "fetched", "injected", "fired", "answered"), "caught", 1.2)
        assert old and ("citation", "old") not in source.lines()
    finally:
        store.close()

    def gone(_since: datetime) -> list[RunProgress]:
        raise StoreError("the store went away", url="sqlite:///gone.db")

    assert DaemonRuns(gone, since, every=0.0).lines() == {}  # a failing read shows nothing, raises nothing
