"""Which run a firing belongs to: the contract's attribution rules 0-4, strongest first, in one place.

A firing belongs to a run when its line (or span) carries

0. the trace id of one of the run's model calls, and of no other model call (a trace the agent
   shares between requests names none of them); else
1. the run's nonce: of a run in flight here, or of any run the store holds (a
   finished run's late line is its own, never offered to the runs in flight); else
2. the run's task id (learned from the first line that carries both its nonce and an id); else
3. one of the run's own values, and it is a firing of the run's guard in the run's span; else
4. nothing of the run, and it is a firing of the run's guard in the run's span: it is
   only a *candidate*, decided at the verdict. It is the run's when the agent did no
   other work in the span; with other work it makes the run ambiguous, unless it
   carries another task's id, or the trace id of a model call of no run (and none of the
   run's), or names a value of the run's kind that is not the run's: then it is someone
   else's. A span in a trace no model call carried is only a candidate: the agent may
   report its guard outside the trace of its model calls.

``tie`` applies rules 0-3 and names the candidates of rule 4 when a firing is committed;
``attributed`` decides rule 4 at the verdict. ``Attribution`` is the store's
``Attributor`` over the runs in flight of one registry: the store is built with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from canary.config.settings import Config
from canary.runs.inflight import ActiveRun, Candidate, Claim
from canary.runs.marks import TaskIds
from canary.runs.registry import Registry
from canary.store.attributing import Sighting, StoredRun
from canary.vocabulary import ATTRIBUTION_RULES, AttributionRule


@dataclass(frozen=True)
class Tie:
    """What the rules made of one firing when it was committed."""

    run_id: int | None = None  # the run it belongs to, in flight or stored; None: organic, for now
    rule: AttributionRule | None = None  # the rule that tied it
    run: ActiveRun | None = None  # the run in flight that claims it (None for a stored run's line)
    candidates: tuple[tuple[ActiveRun, Candidate], ...] = ()  # rule 4: the runs whose span it falls in


def _first(runs: Iterable[ActiveRun], test: Callable[[ActiveRun], bool]) -> ActiveRun | None:
    return next((run for run in runs if test(run)), None)


def _claimed(run: ActiveRun, rule: AttributionRule) -> Tie:
    return Tie(run.run_id, rule, run)


def tie(sighting: Sighting, stored: StoredRun | None, runs: Sequence[ActiveRun], *,
        moment: float, task: str | None, elsewhere: bool = False) -> Tie:
    """The run a firing belongs to by the strongest rule (0-3) any run meets; else its rule-4 candidates.

    ``stored`` is the run the store holds whose nonce the line carries, ``moment`` the
    firing's time, ``task`` the task id its line carries, ``elsewhere`` whether its trace id
    was carried by a model call of no run.
    """
    trace, text = sighting.trace_id, sighting.marked
    if trace is not None and not elsewhere and (
            run := _first(runs, lambda r: trace in r.trace_ids)) is not None:
        return _claimed(run, "trace")
    if stored is not None and stored.finished:
        return Tie(stored.run_id, "nonce")
    if (run := _first(runs, lambda r: r.nonce in text)) is not None:
        return _claimed(run, "nonce")
    if stored is not None:
        # In flight, but not here: another process's run, or one whose verdict is being decided.
        return Tie(stored.run_id, "nonce")
    if task is not None and (run := _first(runs, lambda r: r.task_id == task)) is not None:
        return _claimed(run, "task")
    span = [r for r in runs if r.guard == sighting.guard and r.in_span(moment)]
    if (run := _first(span, lambda r: r.marks.carries_value(text))) is not None:
        return _claimed(run, "value")
    return Tie(candidates=tuple((r, _candidate(sighting, r, moment, task, elsewhere)) for r in span))


def _candidate(sighting: Sighting, run: ActiveRun, moment: float, task: str | None,
               elsewhere: bool) -> Candidate:
    """An unmarked firing in the run's span; a task id it carries is another's (else it tied), and so
    is a trace id another model call carried and none of the run's."""
    return Candidate(
        sighting.offset, moment, sighting.text,
        other_task=task is not None and run.task_id is not None,
        other_value=run.marks.carries_other_value(sighting.marked),
        trace_id=sighting.trace_id,
        other_trace=elsewhere and sighting.trace_id not in run.trace_ids,
    )


