"""Whether an alert channel can deliver here: the notifier each platform's desktop alert runs is the
one looked for, on PATH, and an alert command is looked for the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

from canary.alerts import trial
from canary.alerts.channels import desktop_command
from canary.config.settings import AlertsConfig
from canary.status.delivery import Blocked, blocked_channels, notifier, nowhere


@pytest.mark.parametrize("platform", ["darwin", "linux", "freebsd14"])
def test_the_notifier_looked_for_is_the_one_a_desktop_alert_runs(platform: str) -> None:
    from datetime import UTC, datetime

    argv = desktop_command(trial.test_payload(None, now=datetime(2026, 12, 3, tzinfo=UTC)), platform)
    assert argv is not None and notifier(platform) == argv[0]


def tools(tmp_path: Path, *names: str) -> str:
    for name in names:
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    return str(tmp_path)


@pytest.mark.parametrize(("platform", "tool"), [("darwin", "osascript"), ("linux", "notify-send")])
def test_a_missing_notifier_blocks_the_desktop_channel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, platform: str, tool: str
) -> None:
    monkeypatch.setenv("PATH", tools(tmp_path))
    config = AlertsConfig(desktop=True, desktop_set=True)
    assert blocked_channels(config, platform=platform) == [Blocked("desktop", f"{tool} not found on PATH", True)]
    monkeypatch.setenv("PATH", tools(tmp_path, tool))
    assert blocked_channels(config, platform=platform) == []


def test_windows_has_no_desktop_notifier() -> None:
    config = AlertsConfig(desktop=True)
    assert blocked_channels(config, platform="win32") == [Blocked("desktop", "no desktop notifier on win32", False)]


def test_an_alert_command_is_found_on_path_or_by_its_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert [b.channel for b in blocked_channels(AlertsConfig(desktop=False, command=("notify-me",)))] == ["command"]
    tools(tmp_path / "bin", "notify-me")
    assert blocked_channels(AlertsConfig(desktop=False, command=("notify-me",))) == []
    assert blocked_channels(AlertsConfig(desktop=False, command=(str(tmp_path / "bin" / "notify-me"),))) == []
    assert blocked_channels(AlertsConfig(desktop=False, command=(str(tmp_path / "nowhere"),)))


def test_only_a_default_desktop_channel_that_cannot_deliver_leaves_alerts_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", tools(tmp_path))
    default = AlertsConfig(desktop=True)
    assert nowhere(default, blocked_channels(default, platform="linux")) is not None
    with_hook = AlertsConfig(desktop=True, webhook="https://hooks.example.org/x")
    assert nowhere(with_hook, blocked_channels(with_hook, platform="linux")) is None
    written = AlertsConfig(desktop=True, desktop_set=True)  # a problem of its own in check, not this one
    assert nowhere(written, blocked_channels(written, platform="linux")) is None
