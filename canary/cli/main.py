"""The ``canary`` command: each subcommand parses, calls one library function, prints.

Results go to stdout, diagnostics to stderr. Exit codes: 0 all healthy; 1
something is asleep or a verdict is not caught/passed; 2 bad usage, config or
definitions; 3 could not work (store unavailable, nothing readable).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn

import click

from canary import __version__
from canary.cli import printers as fmt
from canary.errors import CanaryError, ConfigError, UsageError
from canary.vocabulary import EXIT_OK, EXIT_UNAVAILABLE, EXIT_UNHEALTHY, HEALTHY_VERDICTS

EXIT_ASLEEP = EXIT_UNHEALTHY


def _fail(exc: CanaryError) -> NoReturn:
    if isinstance(exc, ConfigError):
        for problem in exc.problems:
            click.echo(problem.render(), err=True)
        for warning in exc.warnings:
            click.echo(warning.render(), err=True)
        n = len(exc.problems)
        click.echo(f"{n} problem{'s' if n != 1 else ''} found; nothing was run.", err=True)
    else:
        click.echo(f"error: {exc}", err=True)
    sys.exit(exc.exit_code)


def _load(ctx: click.Context, *, warn: bool = True) -> Any:
    from canary.config.settings import load_config

    try:
        config = load_config(ctx.obj.get("config"))
    except CanaryError as exc:
        _fail(exc)
    if warn:
        for warning in config.warnings:
            click.echo(warning.render(), err=True)
    return config


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="canary.toml to use (default: $CANARY_CONFIG, ./canary.toml, then the platform config dir).",
)
@click.version_option(__version__, prog_name="guard-canary")
@click.pass_context
def main(ctx: click.Context, config_path: str | None) -> None:
    """guard-canary: prove, continuously, which of your agent's guards are awake."""
    ctx.ensure_object(dict)
    ctx.obj["config"] = config_path


@main.command()
@click.pass_context
def check(ctx: click.Context) -> None:
    """Validate canary.toml and every definition; list every problem (exit 2 if any)."""
    from canary.config.settings import summarize

    config = _load(ctx, warn=False)  # the summary lists the warnings itself
    click.echo(summarize(config))


def _parse_since(since: str | None, window: str | None, now: datetime) -> datetime | None:
    from canary.config.durations import DurationError, parse_duration

    if since and window:
        raise UsageError("give --since or --window, not both", option="--since")
    if window:
        try:
            return now - parse_duration(window)
        except DurationError as exc:
            raise UsageError(f"--window: {exc}", option="--window") from exc
    if not since:
        return None
    try:
        return now - parse_duration(since)
    except DurationError:
        pass
    try:
        moment = datetime.fromisoformat(since)
    except ValueError as exc:
        raise UsageError(
            f"--since: {since!r} is neither a time (2026-11-29, 2026-11-29T10:00:00Z) "
            "nor a duration ago (6h, 7d)",
            option="--since",
        ) from exc
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return moment.astimezone(UTC)


@main.command()
@click.option(
    "--since",
    default=None,
    help="Only lines from this time on: 2026-11-29T10:00Z, or a duration ago: 6h, 7d.",
)
@click.option("--window", default=None, help="Only lines of the last D (e.g. 24h); same as --since D.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON document instead of a table.")
@click.pass_context
def audit(ctx: click.Context, since: str | None, window: str | None, as_json: bool) -> None:
    """Count every guard's firings in the logs from their start (rotated and .gz files too)."""
    from canary.logs.audit import audit as run_audit

    config = _load(ctx)
    now = datetime.now(UTC)
    try:
        start = _parse_since(since, window, now)
    except CanaryError as exc:
        _fail(exc)
    report = run_audit(config, since=start, now=now)
    for f in report.files:
        if f.error:
            click.echo(f"warning: could not read {f.path}: {f.error}", err=True)
        for message in f.warnings:
            click.echo(f"warning: {message}", err=True)
    if not report.files:
        click.echo(
            f"warning: no log file matches {', '.join(config.logs.paths) or '[logs] paths (empty)'}",
            err=True,
        )
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(fmt.audit_table(report))
    readable = [f for f in report.files if f.error is None]
    if not readable:
        sys.exit(EXIT_UNAVAILABLE)
    sys.exit(EXIT_ASLEEP if report.asleep else EXIT_OK)


