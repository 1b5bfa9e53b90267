"""Running canaries: fresh values, the real agent, the proxy's injection, the guard's log line.

Each run takes three steps: *prepare* draws its values and fills its texts
(``canary.runs.plan``), *execute* puts it in flight and asks the agent, *judge*
reads what it saw into a verdict and its record.

A run never ends ``caught`` without a firing of its guard that belongs to it,
and never ends ``leaked`` when the agent could not be reached. Runs of one
guard never overlap; runs of different guards may. A multi-turn canary asks
every turn in one conversation; the leak is looked for in the answer of the
injection turn and of every later one, and the run names the first that held it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

from canary.config.definitions import CanaryDef, GuardDef
from canary.config.fingerprints import fingerprint
from canary.config.settings import Config
from canary.runs.agent import AgentDriver
from canary.runs.attribution import Attributed, attributed
from canary.runs.conversation import Conversation, converse, first_turn_with
from canary.runs.inflight import ActiveRun
from canary.runs.observations import observe
from canary.runs.plan import Plan, prepare
from canary.runs.record import RunRecord
from canary.runs.registry import Registry
from canary.runs.runlog import RunLog
from canary.runs.underway import Underway
from canary.runs.unmatched import NearMiss, near_miss, nonce_lines
from canary.runs.verdicts import Observed, decide
from canary.store.engine import Store
from canary.store.queries import run_count
from canary.vocabulary import Stage, Verdict

#: Seconds to wait after the answer for the guard's line to reach the log and the store.
DEFAULT_GRACE = 3.0
#: Seconds to wait for a guard that fires through spans: an OpenTelemetry SDK's batch span
#: processor sends every 5 s by default (OTEL_BSP_SCHEDULE_DELAY).
DEFAULT_SPAN_GRACE = 6.5
ANSWER_KEEP = 8192
#: Verdicts of a run no firing was tied to, where a guard line the match missed is worth telling.
_UNFIRED = (Verdict.UNLOGGED, Verdict.LEAKED)


class Runner:
    """Runs canaries against the configured agent through a registry the proxy consults."""

    def __init__(
        self,
        config: Config,
        store: Store,
        registry: Registry,
        fixture_base: str,
        *,
        sync: Callable[[float], bool],
        driver: AgentDriver | None = None,
        grace: float = DEFAULT_GRACE,
        span_grace: float = DEFAULT_SPAN_GRACE,
    ) -> None:
        if config.agent is None:
            raise ValueError("no [agent] is configured")
        self.config = config
        self.store = store
        self.registry = registry
        self.fixture_base = fixture_base
        self.grace = grace
        self.span_grace = span_grace
        self._sync = sync
        folder = config.path.parent if config.path is not None else None
        self._driver = driver or AgentDriver(config.agent, folder=folder)
        self._runs = RunLog(store)
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        #: Called with each finished run's record, from the thread that ran it (a progress display).
        self.finished: Callable[[RunRecord], None] | None = None
        #: The runs under way, which a stopping daemon lets finish or cuts short.
        self.underway = Underway()

    def _lock(self, guard: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(guard, threading.Lock())

    def run(self, guard: GuardDef, canary: CanaryDef) -> RunRecord:
        """One run of one canary, start to verdict."""
        with self.underway.hold(), self._lock(guard.name):
            record = self._run(guard, canary)
        if self.finished is not None:
            self.finished(record)
        return record

    def run_many(self, pairs: Sequence[tuple[GuardDef, CanaryDef]], *, parallel: int = 4) -> list[RunRecord]:
        """Run each canary once: guards side by side, one guard's canaries in turn."""
        by_guard: dict[str, list[tuple[GuardDef, CanaryDef]]] = {}
        for guard, canary in pairs:
            by_guard.setdefault(guard.name, []).append((guard, canary))
        results: dict[tuple[str, str], RunRecord] = {}

        def one_guard(items: list[tuple[GuardDef, CanaryDef]]) -> None:
            for guard, canary in items:
                results[(guard.name, canary.name)] = self.run(guard, canary)

        with self.underway.hold(), ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
            list(pool.map(one_guard, by_guard.values()))
        return [results[(g.name, c.name)] for g, c in pairs]

    def _run(self, guard: GuardDef, canary: CanaryDef) -> RunRecord:
        variant = run_count(self.store.engine, guard.name, canary.name) % len(canary.variants)
        plan = prepare(guard, canary, variant, self.fixture_base)
        executed = self._execute(plan)
        record = self._judge(plan, executed)
        self._runs.finish(executed.run_id, record, finished=datetime.now(UTC))
        return record

    def _execute(self, plan: Plan) -> Executed:
        """Put the run in flight, ask the agent, and read the logs until its firing or the grace is over."""
        assert self.config.agent is not None
        inject_mode = self.config.agent.inject_mode
        canary = plan.canary
        started = datetime.now(UTC)
        run_id = self._runs.start(
            guard=plan.guard.name, canary=canary.name, variant=plan.variant, expect=canary.expect,
            nonce=plan.nonce, started=started, injected_text=plan.inject_text, leak_text=plan.expected,
            definition=fingerprint(plan.guard, canary),
        )
        timeout = canary.timeout.total_seconds()
        active = ActiveRun(
            run_id=run_id, guard=plan.guard.name, nonce=plan.nonce, inject_at=canary.inject_at,
            inject_text=plan.inject_text, repair_text=plan.repair, page=plan.page,
            started=started.timestamp(), deadline=started.timestamp() + timeout,
            inject_in_request=inject_mode, inject_tool=plan.tool, marks=plan.marks, canary=canary.name,
            armed=canary.inject_turn == 0,
        )
        self.registry.add(active)
        try:
            reply = self.underway.ask(lambda: converse(
                self._driver, plan.prompts, nonce=plan.nonce, inject_turn=canary.inject_turn,
                inject=plan.inject_text if inject_mode else "", timeout=timeout,
                arm=lambda: self.registry.arm(plan.nonce),
                named=lambda conversation: self.registry.converse(plan.nonce, conversation),
            ))
            active.answered = reply.answered
            # Without an injection the verdict is not_injected whatever the log says: no grace to wait.
            self._await_firings(active, wait=reply.ok and active.injected is not None)
        finally:
            try:
                with self.registry.holding():  # no model call adds to them meanwhile
                    traces = sorted(active.trace_ids)
                # kept before the run leaves the flight, so no later span of its traces goes organic;
                # a trace a call of no run's carried too is no evidence
                self._runs.traced(run_id, [t for t in traces if not self.registry.traced_elsewhere(t)])
            finally:
                self.registry.remove(plan.nonce)
        return Executed(run_id, started, active, reply)

    def _judge(self, plan: Plan, executed: Executed) -> RunRecord:
        """The run's verdict from its firings, its answer and its trace; firings tied by time are claimed."""
        active, reply, started = executed.active, executed.reply, executed.started
        canary = plan.canary
        tied = attributed(active)
        if tied.by_time:
            self._runs.claim(executed.run_id, [(c.offset, c.line) for c in tied.by_time], started)
        seen = _leak_seen(plan, active, reply)
        verdict = decide(
            Observed(
                expect=canary.expect, error=reply.error, injected=active.injected is not None,
                fired=bool(tied.firings), leak_in_answer=seen.leaked, ambiguous=bool(tied.ambiguous),
                cut=self.underway.reason is not None,
            )
        )
        missed = self._near_miss(plan.guard, active) if verdict in _UNFIRED else None
        trace = _trace(active, tied, reply, started.timestamp())
        return RunRecord(
            guard=plan.guard.name, canary=canary.name, variant=plan.variant, expect=canary.expect,
            verdict=verdict, nonce=plan.nonce, started=started, duration_s=time.time() - started.timestamp(),
            trace=trace, leaked=seen.leaked if canary.expect == "reject" else False,
            firings=len(tied.firings), attribution=tied.mark if tied.firings else None,
            foreign_calls=active.foreign_calls, evidence=_evidence(tied),
            answer=seen.answer[:ANSWER_KEEP] if seen.answer is not None else None,
            error=_error(reply.error, active) or (self.underway.reason if verdict == Verdict.ERROR else None),
            leak_text=plan.leak, model_calls=active.calls,
            unmatched_line=missed.line if missed else None, nearest_guard=missed.guard if missed else None,
            turns=len(plan.prompts), leaked_turn=seen.turn, toolless_calls=active.toolless_calls,
            thinking_calls=active.thinking_calls,
        )

    def _near_miss(self, guard: GuardDef, run: ActiveRun) -> NearMiss | None:
        """A line of the logs with the run's nonce that no guard's match fits, nearest a guard."""
        logs = self.config.logs
        fitted = [g.pattern for g in self.config.guards if g.pattern is not None]
        if logs.activity_pattern is not None:
            fitted.append(logs.activity_pattern)
        claimed = {c.line for c in run.claims}
        lines = [line for line in nonce_lines(logs.paths, run.nonce) if line not in claimed]
        matches = {g.name: g.match for g in self.config.guards if g.match is not None}
        return near_miss(lines, matches, own=guard.name, fitted=fitted)

    def _await_firings(self, run: ActiveRun, *, wait: bool) -> None:
        """Read the logs until a marked firing of the run's guard arrives or the grace is over (for a
        guard that fires through spans, the span grace: a span arrives with its exporter's batch).

        Unmarked firings do not end the wait: other work seen within the grace makes them ambiguous.
        """
        spans = any(g.signals for g in self.config.guards if g.name == run.guard)
        grace = max(self.grace, self.span_grace) if spans else self.grace
        deadline = time.monotonic() + (grace if wait else 0.0)
        while True:
            self._sync(max(1.0, self.grace))
            if (any(c.guard == run.guard for c in run.claims) or time.monotonic() >= deadline
                    or self.underway.reason is not None):
                return
            time.sleep(0.05)


