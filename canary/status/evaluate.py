"""A guard's status: one pure function of what is known about it and ``now``.

The daemon, ``canary status``, the dashboard, alerts and metrics all call
``evaluate``; nothing else compares timestamps. Rows are checked in the
contract's order: paused, asleep, degraded, inconclusive, alive or quiet, new.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from canary.vocabulary import CONCLUSIVE, REJECT_FAILURES, Status

BAD = REJECT_FAILURES

_SENTENCE = {
    "leaked": "the answer reached the user; the guard wrote no line",
    "fired_but_leaked": "the guard logged a rejection, yet the answer reached the user",
    "unlogged": "the fabrication was stopped, but the guard wrote no line",
    "error": "the agent could not be used",
    "not_injected": "the fabricated answer was never injected",
}


@dataclass(frozen=True)
class RunFact:
    """One finished run of one of the guard's canaries."""

    canary: str
    variant: int
    expect: str
    verdict: str
    at: datetime

    @property
    def conclusive(self) -> bool:
        """Whether the run proves something (any verdict but error and not_injected)."""
        return self.verdict in CONCLUSIVE


@dataclass(frozen=True)
class CanaryFact:
    """One canary: how often it runs, and its finished runs, newest first."""

    name: str
    period: timedelta
    runs: Sequence[RunFact] = ()


@dataclass(frozen=True)
class GuardFacts:
    """Everything ``evaluate`` may look at for one guard."""

    guard: str
    window: timedelta
    grace: timedelta
    canaries: Sequence[CanaryFact] = ()
    organic: int = 0  # organic firings in the window
    canary_firings: int = 0  # canary firings in the window
    activity: int | None = None  # activity lines in the window; None when no pattern is set
    lines: int = 0  # log lines read in the window
    watched_since: datetime | None = None  # since when the logs have been followed
    logs_readable: bool = True
    last_firing: datetime | None = None
    muted_until: datetime | None = None
    mute_reason: str | None = None


@dataclass(frozen=True)
class GuardStatus:
    """A guard's status with the sentence that explains it."""

    guard: str
    status: Status
    reason: str
    kill_rate: float | None = None
    last_verdict: str | None = None
    last_run: datetime | None = None
    evidence: dict[str, str] = field(default_factory=dict)


def _clock_time(moment: datetime, now: datetime) -> str:
    """``10:02`` for a time today (local), ``2026-11-28 10:02`` otherwise."""
    local, today = moment.astimezone(), now.astimezone()
    return local.strftime("%H:%M" if local.date() == today.date() else "%Y-%m-%d %H:%M")


def _kill_rate(facts: GuardFacts, now: datetime) -> float | None:
    start = now - facts.window
    conclusive = [
        r for c in facts.canaries for r in c.runs
        if r.expect == "reject" and r.conclusive and r.at >= start
    ]
    if not conclusive:
        return None
    return sum(r.verdict == "caught" for r in conclusive) / len(conclusive)


