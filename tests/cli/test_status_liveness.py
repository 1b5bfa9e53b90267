"""Whether a daemon collects, as ``canary status`` tells it: by the daemon's own tick, and at once on
its machine when its process is gone; ``--all-projects`` goes by
the heartbeat's age alone."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from canary.cli.main import main
from canary.daemon.steps import beat
from canary.demo.live import free_port
from canary.store.engine import Store
from canary.store.sites import Site


def project(folder: Path, extra: str = "") -> Path:
    """A config of one guard on a SQLite store of its own."""
    (folder / "defs").mkdir(parents=True, exist_ok=True)
    (folder / "defs" / "cite.toml").write_text("[guard]\nname = 'cite'\nmatch = 'CitationGuard: rejected'\n")
    (folder / "agent.log").write_text("")
    path = folder / "canary.toml"
    path.write_text(f"defs = ['defs/*.toml']\nproject = 'solo'\n[logs]\npaths = ['{folder / 'agent.log'}']\n"
                    f"[alerts]\ndesktop = false\n[store]\nurl = 'sqlite:///{folder / 'c.db'}'\n"
                    f"machine = 'laptop'\n{extra}")
    return path


def beaten(folder: Path, *, age: timedelta, tick: float | None = 10.0, pid: int | None = None,
           control: str | None = None) -> None:
    """The heartbeat a daemon of ``tick`` seconds wrote ``age`` ago."""
    store = Store(f"sqlite:///{folder / 'c.db'}", site=Site("solo", "laptop"))
    now = datetime.now(UTC)
    try:
        beat(store, pid=os.getpid() if pid is None else pid, started=now - timedelta(hours=1), now=now - age,
             files=1, addresses={"control": control}, tick=tick)
    finally:
        store.close()


def status(config: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["status", "--config", str(config), *args])


def gone_pid() -> int:
    """The pid of a process that has exited."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_daemon_of_a_long_tick_is_running_between_its_beats(tmp_path: Path) -> None:
    config = project(tmp_path)
    beaten(tmp_path, age=timedelta(seconds=100), tick=120)
    done = status(config, "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["daemon"]["running"] is True
    team = status(config, "--all-projects", "--json")
    assert team.exit_code == 0, team.output
    assert json.loads(team.stdout)["projects"][0]["daemon"]["stale"] is False


def test_a_daemon_that_missed_its_beats_is_gone(tmp_path: Path) -> None:
    config = project(tmp_path)
    beaten(tmp_path, age=timedelta(seconds=400), tick=60)
    done = status(config)
    assert done.exit_code == 1 and "no daemon is collecting" in done.stdout.splitlines()[0], done.output
    team = status(config, "--all-projects", "--json")
    assert json.loads(team.stdout)["projects"][0]["daemon"]["stale"] is True


def test_a_heartbeat_that_names_no_tick_reads_as_the_default_tick(tmp_path: Path) -> None:
    config = project(tmp_path)
    beaten(tmp_path, age=timedelta(seconds=60), tick=None)
    assert status(config).exit_code == 0
    beaten(tmp_path, age=timedelta(seconds=120), tick=None)
    assert status(config).exit_code == 1


def test_a_daemon_whose_process_is_gone_is_said_gone_at_once(tmp_path: Path) -> None:
    config = project(tmp_path)
    pid = gone_pid()
    beaten(tmp_path, age=timedelta(seconds=1), pid=pid)
    done = status(config)
    assert done.exit_code == 1, done.output
    first = done.stdout.splitlines()[0]
    assert "no daemon is collecting" in first and f"pid {pid}" in first, done.output
    daemon = json.loads(status(config, "--json").stdout)["daemon"]
    assert daemon["running"] is False
    assert daemon["gone"] == f"its process, pid {pid}, is gone"
    team = status(config, "--all-projects", "--json")  # another machine's view: the heartbeat's age
    assert json.loads(team.stdout)["projects"][0]["daemon"]["stale"] is False


@pytest.mark.slow
def test_a_sigkilled_daemon_is_said_gone_at_once_and_its_tick_is_kept(tmp_path: Path) -> None:
    ports = {key: free_port() for key in ("model", "fixtures", "control")}
    config = project(tmp_path, f"[model]\nlisten = '127.0.0.1:{ports['model']}'\n"
                               f"[fixtures]\nlisten = '127.0.0.1:{ports['fixtures']}'\n"
                               f"[daemon]\ncontrol = '127.0.0.1:{ports['control']}'\n")
    err = tmp_path / "daemon.err"
    with err.open("ab") as sink:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "canary.cli.main", "--config", str(config), "daemon", "--tick", "120"],
            stdout=subprocess.DEVNULL, stderr=sink, env=os.environ.copy())
    try:
        deadline = time.monotonic() + 60
        while status(config).exit_code != 0:
            assert daemon.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.5)
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(30)
        done = status(config)
        assert done.exit_code == 1, done.output
        assert "no daemon is collecting" in done.stdout.splitlines()[0], done.output
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    # the daemon's --tick, kept with its heartbeat: 100 s after a beat of a live process it still runs
    with sqlite3.connect(tmp_path / "c.db") as conn:
        conn.execute("UPDATE heartbeat SET pid = ?, control = NULL, beat = ?",
                     (os.getpid(), (datetime.now(UTC) - timedelta(seconds=100)).strftime("%Y-%m-%d %H:%M:%S.%f")))
    conn.close()
    assert status(config).exit_code == 0
    with sqlite3.connect(tmp_path / "c.db") as conn:
        conn.execute("UPDATE heartbeat SET beat = ?",
                     ((datetime.now(UTC) - timedelta(seconds=500)).strftime("%Y-%m-%d %H:%M:%S.%f"),))
    conn.close()
    assert status(config).exit_code == 1
