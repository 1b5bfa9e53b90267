"""``canary run`` and ``canary demo``: canaries run now, their verdicts printed."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from canary.cli import printers as fmt
from canary.cli.boundary import config_option, epilog, load, warn
from canary.demo.clients import DIALECTS as DEMO_DIALECTS
from canary.errors import UnavailableError, UsageError
from canary.runs.record import RunRecord
from canary.sentences import POINT_AT_THE_PROXY, explain
from canary.terminal import colour_wanted, cursor_moves_wanted, safe
from canary.vocabulary import EXIT_OK, EXIT_UNAVAILABLE, EXIT_UNHEALTHY, HEALTHY_VERDICTS

if TYPE_CHECKING:  # rich and the daemon's client load only when a run needs them
    from rich.console import Console

    from canary.config.definitions import CanaryDef, GuardDef
    from canary.config.settings import Config
    from canary.daemon.control import ControlClient


def _report_runs(views: Sequence[RunRecord], as_json: bool, *, proxy: str | None = None,
                 matches: Mapping[str, object] | None = None) -> int:
    if as_json:
        click.echo(json.dumps({"runs": [r.to_json() for r in views]}, indent=2))
    else:
        click.echo(fmt.runs_table(views))
        # One paragraph per cause: runs whose explanation is the same sentence share it.
        causes: dict[str, list[str]] = {}
        for r in views:
            if r.verdict not in HEALTHY_VERDICTS:
                causes.setdefault(explain(r, proxy=proxy, matches=matches), []).append(
                    f"{safe(r.guard)}/{safe(r.canary)}")
        if causes:
            click.echo("")
        for reason, names in causes.items():
            click.echo(f"{', '.join(dict.fromkeys(names))}: {reason}")
    if views and all(r.verdict == "error" for r in views):
        return EXIT_UNAVAILABLE
    return EXIT_OK if all(r.verdict in HEALTHY_VERDICTS for r in views) else EXIT_UNHEALTHY


_RUN_EXITS: dict[int, str | None] = {
    0: "every verdict is caught or passed", 1: "a verdict other than caught/passed", 2: None,
    3: "every run ended in error (the agent or the daemon could not be used)",
}


@click.command(epilog=epilog(["canary run", "canary run citation/fake-url --json"], _RUN_EXITS))
@click.argument("selection", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print the contract's JSON document.")
@config_option
@click.pass_context
def run(ctx: click.Context, selection: tuple[str, ...], as_json: bool) -> None:
    """Run canaries now (GUARD or GUARD/CANARY; all when none) and print their verdicts.

    On a terminal each canary gets a live line with the stages it reached, and a summary ends the output.
    """
    from canary.daemon.control import connect, token_path
    from canary.runs.runner import select_canaries

    config = load(ctx)
    pairs = select_canaries(config, selection)
    if config.agent is None:
        raise UsageError("canary.toml has no [agent]: canaries need to know how to reach it")
    if not pairs:
        raise UsageError("no canaries are defined")
    on_terminal = sys.stdout.isatty() and not as_json
    live = on_terminal and cursor_moves_wanted()  # lines redrawn in place: not on a dumb terminal
    began = time.monotonic()
    keys = [(g.name, c.name) for g, c in pairs]
    matches = {g.name: g.match for g in config.guards if g.match is not None}
    client = connect(config.daemon.control, token_path(config.path, config.project))
    if client is not None:
        click.echo(f"running through the daemon at {config.daemon.control}"
                   + (" (a run shows its stages once it finishes)" if live else ""), err=True)
        with client:
            records = _through_daemon(config, client, [*selection], keys if live else None)
        proxy: str | None = f"http://{config.model.listen}"
    else:
        records, proxy = _in_session(config, pairs, keys if live else None)
    code = _report_runs(records, as_json, proxy=proxy, matches=matches)
    if on_terminal:
        from canary.cli.progress import summary

        click.echo("\n" + summary(records, time.monotonic() - began))
    sys.exit(code)


def _through_daemon(config: Config, client: ControlClient, selection: list[str],
                    live: Sequence[tuple[str, str]] | None) -> list[RunRecord]:
    """The daemon runs the canaries; on a terminal, its run rows in the store feed the live lines."""
    from canary.cli.progress import DaemonRuns, live_runs
    from canary.store.engine import Store
    from canary.store.queries import runs_since

    since = datetime.now(UTC)
    if live is None:
        docs = client.run(selection, wait=True).get("runs", [])
    else:
        store = Store.of(config)
        try:
            with live_runs(live, DaemonRuns(lambda t: runs_since(store.engine, t), since), _console()):
                docs = client.run(selection, wait=True).get("runs", [])
        finally:
            store.close()
    try:
        return [RunRecord.from_json(d) for d in docs]
    except (KeyError, TypeError, ValueError) as exc:
        raise UnavailableError(f"the daemon answered with something that is not a run: {exc!r}") from exc


def _in_session(config: Config, pairs: Sequence[tuple[GuardDef, CanaryDef]],
                live: Sequence[tuple[str, str]] | None) -> tuple[list[RunRecord], str | None]:
    """No daemon: this process serves the proxy and fixtures and follows the logs for the run."""
    from canary.cli.progress import SessionRuns, live_runs
    from canary.runs.session import Session, open_store

    store = open_store(config)
    try:
        click.echo(
            f"note: no daemon runs; the model proxy on {config.model.listen} serves only during this run. "
            + POINT_AT_THE_PROXY,
            err=True,
        )
        with Session(config, store, on_error=warn) as session:
            if session.runner is None:
                raise UnavailableError("the run session could not start its runner")
            proxy = session.proxy.url if session.proxy is not None else None
            if live is None:
                return session.runner.run_many(pairs), proxy
            source = SessionRuns(session.registry)
            session.runner.finished = source.finished
            with live_runs(live, source, _console()):
                return session.runner.run_many(pairs), proxy
    finally:
        store.close()


def _console() -> Console:
    from rich.console import Console

    return Console(file=sys.stdout, highlight=False, no_color=not colour_wanted())


@click.command(epilog=epilog(["canary demo", "canary demo --headless --json"], _RUN_EXITS))
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
@click.option("--dialect", type=click.Choice(list(DEMO_DIALECTS)), default="chat", show_default=True,
              help="The API the demo agent asks its model in, through the proxy.")
@click.option("--organic", is_flag=True,
              help="Run the citation canary amid users' tasks, without and then with [logs] correlate.")
def demo(*, headless: bool, as_json: bool, keep: str | None, sample_audit: bool, organic: bool,
         dialect: str) -> None:
    """The bundled demo agent with live and dead guards, on the dashboard: watch the dead ones leak."""
    import tempfile

    from canary.demo.clients import MissingClient, require_client

    try:
        require_client(dialect)
    except MissingClient as exc:
        raise UsageError(str(exc)) from exc

    from canary.demo.headless import run_every_canary
    from canary.demo.headless import sample_audit as audit_sample

    with tempfile.TemporaryDirectory(prefix="canary-demo-") as tmp:
        where = Path(keep) if keep else Path(tmp)
        if sample_audit:
            config_file, report = audit_sample(where)
            if as_json:
                click.echo(json.dumps(report.to_json(), indent=2))
            else:
                folder = (f"in {where}" if keep else
                          "in a temporary folder, removed on exit; --keep DIR keeps them")
                click.echo(f"Sample agent logs {folder} (config {config_file.name}):\n")
                click.echo(fmt.audit_table(report))
            sys.exit(EXIT_UNHEALTHY if report.asleep else EXIT_OK)
        if organic:
            from canary.demo.organic import run_organic_demo

            if not as_json:
                click.echo("Users keep the demo agent busy; the citation canary runs twice: its guard's "
                           "line names only the task, then [logs] correlate ties the task to the run...\n",
                           err=True)
            sys.exit(_report_runs(run_organic_demo(where), as_json))
        if not headless and not as_json and sys.stdout.isatty():
            from dashboard.demo import run_demo_dashboard

            sys.exit(run_demo_dashboard(where, dialect))

        def started(agent: str, proxy: str, n: int) -> None:
            if not as_json:
                click.echo(f"Demo agent at {agent}, model proxy at {proxy}; running {n} canaries...\n",
                           err=True)

        done = run_every_canary(where, started=started, dialect=dialect)
        results = done.results
        code = _report_runs(results, as_json)
        if not as_json:
            asleep = sorted({r.guard for r in results if r.verdict not in HEALTHY_VERDICTS})
            if asleep:
                click.echo(f"\nAsleep: {', '.join(asleep)}. Their unit tests pass; their canaries leak.")
                click.echo(f"The demo ends with exit status {code}, as `canary run` does when a verdict is "
                           "not caught or passed: these guards are asleep on purpose.")
        sys.exit(code)
