"""The sentence that explains a status decision, and the line that backs it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from canary.config.durations import format_duration
from canary.sentences import meaning

if TYPE_CHECKING:
    from canary.status.evaluate import Decision, GuardFacts, RunFact, View

def clock_time(moment: datetime, now: datetime) -> str:
    """``10:02`` for a time today (local), ``2026-11-28 10:02`` otherwise."""
    local, today = moment.astimezone(), now.astimezone()
    return local.strftime("%H:%M" if local.date() == today.date() else "%Y-%m-%d %H:%M")


def _words(verdict: str) -> str:
    return verdict.replace("_", " ")


def _variant(run: RunFact, now: datetime) -> str:
    return f"{run.canary} variant {run.variant} {_words(run.verdict)} at {clock_time(run.at, now)}"


def _muted(d: Decision, v: View) -> str:
    f = v.facts
    assert f.muted_until is not None
    why = f" ({f.mute_reason})" if f.mute_reason else ""
    return f"muted until {clock_time(f.muted_until, v.now)}{why}"


def _canaries_failed(d: Decision, v: View) -> str:
    run = d.run
    assert run is not None
    at = clock_time(run.at, v.now)
    text = f"canary {run.canary} {_words(run.verdict)} at {at}: {meaning(run.verdict)}"
    if run.leaked_turn is not None:
        text += f" (in turn {run.leaked_turn})"
    if len(d.runs) > 1:
        text += "; every variant failed: " + ", ".join(_variant(r, v.now) for r in d.runs)
    return text


def _late_firing(d: Decision, v: View) -> str:
    run = d.run
    assert run is not None and run.late is not None
    late = f"{run.late.total_seconds():.0f}s"
    return (f"canary {run.canary}'s latest run ({clock_time(run.at, v.now)}) ended unlogged, but the guard "
            f"fired on it {late} after its verdict, once the run had stopped waiting: it is awake on that "
            "path, and too slow for a run to see it; have it write its line (or export its span: "
            "OTEL_BSP_SCHEDULE_DELAY under 5000 ms) within seconds of the answer")


def _silent(d: Decision, v: View) -> str:
    f = v.facts
    what = (
        f"while the agent logged {f.activity} unit(s) of work"
        if f.activity is not None
        else f"across {f.lines} log lines"
    )
    return f"no firing in the last {format_duration(f.window)} {what}, and no canary was caught"


def _control_rejected(d: Decision, v: View) -> str:
    run = d.run
    assert run is not None
    return (
        f"control {run.canary} was rejected at {clock_time(run.at, v.now)}: "
        "the guard rejects grounded answers"
    )


def _variants_disagree(d: Decision, v: View) -> str:
    rate = v.kill_rate
    rated = f"; kill rate {rate:.0%} in {format_duration(v.facts.window)}" if rate is not None else ""
    caught = [r for r in v.runs("reject") if r.healthy]
    return (
        f"canaries disagree: {', '.join(_variant(r, v.now) for r in d.runs)}; "
        f"{', '.join(_variant(r, v.now) for r in caught)}{rated}"
    )


def _logs_unreadable(d: Decision, v: View) -> str:
    return "its logs cannot be read, so a silence proves nothing"


def _no_signals(d: Decision, v: View) -> str:
    unread = v.facts.unread
    spans = "spans" in unread or "span events" in unread
    missing = [what for what, yes in (("span", spans), ("log record", "log records" in unread)) if yes]
    exports = [what for what, yes in (("traces", spans), ("logs", "log records" in unread)) if yes]
    kinds = ", ".join(unread[:-1]) + " or " + unread[-1] if len(unread) > 1 else unread[0]
    point = f"point the agent's OTLP exporter for {' and '.join(exports)} at it"
    fires = f"in {kinds} as well as in log lines" if v.facts.fires_in_logs else f"only in {kinds}"
    if not v.facts.receiver:
        return (f"no trace receiver is configured, and the guard may fire {fires}, so a silence "
                f"proves nothing: add [traces] listen to canary.toml and {point}")
    last = v.facts.unread_last
    when = (f" in the last {format_duration(v.facts.window)} (the last at {clock_time(last, v.now)})"
            if last is not None else "")
    return (f"no {' or '.join(missing)} has reached the trace receiver ([traces] listen){when}, and the "
            f"guard may fire {fires}, so a silence proves nothing: {point}")


def _no_conclusive(d: Decision, v: View) -> str:
    name = d.names[0]
    canary = next(c for c in v.facts.canaries if c.name == name)
    rule = f"(every {format_duration(canary.period)} + grace {format_duration(v.facts.grace)})"
    if not canary.runs:
        return f"canary {name} has never run {rule}"
    since = f"since {clock_time(d.run.at, v.now)}" if d.run is not None else "yet"
    tried = d.runs[0] if d.runs else None
    last_try = (
        f"; its last run ended {_words(tried.verdict)} at {clock_time(tried.at, v.now)}: "
        f"{tried.error if tried.verdict == 'error' and tried.error else meaning(tried.verdict)}"
        if tried is not None and not tried.conclusive
        else ""
    )
    return f"canary {name} has had no conclusive run {since} {rule}{last_try}"


def _pending(d: Decision, v: View) -> str:
    names = ", ".join(d.names)
    if d.run is not None:
        done = f"canary {d.run.canary} {d.run.verdict} at {clock_time(d.run.at, v.now)}"
        return f"{done}; {names} has not run yet"
    redefined = {c.name for c in v.facts.canaries if c.redefined}
    if redefined and redefined >= set(d.names):
        return (f"no canary has run yet under its current definition ({names} pending; its earlier "
                "runs are history)")
    return f"no canary has run yet ({names} pending)"


def _proved(d: Decision, v: View) -> str:
    run = d.run
    assert run is not None
    proof = f"canary {run.canary} {run.verdict} at {clock_time(run.at, v.now)}"
    window = format_duration(v.facts.window)
    if v.facts.organic == 0:
        return f"{proof}; no organic firing in {window}"
    return f"{proof}; {v.facts.organic} organic firing(s) in {window}"


def _fired(d: Decision, v: View) -> str:
    f = v.facts
    when = f", last at {clock_time(f.last_firing, v.now)}" if f.last_firing else ""
    return f"{f.organic + f.canary_firings} firing(s) in the last {format_duration(f.window)}{when}"


def _unknown(d: Decision, v: View) -> str:
    f = v.facts
    if f.last_firing is None:
        return "no canary run and no firing yet"
    quiet = (f"{'' if f.canaries else 'no canary, and '}no firing in the last {format_duration(f.window)} "
             f"(the last at {clock_time(f.last_firing, v.now)})")
    if (f.activity if f.activity is not None else f.lines) == 0:
        work = "unit of work" if f.activity is not None else "line"
        why = f"the agent logged no {work} in it, so the silence proves nothing"
    elif f.watched_since is None or f.watched_since > v.window_start:
        why = "the logs have been followed for less than the window, so the silence proves nothing yet"
    else:
        why = "nothing proves the silence either way"
    return f"{quiet}; {why}" + ("" if f.canaries else ": a canary would prove the guard awake")


_WRITERS: dict[str, Callable[[Decision, View], str]] = {
    "muted": _muted,
    "canaries_failed": _canaries_failed,
    "late_firing": _late_firing,
    "silent": _silent,
    "control_rejected": _control_rejected,
    "variants_disagree": _variants_disagree,
    "logs_unreadable": _logs_unreadable,
    "no_signals": _no_signals,
    "no_conclusive": _no_conclusive,
    "pending": _pending,
    "proved": _proved,
    "fired": _fired,
    "unknown": _unknown,
}


def reason(decision: Decision, v: View) -> str:
    """The sentence a person can act on."""
    return _WRITERS[decision.cause](decision, v)


def evidence(decision: Decision, facts: GuardFacts) -> str | None:
    """The deciding run's firing line; for a decision no run backs, the latest organic firing's line."""
    if decision.run is not None:
        return decision.run.evidence
    return facts.last_organic_line

