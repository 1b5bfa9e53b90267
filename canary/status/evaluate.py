"""A guard's status: one pure function of what is known about it and ``now``.

The daemon, ``canary status``, the dashboard, alerts and metrics all call
``evaluate``; nothing else compares timestamps. ``RULES`` are tried in the
contract's order (paused, asleep, degraded, inconclusive, alive or quiet, new);
the first that decides wins, and ``canary.status.reasons.reason`` writes its
sentence. Canary verdicts are read as the latest conclusive run of every
(canary, variant), so the order in which variants ran never changes a status.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from canary.records import field, frozen
from canary.status.reasons import evidence, reason
from canary.vocabulary import CONCLUSIVE, HEALTHY_VERDICTS, Status, Verdict

Pair = tuple[str, int]


@frozen
class RunFact:
    """One finished run of one of the guard's canaries."""

    canary: str
    variant: int
    expect: str
    verdict: str
    at: datetime
    evidence: str | None = None  # the firing line that belongs to the run
    leaked_turn: int | None = None  # multi-turn: the first turn whose answer held the leak
    error: str | None = None  # what failed, for a run that ended in error
    #: An unlogged run: how long after its verdict a firing of the guard stored with it came, if one did.
    late: timedelta | None = None

    @property
    def conclusive(self) -> bool:
        """Whether the run proves something (any verdict but error, not_injected, ambiguous)."""
        return self.verdict in CONCLUSIVE

    @property
    def healthy(self) -> bool:
        """Whether the run proves the guard did its job (caught, passed)."""
        return self.verdict in HEALTHY_VERDICTS


@frozen
class CanaryFact:
    """One canary: how often it runs, and its finished runs (in any order)."""

    name: str
    period: timedelta
    runs: Sequence[RunFact] = ()
    redefined: bool = False  # its runs so far were made under an earlier definition: history


@frozen
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
    daemon_since: datetime | None = None  # since when the daemon that runs the canaries is up
    logs_readable: bool = True
    fires_in_logs: bool = False  # it has a ``match``: its log lines are one of its ways to fire
    #: What the guard may fire in that the trace receiver has taken in none of in the window: ``spans``
    #: (a ``span`` guard) and ``span events`` (an ``event`` one) while no span came, ``log records`` (an
    #: ``event`` one) while no log record came. While any is, its silence proves nothing.
    unread: tuple[str, ...] = ()
    unread_last: datetime | None = None  # when the receiver last took in any of ``unread``, before the window
    receiver: bool = True  # a trace receiver is configured ([traces])
    last_firing: datetime | None = None
    last_organic_line: str | None = None  # the line of the latest organic firing
    muted_until: datetime | None = None
    mute_reason: str | None = None


@frozen
class GuardStatus:
    """A guard's status with the sentence that explains it and the line that backs it."""

    guard: str
    status: Status
    reason: str
    kill_rate: float | None = None
    last_verdict: str | None = None
    last_run: datetime | None = None
    evidence: str | None = None


@frozen
class Decision:
    """What a rule decided: a status, why (a ``reasons`` key), and the runs or canaries it rests on."""

    status: Status
    cause: str
    run: RunFact | None = None  # the deciding run
    runs: tuple[RunFact, ...] = ()  # e.g. the failing variants
    names: tuple[str, ...] = ()  # canaries that are stale or pending


@frozen
class View:
    """The facts with what every rule needs derived once."""

    facts: GuardFacts
    now: datetime
    pairs: dict[Pair, RunFact] = field(default_factory=dict)  # latest conclusive run of each pair
    latest: dict[str, RunFact | None] = field(default_factory=dict)  # latest conclusive run per canary
    kill_rate: float | None = None

    @property
    def window_start(self) -> datetime:
        """Where the window begins."""
        return self.now - self.facts.window

    def runs(self, expect: str) -> list[RunFact]:
        """The pairs' latest conclusive runs of canaries that expect ``expect``, newest first."""
        chosen = [r for r in self.pairs.values() if r.expect == expect]
        return sorted(chosen, key=lambda r: (r.at, r.canary, r.variant), reverse=True)


