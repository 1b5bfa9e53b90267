"""``canary alerts test`` and the channels ``canary check`` lists, against a real local webhook receiver."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from canary.cli.main import main
from canary.proxy.serving import BackgroundServer


class Receiver:
    """A webhook receiver on loopback that answers with a scripted status and body."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, object]] = []
        self.status = 204
        self.answer = b""
        self.lock = threading.Lock()
        self.app = Starlette(routes=[Route("/hook/{token}", self.hook, methods=["POST"])])

    async def hook(self, request: Request) -> Response:
        with self.lock:
            self.bodies.append(json.loads(await request.body()))
        return Response(self.answer, status_code=self.status)


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    hook = Receiver()
    with BackgroundServer(hook.app, name="webhook receiver") as server:
        yield hook, f"{server.url}/hook/s3cret"


def write(tmp_path: Path, alerts: str) -> None:
    (tmp_path / "defs").mkdir(exist_ok=True)
    (tmp_path / "defs" / "citation.toml").write_text("[guard]\nname = 'citation'\nmatch = 'C: rejected'\n")
    (tmp_path / "canary.toml").write_text(f"defs = ['defs/*.toml']\n[logs]\npaths = []\n[alerts]\n{alerts}\n")


def test_a_test_alert_reaches_the_webhook_and_the_command(
    tmp_path: Path, receiver: tuple[Receiver, str]
) -> None:
    hook, url = receiver
    out = tmp_path / "got.txt"
    write(tmp_path, f"desktop = false\nwebhook = '{url}'\n"
                    f"command = ['sh', '-c', 'printf %s \"$0 $1\" > {out}', '{{guard}}', '{{status}}']")
    result = CliRunner().invoke(main, ["alerts", "test", "citation"])
    assert result.exit_code == 0, result.output
    assert [b["guard"] for b in hook.bodies] == ["citation"]
    assert hook.bodies[0]["status"] == "test" and "test alert" in str(hook.bodies[0]["text"])
    assert out.read_text() == "citation test"
    lines = result.stdout.splitlines()
    assert lines[0].split()[:2] == ["webhook", "sent"] and "s3cret" not in lines[0]
    assert lines[1].split()[:2] == ["command", "sent"]


def test_a_failed_delivery_is_reported_and_exits_3(tmp_path: Path, receiver: tuple[Receiver, str]) -> None:
    hook, url = receiver
    hook.status = 500
    hook.answer = b"\x1b[2Jboom\x07"
    write(tmp_path, f"desktop = false\nwebhook = '{url}'\ncommand = ['true']")
    result = CliRunner().invoke(main, ["alerts", "test"])
    assert result.exit_code == 3, result.output
    webhook_line, command_line = result.stdout.splitlines()
    assert "FAILED" in webhook_line and "500" in webhook_line and "boom" in webhook_line
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout  # the receiver's bytes, made inert
    assert command_line.split()[:2] == ["command", "sent"]
    assert len(hook.bodies) == 1  # a test is sent once, never retried


def test_an_unknown_guard_lists_the_guards(tmp_path: Path) -> None:
    write(tmp_path, "desktop = false\ncommand = ['true']")
    result = CliRunner().invoke(main, ["alerts", "test", "citaton"])
    assert result.exit_code == 2
    assert "citaton" in result.stderr and "citation" in result.stderr


def test_no_channel_is_a_usage_error(tmp_path: Path) -> None:
    write(tmp_path, "desktop = false")
    result = CliRunner().invoke(main, ["alerts", "test"])
    assert result.exit_code == 2
    assert "no alert channel" in result.stderr


def fake_tools(tmp_path: Path, *names: str) -> Path:
    """A folder of do-nothing programs under the given names, to stand as PATH."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    for name in names:
        (folder / name).write_text("#!/bin/sh\nexit 0\n")
        (folder / name).chmod(0o755)
    return folder


def test_check_lists_the_channels_without_the_webhook_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(fake_tools(tmp_path, "notify-send", "osascript", "notify-me")))
    write(tmp_path, "desktop = true\nwebhook = 'https://hooks.example.org/T000/s3cret'\ncommand = ['notify-me']")
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 0, result.output + result.stderr
    text = result.stdout
    assert "alerts   3 channels" in text
    assert "  desktop" in text and "  webhook   https://hooks.example.org" in text and "  command   notify-me" in text
    assert "s3cret" not in text


def test_check_warns_of_a_webhook_variable_this_shell_has_not_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``webhook = "env:VAR"`` is read when an alert is sent, by the daemon: one started from a shell without
    VAR, or a service installed from it, sends no webhook alert. A warning (another machine's daemon may
    have it), that names what to do; none once it is set."""
    monkeypatch.setenv("PATH", str(fake_tools(tmp_path)))
    monkeypatch.delenv("TEAM_HOOK", raising=False)
    write(tmp_path, "desktop = false\nwebhook = 'env:TEAM_HOOK'")
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 0, result.output
    assert ("alerts.webhook: $TEAM_HOOK is not set here, so a daemon started from this shell, or a service "
            "installed from it, sends no webhook alert: export it first") in result.stderr, result.stderr
    monkeypatch.setenv("TEAM_HOOK", "https://hooks.example.org/T000/s3cret")
    again = CliRunner().invoke(main, ["check"])
    assert again.exit_code == 0 and "TEAM_HOOK is not set" not in again.stderr, again.stderr