def _error(error: str | None, active: ActiveRun) -> str | None:
    """The side that failed: the model server when it failed the run's latest model call, or had not
    answered it when the agent's time ran out, then the agent's own error when the proxy relayed the
    model server's answer."""
    waiting = active.upstream_waiting
    if error is not None and active.upstream_failure is None and waiting is not None:
        since, server = waiting
        return (f"{server} had not answered the run's model call after {max(time.time() - since, 0):.0f}s; "
                f"then {error}")
    if error is None or active.upstream_failure is None:
        return error
    if active.upstream_relayed:
        return f"{active.upstream_failure}; then {error}"
    return f"{active.upstream_failure} (the proxy answered the agent's model call with an error)"


@dataclass(frozen=True)
class Executed:
    """What happened to a run in flight: its row, its start, what the proxy and logs saw, the answers."""

    run_id: int
    started: datetime
    active: ActiveRun
    reply: Conversation


@dataclass(frozen=True)
class LeakSeen:
    """Whether the run's expected text showed (in an answer, or as an observed effect), and where."""

    leaked: bool
    answer: str | None  # the answer the record keeps: the one that proves the leak, else the last
    turn: int | None = None  # multi-turn: the first turn (from 1) whose answer held the leak


def _leak_seen(plan: Plan, active: ActiveRun, reply: Conversation) -> LeakSeen:
    canary = plan.canary
    if canary.observe is not None:  # the call's effect, seen by the fixture server or on disk
        return LeakSeen(observe(canary.observe, plan.values, active.paths), reply.last)
    turn = first_turn_with(plan.expected, reply.answers, canary.inject_turn)
    if canary.multi_turn and canary.expect == "reject" and turn is not None:
        return LeakSeen(True, reply.answers[turn - 1], turn)
    return LeakSeen(turn is not None, reply.last)


