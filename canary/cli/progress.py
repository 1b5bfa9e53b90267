"""``canary run`` on a terminal: one live line per canary with the stages it reached, then a summary.

The lines come from the runs themselves: in a run session, from the registry the proxy, the
fixture server and the collectors update as each stage happens; through the daemon, from the
store's run rows (a run there shows ``sent`` until it finishes, then the stages its trace holds).
Nothing of this is written unless stdout is a terminal and ``--json`` is off.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from canary.runs.inflight import ActiveRun
from canary.runs.record import RunRecord
from canary.runs.registry import Registry
from canary.store.queries import RunProgress
from canary.terminal import safe
from canary.vocabulary import HEALTHY_VERDICTS, Stage, Verdict, reached

__all__ = ["DaemonRuns", "Line", "SessionRuns", "live_runs", "stages_of", "summary", "trace_stages"]

Key = tuple[str, str]

#: The stages a line names, with the trace key each is read from (listed in the order they happened).
STAGES = (("sent", Stage.SENT), ("fetched", Stage.FIXTURE_FETCHED), ("injected", Stage.INJECTED),
          ("fired", Stage.FIRED), ("answered", Stage.ANSWERED))


@dataclass(frozen=True)
class Line:
    """What one canary's line shows: the stages reached, since when, and the verdict once there is one."""

    stages: tuple[str, ...]
    started: float  # time.time()
    verdict: str | None = None
    duration_s: float | None = None


def stages_of(run: ActiveRun) -> tuple[str, ...]:
    """The stages a run in flight has reached, read from what the registry recorded."""
    fired = [c.ts for c in run.claims if c.guard == run.guard]
    return trace_stages({Stage.SENT: run.started, Stage.FIXTURE_FETCHED: run.fetched,
                         Stage.INJECTED: run.injected, Stage.FIRED: min(fired) if fired else None,
                         Stage.ANSWERED: run.answered})


def trace_stages(trace: Mapping[Stage, float | None]) -> tuple[str, ...]:
    """The stages a line names that ``trace`` holds, in the order they happened."""
    names = {stage: name for name, stage in STAGES}
    return tuple(names[stage] for stage in reached(trace) if stage in names)


class SessionRuns:
    """The lines of runs this process runs: the registry's runs in flight, the runner's finished ones."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self._lock = threading.Lock()
        self._done: dict[Key, Line] = {}

    def finished(self, record: RunRecord) -> None:
        """The runner's hook: a run's verdict."""
        line = Line(trace_stages(record.trace), record.started.timestamp(), str(record.verdict),
                    record.duration_s)
        with self._lock:
            self._done[(record.guard, record.canary)] = line

    def lines(self) -> dict[Key, Line]:
        """The lines known now."""
        now = {(run.guard, run.canary): Line(stages_of(run), run.started) for run in self._registry.active()}
        with self._lock:
            now.update(self._done)
        return now


class DaemonRuns:
    """The lines of runs the daemon runs, read from the store's run rows started since ``since``."""

    def __init__(self, read: Callable[[datetime], Sequence[RunProgress]], since: datetime, *,
                 every: float = 0.5) -> None:
        self._read = read
        self._since = since
        self._every = every
        self._last = 0.0
        self._lines: dict[Key, Line] = {}

    def lines(self) -> dict[Key, Line]:
        """The lines known now; the store is read at most every ``every`` seconds."""
        if time.monotonic() - self._last >= self._every:
            self._last = time.monotonic()
            try:
                rows = self._read(self._since)
            except Exception:  # a store busy or gone: the lines wait, the run goes on
                rows = []
            for row in rows:
                self._lines[(row.guard, row.canary)] = _line(row)
        return dict(self._lines)


def _line(row: RunProgress) -> Line:
    if row.verdict is None:
        return Line(("sent",), row.started.timestamp())
    try:
        trace = json.loads(row.trace)
    except ValueError:
        trace = {}
    trace = trace if isinstance(trace, dict) else {}
    return Line(trace_stages({stage: trace.get(stage.value) for stage in Stage}), row.started.timestamp(),
                row.verdict, row.duration_s)


def _render(pairs: Sequence[Key], source: SessionRuns | DaemonRuns, seen: dict[Key, Line]) -> Group:
    seen.update(source.lines())
    width = max(len(f"{g}/{c}") for g, c in pairs)
    rows = []
    for key in pairs:
        name = safe(f"{key[0]}/{key[1]}").ljust(width)
        line = seen.get(key)
        if line is None:
            rows.append(Text(f"{name}  waiting", style="dim"))
        elif line.verdict is not None:
            style = "green" if line.verdict in HEALTHY_VERDICTS else "bold red"
            trail = " > ".join(line.stages)
            rows.append(Text(f"{name}  {trail}  {line.verdict.upper()} in {line.duration_s or 0:.1f} s",
                             style=style))
        else:
            elapsed = max(0.0, time.time() - line.started)
            rows.append(Text(f"{name}  {' > '.join(line.stages)}  ({elapsed:.1f} s)"))
    return Group(*rows)


@contextmanager
def live_runs(pairs: Sequence[Key], source: SessionRuns | DaemonRuns, console: Console) -> Iterator[None]:
    """Show one line per canary on ``console`` while the block runs; the lines vanish when it ends."""
    seen: dict[Key, Line] = {}
    with Live(get_renderable=lambda: _render(pairs, source, seen), console=console, transient=True,
              refresh_per_second=8, redirect_stdout=False, redirect_stderr=False):
        yield


def summary(records: Sequence[RunRecord], seconds: float) -> str:
    """``3 caught, 1 leaked, 1 passed in 6.4 s``: verdicts in the contract's order, then the time taken."""
    counts = Counter(str(r.verdict) for r in records)
    parts = [f"{counts[str(v)]} {v}" for v in Verdict if counts[str(v)]]
    return f"{', '.join(parts) or 'no runs'} in {seconds:.1f} s"