@main.command()
@click.option("--once", is_flag=True, help="Read every file to its end once, print counts, exit.")
@click.option("--every", "interval", default=5.0, show_default=True, help="Seconds between printed counts.")
@click.option("--from-end", is_flag=True, help="Files never seen before start at their end, not their start.")
@click.pass_context
def collect(ctx: click.Context, once: bool, interval: float, from_end: bool) -> None:
    """Follow the logs in the foreground and watch the firing counts grow (Ctrl-C stops)."""
    from canary.logs.collect import Collection
    from canary.store.engine import Store

    config = _load(ctx)
    try:
        store = Store(config.store.url)
    except CanaryError as exc:
        _fail(exc)

    def warn(path: str, message: str) -> None:
        click.echo(f"warning: {message}", err=True)

    collection = Collection(config, store, on_error=warn, start_at_end=from_end)
    if once:
        collection.poll()
        click.echo(_counts(config, store, collection))
        collection.tailer.close()
        store.close()
        return
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    collection.start()
    click.echo(f"following {', '.join(config.logs.paths)}; store {config.store.url}", err=True)
    try:
        while not stop.wait(interval):
            click.echo(_counts(config, store, collection))
    except KeyboardInterrupt:
        pass
    finally:
        collection.stop()
        click.echo(_counts(config, store, collection))
        store.close()


def _counts(config: Any, store: Any, collection: Any) -> str:
    from canary.store.queries import window_activity, window_counts

    now = datetime.now(UTC)
    parts = []
    for guard in config.guards:
        since = now - guard.window
        counts = window_counts(store.engine, since).get(guard.name)
        organic = counts.organic if counts else 0
        canary = counts.canary if counts else 0
        parts.append(f"{guard.name}={organic}" + (f"(+{canary} canary)" if canary else ""))
    activity, _lines = window_activity(store.engine, now - timedelta(hours=24))
    files = collection.files()
    return (
        f"{now.astimezone().strftime('%H:%M:%S')} firings: {' '.join(parts) or '(no guards)'}"
        f" | activity 24h={activity} | files={len(files)} lines read={collection.tailer.lines_total}"
    )


def _from_json(doc: dict[str, Any]) -> Any:
    """A run as the daemon sent it, with the attributes the printers read."""
    from types import SimpleNamespace

    return SimpleNamespace(leak_text=None, to_json=lambda: doc, **doc)


def _report_runs(results: list[Any], as_json: bool) -> int:
    from canary.vocabulary import HEALTHY_VERDICTS as HEALTHY

    if as_json:
        click.echo(json.dumps({"runs": [r.to_json() for r in results]}, indent=2))
    else:
        click.echo(fmt.runs_table(results))
        bad = [r for r in results if r.verdict not in HEALTHY]
        if bad:
            click.echo("")
            for r in bad:
                click.echo(f"{r.guard}/{r.canary}: {fmt.explain(r)}")
    if results and all(r.verdict == "error" for r in results):
        return EXIT_UNAVAILABLE
    return EXIT_OK if all(r.verdict in HEALTHY_VERDICTS for r in results) else EXIT_ASLEEP


