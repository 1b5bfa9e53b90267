"""The service manager holds the listeners: systemd `.socket` units, launchd `Sockets`, and safe paths."""

from __future__ import annotations

import plistlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from canary.daemon import service
from canary.errors import UsageError

LISTENS = {"proxy": "127.0.0.1:11435", "fixtures": "[::1]:11436"}
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
# Installed without a config, a service is the project "default"'s.
UNIT = "guard-canary-default.service"
PROXY_SOCKET, FIXTURES_SOCKET = "guard-canary-default-proxy.socket", "guard-canary-default-fixtures.socket"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME and XDG_CONFIG_HOME in tmp_path: nothing reaches the real LaunchAgents or systemd dirs."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdg"))
    return home


def _verify(tmp_path: Path, files: list[tuple[Path, bytes]]) -> subprocess.CompletedProcess[str]:
    where = tmp_path / "units"
    where.mkdir(exist_ok=True)
    for path, contents in files:
        (where / path.name).write_bytes(contents)
    assert SYSTEMD_ANALYZE is not None
    return subprocess.run(
        [SYSTEMD_ANALYZE, "verify", "--man=no", *(str(where / p.name) for p, _ in files)],
        capture_output=True, text=True, check=False, cwd=where,
    )


def test_linux_install_plans_a_socket_unit_per_listener() -> None:
    files = dict(service.plan_files(None, platform="linux", listens=LISTENS))
    names = sorted(p.name for p in files)
    assert names == [FIXTURES_SOCKET, PROXY_SOCKET, UNIT]
    proxy = next(c for p, c in files.items() if p.name == PROXY_SOCKET).decode()
    assert "ListenStream=127.0.0.1:11435\n" in proxy
    assert "FileDescriptorName=proxy\n" in proxy
    assert f"Service={UNIT}\n" in proxy
    fixtures = next(c for p, c in files.items() if p.name == FIXTURES_SOCKET).decode()
    assert "ListenStream=[::1]:11436\n" in fixtures
    assert "FileDescriptorName=fixtures\n" in fixtures


@pytest.mark.slow
@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed (Debian: apt install systemd)")
def test_generated_socket_and_service_units_pass_systemd_analyze_verify(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An awkward state directory: a space and a `%` (a systemd specifier unless doubled).
    monkeypatch.setenv("CANARY_STATE_DIR", str(tmp_path / "state dir 50%"))
    files = service.plan_files(tmp_path / "canary.toml", platform="linux", listens=LISTENS)

    out = _verify(tmp_path, files)

    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == "", out.stderr


@pytest.mark.slow
@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed (Debian: apt install systemd)")
def test_systemd_analyze_verify_catches_a_broken_socket_unit(tmp_path: Path) -> None:
    """The check above can fail: a socket unit naming a missing service and a bad address does."""
    path, contents = service.plan_files(None, platform="linux", listens=LISTENS)[1]
    broken = contents.replace(b"ListenStream=127.0.0.1:11435", b"ListenStream=not an address")

    out = _verify(tmp_path, [(path, broken)])

    assert out.returncode != 0
    assert "not an address" in out.stderr


def test_launchd_sockets_entry_round_trips_through_plistlib() -> None:
    _path, contents = service.plan(None, platform="darwin", listens=LISTENS)

    job = plistlib.loads(contents)
    assert job["Sockets"] == {
        "proxy": {"SockNodeName": "127.0.0.1", "SockServiceName": "11435", "SockType": "stream",
                  "SockFamily": "IPv4"},
        "fixtures": {"SockNodeName": "::1", "SockServiceName": "11436", "SockType": "stream",
                     "SockFamily": "IPv6"},
    }
    # written back, it is the same document: nothing launchd would read differently
    assert plistlib.loads(plistlib.dumps(job, fmt=plistlib.FMT_XML, sort_keys=True)) == job
    assert plistlib.dumps(job, fmt=plistlib.FMT_XML, sort_keys=True) == contents


@pytest.mark.parametrize("platform", ["linux", "darwin"])
@pytest.mark.parametrize(
    "bad", ["line\nbreak", "tab\tinside", "esc\x1b[2J", "del\x7f", "c1\x85"],
)
def test_a_state_directory_with_a_control_character_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, platform: str, bad: str
) -> None:
    monkeypatch.setenv("CANARY_STATE_DIR", str(tmp_path / bad))

    with pytest.raises(UsageError, match="control characters") as caught:
        service.plan_files(None, platform=platform, listens=LISTENS)
    message = str(caught.value)
    assert "\n" not in message and "\x1b" not in message  # the path is named escaped, never raw


@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_a_config_path_with_a_newline_cannot_inject_a_directive(tmp_path: Path, platform: str) -> None:
    evil = tmp_path / "x\nExecStartPre=/bin/rm -rf ~" / "canary.toml"
    with pytest.raises(UsageError, match="the config path contains control characters"):
        service.plan_files(evil, platform=platform, listens=LISTENS)


def test_an_environment_value_with_a_control_character_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CANARY_WEBHOOK", "https://x.example/\x1b]52;c;AA\x07")
    with pytest.raises(UsageError, match=r"\$CANARY_WEBHOOK contains control characters"):
        service.plan_files(None, platform="linux", listens=LISTENS)


def test_the_working_directory_is_not_quoted_since_systemd_would_keep_the_quotes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "with space 100%"
    monkeypatch.setenv("CANARY_STATE_DIR", str(state))
    _path, contents = service.plan(None, platform="linux", listens=LISTENS)
    lines = contents.decode().splitlines()
    assert f"WorkingDirectory={str(state).replace('%', '%%')}" in lines


def test_install_writes_the_socket_units_owner_only(home: Path) -> None:
    def ok(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 0, "", "")

    report = service.install(None, platform="linux", run=ok, listens=LISTENS)

    assert report.ok
    units = home / "xdg" / "systemd" / "user"
    for name in (PROXY_SOCKET, FIXTURES_SOCKET, UNIT):
        assert (units / name).stat().st_mode & 0o777 == 0o600
    assert service.installed(platform="linux")


def test_the_unit_in_a_dry_run_names_every_file() -> None:
    report = service.install(None, platform="linux", dry_run=True, listens=LISTENS)
    text = service.render(report)
    assert f"{PROXY_SOCKET}:" in text and f"{FIXTURES_SOCKET}:" in text
    assert not any(p.exists() for p, _ in service.plan_files(None, platform="linux", listens=LISTENS))


def test_interpreter_path_with_a_newline_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "venv\n" / "python"))
    with pytest.raises(UsageError, match="interpreter"):
        service.plan_files(None, platform="darwin", listens=LISTENS)