@dataclass(frozen=True)
class Attributed:
    """The firings of the run's guard that belong to it, and the rule that tied them."""

    mark: AttributionRule | None
    firings: list[tuple[float, str]] = field(default_factory=list)
    by_time: list[Candidate] = field(default_factory=list)  # unmarked firings claimed by rule 4
    ambiguous: list[Candidate] = field(default_factory=list)  # unmarked firings amid other work


def attributed(run: ActiveRun) -> Attributed:
    """At the verdict: the run's own firings by the strongest rule that tied one, else rule 4; none
    read before the fabrication was injected (the guard did not see it yet).

    An unmarked firing of the run's guard in its span belongs to the run only when the
    agent did no other work since the run started (then beside its marked firings too);
    with other work it makes a run with no marked firing ambiguous, unless it names a value
    of the run's kind that is not the run's. One that carries another task's id or another
    trace's is never the run's.
    """
    # A line read before the fabrication was injected was written before it: it cannot have caught it.
    own = [c for c in run.claims if c.guard == run.guard and not c.before_injection]
    unmarked = [c for c in run.candidates if not c.someone_elses]
    # With no other work in the span, an unmarked line is the run's, beside marked ones too (an
    # agent that rejects its draft, then its correction): it is stored with the run, never organic.
    by_time = unmarked if run.foreign_work == 0 else []
    if own:
        best = min((c.mark for c in own), key=ATTRIBUTION_RULES.index)
        lines = sorted([(c.ts, c.line) for c in own] + [(c.ts, c.line) for c in by_time])
        return Attributed(best, lines, by_time=by_time)
    if not unmarked:
        return Attributed(None)
    if by_time:
        return Attributed("time", [(c.ts, c.line) for c in unmarked], by_time=unmarked)
    return Attributed(None, ambiguous=[c for c in unmarked if not c.other_value])


class Attribution:
    """The store's ``Attributor``: the rules over the runs in flight of one registry."""

    def __init__(self, runs: Registry, task_ids: TaskIds | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.runs = runs
        self.task_ids = task_ids or TaskIds(None, None, "text")
        self._clock = clock

    @classmethod
    def of(cls, config: Config) -> Attribution:
        """The attribution of a new registry, reading task ids as ``[logs] correlate`` says."""
        logs = config.logs
        return cls(Registry(has_upstream=bool(config.model.upstream)),
                   TaskIds(logs.correlate, logs.correlate_pattern, logs.format))

    def _task(self, text: str) -> str | None:
        return self.task_ids.of(text) if self.task_ids.enabled else None

    def observe(self, text: str, ts: float | None, *, activity: bool) -> None:
        """A matched line: learn a run's task id from it (rule 2), count it as other work (rule 4)."""
        if self.runs.idle:
            return
        moment = self._clock() if ts is None else ts
        task = self._task(text)
        with self.runs.holding() as runs:
            for run in runs:
                own = run.nonce in text
                if own and task is not None and run.task_id is None:
                    run.task_id = task
                if not activity or moment < run.started:
                    continue
                if own or (task is not None and task == run.task_id):
                    run.own_activity = True
                else:
                    run.activity_lines += 1

    def attribute(self, sighting: Sighting, stored: StoredRun | None) -> int | None:
        """The run a firing belongs to (``tie``); the run in flight records it as a claim or a candidate."""
        moment = self._clock() if sighting.ts is None else sighting.ts
        task = self._task(sighting.marked)
        trace = sighting.trace_id
        elsewhere = trace is not None and not self.runs.idle and self.runs.traced_elsewhere(trace)
        with self.runs.holding() as runs:
            found = tie(sighting, stored, runs, moment=moment, task=task, elsewhere=elsewhere)
            if found.run is not None and found.rule is not None:
                early = found.run.injected is None  # read before the fabrication existed
                found.run.claims.append(Claim(sighting.guard, found.rule, moment, sighting.text,
                                              before_injection=early))
            for run, candidate in found.candidates:
                run.candidates.append(candidate)
        return found.run_id
