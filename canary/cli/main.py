"""The ``canary`` command: each subcommand parses, calls one library function, prints.

Results go to stdout, diagnostics to stderr. Every ``CanaryError`` becomes its message
and exit code in one place (``canary.cli.boundary``); the exit codes are
``canary.vocabulary``'s EXIT_* names.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from canary import __version__
from canary.cli import printers as fmt
from canary.cli.boundary import CanaryGroup, config_option, epilog, load, warn
from canary.config.urls import redact_url
from canary.errors import StoreError, UsageError
from canary.sentences import POINT_AT_THE_PROXY
from canary.terminal import colour_wanted, safe, safe_lines
from canary.vocabulary import EXIT_OK, EXIT_UNHEALTHY, hour_floor

if TYPE_CHECKING:
    from canary.config.settings import Config
    from canary.logs.collect import Collection
    from canary.store.engine import Store


#: Commands whose modules load only when they run (``canary status`` must not pay for ``init``).
LAZY_COMMANDS = {
    "run": "canary.cli.running:run",
    "demo": "canary.cli.running:demo",
    "templates": "canary.cli.templates:templates_command",
    "init": "canary.cli.init:init_command",
    "alerts": "canary.cli.alerts_cmd:alerts_group",
    "service": "canary.cli.service_cmd:service",
}


@click.group(cls=CanaryGroup, lazy=LAZY_COMMANDS, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=epilog(["canary init", "canary run --config ~/agent/canary.toml"],
                           {0: None, 1: None, 2: None, 3: None}))
@config_option
@click.version_option(__version__, prog_name="guard-canary")
@click.pass_context
def main(ctx: click.Context) -> None:
    """guard-canary: prove, continuously, which of your agent's guards are awake."""
    if not colour_wanted():
        ctx.color = False  # every command's click.echo strips its styles (NO_COLOR, TERM=dumb)


@main.command(epilog=epilog(["canary check", "canary check --config ~/agent/canary.toml"],
                            {0: "the config and every definition are valid", 2: None}))
@config_option
@click.pass_context
def check(ctx: click.Context) -> None:
    """Validate canary.toml and every definition; list every problem (exit 2 if any)."""
    from canary.alerts.trial import alert_problems, channels_summary
    from canary.cli.probes import ca_file_warning, store_warning, upstream_path_warning, upstream_warning
    from canary.config.summary import summarize, unmatched_globs
    from canary.errors import ConfigError, Problem

    config = load(ctx, warn=False)  # the summary lists the warnings itself
    click.echo(safe_lines(summarize(config)))
    click.echo(safe_lines(channels_summary(config.alerts, config.path)))
    channel_problems = alert_problems(config.alerts, config.path)
    if any(p.severity == "error" for p in channel_problems):
        raise ConfigError(channel_problems)  # a channel turned on that cannot deliver loses every alert
    for problem in channel_problems:
        click.echo(safe_lines(problem.render()), err=True)
    for pattern in unmatched_globs(config):
        warn("", f"[logs] paths: {pattern!r} matches no file; no firing can be counted from it")
    for warning in (upstream_warning(config), upstream_path_warning(config), ca_file_warning(config),
                    store_warning(config), _relay_warning(config)):
        if warning:
            click.echo(safe_lines(warning), err=True)
    for name in config.daemon.pass_env:
        if name not in os.environ:
            unset = Problem(config.path, "daemon.pass_env", f"${name} is not set here, so a service "
                            "installed from this shell runs without it", severity="warning")
            click.echo(safe_lines(unset.render()), err=True)