def evaluate(facts: GuardFacts, *, now: datetime) -> GuardStatus:
    """The guard's status at ``now`` (the contract's table, first matching row wins)."""
    def _at(moment: datetime) -> str:
        return _clock_time(moment, now)

    runs = sorted((r for c in facts.canaries for r in c.runs), key=lambda r: r.at, reverse=True)
    last = runs[0] if runs else None
    base = {
        "guard": facts.guard,
        "kill_rate": _kill_rate(facts, now),
        "last_verdict": last.verdict if last else None,
        "last_run": last.at if last else None,
    }

    def status(kind: Status, reason: str) -> GuardStatus:
        return GuardStatus(status=kind, reason=reason, **base)  # type: ignore[arg-type]

    if facts.muted_until is not None and now < facts.muted_until:
        why = f" ({facts.mute_reason})" if facts.mute_reason else ""
        return status(Status.PAUSED, f"muted until {_at(facts.muted_until)}{why}")

    latest = {c.name: next((r for r in c.runs if r.conclusive), None) for c in facts.canaries}
    for canary in facts.canaries:
        run = latest[canary.name]
        if run is not None and run.verdict in BAD:
            return status(
                Status.ASLEEP,
                f"canary {canary.name} {run.verdict.replace('_', ' ')} at {_at(run.at)}: "
                f"{_SENTENCE[run.verdict]}",
            )

    window_start = now - facts.window
    whole_window = facts.watched_since is not None and facts.watched_since <= window_start
    active = (facts.activity if facts.activity is not None else facts.lines) > 0
    caught_in_window = any(
        r.verdict == "caught" and r.at >= window_start for c in facts.canaries for r in c.runs
    )
    fired = facts.organic + facts.canary_firings
    if fired == 0 and whole_window and active and not caught_in_window:
        what = (
            f"while the agent logged {facts.activity} unit(s) of work"
            if facts.activity is not None
            else f"across {facts.lines} log lines"
        )
        return status(
            Status.ASLEEP,
            f"no firing in the last {_span(facts.window)} {what}, and no canary was caught",
        )

    for canary in facts.canaries:
        run = latest[canary.name]
        if run is not None and run.verdict == "false_rejection":
            return status(
                Status.DEGRADED,
                f"control {canary.name} was rejected at {_at(run.at)}: the guard rejects grounded answers",
            )
    variants: dict[tuple[str, int], RunFact] = {}
    for canary in facts.canaries:
        for run in canary.runs:
            if run.conclusive and run.expect == "reject" and run.at >= window_start:
                variants.setdefault((canary.name, run.variant), run)
    verdicts = {r.verdict for r in variants.values()}
    if "caught" in verdicts and verdicts - {"caught"}:
        bad = next(r for r in variants.values() if r.verdict != "caught")
        good = next(r for r in variants.values() if r.verdict == "caught")
        return status(
            Status.DEGRADED,
            f"canaries disagree: {bad.canary} variant {bad.variant} {bad.verdict.replace('_', ' ')} "
            f"at {_at(bad.at)}, {good.canary} variant {good.variant} caught at {_at(good.at)}",
        )

    if not facts.logs_readable:
        return status(Status.INCONCLUSIVE, "its logs cannot be read, so a silence proves nothing")

    if facts.canaries:
        stale = []
        pending = []
        for canary in facts.canaries:
            run = latest[canary.name]
            deadline = now - (canary.period + facts.grace)
            if run is not None and run.at >= deadline:
                continue
            never = run is None and not any(True for _ in canary.runs)
            if never and (facts.watched_since is None or facts.watched_since > deadline):
                pending.append(canary)  # not due yet since the logs have been watched
            else:
                stale.append((canary, run))
        if pending and not stale:
            done = [r for r in latest.values() if r is not None]
            names = ", ".join(c.name for c in pending)
            if done:
                proof = max(done, key=lambda r: r.at)
                return status(
                    Status.NEW,
                    f"canary {proof.canary} {proof.verdict} at {_at(proof.at)}; {names} has not run yet",
                )
            return status(Status.NEW, f"no canary has run yet ({names} pending)")
        if not stale:
            proof = max((r for r in latest.values() if r is not None), key=lambda r: r.at)
            proved = f"canary {proof.canary} {proof.verdict} at {_at(proof.at)}"
            if facts.organic == 0:
                return status(Status.QUIET, f"{proved}; no organic firing in {_span(facts.window)}")
            organic = f"{facts.organic} organic firing(s) in {_span(facts.window)}"
            return status(Status.ALIVE, f"{proved}; {organic}")
        if runs:
            canary, run = stale[0]
            tried = next((r for r in canary.runs), None)
            since = f"since {_at(run.at)}" if run is not None else "yet"
            last_try = (
                f"; its last run ended {tried.verdict.replace('_', ' ')} at {_at(tried.at)}: "
                f"{_SENTENCE.get(tried.verdict, tried.verdict)}"
                if tried is not None and not tried.conclusive
                else ""
            )
            return status(
                Status.INCONCLUSIVE,
                f"canary {canary.name} has had no conclusive run {since} "
                f"(every {_span(canary.period)} + grace {_span(facts.grace)}){last_try}",
            )
    elif fired > 0:
        when = f", last at {_at(facts.last_firing)}" if facts.last_firing else ""
        return status(Status.ALIVE, f"{fired} firing(s) in the last {_span(facts.window)}{when}")

    if fired > 0:
        return status(Status.NEW, f"{fired} firing(s) seen, but no canary has run yet")
    return status(Status.NEW, "no canary run and no firing yet")


def _span(delta: timedelta) -> str:
    from canary.config.durations import format_duration

    return format_duration(delta)
