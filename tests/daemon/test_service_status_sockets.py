"""`canary service status` reports the sockets the service manager holds for the daemon.

systemd: a fake ``systemctl`` executable on PATH, run as a real subprocess, records its argv and
prints what systemd prints. launchd: the ``Sockets`` of the installed plist.
"""

from __future__ import annotations

import os
import plistlib
import stat
from pathlib import Path

import pytest

from canary.daemon import service
from canary.daemon.service import launchd, systemd
from tests.daemon.test_service import Recorder, done

FAKE_SYSTEMCTL = """#!/bin/sh
echo "$@" >> "{calls}"
case "$*" in
  *guard-canary-default-proxy.socket*)
    printf 'Id=guard-canary-default-proxy.socket\\nLoadState=loaded\\nActiveState=active\\nSubState=listening\\n'
    printf 'Listen=127.0.0.1:11435 (Stream)\\n\\n'
    printf 'Id=guard-canary-default-fixtures.socket\\nLoadState=loaded\\nActiveState=failed\\nSubState=failed\\n'
    printf 'Listen=127.0.0.1:11436 (Stream)\\n'
    ;;
  *)
    printf 'LoadState=loaded\\nActiveState=active\\nSubState=running\\nMainPID=4242\\nExecMainStatus=0\\n'
    ;;
esac
"""


@pytest.fixture
def fake_systemctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdg"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "systemctl.calls"
    tool = bin_dir / "systemctl"
    tool.write_text(FAKE_SYSTEMCTL.format(calls=calls))
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    return calls


def test_systemd_status_asks_for_each_installed_socket_unit_and_reports_its_state(fake_systemctl: Path) -> None:
    service.install(None, platform="linux", run=Recorder())

    st = service.status(platform="linux")

    calls = fake_systemctl.read_text().splitlines()
    assert "--user show guard-canary-default-fixtures.socket guard-canary-default-proxy.socket -p Id,LoadState,ActiveState," \
           "SubState,Listen" in calls
    by_name = {s.name: s for s in st.sockets}
    assert by_name["guard-canary-default-proxy.socket"].held is True
    assert by_name["guard-canary-default-proxy.socket"].listen == "127.0.0.1:11435"
    assert by_name["guard-canary-default-fixtures.socket"].held is False
    text = service.render(st)
    assert "socket: guard-canary-default-proxy.socket on 127.0.0.1:11435: active (listening)" in text
    assert "socket: guard-canary-default-fixtures.socket on 127.0.0.1:11436: failed (failed)" in text


def test_systemd_status_without_socket_units_says_so_and_asks_nothing_more(fake_systemctl: Path) -> None:
    service.install(None, platform="linux", run=Recorder())
    for unit in systemd.installed_sockets(systemd.unit_dir(), service.names_of("default")):
        unit.unlink()  # as an install from before the socket units left it

    st = service.status(platform="linux")
    assert st.sockets == ()
    assert not any(".socket" in line for line in fake_systemctl.read_text().splitlines())
    assert "sockets: none installed" in service.render(st)


def test_systemd_status_when_systemctl_cannot_say_reports_the_sockets_as_unknown(fake_systemctl: Path) -> None:
    service.install(None, platform="linux", run=Recorder())
    failing = Recorder({("systemctl",): done(code=1, err="Failed to connect to bus: No medium found")})

    st = service.status(platform="linux", run=failing)

    assert {s.held for s in st.sockets} == {None}
    assert "Failed to connect to bus" in service.render(st)


def test_launchd_status_reports_the_plist_sockets_held_while_the_agent_is_loaded(fake_systemctl: Path) -> None:
    service.install(None, platform="darwin", run=Recorder())
    entries = plistlib.loads(launchd.plist_path(service.names_of("default")).read_bytes())["Sockets"]
    loaded = Recorder({("launchctl",): done(out="state = running\npid = 77\n")})

    st = service.status(platform="darwin", run=loaded)

    assert {s.name for s in st.sockets} == set(entries)
    assert all(s.held for s in st.sockets)
    assert "socket: proxy on 127.0.0.1:11435: held by launchd" in service.render(st)
    unloaded = Recorder({("launchctl",): done(code=113, err="Could not find service")})
    assert {s.held for s in service.status(platform="darwin", run=unloaded).sockets} == {False}


def test_the_reinstall_hint_names_the_config_the_service_runs_with(
    fake_systemctl: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "conf dir" / "canary.toml"
    elsewhere.parent.mkdir()
    elsewhere.write_text('project = "default"\n')
    monkeypatch.chdir(tmp_path / "home")
    service.install(elsewhere, platform="linux", run=Recorder(), project="default")
    for unit in systemd.installed_sockets(systemd.unit_dir(), service.names_of("default")):
        unit.unlink()

    text = service.render(service.status(platform="linux"))
    assert f"run `canary service install --config '{elsewhere}'` again to add them" in text