def _relay_warning(config: Config) -> str | None:
    """A warning when the agent may point at a proxy that nothing keeps up: no daemon, no service."""
    import tomllib

    from canary.cli.probes import answers
    from canary.daemon import service as svc

    try:
        raw = tomllib.loads(config.path.read_text(encoding="utf-8")) if config.path is not None else {}
    except (OSError, ValueError):
        return None
    model = raw.get("model")
    if not isinstance(model, dict) or "listen" not in model or svc.installed(project=config.project):
        return None
    if answers(config.daemon.control):
        return None
    return (f"warning: [model] listen = {config.model.listen!r}, but no daemon runs and no service is "
            f"installed: an agent pointed at the proxy fails until one does. {POINT_AT_THE_PROXY}")


class ListOtlp(click.Command):
    """A command whose ``--otlp`` takes a list: the files after its value, up to the next option (a
    shell's glob expanded), are its values too (``canary.cli.entry.spread_otlp``)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Parse ``args`` with every file of an ``--otlp`` list given its own ``--otlp``."""
        from canary.cli.entry import spread_otlp

        return super().parse_args(ctx, spread_otlp(args))


@main.command(cls=ListOtlp, epilog=epilog(["canary audit --window 7d --json",
                                           "canary audit --otlp exports/*.json"],
                                          {0: "every guard fired",
                                           1: "a guard had zero firings, or nothing it fires through "
                                              "was read",
                                           2: "bad usage, config or definitions, or an --otlp file "
                                              "that is no OTLP JSON export",
                                           3: "no log file could be read"}))
@click.option(
    "--since",
    default=None,
    help="Only lines from this time on: 2026-11-29T10:00Z, or a duration ago: 6h, 7d.",
)
@click.option("--window", default=None, help="Only lines of the last D (e.g. 24h); same as --since D.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON document instead of a table.")
@click.option("--otlp", "otlp", multiple=True, type=click.Path(path_type=Path), metavar="FILE ...",
              help="Also count the spans and log records of OTLP JSON export files (the OpenTelemetry "
                   "Collector's file exporter): one or more files, or a quoted glob ('exports/*.json'); "
                   "repeatable.")
@config_option
@click.pass_context
def audit(ctx: click.Context, since: str | None, window: str | None, as_json: bool,
          otlp: tuple[Path, ...]) -> None:
    """Count every guard's firings in the logs from their start (rotated and .gz files too), and in
    OTLP export files."""
    from canary.cli.audit_cmd import audit_command, parse_since

    config = load(ctx)
    now = datetime.now(UTC)
    moment = parse_since(since, window, now)
    sys.exit(audit_command(config, since=moment, now=now, as_json=as_json, otlp=otlp))


@main.command(epilog=epilog(["canary collect --once", "canary collect --every 2"],
                            {0: None, 2: None, 3: None}))
@click.option("--once", is_flag=True, help="Read every file to its end once, print counts, exit.")
@click.option("--every", "interval", default=5.0, show_default=True, help="Seconds between printed counts.")
@click.option("--from-end", is_flag=True, help="Files never seen before start at their end, not their start.")
@config_option
@click.pass_context
def collect(ctx: click.Context, once: bool, interval: float, from_end: bool) -> None:
    """Follow the logs in the foreground and watch the firing counts grow (Ctrl-C stops)."""
    from canary.logs.collect import Collection
    from canary.store.engine import Store

    config = load(ctx)
    store = Store.of(config)
    collection = Collection(config, store, on_error=warn, start_at_end=from_end)
    if once:
        collection.poll()
        click.echo(_counts(config, store, collection))
        collection.tailer.close()
        store.close()
        return
    from canary.daemon.signals import SignalPipe

    stop = threading.Event()
    # The handlers run no Python code: a burst of signals cannot wait on the event's own lock.
    signals = SignalPipe({signal.SIGTERM: stop.set, signal.SIGINT: stop.set}).install()
    collection.start()
    click.echo(f"following {safe(', '.join(config.logs.paths))}; store {safe(redact_url(config.store.url))}",
               err=True)
    try:
        while not stop.wait(interval):
            click.echo(_counts(config, store, collection))
    except KeyboardInterrupt:
        pass
    finally:
        signals.close()
        collection.stop()
        click.echo(_counts(config, store, collection))
        store.close()


