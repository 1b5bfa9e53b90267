"""A test notification through every configured channel, each delivery reported.

``canary alerts test`` calls ``send_test``: it proves the channels reach the user
before a guard falls asleep. Nothing is written to the store: a test is no
status change and is never retried.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from canary.config.settings import AlertsConfig
from canary.errors import Problem
from canary.status.delivery import CHANNELS, blocked_channels, enabled_channels, nowhere, shown_channels
from canary.vocabulary import iso

__all__ = ["CHANNELS", "TestDelivery", "alert_problems", "blocked_channels", "channel_target",
           "channels_summary", "enabled_channels", "nowhere", "send_test", "test_payload"]

if TYPE_CHECKING:
    from canary.alerts.channels import AlertPayload, Sender


def alert_problems(config: AlertsConfig, path: Path | None, *, platform: str = sys.platform) -> list[Problem]:
    """``canary check``'s problems with the channels: an error for a channel turned on that cannot
    deliver, a warning when only the default desktop channel is on and it cannot."""
    blocked = blocked_channels(config, platform=platform)
    fixes = {"desktop": "so no desktop alert can be shown; install it, or set desktop = false and use "
                        "webhook or command",
             "command": "so the alert command cannot run; give its full path"}
    out = [Problem(path, f"alerts.{b.channel}", f"{b.reason}, {fixes[b.channel]}")
           for b in blocked if b.written]
    lost = nowhere(config, blocked)
    if lost:
        out.append(Problem(path, "alerts", lost, severity="warning"))
    variable = config.webhook[len("env:"):] if config.webhook and config.webhook.startswith("env:") else None
    if variable is not None and not os.environ.get(variable, "").strip():
        out.append(Problem(path, "alerts.webhook", f"${variable} is not set here, so a daemon started from "
                           "this shell, or a service installed from it, sends no webhook alert: export it "
                           "first", severity="warning"))
    return out


@dataclass(frozen=True)
class TestDelivery:
    """How one channel took the test notification: ``sent``, ``skipped`` or ``failed``, and why."""

    __test__ = False  # not a pytest class

    channel: str
    outcome: str
    note: str | None = None


def test_payload(guard: str | None, *, now: datetime) -> AlertPayload:
    """The test notification: marked as a test in every field a person reads."""
    name = guard or "guard-canary"
    from canary.alerts.channels import AlertPayload

    return AlertPayload(
        guard=name,
        status="test",
        previous=None,
        reason="a test notification sent by `canary alerts test`; no guard changed status",
        since=iso(now) or "",
        evidence=None,
        kind="test",
        text=f"guard-canary test alert for {name}: alerts reach you on this channel",
    )


def channel_target(config: AlertsConfig, channel: str) -> str:
    """Where a channel delivers, as ``canary check`` shows it (a webhook by scheme and host only)."""
    if channel == "webhook" and config.webhook is not None:
        if config.webhook.startswith("env:"):
            return f"${config.webhook[4:]}"
        from urllib.parse import urlsplit

        parts = urlsplit(config.webhook)
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"  # paths often carry a secret token
    if channel == "command" and config.command:
        return config.command[0]
    return "this machine's notifier"


def send_test(
    config: AlertsConfig, guard: str | None, *, now: datetime, sender: Sender | None = None
) -> list[TestDelivery]:
    """Send the test notification once through every enabled channel, in channel order."""
    from canary.alerts.channels import default_sender
    from canary.errors import DeliveryError
    from canary.status.transitions import clean_line

    send = sender or default_sender(config)
    payload = test_payload(guard, now=now)
    results = []
    blocked = {b.channel: b for b in blocked_channels(config)}
    for channel in shown_channels(config, list(blocked.values())):
        if channel in blocked:  # not tried: it would be skipped, and the alert lost
            results.append(TestDelivery(channel, "failed", blocked[channel].reason))
            continue
        try:
            note = send(channel, payload)
        except DeliveryError as exc:
            results.append(TestDelivery(channel, "failed", clean_line(str(exc))))
            continue
        results.append(TestDelivery(channel, "skipped" if note else "sent", clean_line(note)))
    return results


def channels_summary(config: AlertsConfig, config_path: Path | None = None) -> str:
    """The ``alerts`` lines of ``canary check``: every enabled channel, where it delivers, and
    whether it cannot (the test command reads ``config_path``)."""
    from canary.config.commandline import command_line

    blocked = {b.channel: b for b in blocked_channels(config)}
    channels = shown_channels(config, list(blocked.values()))
    if not channels:
        return "alerts   none configured: asleep guards are only shown, never sent"
    lines = [f"alerts   {len(channels)} channel{'s' if len(channels) != 1 else ''}"
             f" (`{command_line('canary alerts test', config_path)}` sends a test through each)"]
    for channel in channels:
        cannot = f": CANNOT DELIVER ({blocked[channel].reason})" if channel in blocked else ""
        lines.append(f"  {channel}   {channel_target(config, channel)}{cannot}")
    return "\n".join(lines)
