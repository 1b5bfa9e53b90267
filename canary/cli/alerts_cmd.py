"""``canary alerts``: see the alert channels work."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import click

from canary.cli.boundary import CanaryGroup, config_option, epilog, load
from canary.errors import UsageError
from canary.terminal import safe
from canary.vocabulary import EXIT_OK, EXIT_UNAVAILABLE


@click.group(name="alerts", cls=CanaryGroup,
             epilog=epilog(["canary alerts test", "canary alerts test citation"],
                           {0: None, 2: None, 3: None}))
def alerts_group() -> None:
    """Alert channels: send a test notification through each of them."""


@alerts_group.command(
    name="test",
    epilog=epilog(["canary alerts test", "canary alerts test citation"],
                  {0: "every channel delivered it",
                   2: "no channel is configured or can deliver here, or GUARD is unknown",
                   3: "a delivery failed, or a channel cannot deliver here (no notify-send)"}),
)
@click.argument("guard", required=False)
@config_option
@click.pass_context
def alerts_test(ctx: click.Context, guard: str | None) -> None:
    """Send a test notification through every configured channel and report each delivery."""
    from canary.alerts.trial import blocked_channels, channel_target, nowhere, send_test
    from canary.config.tomlcheck import unknown_name

    config = load(ctx)
    names = [g.name for g in config.guards]
    if guard is not None and guard not in names:
        raise UsageError(unknown_name("guard", guard, names))
    results = send_test(config.alerts, guard, now=datetime.now(UTC))
    if not results:
        raise UsageError(nowhere(config.alerts, blocked_channels(config.alerts))
                         or "no alert channel is configured; set [alerts] desktop, webhook or command "
                         "in canary.toml")
    width = max(len(r.channel) for r in results)
    for r in results:
        where = channel_target(config.alerts, r.channel)
        word = {"sent": "sent", "skipped": "SKIPPED", "failed": "FAILED"}[r.outcome]
        line = safe(f"{r.channel.ljust(width)}  {word:<7}  {where}" + (f": {r.note}" if r.note else ""))
        click.echo(click.style(line, fg="red", bold=True) if r.outcome == "failed" else line)
    sys.exit(EXIT_UNAVAILABLE if any(r.outcome == "failed" for r in results) else EXIT_OK)