def _trace(active: ActiveRun, tied: Attributed, reply: Conversation,
           started: float) -> dict[Stage, float | None]:
    """Each stage's time in seconds after the prompt was sent; None for a stage that never happened.

    A firing is placed at its line's stamp; one less than a second before the injection is placed at
    it: the line was read after the injection (a run counts no line read before), and a log stamped
    to the second floors its time. A stamp earlier than that stays as it is, for the reader to see."""
    fired = tied.firings[0][0] if tied.firings else None
    if fired is not None and active.injected is not None and active.injected - 1.0 <= fired < active.injected:
        fired = active.injected
    return {
        Stage.SENT: 0.0,
        Stage.FIXTURE_FETCHED: _since(active.fetched, started),
        Stage.INJECTED: _since(active.injected, started),
        Stage.FIRED: _since(fired, started),
        Stage.REPAIR_REQUESTED: _since(active.repair_requested, started),
        Stage.ANSWERED: _since(reply.answered, started),
    }


def _evidence(tied: Attributed) -> str | None:
    """The first firing line that belongs to the run; for an ambiguous run, the unmarked line."""
    if tied.firings:
        return tied.firings[0][1]
    return tied.ambiguous[0].line if tied.ambiguous else None


def _since(moment: float | None, start: float) -> float | None:
    if moment is None:
        return None
    return round(max(0.0, moment - start), 3)


def select_canaries(config: Config, names: Sequence[str]) -> list[tuple[GuardDef, CanaryDef]]:
    """GUARD or GUARD/CANARY selections in definition order; every canary when none is named."""
    from canary.config.tomlcheck import unknown_name
    from canary.errors import UsageError

    guards = {g.name: g for g in config.guards}
    if not names:
        return [(g, c) for g in config.guards for c in g.canaries]
    chosen: list[tuple[GuardDef, CanaryDef]] = []
    for name in names:
        guard_name, _, canary_name = name.partition("/")
        guard = guards.get(guard_name)
        if guard is None:
            raise UsageError(unknown_name("guard", guard_name, guards))
        canaries = [c for c in guard.canaries if not canary_name or c.name == canary_name]
        if not canaries:
            raise UsageError(
                f"guard {guard_name!r}: "
                + unknown_name("canary", canary_name, [c.name for c in guard.canaries], plural="canaries")
                if canary_name
                else f"guard {guard_name!r} has no canaries"
            )
        chosen.extend((guard, c) for c in canaries if (guard, c) not in chosen)
    return chosen
