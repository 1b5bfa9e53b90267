"""The facts ``evaluate`` needs, gathered from the store and the config.

Window counts come from the hourly counts, and only the window's first, partial hour from
the firing rows, so the window ends where ``canary audit --window`` ends it; activity in that
hour comes from its whole minutes inside the window. The SQL is ``canary.store.reads``, so no
ORM object is built and SQLAlchemy need not be imported.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from canary.config.definitions import CanaryDef, GuardDef
from canary.config.fingerprints import fingerprint
from canary.config.settings import Config
from canary.status.evaluate import CanaryFact, GuardFacts, RunFact
from canary.store import reads
from canary.store.reads import Reader
from collectors.files import expand


def canary_period(canary: CanaryDef, now: datetime) -> timedelta:
    """How often a canary runs: its ``every``, or the gap between its next two cron times."""
    if canary.every is not None:
        return canary.every
    from apscheduler.triggers.cron import CronTrigger

    assert canary.cron is not None
    trigger = CronTrigger.from_crontab(canary.cron, timezone=UTC)
    first = trigger.get_next_fire_time(None, now)
    second = trigger.get_next_fire_time(first, first + timedelta(seconds=1)) if first else None
    if first is None or second is None:
        return timedelta(days=365)
    gap: timedelta = second - first
    return gap


def variant_counts(guard: GuardDef) -> dict[str, tuple[str, int]]:
    """Per canary of a guard: what it expects, and how many variants its definition has."""
    return {c.name: (c.expect, len(c.variants)) for c in guard.canaries}


def logs_readable(config: Config) -> bool:
    """Whether at least one log file matches and every match can be opened."""
    paths = expand(config.logs.paths)
    if not paths:
        return False
    return all(os.access(p, os.R_OK) for p in paths)


def _received(reader: Reader, config: Config) -> tuple[datetime | None, datetime | None]:
    """When a daemon's trace receiver last took in a span, and a log record (its stored times; what one
    before a restart took in counts too); None for never, or with no ``[traces]``."""
    if config.traces is None:
        return None, None
    from canary.status import receiver

    counts = receiver.load(reader) or {}
    return receiver.seen_at(counts.get("span_seen_at")), receiver.seen_at(counts.get("record_seen_at"))


def unread(guard: GuardDef, *, spans: bool, records: bool) -> tuple[str, ...]:
    """What ``guard`` may fire in that the receiver has taken in none of (``spans``, ``records``: it
    took in a span, a log record). A span is taken in with its events; an ``event`` fires on span
    events and on log records, so it needs both."""
    missing: list[str] = []
    if guard.span is not None and not spans:
        missing.append("spans")
    if guard.event is not None and not spans:
        missing.append("span events")
    if guard.event is not None and not records:
        missing.append("log records")
    return tuple(missing)


def _unread_since(
    guard: GuardDef, seen: tuple[datetime | None, datetime | None], since: datetime | None
) -> tuple[tuple[str, ...], datetime | None]:
    """What ``guard`` may fire in that the receiver took in none of since ``since`` (the window's
    start; None: ever), and when it last took in any of that before (None for never)."""
    span_at, record_at = seen

    def taken(at: datetime | None) -> bool:
        return at is not None and (since is None or at >= since)

    missing = unread(guard, spans=taken(span_at), records=taken(record_at))
    kinds = {"spans": span_at, "span events": span_at, "log records": record_at}
    before = [at for at in (kinds[kind] for kind in missing) if at is not None]
    return missing, max(before) if before else None


def gather(
    reader: Reader, config: Config, *, now: datetime, readable: bool | None = None
) -> list[GuardFacts]:
    """The facts ``evaluate`` needs for every declared guard, read with lean SQL.

    Only the runs a status can rest on are read (``reads.status_runs``), never a guard's whole
    history: each (canary, variant)'s latest conclusive and latest finished run, and the
    window's runs.
    """
    readable = logs_readable(config) if readable is None else readable
    seen = _received(reader, config)
    mutes = reads.active_mutes(reader, now)
    since_watched = reads.watched_since(reader)
    beat = reads.heartbeat(reader)
    daemon_since = beat.started if beat is not None else None
    activity_of: dict[timedelta, tuple[int, int]] = {}
    facts = []
    for guard in config.guards:
        if guard.window not in activity_of:
            activity_of[guard.window] = reads.window_activity(reader, now - guard.window)
        activity, lines = activity_of[guard.window]
        # Beyond the retention, firing rows of the window's first hour may be pruned: those left count.
        organic, canary_firings = reads.window_firings(reader, guard.name, now - guard.window)
        until, mute_reason = mutes.get(guard.name, (None, None))
        # An idle agent explains spans and records that stopped with it: an active one must have sent some.
        active = (activity if config.logs.activity is not None else lines) > 0
        missing, missing_last = _unread_since(guard, seen, now - guard.window if active else None)
        facts.append(
            GuardFacts(
                guard=guard.name,
                window=guard.window,
                grace=guard.grace,
                canaries=_canaries(guard, reader, now),
                organic=organic,
                canary_firings=canary_firings,
                activity=activity if config.logs.activity is not None else None,
                lines=lines,
                watched_since=since_watched,
                daemon_since=daemon_since,
                # a guard that fires only through spans or events reads no log
                logs_readable=readable if guard.match is not None else True,
                fires_in_logs=guard.match is not None,
                unread=missing,
                unread_last=missing_last,
                receiver=config.traces is not None,
                last_firing=reads.last_firing(reader, guard.name),
                last_organic_line=reads.last_organic_line(reader, guard.name),
                muted_until=until,
                mute_reason=mute_reason,
            )
        )
    return facts


def _canaries(guard: GuardDef, reader: Reader, now: datetime) -> list[CanaryFact]:
    # A run made under an older definition of the canary is history, not evidence.
    stamps = {c.name: fingerprint(guard, c) for c in guard.canaries}
    current = reads.evidence(reader, guard.name, stamps)
    since = now - guard.window
    runs = reads.status_runs(reader, guard.name, stamps, since, current=current) if stamps else []
    return [
        CanaryFact(
            c.name,
            canary_period(c, now),
            tuple(RunFact(r.canary, r.variant, r.expect, r.verdict, r.started, r.evidence, r.leaked_turn,
                          r.error, _late(reader, r))
                  for r in runs if r.canary == c.name),
            redefined=current[c.name].redefined,
        )
        for c in guard.canaries
    ]


def _late(reader: Reader, run: reads.RunRow) -> timedelta | None:
    """For an unlogged run: how long after its verdict its guard's firing came, if one came."""
    if run.verdict != "unlogged" or run.run_id is None:
        return None
    return reads.late_firing(reader, run.run_id)
