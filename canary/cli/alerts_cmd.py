"""``canary alerts``: see the alert channels work."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import click

from canary.vocabulary import EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE


@click.group(name="alerts")
def alerts_group() -> None:
    """Alert channels: send a test notification through each of them."""


@alerts_group.command(name="test")
@click.argument("guard", required=False)
@click.pass_context
def alerts_test(ctx: click.Context, guard: str | None) -> None:
    """Send a test notification through every configured channel and report each delivery.

    \b
    Examples:
      canary alerts test
      canary alerts test citation

    Exit codes: 0 every channel delivered (or skipped it, as a missing notifier does),
    2 no channel is configured or GUARD is unknown, 3 a delivery failed.
    """
    from canary.alerts.trial import channel_target, send_test
    from canary.cli.main import _load

    config = _load(ctx)
    names = [g.name for g in config.guards]
    if guard is not None and guard not in names:
        known = ", ".join(names) or "none"
        click.echo(f"error: no guard named {guard!r}; the guards are: {known}", err=True)
        sys.exit(EXIT_USAGE)
    results = send_test(config.alerts, guard, now=datetime.now(UTC))
    if not results:
        click.echo("error: no alert channel is configured; set [alerts] desktop, webhook or command "
                   "in canary.toml", err=True)
        sys.exit(EXIT_USAGE)
    width = max(len(r.channel) for r in results)
    for r in results:
        where = channel_target(config.alerts, r.channel)
        word = {"sent": "sent", "skipped": "SKIPPED", "failed": "FAILED"}[r.outcome]
        line = f"{r.channel.ljust(width)}  {word:<7}  {where}" + (f": {r.note}" if r.note else "")
        click.echo(click.style(line, fg="red", bold=True) if r.outcome == "failed" else line)
    sys.exit(EXIT_UNAVAILABLE if any(r.outcome == "failed" for r in results) else EXIT_OK)