def test_an_alert_command_written_relative_runs_in_the_configs_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``command = ["./notify.sh", ...]`` reads as canary.toml's other paths do: from its folder, whatever
    folder ``canary check`` or ``canary alerts test`` is typed in (or the service's daemon runs in)."""
    project = tmp_path / "agent-home"
    project.mkdir()
    script = project / "notify.sh"
    script.write_text('#!/bin/sh\necho "$1 $(basename "$PWD")" > got.txt\n')
    script.chmod(0o755)
    write(project, "desktop = false\ncommand = ['./notify.sh', '{guard}']")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = str(project / "canary.toml")
    checked = CliRunner().invoke(main, ["check", "--config", config])
    assert checked.exit_code == 0, checked.output
    tested = CliRunner().invoke(main, ["alerts", "test", "--config", config])
    assert tested.exit_code == 0, tested.output
    assert (project / "got.txt").read_text() == "guard-canary agent-home\n"


NOTIFIER = "osascript" if sys.platform == "darwin" else "notify-send"


def test_check_fails_on_a_desktop_channel_that_cannot_deliver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(fake_tools(tmp_path)))  # no notifier on this machine
    write(tmp_path, "desktop = true\ncommand = ['true']")
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 2, result.output
    assert f"alerts.desktop: {NOTIFIER} not found" in result.stderr
    assert "desktop = false" in result.stderr  # what to do about it
    assert "CANNOT DELIVER" in result.stdout


def test_check_fails_on_an_alert_command_that_cannot_be_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(fake_tools(tmp_path)))
    write(tmp_path, "desktop = false\ncommand = ['notify-me', '{guard}']")
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 2, result.output
    assert "alerts.command: 'notify-me' not found" in result.stderr


def test_check_warns_when_no_channel_can_deliver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(fake_tools(tmp_path)))
    write(tmp_path, "repeat = '6h'")  # desktop alerts on by default, and nothing shows them here
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 0, result.output
    assert "no alert channel can deliver" in result.stderr and f"{NOTIFIER} not found" in result.stderr
    assert "this machine's notifier" not in result.stdout


def test_alerts_test_fails_a_channel_that_cannot_deliver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(fake_tools(tmp_path, "true")))
    write(tmp_path, "desktop = true\ncommand = ['true']")
    result = CliRunner().invoke(main, ["alerts", "test"])
    assert result.exit_code == 3, result.output
    desktop, command = result.stdout.splitlines()
    assert desktop.split()[:2] == ["desktop", "FAILED"] and f"{NOTIFIER} not found" in desktop
    assert command.split()[:2] == ["command", "sent"]


def test_alerts_test_with_no_channel_that_can_deliver_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(fake_tools(tmp_path)))
    write(tmp_path, "repeat = '6h'")
    result = CliRunner().invoke(main, ["alerts", "test"])
    assert result.exit_code == 2, result.output
    assert "no alert channel can deliver" in result.stderr and f"{NOTIFIER} not found" in result.stderr


@pytest.mark.slow
def test_listing_the_channels_keeps_check_free_of_http_and_sql_imports(tmp_path: Path) -> None:
    import subprocess
    import sys

    write(tmp_path, "desktop = false\nwebhook = 'https://hooks.example.org/x'")
    probe = (
        "import sys, runpy\n"
        "sys.argv = ['canary', '--config', sys.argv[1], 'check']\n"
        "try:\n"
        "    runpy.run_module('canary.cli.main', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    print('EXIT', exc.code, sorted(m for m in sys.modules if m.split('.')[0] in "
        "('sqlalchemy', 'sqlmodel', 'httpx')), file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "canary.toml")], capture_output=True,
                         text=True, timeout=60, check=False)
    assert "EXIT 0 []" in out.stderr, out.stderr
    assert "alerts   1 channel" in out.stdout