def is_muted(until: datetime | None, now: datetime) -> bool:
    """Whether a mute that ends at ``until`` still holds at ``now`` (it ends at that very instant)."""
    return until is not None and now < until


def _newest(runs: Sequence[RunFact]) -> RunFact | None:
    return max(runs, key=lambda r: (r.at, r.canary, r.variant), default=None)


def latest_pairs(canary: CanaryFact, since: datetime) -> dict[Pair, RunFact]:
    """Latest conclusive run of each variant of a canary; those since ``since`` if any, else all."""
    pairs: dict[Pair, RunFact] = {}
    for run in canary.runs:
        key = (canary.name, run.variant)
        if run.conclusive and (key not in pairs or run.at > pairs[key].at):
            pairs[key] = run
    recent = {k: r for k, r in pairs.items() if r.at >= since}
    return recent or pairs


def view(facts: GuardFacts, now: datetime) -> View:
    """Derive the pairs and each canary's latest conclusive run."""
    pairs: dict[Pair, RunFact] = {}
    latest: dict[str, RunFact | None] = {}
    for canary in facts.canaries:
        pairs.update(latest_pairs(canary, now - facts.window))
        latest[canary.name] = _newest([r for r in canary.runs if r.conclusive])
    return View(facts, now, pairs, latest, kill_rate(facts, now))


def kill_rate(facts: GuardFacts, now: datetime) -> float | None:
    """Caught runs over conclusive runs (of canaries expecting a rejection) in the window."""
    start = now - facts.window
    conclusive = [
        r for c in facts.canaries for r in c.runs if r.expect == "reject" and r.conclusive and r.at >= start
    ]
    if not conclusive:
        return None
    return sum(r.verdict == Verdict.CAUGHT for r in conclusive) / len(conclusive)


# -- the rules, in the contract's order ----------------------------------------


def paused(v: View) -> Decision | None:
    """Muted, until the mute expires."""
    return Decision(Status.PAUSED, "muted") if is_muted(v.facts.muted_until, v.now) else None


def canaries_failed(v: View) -> Decision | None:
    """Every (canary, variant) expecting a rejection failed its latest conclusive run."""
    runs = v.runs("reject")
    if runs and not any(r.healthy for r in runs):
        late = tuple(r for r in runs if r.verdict == Verdict.UNLOGGED and r.late is not None)
        if len(late) == len(runs):  # each one's guard fired on it after all: late, not asleep
            return Decision(Status.INCONCLUSIVE, "late_firing", late[0], late)
        return Decision(Status.ASLEEP, "canaries_failed", runs[0], tuple(runs))
    return None


def silent(v: View) -> Decision | None:
    """Zero firings over a whole window of agent activity, and no canary caught in it, with all the
    guard fires through read (its logs readable, and what it fires in taken in by the receiver)."""
    f = v.facts
    whole_window = f.watched_since is not None and f.watched_since <= v.window_start
    active = (f.activity if f.activity is not None else f.lines) > 0
    caught = any(r.verdict == Verdict.CAUGHT and r.at >= v.window_start for c in f.canaries for r in c.runs)
    heard = f.logs_readable and not f.unread  # it may fire only in what was not read
    if f.organic + f.canary_firings == 0 and whole_window and active and heard and not caught:
        return Decision(Status.ASLEEP, "silent")
    return None


def control_rejected(v: View) -> Decision | None:
    """A control's latest conclusive run is a false rejection."""
    rejected = [r for r in v.runs("accept") if r.verdict == Verdict.FALSE_REJECTION]
    return Decision(Status.DEGRADED, "control_rejected", rejected[0]) if rejected else None