@main.command()
@click.argument("selection", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print the contract's JSON document.")
@click.pass_context
def run(ctx: click.Context, selection: tuple[str, ...], as_json: bool) -> None:
    """Run canaries now (GUARD or GUARD/CANARY; all when none) and print their verdicts."""
    from canary.runs.runner import select_canaries
    from canary.runs.session import Session
    from canary.store.engine import Store

    config = _load(ctx)
    try:
        pairs = select_canaries(config, selection)
        if config.agent is None:
            raise UsageError("canary.toml has no [agent]: canaries need to know how to reach it")
        if not pairs:
            raise UsageError("no canaries are defined")
        store = Store(config.store.url)
    except CanaryError as exc:
        _fail(exc)

    def warn(path: str, message: str) -> None:
        click.echo(f"warning: {message}", err=True)

    from canary.daemon.control import connect

    client = connect(config.daemon.control)
    if client is not None:
        store.close()
        click.echo(f"running through the daemon at {config.daemon.control}", err=True)
        try:
            doc = client.run([*selection], wait=True)
        except Exception as exc:
            click.echo(f"error: the daemon could not run them: {exc}", err=True)
            sys.exit(EXIT_UNAVAILABLE)
        sys.exit(_report_runs([_from_json(r) for r in doc.get("runs", [])], as_json))
    try:
        with Session(config, store, on_error=warn) as session:
            assert session.runner is not None
            results = session.runner.run_many(pairs)
    except CanaryError as exc:
        store.close()
        _fail(exc)
    store.close()
    sys.exit(_report_runs(results, as_json))


@main.command()
@click.option(
    "--headless",
    is_flag=True,
    help="Run every canary once and print the verdicts; no screen (also when stdout is not a terminal).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the `canary run --json` document (implies --headless)."
)
@click.option(
    "--keep",
    type=click.Path(file_okay=False),
    default=None,
    help="Keep the demo's config, logs and store in this directory.",
)
@click.option("--sample-audit", is_flag=True, help="Audit the bundled sample logs instead.")
def demo(headless: bool, as_json: bool, keep: str | None, sample_audit: bool) -> None:
    """The bundled demo agent with live and dead guards, on the dashboard: watch the dead ones leak."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="canary-demo-") as tmp:
        where = Path(keep) if keep else Path(tmp)
        if sample_audit:
            sys.exit(_demo_audit(where, as_json))
        if not headless and not as_json and sys.stdout.isatty():
            from dashboard.demo import run_demo_dashboard

            sys.exit(run_demo_dashboard(where))
        from canary.demo.live import start_demo

        try:
            running = start_demo(where)
        except CanaryError as exc:
            _fail(exc)
        try:
            if not as_json:
                click.echo(
                    f"Demo agent at {running.config.agent.url if running.config.agent else '?'}, "
                    f"model proxy at {running.session.proxy.url if running.session.proxy else '?'}; "
                    f"running {sum(len(g.canaries) for g in running.config.guards)} canaries...\n",
                    err=True,
                )
            assert running.session.runner is not None
            pairs = [(g, c) for g in running.config.guards for c in g.canaries]
            results = running.session.runner.run_many(pairs)
        finally:
            running.stop()
        code = _report_runs(results, as_json)
        if not as_json:
            asleep = sorted({r.guard for r in results if r.verdict not in HEALTHY_VERDICTS})
            if asleep:
                click.echo(f"\nAsleep: {', '.join(asleep)}. Their unit tests pass; their canaries leak.")
        sys.exit(code)


def _demo_audit(where: Path, as_json: bool) -> int:
    from canary.config.settings import load_config
    from canary.demo.sample import write_demo
    from canary.logs.audit import audit as run_audit

    config_path = write_demo(where)
    try:
        config = load_config(str(config_path))
    except CanaryError as exc:
        _fail(exc)
    report = run_audit(config, now=datetime.now(UTC))
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(f"Sample agent logs in {where} (config {config_path.name}):\n")
        click.echo(fmt.audit_table(report))
    return EXIT_ASLEEP if report.asleep else EXIT_OK


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the contract's JSON document.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """The status of every guard, and why (exit 1 if any is asleep, degraded or inconclusive)."""
    from canary.status.overview import status_document
    from canary.store.engine import Store

    config = _load(ctx)
    try:
        store = Store.existing(config.store.url)
    except CanaryError as exc:
        _fail(exc)
    doc = status_document(store, config, now=datetime.now(UTC))
    store.close()
    error = doc["daemon"].get("error")
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        if error:
            click.echo(f"daemon error: {error}", err=True)
        elif not doc["daemon"]["running"]:
            click.echo("note: the daemon is not running; this is what the store knows.", err=True)
        click.echo(fmt.status_table(doc))
    if error:
        sys.exit(EXIT_UNAVAILABLE)
    bad = [g for g in doc["guards"] if g["status"] in ("asleep", "degraded", "inconclusive")]
    sys.exit(EXIT_ASLEEP if bad else EXIT_OK)


@main.command(name="mute")
@click.argument("guard")
@click.option("--for", "duration", required=True, help="How long: 30m, 6h, 2d (at most 30d).")
@click.option("--reason", default=None, help="Why, shown in the status and the dashboard.")
@click.pass_context
def mute_command(ctx: click.Context, guard: str, duration: str, reason: str | None) -> None:
    """Pause alerts for a guard for a while; the mute always expires."""
    from canary.config.durations import DurationError, parse_duration
    from canary.status.mutes import mute
    from canary.store.engine import Store

    config = _load(ctx)
    try:
        if guard not in {g.name for g in config.guards}:
            raise UsageError(f"no guard named {guard!r}")
        try:
            span = parse_duration(duration)
        except DurationError as exc:
            raise UsageError(f"--for: {exc}", option="--for") from exc
        store = Store(config.store.url)
        until = mute(store, guard, span, now=datetime.now(UTC), reason=reason)
    except CanaryError as exc:
        _fail(exc)
    store.close()
    click.echo(f"{guard}: alerts muted until {until.astimezone().strftime('%Y-%m-%d %H:%M %Z')}")


@main.command(name="unmute")
@click.argument("guard")
@click.pass_context
def unmute_command(ctx: click.Context, guard: str) -> None:
    """Lift a guard's mute now."""
    from canary.status.mutes import unmute
    from canary.store.engine import Store

    config = _load(ctx)
    try:
        store = Store(config.store.url)
    except CanaryError as exc:
        _fail(exc)
    lifted = unmute(store, guard)
    store.close()
    click.echo(f"{guard}: " + ("mute lifted" if lifted else "was not muted"))


@main.command()
@click.option("--tick", default=10.0, show_default=True, help="Seconds between status checks.")
@click.option(
    "--spread",
    default="60s",
    show_default=True,
    help="First and overdue canary runs start at random within this time, not all at once.",
)
@click.pass_context
def daemon(ctx: click.Context, tick: float, spread: str) -> None:
    """The background service in the foreground: collectors, canaries, status, alerts, metrics."""
    from canary.config.durations import DurationError, parse_duration
    from canary.daemon.loop import Daemon, setup_logging

    config = _load(ctx)
    try:
        spread_for = parse_duration(spread)
    except DurationError as exc:
        _fail(UsageError(f"--spread: {exc}", option="--spread"))
    log_path = setup_logging()
    click.echo(f"daemon log: {log_path}", err=True)
    try:
        code = Daemon(config, tick=tick, spread=spread_for).run()
    except CanaryError as exc:
        _fail(exc)
    sys.exit(code)


@main.group()
def service() -> None:
    """Run the daemon as a background service (launchd on macOS, systemd --user on Linux)."""


@service.command(name="install")
@click.option("--dry-run", is_flag=True, help="Print what would be written; change nothing.")
@click.pass_context
def service_install(ctx: click.Context, dry_run: bool) -> None:
    """Install and start the service (idempotent)."""
    from canary.config.settings import find_config
    from canary.daemon import service as svc

    try:
        found = find_config(ctx.obj.get("config"))
    except CanaryError as exc:
        _fail(exc)
    try:
        report = svc.install(found.resolve() if found else None, dry_run=dry_run)
    except CanaryError as exc:
        _fail(exc)
    click.echo(svc.render(report))
    sys.exit(EXIT_OK if report.ok else EXIT_UNAVAILABLE)


@service.command(name="uninstall")
def service_uninstall() -> None:
    """Stop and remove the service."""
    from canary.daemon import service as svc

    try:
        report = svc.uninstall()
    except CanaryError as exc:
        _fail(exc)
    click.echo(svc.render(report))
    sys.exit(EXIT_OK if report.ok else EXIT_UNAVAILABLE)


@service.command(name="status")
def service_status() -> None:
    """Whether the service is installed and running."""
    from canary.daemon import service as svc

    try:
        state = svc.status()
    except CanaryError as exc:
        _fail(exc)
    click.echo(svc.render(state))
    sys.exit(EXIT_OK if state.installed and state.running else EXIT_ASLEEP)


@main.command()
@click.pass_context
def dashboard(ctx: click.Context) -> None:
    """The terminal dashboard: which guards are awake, since when, and why."""
    from dashboard.app import run_dashboard

    config = _load(ctx)
    sys.exit(run_dashboard(config))


def _add_init() -> None:
    from canary.cli.init import init_command

    main.add_command(init_command, "init")


_add_init()


if __name__ == "__main__":  # pragma: no cover
    main()
