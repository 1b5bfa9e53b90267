"""Two projects' services under a real systemd user manager: install, restart, uninstall one.

The manager is ``systemd --user`` started for the test, with its own runtime and unit folders
in tmp_path. It refuses to run unless the machine booted with systemd, which a container did
not: it gets a mount namespace of its own (``unshare -m``) with an empty ``/run`` in which
``/run/systemd/system`` exists, so nothing of the machine's ``/run`` changes. ``systemctl --user``
and ``canary service`` then talk to it through ``$XDG_RUNTIME_DIR`` as they would on a desktop.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from canary import locations
from tests.daemon.projects import Project, canary, make_project, scrape, wait_for

pytestmark = pytest.mark.slow

SYSTEMD = next((p for p in ("/lib/systemd/systemd", "/usr/lib/systemd/systemd") if Path(p).exists()), None)


@pytest.fixture
def user_manager(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A real ``systemd --user`` of the test's own, and the environment that reaches it."""
    if SYSTEMD is None or shutil.which("unshare") is None or shutil.which("systemctl") is None:
        pytest.skip("systemd and unshare are not installed (Debian: apt install systemd util-linux)")
    runtime, xdg = tmp_path / "run", tmp_path / "xdg"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    script = f"mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/system && exec {SYSTEMD} --user"
    log = tmp_path / "systemd.log"
    with log.open("wb") as sink:
        manager = subprocess.Popen(["unshare", "-m", "sh", "-c", script], stdout=sink, stderr=sink)
    try:
        private = runtime / "systemd" / "private"
        with contextlib.suppress(AssertionError):
            wait_for(lambda: private.exists() or manager.poll() is not None, 30, "systemd --user")
        if manager.poll() is not None or not private.exists():
            pytest.skip(f"systemd --user could not start here (no mount namespace?): {log.read_text()[-300:]}")
        yield os.environ.copy()
    finally:
        manager.terminate()  # a user manager stops its units and exits on SIGTERM
        try:
            manager.wait(60)
        except subprocess.TimeoutExpired:
            manager.kill()
            manager.wait()


def systemctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemctl", "--user", *args], capture_output=True, text=True, timeout=60, check=False)


def main_pid(project: Project) -> int:
    """The running daemon's pid, 0 when the service does not run."""
    out = systemctl("show", f"guard-canary-{project.name}.service", "-p", "MainPID,ActiveState,SubState")
    props = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    running = props.get("ActiveState") == "active" and props.get("SubState") == "running"
    return int(props.get("MainPID", "0")) if running else 0


def serving(project: Project) -> bool:
    """The project's daemon answers its /metrics (it beat at least once)."""
    return "canary_daemon_heartbeat_timestamp_seconds{" in scrape(project)


def test_two_projects_install_run_restart_and_uninstall_side_by_side(
    user_manager: dict[str, str], tmp_path: Path
) -> None:
    alpha, beta = make_project(tmp_path, "alpha"), make_project(tmp_path, "beta")
    for project in (alpha, beta):
        done = canary("service", "install", cwd=project.folder, env=user_manager)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"enabled and started guard-canary-{project.name}.service" in done.stdout
    pids = {p.name: wait_for(lambda p=p: main_pid(p), 60, f"{p.name}'s daemon") for p in (alpha, beta)}
    for project in (alpha, beta):
        wait_for(lambda p=project: serving(p), 90, f"{project.name}'s metrics")
    listed = canary("service", "status", cwd=alpha.folder, env=user_manager)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "service of project alpha" in listed.stdout and "service of project beta" in listed.stdout
    assert listed.stdout.count("daemon: running") == 2

    # restart both: each comes back on its own sockets, as its own project
    assert systemctl("restart", "guard-canary-alpha.service", "guard-canary-beta.service").returncode == 0
    for project in (alpha, beta):
        new = wait_for(lambda p=project: main_pid(p) not in (0, pids[p.name]) and main_pid(p), 60,
                       f"{project.name} restarted")
        pids[project.name] = new
        wait_for(lambda p=project: serving(p), 90, f"{project.name}'s metrics after the restart")

    # uninstall alpha: beta keeps running, untouched
    gone = canary("service", "uninstall", cwd=alpha.folder, env=user_manager)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    wait_for(lambda: main_pid(alpha) == 0, 60, "alpha's daemon to stop")
    assert main_pid(beta) == pids["beta"]
    assert not (Path(os.environ["XDG_CONFIG_HOME"]) / "systemd" / "user" / "guard-canary-alpha.service").exists()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{alpha.proxy}/", timeout=2, trust_env=False)  # its socket unit is gone
    text = scrape(beta)
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert samples and all('project="beta"' in line for line in samples)
    after = canary("service", "status", cwd=beta.folder, env=user_manager)
    assert "service of project alpha" not in after.stdout and "service of project beta" in after.stdout

    # each project's daemon log holds its own lines only, each naming the project
    for project, other in ((alpha, beta), (beta, alpha)):
        lines = locations.project_log(project.config, project.name).read_text().splitlines()
        assert lines and all(f"[{project.name}]" in line for line in lines), lines[:3]
        assert not any(f"[{other.name}]" in line for line in lines)
