"""One run between its start and its verdict: what it put into the agent's path and what it saw.

The proxy and the fixture server record on it what happened to the run (``canary.runs.registry``);
the attribution records the firings tied to it and the unmarked ones in its span
(``canary.runs.attribution``); the runner reads it all at the verdict.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from canary.config.definitions import InjectAt
from canary.proxy.toolcalls import ToolCall
from canary.runs.marks import RunMarks
from canary.vocabulary import AttributionRule

#: Seconds a line's own timestamp may precede the injection and still be in the span (clock skew).
SPAN_SLACK = 1.0


@dataclass(frozen=True)
class Claim:
    """A firing tied to a run by the evidence its line carries (rules 0-3)."""

    guard: str
    mark: AttributionRule
    ts: float
    line: str
    #: Read before the run's fabrication was injected: the run's line, but no reaction to the fabrication.
    before_injection: bool = False


@dataclass(frozen=True)
class Candidate:
    """A firing of the run's guard in its span that carries no mark of the run (rule 4 decides it)."""

    offset: int
    ts: float
    line: str
    other_task: bool  # it carries a task id, and the run's is another
    other_value: bool  # it names a value of the run's kind, none of the run's
    trace_id: str | None = None  # the trace id of the span it was read from
    other_trace: bool = False  # its trace id was carried by a model call of no run, and none of the run's

    @property
    def someone_elses(self) -> bool:
        """Whether it carries another task's id or another trace's: never the run's, even by time."""
        return self.other_task or self.other_trace


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
    upstream_failure: str | None = None  # what the model server did to the run's latest call, if it failed it
    upstream_relayed: bool = False  # that failure was the model server's answer, relayed as it came
    #: (time.time(), how a reason names the model server) while a call of the run waits on its answer
    upstream_waiting: tuple[float, str] | None = None
    paths: list[str] = field(default_factory=list)  # fixture paths served, in order
    task_id: str | None = None
    trace_ids: set[str] = field(default_factory=set)  # W3C trace ids of the run's model calls (rule 0)
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
    # The conversation id the agent's reply named (a multi-turn canary): a model call that carries
    # it is the run's too, when the agent sends its model that id rather than the earlier turns.
    conversation: str | None = None
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


def _strings(value: object) -> list[str]:
    """Every string of at least 8 characters inside a JSON value (shorter ones match too much)."""
    if isinstance(value, str):
        return [value] if len(value) >= 8 else []
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []
