"""``canary audit``: one body for the click command and for the console script's short way, which
answers a plain ``canary audit`` line without loading click (``canary.cli.entry``).

Both print the same bytes and exit with the same code: the short way hands any line it does not
take whole (``--help``, an unknown option, a ``--since`` that does not parse) to click.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from canary.cli.quick import echo, guarded, warn
from canary.errors import UsageError
from canary.terminal import safe_lines
from canary.vocabulary import EXIT_OK, EXIT_UNAVAILABLE, EXIT_UNHEALTHY, EXIT_USAGE

if TYPE_CHECKING:
    from canary.config.settings import Config
    from canary.logs.audit import AuditReport

__all__ = ["audit_command", "parse_since", "run"]


def parse_since(since: str | None, window: str | None, now: datetime) -> datetime | None:
    """The start of the audited window from ``--since`` (a time, or a duration ago) or ``--window``."""
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
    if moment > now:
        raise UsageError(f"--since: {since} is after now ({now.astimezone():%Y-%m-%d %H:%M:%S %z}): "
                         "no line lies in the window", option="--since")
    return moment.astimezone(UTC)


def audit_command(config: Config, *, since: datetime | None, now: datetime, as_json: bool,
                  otlp: Sequence[Path]) -> int:
    """Audit ``config``'s logs (and ``otlp`` files, or the files of a glob among them) from ``since``,
    print the report; the exit code."""
    from canary.logs.audit import audit

    if otlp:
        from canary.traces.files import export_paths

        otlp = export_paths([str(path) for path in otlp])
    report = audit(config, since=since, now=now, otlp=otlp)
    bad_exports = _tell_files(report, {str(path) for path in otlp})
    if report.store_problem:
        warn(f"the store's runs could not be read ({report.store_problem}): "
             "lines carrying a run's nonce are counted organic")
    if not report.files and not otlp:
        warn(f"no log file matches {', '.join(config.logs.paths) or '[logs] paths (empty)'}")
    if not config.guards:
        from canary.config.commandline import no_guards

        warn(no_guards(config.path))
    if as_json:
        import json

        echo(json.dumps(report.to_json(), indent=2))
    else:
        from canary.cli.printers import audit_table

        echo(audit_table(report))
    if bad_exports:
        return EXIT_USAGE  # an --otlp file that is no export, or cannot be read: bad input
    if not [f for f in report.files if f.error is None]:
        return EXIT_UNAVAILABLE
    nothing_proven = report.asleep or report.unread or report.idle or not config.guards  # inconclusive
    return EXIT_UNHEALTHY if nothing_proven else EXIT_OK


def _tell_files(report: AuditReport, exports: set[str]) -> bool:
    """Say what went wrong with each file read; whether an ``--otlp`` file is no export or could not
    be read (an error: bad input), where a log file that could not be read is a warning."""
    bad = False
    for f in report.files:
        if f.error and f.path in exports:
            echo(f"error: {safe_lines(f'{f.path}: {f.error}')}", err=True)
            bad = True
        elif f.error:
            warn(f"could not read {f.path}: {f.error}")
        for message in f.warnings:
            warn(message)
    return bad


def run(explicit: str | None, *, since: str | None, window: str | None, as_json: bool,
        otlp: Sequence[str]) -> int | None:
    """``canary audit`` from start to exit code, with the CLI's error boundary; None (nothing printed)
    when ``--since`` or ``--window`` is wrong, for click to say so with its usage line."""
    now = datetime.now(UTC)
    try:
        moment = parse_since(since, window, now)
    except UsageError:
        return None

    def body() -> int:
        from canary.config.settings import load_config

        config = load_config(explicit)
        for warning in config.warnings:
            echo(safe_lines(warning.render()), err=True)
        return audit_command(config, since=moment, now=now, as_json=as_json, otlp=[Path(p) for p in otlp])

    return guarded(body)
