"""Two projects' services side by side: named apart, never taking each other's unit or port."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from canary.daemon import service
from canary.errors import UsageError
from tests.daemon.test_service import Recorder

ALPHA = {"proxy": "127.0.0.1:21435", "fixtures": "127.0.0.1:21436"}
BETA = {"proxy": "127.0.0.1:22435", "fixtures": "127.0.0.1:22436"}


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME and XDG_CONFIG_HOME in tmp_path: nothing reaches the real LaunchAgents or systemd dirs."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdg"))
    return home


def units(home: Path) -> Path:
    return home / "xdg" / "systemd" / "user"


def config(tmp_path: Path, folder: str) -> Path:
    path = tmp_path / folder / "canary.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("defs = []\n")
    return path


def test_two_projects_install_side_by_side_and_uninstalling_one_leaves_the_other(
    home: Path, tmp_path: Path
) -> None:
    alpha, beta = config(tmp_path, "alpha"), config(tmp_path, "beta")
    assert service.install(alpha, platform="linux", run=Recorder(), listens=ALPHA, project="alpha").ok
    beta_report = service.install(beta, platform="linux", run=Recorder(), listens=BETA, project="beta")
    assert beta_report.ok
    files = sorted(p.name for p in units(home).iterdir())
    assert files == sorted(["guard-canary-alpha.service", "guard-canary-alpha-proxy.socket",
                            "guard-canary-alpha-fixtures.socket", "guard-canary-beta.service",
                            "guard-canary-beta-proxy.socket", "guard-canary-beta-fixtures.socket"])
    alpha_unit = (units(home) / "guard-canary-alpha.service").read_text()
    assert f"--config {alpha}" in alpha_unit and "guard-canary-alpha-proxy.socket" in alpha_unit
    assert "Service=guard-canary-beta.service" in (units(home) / "guard-canary-beta-proxy.socket").read_text()
    before = {p.name: p.read_bytes() for p in units(home).iterdir() if "beta" in p.name}

    run = Recorder()
    report = service.uninstall(platform="linux", run=run, project="alpha")

    assert report.ok
    assert all("beta" not in word for call in run.calls for word in call)  # nothing asked of beta's units
    assert {p.name: p.read_bytes() for p in units(home).iterdir()} == before
    listed = service.status_all(platform="linux", run=Recorder())
    assert [(st.project, st.installed, st.config) for st in listed] == [("beta", True, beta)]


def test_status_lists_every_projects_service(home: Path, tmp_path: Path) -> None:
    alpha, beta = config(tmp_path, "alpha"), config(tmp_path, "beta")
    service.install(alpha, platform="linux", run=Recorder(), listens=ALPHA, project="alpha")
    service.install(beta, platform="linux", run=Recorder(), listens=BETA, project="beta")

    states = service.status_all(platform="linux", run=Recorder(), project="gamma")

    assert [(st.project, st.installed) for st in states] == [("alpha", True), ("beta", True), ("gamma", False)]
    text = service.render(states)
    assert "service of project alpha" in text and "service of project beta" in text
    assert f"config: {alpha}" in text and f"config: {beta}" in text


@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_a_second_config_cannot_take_a_projects_service(home: Path, tmp_path: Path, platform: str) -> None:
    first, second = config(tmp_path, "one"), config(tmp_path, "two")
    installed = service.install(first, platform=platform, run=Recorder(), listens=ALPHA, project="agent")
    before = installed.path.read_bytes()

    with pytest.raises(UsageError, match=r"already installed for another config.*uninstall --project agent"):
        service.install(second, platform=platform, run=Recorder(), listens=BETA, project="agent")
    assert installed.path.read_bytes() == before  # untouched: the first project keeps its service


@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_a_port_another_project_holds_is_refused_before_anything_is_written(
    home: Path, tmp_path: Path, platform: str
) -> None:
    service.install(config(tmp_path, "alpha"), platform=platform, run=Recorder(), listens=ALPHA, project="alpha")
    clash = {"proxy": "127.0.0.1:22435", "fixtures": ALPHA["fixtures"]}
    run = Recorder()

    with pytest.raises(UsageError, match=r"fixtures address 127\.0\.0\.1:21436 .* project 'alpha' already holds"):
        service.install(config(tmp_path, "beta"), platform=platform, run=run, listens=clash, project="beta")
    assert run.calls == []
    assert not service.installed(platform=platform, project="beta")


def test_reinstalling_a_project_from_its_own_config_is_allowed(home: Path, tmp_path: Path) -> None:
    alpha = config(tmp_path, "alpha")
    service.install(alpha, platform="linux", run=Recorder(), listens=ALPHA, project="alpha")
    again = service.install(alpha, platform="linux", run=Recorder(), listens=ALPHA, project="alpha")
    assert again.ok and "(unchanged)" in again.messages[0]


def test_an_older_versions_unit_for_the_same_config_is_replaced(home: Path, tmp_path: Path) -> None:
    alpha = config(tmp_path, "alpha")
    where = units(home)
    where.mkdir(parents=True)
    # what an older version wrote: one unnamed unit and its sockets, on the same ports
    (where / "guard-canary.service").write_text(
        f"[Unit]\nDescription=guard-canary daemon\n[Service]\nExecStart={sys.executable} -m canary.cli.main "
        f"--config {alpha} daemon\nSockets=guard-canary-proxy.socket\n")
    (where / "guard-canary-proxy.socket").write_text(f"[Socket]\nListenStream={ALPHA['proxy']}\n")
    run = Recorder()

    report = service.install(alpha, platform="linux", run=run, listens=ALPHA, project="alpha")

    assert report.ok
    assert run.calls[0] == ["systemctl", "--user", "disable", "--now", "guard-canary.service",
                            "guard-canary-proxy.socket"]
    assert sorted(p.name for p in where.iterdir()) == sorted(
        ["guard-canary-alpha.service", "guard-canary-alpha-proxy.socket", "guard-canary-alpha-fixtures.socket"])


def test_an_older_versions_unit_of_another_config_is_listed_and_its_ports_kept(home: Path, tmp_path: Path) -> None:
    where = units(home)
    where.mkdir(parents=True)
    (where / "guard-canary.service").write_text(
        f"[Service]\nExecStart={sys.executable} -m canary.cli.main --config /elsewhere/canary.toml daemon\n")
    (where / "guard-canary-proxy.socket").write_text(f"[Socket]\nListenStream={ALPHA['proxy']}\n")

    with pytest.raises(UsageError, match="an older version's service already holds"):
        service.install(config(tmp_path, "alpha"), platform="linux", run=Recorder(), listens=ALPHA, project="alpha")
    (only,) = service.status_all(platform="linux", run=Recorder())
    assert only.project is None and only.config == Path("/elsewhere/canary.toml")
    assert "no project (installed by an older version)" in service.render([only])


def test_darwin_two_projects_get_two_labels_and_two_plists(home: Path, tmp_path: Path) -> None:
    run = Recorder()
    service.install(config(tmp_path, "alpha"), platform="darwin", run=run, listens=ALPHA, project="alpha")
    service.install(config(tmp_path, "beta"), platform="darwin", run=run, listens=BETA, project="beta")
    agents = home / "Library" / "LaunchAgents"
    assert sorted(p.name for p in agents.iterdir()) == [
        "io.github.guard-canary.daemon.alpha.plist", "io.github.guard-canary.daemon.beta.plist"]
    uid = os.getuid()
    service.uninstall(platform="darwin", run=run, project="alpha")
    assert run.calls[-1] == ["launchctl", "bootout", f"gui/{uid}/io.github.guard-canary.daemon.alpha"]
    assert [p.name for p in agents.iterdir()] == ["io.github.guard-canary.daemon.beta.plist"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_two_projects_units_together_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    files = [*service.plan_files(config(tmp_path, "alpha"), platform="linux", listens=ALPHA, project="alpha"),
             *service.plan_files(config(tmp_path, "beta"), platform="linux", listens=BETA, project="beta")]
    where = tmp_path / "units"
    where.mkdir()
    for path, contents in files:
        (where / path.name).write_bytes(contents)
    out = subprocess.run(["systemd-analyze", "verify", "--man=no", *(str(where / p.name) for p, _ in files)],
                         capture_output=True, text=True, check=False, cwd=where)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == "", out.stderr
