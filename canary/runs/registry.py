"""Runs in flight: what the proxy, the fixture server and the collectors ask about, and what they tell.

The registry is the proxy's interceptor: a model call is changed only when its
body carries the nonce of a run in flight and it is the call ``inject_at``
selects; each run injects at most once, and never after its deadline. Every
model call that does not carry a run's nonce is counted as that run's foreign
work, and so is every activity line without it. The fixture server reads each
run's page from here and records the fetch. The collectors ask which run a
firing belongs to (``attribute``), strongest mark first: the nonce, the task id,
one of the run's values; an unmarked firing of the run's guard in its span is
only a candidate, decided at the verdict by whether other work happened.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from canary.config.definitions import InjectAt, MatchAt
from canary.proxy.needles import Needles
from canary.proxy.toolcalls import ToolCall, offers_tools
from canary.runs.attribution import Mark, RunMarks, TaskIds

if TYPE_CHECKING:
    from canary.proxy.app import ModelCall


#: Seconds a line's own timestamp may precede the injection and still be in the span (clock skew).
SPAN_SLACK = 1.0


@dataclass(frozen=True)
class Claim:
    """A firing tied to a run by a mark its line carries."""

    guard: str
    mark: Mark
    ts: float
    line: str


@dataclass(frozen=True)
class Candidate:
    """A firing of the run's guard in its span that carries no mark of the run."""

    offset: int
    ts: float
    line: str
    other_task: bool  # it carries a task id, and the run's is another
    other_value: bool  # it names a value of the run's kind, none of the run's