def _counts(config: Config, store: Store, collection: Collection) -> str:
    from canary.store import reads

    now = datetime.now(UTC)
    parts = []
    with store.engine.connect() as conn:
        reader = reads.Reader.over(conn)
        for guard in config.guards:
            # the window as canary status and canary audit --window count it, to the instant
            organic, canary = reads.window_firings(reader, guard.name, now - guard.window)
            parts.append(f"{guard.name}={organic}" + (f"(+{canary} canary)" if canary else ""))
        activity, _lines = reads.window_activity(reader, hour_floor(now - timedelta(hours=24)))
    files = collection.files()
    return (
        f"{now.astimezone().strftime('%H:%M:%S')} firings: {' '.join(parts) or '(no guards)'}"
        f" | activity 24h={activity} | files={len(files)} lines read={collection.tailer.lines_total}"
    )


@main.command(epilog=epilog(["canary status", "canary status --json"],
                            {0: "every guard is healthy, new or paused, and a daemon is collecting",
                             1: "a guard is asleep, degraded or inconclusive, no daemon is collecting, "
                                "or the model server is unreachable",
                             2: "bad usage, config or definitions (the guards are still shown)",
                             3: "the store is unavailable, or the daemon cannot write it"}))
@click.option("--json", "as_json", is_flag=True, help="Print the contract's JSON document.")
@click.option("--all-projects", is_flag=True,
              help="Every project's daemon and guards in the store, on every machine (a shared store).")
@config_option
@click.pass_context
def status(ctx: click.Context, as_json: bool, all_projects: bool) -> None:
    """The status of every guard, and why (exit 1 if any is asleep, degraded or inconclusive, or no
    daemon runs)."""
    from canary.cli.quick import status_command

    config = load(ctx, keep_going=True)  # a broken definition file is shown beside the daemon's status
    if all_projects:
        _team_status(config, as_json=as_json)
    sys.exit(status_command(config, as_json=as_json))


def _team_status(config: Config, *, as_json: bool) -> None:
    """``canary status --all-projects``: exit 1 when a guard alerts, a daemon is stale, or none wrote."""
    from canary.cli.quick import unreadable_team
    from canary.status.team import team_document, team_view
    from canary.store.engine import Store
    from canary.store.sites import Site

    try:
        store = Store.existing(config.store.url, site=Site(config.project, config.store.machine or ""),
                               local=config.state_folder / "store")
        try:
            doc = team_document(team_view(store), now=datetime.now(UTC))
        finally:
            store.close()
    except StoreError as exc:
        if as_json:  # a document still, saying why: nothing is known of the projects
            click.echo(json.dumps(unreadable_team(config, exc), indent=2))
        raise
    doc["store"] = _shown_url(config.store.url)
    click.echo(json.dumps(doc, indent=2) if as_json else fmt.team_table(doc))
    sys.exit(team_exit(doc))


def team_exit(doc: dict[str, Any]) -> int:
    """1 when a guard alerts, a daemon is stale, or no project has written to the store at all (nothing
    collects anywhere: nothing is proven); else 0."""
    projects = doc["projects"]
    bad = not projects or any(
        s["daemon"]["stale"] or any(g["alerting"] for g in s["guards"]) for s in projects)
    return EXIT_UNHEALTHY if bad else EXIT_OK


def _shown_url(url: str) -> str:
    """A store URL as it may be shown: any password hidden."""
    from canary.config.urls import redact_url

    return redact_url(url)


def _known_guard(config: Config, guard: str) -> None:
    from canary.config.tomlcheck import unknown_name

    names = [g.name for g in config.guards]
    if guard not in names:
        raise UsageError(unknown_name("guard", guard, names))


@main.command(name="mute", epilog=epilog(["canary mute citation --for 6h --reason 'deploying'"],
                                         {0: "the guard is muted", 2: None, 3: "the store is unavailable"}))