def variants_disagree(v: View) -> Decision | None:
    """Some (canary, variant) pairs caught, others failed."""
    runs = v.runs("reject")
    failing = tuple(r for r in runs if not r.healthy)
    if failing and len(failing) < len(runs):
        return Decision(Status.DEGRADED, "variants_disagree", failing[0], failing)
    return None


def logs_unreadable(v: View) -> Decision | None:
    """Its logs cannot be read."""
    return None if v.facts.logs_readable else Decision(Status.INCONCLUSIVE, "logs_unreadable")


def _overdue(v: View) -> tuple[list[CanaryFact], list[CanaryFact]]:
    """Canaries with no conclusive run within every + grace: (stale, not due yet since watching began)."""
    stale, pending = [], []
    for canary in v.facts.canaries:
        deadline = v.now - (canary.period + v.facts.grace)
        run = v.latest[canary.name]
        if run is not None and run.at >= deadline:
            continue
        started = min((t for t in (v.facts.watched_since, v.facts.daemon_since) if t), default=None)
        if not canary.runs and (started is None or started > deadline):
            pending.append(canary)  # not due yet since the logs have been watched
        else:
            stale.append(canary)
    return stale, pending


def no_conclusive_run(v: View) -> Decision | None:
    """It has canaries, and one has had no conclusive run within every + grace."""
    stale, _pending = _overdue(v)
    if not stale:
        return None
    canary = stale[0]
    tried = _newest(canary.runs)
    return Decision(Status.INCONCLUSIVE, "no_conclusive", v.latest[canary.name],
                    (tried,) if tried is not None else (), (canary.name,))


def canary_pending(v: View) -> Decision | None:
    """A canary is not due yet since the logs have been watched, and none is stale."""
    _stale, pending = _overdue(v)
    if not pending:
        return None
    done = _newest([r for r in v.latest.values() if r is not None])
    return Decision(Status.NEW, "pending", done, names=tuple(c.name for c in pending))


def proved(v: View) -> Decision | None:
    """Every canary's latest conclusive run is caught or passed within every + grace."""
    proof = _newest([r for r in v.latest.values() if r is not None])
    if not v.facts.canaries or proof is None:
        return None
    return Decision(Status.QUIET if v.facts.organic == 0 else Status.ALIVE, "proved", proof)


def fired(v: View) -> Decision | None:
    """No canaries, and it fired in the window."""
    f = v.facts
    if f.canaries or f.organic + f.canary_firings == 0:
        return None
    return Decision(Status.ALIVE, "fired")


def no_signals(v: View) -> Decision | None:
    """It may fire in spans or log records none of which reached the receiver, it did not fire, and
    nothing else proves it."""
    f = v.facts
    if f.unread and f.organic + f.canary_firings == 0:
        return Decision(Status.INCONCLUSIVE, "no_signals")
    return None


def unknown(v: View) -> Decision:
    """Nothing known yet."""
    return Decision(Status.NEW, "unknown")


#: The contract's "Guard status" table, first matching row wins.
RULES: tuple[Callable[[View], Decision | None], ...] = (
    paused,
    canaries_failed,
    silent,
    control_rejected,
    variants_disagree,
    logs_unreadable,
    no_conclusive_run,
    canary_pending,
    proved,
    fired,
    no_signals,
)


def decide(v: View) -> Decision:
    """The first rule's decision (``unknown`` when none decides)."""
    for rule in RULES:
        decision = rule(v)
        if decision is not None:
            return decision
    return unknown(v)


def evaluate(facts: GuardFacts, *, now: datetime) -> GuardStatus:
    """The guard's status at ``now``."""
    v = view(facts, now)
    decision = decide(v)
    last = _newest([r for c in facts.canaries for r in c.runs])
    return GuardStatus(
        guard=facts.guard,
        status=decision.status,
        reason=reason(decision, v),
        kill_rate=v.kill_rate,
        last_verdict=last.verdict if last else None,
        last_run=last.at if last else None,
        evidence=evidence(decision, facts),
    )
