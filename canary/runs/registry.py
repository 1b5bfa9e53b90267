"""Runs in flight: what the proxy and the fixture server ask about, and what they tell.

The registry is the proxy's interceptor: a model call is changed only when its
body carries the nonce of a run in flight and it is the call ``inject_at``
selects; each run injects at most once, and never after its deadline. The
fixture server reads each run's page from here and records the fetch.
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
from canary.proxy.toolcalls import ToolCall

if TYPE_CHECKING:
    from canary.proxy.app import ModelCall


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
    calls: int = 0
    fetched: float | None = None
    injected: float | None = None
    repair_requested: float | None = None
    paths: list[str] = field(default_factory=list)  # fixture paths served, in order
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
        if self.inject_in_request:
            self.injected = self.started

    @property
    def fabrication(self) -> str | ToolCall:
        """What the proxy answers the selected call with: the tool call, or the text."""
        return self.inject_tool if self.inject_tool is not None else self.inject_text

    def carries_injection(self, body: bytes) -> bool:
        """Whether a request body quotes the injected text back (a repair round)."""
        return any(needle in body for needle in self._needles)


class Registry:
    """Thread-safe map of nonce -> run in flight; the proxy's ``Interceptor``."""

    def __init__(self, *, has_upstream: bool, clock: Callable[[], float] = time.time) -> None:
        self.has_upstream = has_upstream
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

    def active(self) -> list[ActiveRun]:
        """Every run in flight."""
        with self._lock:
            return list(self._runs.values())

    # -- proxy ----------------------------------------------------------------

    def intercept(self, call: ModelCall) -> str | ToolCall | None:
        """The scripted text for this model call, or None to pass it through."""
        # One pass for every live nonce; the body is never parsed when it carries none.
        run = self._finder.find(call.body)
        if run is None:
            return None
        return self._decide(run, call)

    def _decide(self, run: ActiveRun, call: ModelCall) -> str | ToolCall | None:
        now = self._clock()
        with self._lock:
            if now > run.deadline or run.nonce not in self._runs:
                return None
            run.calls += 1
            if run.injected is None:
                if self._selected(run, call):
                    run.injected = now
                    return run.fabrication
                return None
            if run.repair_requested is None and run.carries_injection(call.body):
                run.repair_requested = now
            if not self.has_upstream and run.repair_text is not None:
                return run.repair_text
            return None

    @staticmethod
    def _selected(run: ActiveRun, call: ModelCall) -> bool:
        where = run.inject_at
        if where == "first":
            return True
        if where == "after-fetch":
            return run.fetched is not None
        if isinstance(where, int):
            return run.calls == where
        assert isinstance(where, MatchAt)
        return where.pattern.search(call.body.decode("utf-8", "replace")) is not None

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

    def attribute(self, guard: str, text: str, ts: float | None) -> int | None:
        """The run a firing belongs to: by nonce in the line, else by guard and time span."""
        runs = self.active()
        for run in runs:
            if run.nonce in text:
                return run.run_id
        for run in runs:
            if run.guard != guard or run.injected is None:
                continue
            if ts is not None and ts < run.injected - 1.0:
                continue  # the line was written before the injection: organic
            return run.run_id
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
