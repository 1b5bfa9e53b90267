"""Running canaries: fresh values, the real agent, the proxy's injection, the guard's log line.

A run never ends ``caught`` without a firing of its guard that belongs to it,
and never ends ``leaked`` when the agent could not be reached. Runs of one
guard never overlap; runs of different guards may. A multi-turn canary asks
every turn in one conversation; the leak is looked for in the answer of the
injection turn and of every later one, and the run names the first that held it.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from canary.config.definitions import CanaryDef, GuardDef
from canary.config.fabrications import fill_arguments
from canary.config.placeholders import fill
from canary.config.settings import Config
from canary.proxy.toolcalls import ToolCall
from canary.runs.agent import AgentDriver
from canary.runs.attribution import run_marks
from canary.runs.conversation import converse, first_turn_with
from canary.runs.observations import describe, observe
from canary.runs.record import RunRecord
from canary.runs.registry import ActiveRun, Registry
from canary.runs.unmatched import NearMiss, near_miss, nonce_lines
from canary.runs.values import draw
from canary.runs.verdicts import Attributed, Observed, attributed, decide
from canary.store.engine import Store
from canary.store.queries import run_count
from canary.store.runlog import RunLog
from canary.vocabulary import Verdict

#: Seconds to wait after the answer for the guard's line to reach the log and the store.
DEFAULT_GRACE = 3.0
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
    ) -> None:
        if config.agent is None:
            raise ValueError("no [agent] is configured")
        self.config = config
        self.store = store
        self.registry = registry
        self.fixture_base = fixture_base
        self.grace = grace
        self._sync = sync
        self._driver = driver or AgentDriver(config.agent)
        self._runs = RunLog(store)
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        #: Called with each finished run's record, from the thread that ran it (a progress display).
        self.finished: Callable[[RunRecord], None] | None = None

    def _lock(self, guard: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(guard, threading.Lock())

    def run(self, guard: GuardDef, canary: CanaryDef) -> RunRecord:
        """One run of one canary, start to verdict."""
        with self._lock(guard.name):
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

        with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
            list(pool.map(one_guard, by_guard.values()))
        return [results[(g.name, c.name)] for g, c in pairs]

    def _run(self, guard: GuardDef, canary: CanaryDef) -> RunRecord:
        assert self.config.agent is not None
        inject_mode = self.config.agent.inject_mode
        variants = canary.variants
        variant = run_count(self.store.engine, guard.name, canary.name) % len(variants)
        drawn = draw(canary.fixture, self.fixture_base)
        values = drawn.values
        template = variants[variant]
        tool: ToolCall | None = None
        if isinstance(template, str):
            inject_text = fill(template, values)
        else:
            tool = ToolCall(template.name, fill_arguments(dict(template.arguments), values),
                            call_id=f"call_{secrets.token_hex(12)}")
            inject_text = tool.as_text
        leak = fill(canary.leak, values) if canary.leak else None
        if canary.observe is not None:
            leak = describe(canary.observe, values)
        grounded = fill(canary.grounded, values) if canary.grounded else None
        repair = fill(canary.repair, values) if canary.repair else None
        prompts = [fill(turn, values) for turn in canary.turns]
        if canary.expect == "accept":
            marks = run_marks(values, [canary.grounded or ""], [canary.grounded],
                              prefixes=("fake", "true"))
        else:
            used = template if isinstance(template, str) else json.dumps(dict(template.arguments))
            marks = run_marks(values, [used, canary.leak or ""], [canary.leak])
        started_dt = datetime.now(UTC)
        started = started_dt.timestamp()
        run_id = self._runs.start(
            guard=guard.name, canary=canary.name, variant=variant, expect=canary.expect,
            nonce=drawn.nonce, started=started_dt, injected_text=inject_text,
            leak_text=leak if canary.expect == "reject" else grounded,
        )
        active = ActiveRun(
            run_id=run_id, guard=guard.name, nonce=drawn.nonce, inject_at=canary.inject_at,
            inject_text=inject_text, repair_text=repair, page=drawn.page, started=started,
            deadline=started + canary.timeout.total_seconds(), inject_in_request=inject_mode,
            inject_tool=tool, marks=marks, canary=canary.name, armed=canary.inject_turn == 0,
        )
        self.registry.add(active)
        try:
            reply = converse(
                self._driver, prompts, nonce=drawn.nonce, inject_turn=canary.inject_turn,
                inject=inject_text if inject_mode else "", timeout=canary.timeout.total_seconds(),
                arm=lambda: self.registry.arm(drawn.nonce),
            )
            active.answered = reply.answered
            # Without an injection the verdict is not_injected whatever the log says: no grace to wait.
            self._await_firings(active, wait=reply.ok and active.injected is not None)
        finally:
            self.registry.remove(drawn.nonce)
        tied = attributed(active)
        if tied.by_time:
            self._runs.claim(run_id, guard.name, [(c.offset, c.line) for c in tied.by_time], started_dt)
        answer = reply.last
        leaked_turn: int | None = None
        if canary.observe is not None:  # the call's effect, seen by the fixture server or on disk
            in_answer = observe(canary.observe, values, active.paths)
        else:
            expected = leak if canary.expect == "reject" else grounded
            turn = first_turn_with(expected, reply.answers, canary.inject_turn)
            in_answer = turn is not None
            if canary.multi_turn and canary.expect == "reject" and turn is not None:
                leaked_turn = turn
                answer = reply.answers[turn - 1]  # the answer that proves the leak
        verdict = decide(
            Observed(
                expect=canary.expect, error=reply.error, injected=active.injected is not None,
                fired=bool(tied.firings), leak_in_answer=in_answer, ambiguous=bool(tied.ambiguous),
            )
        )
        missed = self._near_miss(guard, active) if verdict in _UNFIRED else None
        trace = {
            "sent": 0.0,
            "fixture_fetched": _since(active.fetched, started),
            "injected": _since(active.injected, started),
            "fired": _since(tied.firings[0][0], started) if tied.firings else None,
            "repair_requested": _since(active.repair_requested, started),
            "answered": _since(reply.answered, started),
        }
        trace.update(_skipped(active))
        duration = time.time() - started
        result = RunRecord(
            guard=guard.name, canary=canary.name, variant=variant, expect=canary.expect,
            verdict=verdict, nonce=drawn.nonce, started=started_dt, duration_s=duration,
            trace=trace, leaked=in_answer if canary.expect == "reject" else False,
            firings=len(tied.firings), attribution=tied.mark if tied.firings else None,
            foreign_calls=active.foreign_calls, evidence=_evidence(tied),
            answer=answer[:ANSWER_KEEP] if answer is not None else None, error=_error(reply.error, active),
            leak_text=leak, model_calls=active.calls,
            unmatched_line=missed.line if missed else None, nearest_guard=missed.guard if missed else None,
            turns=len(prompts), leaked_turn=leaked_turn,
        )
        self._runs.finish(
            run_id, finished=datetime.now(UTC), duration_s=round(duration, 3), verdict=verdict,
            trace=json.dumps(trace), leaked=result.leaked, firings=result.firings,
            attribution=result.attribution, foreign_calls=result.foreign_calls,
            evidence=result.evidence, answer=result.answer, error=result.error,
            leaked_turn=leaked_turn,
        )
        return result

    def _near_miss(self, guard: GuardDef, run: ActiveRun) -> NearMiss | None:
        """A line of the logs with the run's nonce that no guard's match fits, nearest a guard."""
        logs = self.config.logs
        fitted = [g.pattern for g in self.config.guards if g.pattern is not None]
        if logs.activity_pattern is not None:
            fitted.append(logs.activity_pattern)
        claimed = {c.line for c in run.claims}
        lines = [line for line in nonce_lines(logs.paths, run.nonce) if line not in claimed]
        return near_miss(lines, {g.name: g.match for g in self.config.guards}, own=guard.name, fitted=fitted)

    def _await_firings(self, run: ActiveRun, *, wait: bool) -> None:
        """Read the logs until a marked firing of the run's guard arrives or the grace is over.

        Unmarked firings do not end the wait: other work seen within the grace makes them ambiguous.
        """
        deadline = time.monotonic() + (self.grace if wait else 0.0)
        while True:
            self._sync(max(1.0, self.grace))
            if any(c.guard == run.guard for c in run.claims) or time.monotonic() >= deadline:
                return
            time.sleep(0.05)


def _skipped(active: ActiveRun) -> dict[str, int]:
    """Calls not injected, and why: they offered no tools, or asked for thinking with no repair."""
    counts = {"toolless_calls": active.toolless_calls, "thinking_calls": active.thinking_calls}
    return {key: count for key, count in counts.items() if count}


def _error(error: str | None, active: ActiveRun) -> str | None:
    """The side that failed: the model server when the proxy answered the run's call with its own error."""
    if error is None or active.upstream_failure is None:
        return error
    return f"{active.upstream_failure} (the proxy answered the agent's model call with an error)"


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