@click.argument("guard")
@click.option("--for", "duration", required=True, help="How long: 30m, 6h, 2d (at most 30d).")
@click.option("--reason", default=None, help="Why, shown in the status and the dashboard.")
@config_option
@click.pass_context
def mute_command(ctx: click.Context, guard: str, duration: str, reason: str | None) -> None:
    """Pause alerts for a guard for a while; the mute always expires."""
    from canary.config.durations import DurationError, parse_duration
    from canary.status.mutes import mute
    from canary.store.engine import Store

    config = load(ctx)
    _known_guard(config, guard)
    try:
        span = parse_duration(duration)
    except DurationError as exc:
        raise UsageError(f"--for: {exc}", option="--for") from exc
    store = Store.joining(config)
    try:
        if store.absent:
            raise StoreError(_no_site(store, config))
        until = mute(store, guard, span, now=datetime.now(UTC), reason=reason)
    finally:
        store.close()
    click.echo(f"{guard}: alerts muted until {until.astimezone().strftime('%Y-%m-%d %H:%M %Z')}")


def _no_site(store: Store, config: Config) -> str:
    """Why a mute cannot be kept in a shared store that holds no rows of the project yet, and what to run."""
    from canary.config.commandline import command_line
    from canary.status.mutes import no_site

    return f"{no_site(store.site)}; start one with `{command_line('canary daemon', config.path)}`, then mute"


@main.command(name="unmute", epilog=epilog(["canary unmute citation"],
                                           {0: "the mute is lifted (or there was none)", 2: None,
                                            3: "the store is unavailable"}))
@click.argument("guard")
@config_option
@click.pass_context
def unmute_command(ctx: click.Context, guard: str) -> None:
    """Lift a guard's mute now."""
    from canary.status.mutes import unmute
    from canary.store.engine import Store

    config = load(ctx)
    _known_guard(config, guard)
    store = Store.joining(config)
    try:
        lifted = not store.absent and unmute(store, guard)  # no site yet: nothing was muted
    finally:
        store.close()
    click.echo(f"{guard}: " + ("mute lifted" if lifted else "was not muted"))


@main.command(epilog=epilog(["canary daemon", "canary daemon --tick 5 --spread 10s"],
                            {0: "stopped by a signal", 2: None,
                             3: "a port is taken or the store is unavailable"}))
@click.option("--tick", default=10.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds between status checks (more than 0).")
@click.option(
    "--spread",
    default="60s",
    show_default=True,
    help="First and overdue canary runs start at random within this time, not all at once.",
)
@config_option
@click.pass_context
def daemon(ctx: click.Context, tick: float, spread: str) -> None:
    """The background service in the foreground: collectors, canaries, status, alerts, metrics."""
    from canary.config.durations import DurationError, parse_duration
    from canary.daemon.loop import Daemon
    from canary.daemon.steps import setup_logging

    config = load(ctx)
    try:
        spread_for = parse_duration(spread)
    except DurationError as exc:
        raise UsageError(f"--spread: {exc}", option="--spread") from exc
    from canary import locations

    log_path = setup_logging(locations.project_log(config.path, config.project), project=config.project)
    click.echo(f"daemon log: {log_path}", err=True)
    sys.exit(Daemon(config, tick=tick, spread=spread_for, detached_proxy=True).run())


@main.command(epilog=epilog(["canary dashboard", "canary dashboard --config ~/agent/canary.toml"],
                            {0: "quit", 2: None, 3: None}))
@config_option
@click.pass_context
def dashboard(ctx: click.Context) -> None:
    """The terminal dashboard: which guards are awake, since when, and why."""
    from dashboard.app import run_dashboard

    config = load(ctx, keep_going=True)  # a broken definition file is shown beside the other guards
    sys.exit(run_dashboard(config))


if __name__ == "__main__":  # pragma: no cover
    main()
