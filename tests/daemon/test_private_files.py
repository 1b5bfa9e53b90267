"""The state directory is 0700 and its files 0600 from creation, whatever the umask."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from canary import locations
from canary.config.settings import load_config
from canary.demo.live import free_port

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.name != "posix", reason="POSIX modes")]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_parent() -> Iterator[Path]:
    """A folder any user may traverse (pytest's own tmp folders are 0700, which would hide the point)."""
    parent = Path(tempfile.mkdtemp(prefix="canary-modes-"))
    os.chmod(parent, 0o755)
    yield parent
    shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture
def running_daemon(open_parent: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``canary daemon`` started under umask 022 with a state directory that does not exist yet."""
    state = open_parent / "state"
    monkeypatch.setenv("CANARY_STATE_DIR", str(state))
    (open_parent / "agent.log").write_text("CitationGuard: rejected https://x.example.org\n")
    os.chmod(open_parent / "agent.log", 0o644)
    config = open_parent / "canary.toml"
    config.write_text(
        f"defs = []\n[logs]\npaths = [{str(open_parent / 'agent.log')!r}]\n"
        f"[model]\nlisten = '127.0.0.1:{free_port()}'\n[fixtures]\nlisten = '127.0.0.1:{free_port()}'\n"
        f"[daemon]\ncontrol = '127.0.0.1:{free_port()}'\n")
    canary = str(Path(sys.executable).with_name("canary"))
    errors = open_parent / "daemon.stderr"
    with errors.open("wb") as sink:
        proc = subprocess.Popen([canary, "--config", str(config), "daemon", "--tick", "0.5"],
                                stdout=subprocess.DEVNULL, stderr=sink, umask=0o022)
    loaded = load_config(path=config)
    db = Path(loaded.store.url.removeprefix("sqlite:///"))
    wanted = [db, db.with_name("canary.db-wal"), db.with_name("canary.db-shm"),
              locations.project_log(config, loaded.project), db.with_name("control.token")]
    deadline = time.monotonic() + 60
    while not all(p.exists() for p in wanted):
        assert proc.poll() is None, errors.read_text()
        assert time.monotonic() < deadline, [p for p in wanted if not p.exists()]
        time.sleep(0.1)
    time.sleep(1.0)  # a few ticks: heartbeats and the log's first lines written
    try:
        yield state
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_after_a_daemon_start_with_umask_022_everything_is_owner_only(running_daemon: Path) -> None:
    state = running_daemon
    assert mode(state) == 0o700
    project = _project(state)
    assert mode(project.parent) == 0o700 and mode(project) == 0o700
    assert mode(project / "logs") == 0o700
    for name in ("canary.db", "canary.db-wal", "canary.db-shm", "canary.db.lock", "control.token"):
        assert mode(project / name) == 0o600, name
    logs = sorted((project / "logs").glob("*.log"))
    assert len(logs) == 2  # the daemon's own and its model proxy process's (<project>-proxy.log)
    for log in logs:
        assert mode(log) == 0o600, log.name


def _project(state: Path) -> Path:
    """The one project folder of the state directory, where the daemon's store and token are."""
    (project,) = (state / "projects").iterdir()
    return project


def _where(state: Path, name: str) -> Path:
    if name == "proxy log":
        (log,) = (_project(state) / "logs").glob("*-proxy.log")
        return log
    if name == "daemon log":  # <project folder>/logs/<project>.log, beside <project>-proxy.log
        (log,) = (p for p in (_project(state) / "logs").glob("*.log") if not p.name.endswith("-proxy.log"))
        return log
    return _project(state) / name


def _nobody() -> pwd.struct_passwd | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        return None


@pytest.mark.skipif(_nobody() is None, reason="the tests cannot switch to another user")
def test_another_user_cannot_read_the_store(running_daemon: Path) -> None:
    nobody = _nobody()
    assert nobody is not None
    head = shutil.which("head")
    assert head is not None

    def as_nobody(path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([head, "-c", "16", str(path)], cwd="/", user=nobody.pw_uid,
                              group=nobody.pw_gid, extra_groups=[], capture_output=True, text=True,
                              timeout=30, check=False)

    for name in ("canary.db", "canary.db-wal", "daemon log", "proxy log", "control.token"):
        done = as_nobody(_where(running_daemon, name))
        assert done.returncode != 0 and "Permission denied" in done.stderr, name
    # Even with the directory opened up, each file keeps others out on its own.
    os.chmod(running_daemon, 0o755)
    os.chmod(_project(running_daemon) / "logs", 0o755)
    os.chmod(running_daemon / "projects", 0o755)
    os.chmod(_project(running_daemon), 0o755)
    for name in ("canary.db", "canary.db-wal", "daemon log", "proxy log", "control.token"):
        done = as_nobody(_where(running_daemon, name))
        assert done.returncode != 0 and "Permission denied" in done.stderr, name
    sanity = as_nobody(running_daemon.parent / "agent.log")
    assert sanity.returncode == 0, sanity.stderr  # the switch of user itself works
