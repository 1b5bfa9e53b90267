"""What ``canary check`` (and ``canary init`` at its end) prints of a valid config: files, store,
logs, guards and warnings, and the log globs that match no file now."""

from __future__ import annotations

from pathlib import Path

from canary.config.definitions import GuardDef, expand_glob
from canary.config.durations import format_duration
from canary.config.settings import Config
from canary.config.urls import redact_url


def unmatched_globs(config: Config) -> list[str]:
    """The ``[logs] paths`` globs that match no file now, shown relative to the config's folder."""
    base = config.path.parent if config.path is not None else Path.cwd()
    return [str(Path(p).relative_to(base)) if Path(p).is_relative_to(base) else p
            for p in config.logs.paths if not expand_glob(p, base)]


def _guard_lines(guard: GuardDef) -> list[str]:
    """What ``canary check`` prints under a guard: how it fires, then its canaries."""
    fires = [f"{key} {value!r}" for key, value in (
        ("match", guard.match), ("span", guard.span and guard.span.spec),
        ("event", guard.event and guard.event.spec)) if value is not None]
    lines = [f"    {'   '.join(fires)}   window {format_duration(guard.window)}"
             f"   grace {format_duration(guard.grace)}"]
    for canary in guard.canaries:
        schedule = (f"every {format_duration(canary.every)}" if canary.every is not None
                    else f"cron {canary.cron!r}")
        variants = len(canary.variants)
        lines.append(f"    - {canary.name}   {schedule}   expect {canary.expect}   "
                     f"{variants} variant{'s' if variants != 1 else ''}")
    if not guard.canaries:
        lines.append("    (no canaries: known alive only through organic firings)")
    return lines


def summarize(config: Config) -> str:
    """What ``canary check`` prints for a valid config: files, store, logs, guards, warnings."""
    base = config.path.parent if config.path is not None else Path.cwd()

    def shown(path: Path) -> str:
        return str(path.relative_to(base)) if path.is_relative_to(base) else str(path)

    lines = [f"config   {config.path if config.path is not None else '(none)'}",
             f"project  {config.project}",
             f"store    {redact_url(config.store.url)}"]
    if config.agent is not None:
        agent = config.agent
        target = f"{agent.method} {redact_url(agent.url)}" if agent.url else " ".join(agent.command or ())
        how = "in the request ({inject})" if agent.inject_mode else (
            f"through the model proxy on {config.model.listen}")
        lines.append(f"agent    {target}; fabricated answers go {how}")
    if config.model.upstream:
        lines.append(f"model    proxy on {config.model.listen} relays to {redact_url(config.model.upstream)}")
    if config.traces is not None:
        listen = config.traces.listen
        lines.append(f"traces   OTLP/HTTP receiver on {listen}; point the agent at it with "
                     f"OTEL_EXPORTER_OTLP_ENDPOINT=http://{listen} and "
                     "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf (or tee a Collector to it: docs/traces.md)")
    logs = config.logs
    activity = f", activity {logs.activity!r}" if logs.activity is not None else ""
    activity += f", task ids {logs.correlate!r}" if logs.correlate is not None else ""
    lines.append(f"logs     {logs.format}, timestamps {logs.timestamp}{activity}")
    for pattern in logs.paths:
        count = len(expand_glob(pattern, base))
        lines.append(f"  {pattern}   {count} file{'s' if count != 1 else ''} now")
    if not logs.paths:
        lines.append("  (no log paths: firings cannot be counted)")
    lines.append(f"guards   {len(config.guards)}")
    if not config.guards:
        from canary.config.commandline import no_guards

        lines.append(f"  ({no_guards(config.path)})")
    for guard in config.guards:
        lines.append(f"  {guard.name}   {shown(guard.path)}")
        lines.extend(_guard_lines(guard))
    if config.warnings:
        lines.append(f"warnings {len(config.warnings)}")
        lines.extend(f"  {w.render()}" for w in config.warnings)
    return "\n".join(lines)