@dataclass
class ActiveRun:
    """One run between its start and its verdict."""

    run_id: int
    guard: str
    nonce: str
    inject_at: InjectAt
    inject_text: str
    repair_text: str | None
    page: str
    started: float  # time.time() when the prompt was sent
    deadline: float  # time.time() after which the nonce expires
    inject_in_request: bool = False
    inject_tool: ToolCall | None = None  # the fabrication is this tool call, not ``inject_text``
    marks: RunMarks = field(default_factory=lambda: RunMarks((), None))
    # False until the turn that carries the fabrication (a multi-turn canary's earlier turns pass through).
    armed: bool = True
    calls: int = 0  # the run's model calls since it was armed
    fetched: float | None = None
    injected: float | None = None
    repair_requested: float | None = None
    upstream_failure: str | None = None  # what the model server did when the proxy answered its own error
    paths: list[str] = field(default_factory=list)  # fixture paths served, in order
    task_id: str | None = None
    foreign_calls: int = 0
    toolless_calls: int = 0  # a tool canary's calls not injected: their chat request offered no tools
    # A tool canary whose calls asked for extended thinking: the upstream would reject the turn that
    # carries the fabricated call (it has no signed thinking block), so the run answers later calls.
    thinking: bool = False
    thinking_calls: int = 0  # calls not injected for it: the canary has no ``repair`` to answer with
    activity_lines: int = 0  # activity lines without the nonce or the run's task id since it started
    own_activity: bool = False  # an activity line with the nonce or the run's task id was seen
    claims: list[Claim] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)
    canary: str = ""  # the canary's name, for a progress display
    answered: float | None = None  # time.time() when the agent's answer came (set by the runner)
    _needles: tuple[bytes, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        texts = [self.inject_text]
        if self.inject_tool is not None:
            # A follow-up quotes the call back by its id (OpenAI) or by its arguments (Ollama).
            texts = [self.inject_tool.call_id, *_strings(self.inject_tool.arguments)]
        needles: list[bytes] = []
        for text in texts:
            needles += [text.encode("utf-8"), json.dumps(text)[1:-1].encode("utf-8"),
                        json.dumps(text, ensure_ascii=True)[1:-1].encode("ascii")]
        self._needles = tuple(dict.fromkeys(needles))
        if self.inject_in_request and self.armed:
            self.injected = self.started

    @property
    def fabrication(self) -> str | ToolCall:
        """What the proxy answers the selected call with: the tool call, or the text."""
        return self.inject_tool if self.inject_tool is not None else self.inject_text

    def carries_injection(self, body: bytes) -> bool:
        """Whether a request body quotes the injected text back (a repair round)."""
        return any(needle in body for needle in self._needles)

    @property
    def foreign_activity(self) -> int:
        """Activity lines of other work: the run's own task is one unit of work, and may log one."""
        return max(0, self.activity_lines - (0 if self.own_activity else 1))

    @property
    def foreign_work(self) -> int:
        """Model calls and activity lines without the run's nonce, since the run started."""
        return self.foreign_calls + self.foreign_activity

    def in_span(self, ts: float) -> bool:
        """Whether a moment falls between the injection (less the slack) and now."""
        return self.injected is not None and ts >= self.injected - SPAN_SLACK


class Registry:
    """Thread-safe map of nonce -> run in flight; the proxy's ``Interceptor``."""

    def __init__(self, *, has_upstream: bool, clock: Callable[[], float] = time.time,
                 task_ids: TaskIds | None = None) -> None:
        self.has_upstream = has_upstream
        self.task_ids = task_ids or TaskIds(None, None, "text")
        self._clock = clock
        self._lock = threading.Lock()
        self._runs: dict[str, ActiveRun] = {}
        self._needles: dict[bytes, ActiveRun] = {}
        self._finder: Needles[ActiveRun] = Needles({})

    def add(self, run: ActiveRun) -> None:
        """Put a run in flight."""
        with self._lock:
            self._runs[run.nonce] = run
            self._needles = {r.nonce.encode("ascii"): r for r in self._runs.values()}
            self._finder = Needles(self._needles)

    def remove(self, nonce: str) -> ActiveRun | None:
        """Take a run out of flight (its verdict is being decided)."""
        with self._lock:
            run = self._runs.pop(nonce, None)
            self._needles = {r.nonce.encode("ascii"): r for r in self._runs.values()}
            self._finder = Needles(self._needles)
            return run

    def arm(self, nonce: str) -> None:
        """The run's injection turn begins: ``inject_at`` counts its model calls from here."""
        now = self._clock()
        with self._lock:
            run = self._runs.get(nonce)
            if run is not None and not run.armed:
                run.armed = True
                if run.inject_in_request:
                    run.injected = now

    def active(self) -> list[ActiveRun]:
        """Every run in flight."""
        with self._lock:
            return list(self._runs.values())

    # -- proxy ----------------------------------------------------------------

    def intercept(self, call: ModelCall) -> str | ToolCall | None:
        """The scripted text or tool call for this call, or None to pass it through; counts foreign calls."""
        if not self._runs:
            return None
        # One pass for every live nonce; the body is never parsed when it carries none.
        owner = self._finder.find(call.body)
        with self._lock:
            for run in self._runs.values():
                if run is not owner:
                    run.foreign_calls += 1
        return self._decide(owner, call) if owner is not None else None

    def _decide(self, run: ActiveRun, call: ModelCall) -> str | ToolCall | None:
        now = self._clock()
        # A user's `inject_at = { match = ... }` regex runs before the lock is taken, so a slow
        # pattern delays only this call, never the other runs or the fixture server.
        matched = (run.injected is None and isinstance(run.inject_at, MatchAt)
                   and run.inject_at.pattern.search(call.body.decode("utf-8", "replace")) is not None)
        toolless = (run.inject_tool is not None and run.injected is None
                    and not offers_tools(call.dialect, call.body))
        thinking = run.inject_tool is not None and self.has_upstream and call.asks_thinking
        with self._lock:
            if now > run.deadline or run.nonce not in self._runs or not run.armed:
                return None
            run.calls += 1
            run.thinking = run.thinking or thinking
            if run.injected is None:
                return self._inject(run, now, matched=matched, toolless=toolless)
            if run.repair_requested is None and run.carries_injection(call.body):
                run.repair_requested = now
            if (run.thinking or not self.has_upstream) and run.repair_text is not None:
                return run.repair_text
            return None

    def _inject(self, run: ActiveRun, now: float, *, matched: bool, toolless: bool) -> str | ToolCall | None:
        """The fabrication if this call of a run not yet injected is its injection point (lock held)."""
        if toolless:
            # An agent that gave its model no tools cannot take a tool call: sent one, it
            # would ignore it, and the run would look as if something had stopped the call.
            run.toolless_calls += 1
            return None
        if not self._selected(run, matched):
            return None
        if run.thinking and run.repair_text is None:
            # Injected, the call would come back to the upstream without a thinking block
            # of its own, and be rejected: the agent would fail, not the guard.
            run.thinking_calls += 1
            return None
        run.injected = now
        return run.fabrication

    @staticmethod
    def _selected(run: ActiveRun, matched: bool) -> bool:
        where = run.inject_at
        if where == "first":
            return True
        if where == "after-fetch":
            return run.fetched is not None
        if isinstance(where, int):
            return run.calls == where
        return matched

    def upstream_failed(self, body: bytes, sentence: str) -> None:
        """The proxy answered a model call carrying a run's nonce with its own error: tell that run."""
        for needle, run in self._needles.items():
            if needle in body:
                with self._lock:
                    run.upstream_failure = sentence
                return

    # -- fixtures -------------------------------------------------------------

    def fetch_page(self, nonce: str, path: str = "", *, record: bool = True) -> str | None:
        """The run's fixture page, recording every path and (if ``record``: a GET) the first fetch."""
        now = self._clock()
        with self._lock:
            run = self._runs.get(nonce)
            if run is None or now > run.deadline:
                return None
            if record and run.fetched is None:
                run.fetched = now
            if path:
                run.paths.append(path)
            return run.page

    # -- collectors -----------------------------------------------------------

    def observe(self, text: str, ts: float | None, *, activity: bool) -> None:
        """A line the collectors matched: learn task ids from it, count it as foreign activity."""
        if not self._runs:
            return
        moment = self._clock() if ts is None else ts
        task = self.task_ids.of(text) if self.task_ids.enabled else None
        with self._lock:
            for run in self._runs.values():
                own = run.nonce in text
                if own and task is not None and run.task_id is None:
                    run.task_id = task
                if not activity or moment < run.started:
                    continue
                if own or (task is not None and task == run.task_id):
                    run.own_activity = True
                else:
                    run.activity_lines += 1

    def attribute(self, guard: str, text: str, ts: float | None, *, offset: int = -1) -> int | None:
        """The run a firing belongs to by a mark its line carries; unmarked ones become candidates."""
        moment = self._clock() if ts is None else ts
        task = self.task_ids.of(text) if self.task_ids.enabled else None
        with self._lock:
            runs = list(self._runs.values())
            found = next(((r, "nonce") for r in runs if r.nonce in text), None)
            if found is None and task is not None:
                found = next(((r, "task") for r in runs if r.task_id == task), None)
            if found is None:
                found = next(((r, "value") for r in runs if r.guard == guard and r.in_span(moment)
                              and r.marks.carries_value(text)), None)
            if found is not None:
                run, mark = found
                run.claims.append(Claim(guard, mark, moment, text))  # type: ignore[arg-type]
                return run.run_id
            for run in runs:
                if run.guard == guard and run.in_span(moment):
                    other_task = task is not None and run.task_id is not None
                    other_value = run.marks.carries_other_value(text)
                    run.candidates.append(Candidate(offset, moment, text, other_task, other_value))
            return None


def _strings(value: object) -> list[str]:
    """Every string of at least 8 characters inside a JSON value (shorter ones match too much)."""
    if isinstance(value, str):
        return [value] if len(value) >= 8 else []
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []
