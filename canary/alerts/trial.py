"""A test notification through every configured channel, each delivery reported.

``canary alerts test`` calls ``send_test``: it proves the channels reach the user
before a guard falls asleep. Nothing is written to the store: a test is no
status change and is never retried.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from canary.config.settings import AlertsConfig
from canary.vocabulary import iso

if TYPE_CHECKING:
    from canary.alerts.channels import AlertPayload, Sender

#: The channels, in the order their deliveries are created (``canary.alerts.channels.CHANNELS``).
CHANNELS = ("desktop", "webhook", "command")


def enabled_channels(config: AlertsConfig) -> tuple[str, ...]:
    """The channels the config turns on, in ``CHANNELS`` order (no HTTP client imported)."""
    on = {"desktop": config.desktop, "webhook": config.webhook is not None, "command": bool(config.command)}
    return tuple(name for name in CHANNELS if on[name])


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
    for channel in enabled_channels(config):
        try:
            note = send(channel, payload)
        except DeliveryError as exc:
            results.append(TestDelivery(channel, "failed", clean_line(str(exc))))
            continue
        results.append(TestDelivery(channel, "skipped" if note else "sent", clean_line(note)))
    return results


def channels_summary(config: AlertsConfig) -> str:
    """The ``alerts`` lines of ``canary check``: every enabled channel and where it delivers."""
    channels = enabled_channels(config)
    if not channels:
        return "alerts   none configured: asleep guards are only shown, never sent"
    lines = [f"alerts   {len(channels)} channel{'s' if len(channels) != 1 else ''}"
             " (`canary alerts test` sends a test through each)"]
    lines += [f"  {channel}   {channel_target(config, channel)}" for channel in channels]
    return "\n".join(lines)
