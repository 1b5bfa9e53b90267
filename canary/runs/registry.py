"""Runs in flight: what the proxy and the fixture server ask about, and what they tell.

The registry is the proxy's interceptor: a model call is changed only when its
body carries the nonce of a run in flight (or the conversation id a multi-turn
run's agent named) and it is the call ``inject_at`` selects; each run injects at
most once, and never after its deadline. Every model call that does not carry a
run's nonce is counted as that run's foreign work. A model call's W3C
``traceparent`` names its trace: a run keeps the trace ids of its own calls
(attribution rule 0), and the registry keeps the latest ones of every other call, so a
guard span in one of those traces is known to be someone else's.
The fixture server reads each run's page from here and records the fetch.
Which run a firing belongs to is ``canary.runs.attribution``'s to say, over the
runs held here.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from canary.config.definitions import MatchAt
from canary.proxy.needles import Needles
from canary.proxy.toolcalls import ToolCall, offers_tools
from canary.runs.inflight import ActiveRun

if TYPE_CHECKING:
    from canary.proxy.app import ModelCall

#: ``version-traceid-parentid-flags``; the trace id is kept in lowercase, as OTLP ids read.
_TRACEPARENT = re.compile(r"\s*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})", re.IGNORECASE)
#: Trace ids of other model calls remembered (the oldest are forgotten first).
FOREIGN_TRACES = 4096
#: The shortest conversation id a model call is told by (a shorter one is too common a string).
CONVERSATION_MIN = 8


def trace_id(traceparent: str | None) -> str | None:
    """The trace id of a W3C ``traceparent`` header, lowercase; None when absent or invalid."""
    if not traceparent:
        return None
    found = _TRACEPARENT.match(traceparent)
    if found is None or found.group(1).lower() == "ff":
        return None
    trace = found.group(2).lower()
    return None if trace == "0" * 32 or found.group(3) == "0" * 16 else trace


class Registry:
    """Thread-safe map of nonce -> run in flight; the proxy's ``Interceptor``."""

    def __init__(self, *, has_upstream: bool, clock: Callable[[], float] = time.time) -> None:
        self.has_upstream = has_upstream
        self._clock = clock
        self._lock = threading.Lock()
        self._runs: dict[str, ActiveRun] = {}
        self._needles: dict[bytes, ActiveRun] = {}
        self._finder: Needles[ActiveRun] = Needles({})
        self._foreign: OrderedDict[str, None] = OrderedDict()  # trace ids of calls of no run
        #: Told the live nonces whenever they change (a proxy in another process screens by them).
        self.on_change: Callable[[list[str]], None] | None = None

    def add(self, run: ActiveRun) -> None:
        """Put a run in flight."""
        with self._lock:
            self._runs[run.nonce] = run
            self._rebuild()
        self._changed()

    def remove(self, nonce: str) -> ActiveRun | None:
        """Take a run out of flight (its verdict is being decided)."""
        with self._lock:
            run = self._runs.pop(nonce, None)
            self._rebuild()
        self._changed()
        return run

    def _changed(self) -> None:
        """Tell the proxy process every needle in flight: the nonces and the conversation ids."""
        tell = self.on_change
        if tell is not None:
            tell([needle.decode("utf-8") for needle in list(self._needles)])

    def converse(self, nonce: str, conversation: str) -> None:
        """The agent named the run's conversation: a model call that carries the id is the run's too.

        An id shorter than ``CONVERSATION_MIN`` characters is too common a string to tell a body by.
        """
        with self._lock:
            run = self._runs.get(nonce)
            if run is None or len(conversation) < CONVERSATION_MIN:
                return
            run.conversation = conversation
            self._rebuild()
        self._changed()

    def _rebuild(self) -> None:
        """The needles of every run in flight: its nonce, and its conversation id (lock held)."""
        needles: dict[bytes, ActiveRun] = {}
        for run in self._runs.values():
            needles[run.nonce.encode("ascii")] = run
            if run.conversation is not None:
                for form in dict.fromkeys((run.conversation, json.dumps(run.conversation)[1:-1])):
                    needles.setdefault(form.encode("utf-8"), run)
        self._needles = needles
        self._finder = Needles(needles)

    def arm(self, nonce: str) -> None:
        """The run's injection turn begins: ``inject_at`` counts its model calls from here."""
        now = self._clock()
        with self._lock:
            run = self._runs.get(nonce)
            if run is not None and not run.armed:
                run.armed = True
                if run.inject_in_request:
                    run.injected = now

    @property
    def idle(self) -> bool:
        """Whether no run is in flight (read without the lock: a hint for the hot paths)."""
        return not self._runs

    def active(self) -> list[ActiveRun]:
        """Every run in flight."""
        with self._lock:
            return list(self._runs.values())

    # -- proxy ----------------------------------------------------------------

    def live(self, body: bytes) -> bool:
        """Whether a model call's body carries the nonce of a run in flight (it then takes the full path)."""
        return bool(self._runs) and self._finder.find(body) is not None

    def passed(self, traceparent: str | None) -> None:
        """A model call that carried no live nonce went by: foreign work of every run, its trace another's."""
        trace = trace_id(traceparent) if traceparent else None
        if self._runs:
            with self._lock:
                for run in self._runs.values():
                    run.foreign_calls += 1
        if trace is not None:
            self._foreign_trace(trace)

    def intercept(self, call: ModelCall) -> str | ToolCall | None:
        """The scripted text or tool call for this call, or None to pass it through; counts foreign
        calls, and records the call's trace id with its run, or as another's."""
        trace = trace_id(call.traceparent) if call.traceparent else None
        if not self._runs:
            if trace is not None:
                self._foreign_trace(trace)
            return None
        # One pass for every live nonce; the body is never parsed when it carries none.
        owner = self._finder.find(call.body)
        with self._lock:
            for run in self._runs.values():
                if run is not owner:
                    run.foreign_calls += 1
            if trace is not None and owner is not None:
                owner.trace_ids.add(trace)
        if trace is not None and owner is None:
            self._foreign_trace(trace)
        return self._decide(owner, call) if owner is not None else None

    def _foreign_trace(self, trace: str) -> None:
        with self._lock:
            self._foreign[trace] = None
            self._foreign.move_to_end(trace)
            if len(self._foreign) > FOREIGN_TRACES:
                self._foreign.popitem(last=False)

    def traced_elsewhere(self, trace: str) -> bool:
        """Whether a model call that carried no run's nonce carried this trace id (lately)."""
        with self._lock:
            return trace in self._foreign

    def _decide(self, run: ActiveRun, call: ModelCall) -> str | ToolCall | None:
        now = self._clock()
        # A user's `inject_at = { match = ... }` is searched before the lock is taken, in time linear
        # in the body (canary.config.bodymatch): it never holds the other runs or the fixture server.
        matched = (run.injected is None and isinstance(run.inject_at, MatchAt)
                   and run.inject_at.found(call.body))
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
            # A proxied call with no model server behind gets the repair; the in-process hook's
            # agent asks its own model (204), as for every call but the injection point.
            in_process = call.dialect == "inprocess"
            if (run.thinking or not (self.has_upstream or in_process)) and run.repair_text is not None:
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
                    run.upstream_relayed = False
                return

    def relaying(self, body: bytes) -> ActiveRun | None:
        """The run a model call on its way to the model server is of; how the model server failed the
        run's earlier calls is forgotten, so an ``error`` names what befell the latest."""
        owner = self._finder.find(body) if self._runs else None
        if owner is not None:
            with self._lock:
                owner.upstream_failure = None
                owner.upstream_relayed = False
        return owner

    def waiting(self, run: ActiveRun, server: str | None) -> None:
        """A call of ``run`` went to the model server (``server``: how a reason names it), or (None) got
        its answer or the proxy's error: an ``error`` then says what the run was waiting on."""
        with self._lock:
            run.upstream_waiting = (self._clock(), server) if server is not None else None

    def relayed_failure(self, run: ActiveRun, sentence: str) -> None:
        """The model server failed a run's call in an answer the proxy relayed as it came; a call the
        proxy answered with its own error was told already (``upstream_failed``) and keeps that."""
        with self._lock:
            if run.upstream_failure is None:
                run.upstream_failure = sentence
                run.upstream_relayed = True

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

    # -- attribution --------------------------------------------------------

    @contextmanager
    def holding(self) -> Iterator[list[ActiveRun]]:
        """Every run in flight, with no model call or fetch changing them meanwhile."""
        with self._lock:
            yield list(self._runs.values())
