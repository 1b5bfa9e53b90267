"""What the proxy saw of the model server: outcomes of the agent's requests and upstream latency.

The proxy calls a ``Recorder`` once per request, from its event loop; ``ProxyCounts`` keeps plain
integers there (no lock: one thread writes, readers copy a snapshot and tolerate a count that
is one request behind). These counts live in memory, since the daemon started; the daemon turns
them into the model server's health in the store, and ``/metrics`` shows them as counters
(Prometheus handles a counter that restarts from zero).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from canary.config.urls import redact_url

#: Every outcome of a request through the proxy.
OUTCOMES = ("ok", "upstream_5xx", "refused", "timeout", "broken", "scripted", "no_upstream")
#: Outcomes where the model server failed the agent's request.
FAILURES = frozenset({"upstream_5xx", "refused", "timeout", "broken"})
#: Upper bounds (seconds) of the upstream latency histogram's buckets, to the response headers.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, float("inf"))


def redact(url: str | None) -> str:
    """A URL with its ``user:password@`` shown as ``***@``, for every message that shows it."""
    return redact_url(url) if url else ""


class Recorder(Protocol):
    """What the proxy tells about each request it handles."""

    def answered(self, status: int, seconds: float) -> None:
        """The model server answered with ``status`` after ``seconds`` (to the response headers)."""
        ...

    def failed(self, outcome: str, message: str, body: bytes) -> None:
        """The proxy answered its own error (``outcome`` in FAILURES) because the model server failed."""
        ...

    def counted(self, outcome: str) -> None:
        """A request that never reached the model server (``scripted``, ``no_upstream``)."""
        ...


@dataclass(frozen=True)
class ProxySnapshot:
    """The counts at one moment."""

    requests: dict[str, int]
    buckets: tuple[int, ...]  # per bucket of BUCKETS, not cumulative
    seconds_sum: float
    failing_since: float | None  # unix time of the first failure after the last success
    failed_since: int  # failures since then
    last_failure: str | None  # the message of the latest failure
    last_outcome: str | None  # its outcome

    @property
    def agent_requests(self) -> int:
        """Requests of the agent, scripted ones included."""
        return sum(self.requests.values())


class ProxyCounts:
    """A ``Recorder`` that counts; ``on_failure`` hears every failure (the runs in flight use it)."""

    def __init__(
        self,
        on_failure: Callable[[str, str, bytes], None] | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.on_failure = on_failure
        self._clock = clock
        self._requests = dict.fromkeys(OUTCOMES, 0)
        self._buckets = [0] * len(BUCKETS)
        self._seconds = 0.0
        self._failing_since: float | None = None
        self._failed_since = 0
        self._last: tuple[str, str] | None = None

    def answered(self, status: int, seconds: float) -> None:
        """Count an upstream answer; a 5xx is a failure of the model server."""
        self._buckets[bisect.bisect_left(BUCKETS, seconds)] += 1
        self._seconds += seconds
        if status < 500:
            self._requests["ok"] += 1
            self._failing_since = None
            self._failed_since = 0
            return
        self._requests["upstream_5xx"] += 1
        self._fail("upstream_5xx", f"answered HTTP {status}")

    def failed(self, outcome: str, message: str, body: bytes) -> None:
        """Count a failure the proxy answered itself, and pass it on."""
        self._requests[outcome if outcome in self._requests else "broken"] += 1
        self._fail(outcome, message)
        if self.on_failure is not None:
            self.on_failure(outcome, message, body)

    def counted(self, outcome: str) -> None:
        """Count a request that did not reach the model server."""
        self._requests[outcome] = self._requests.get(outcome, 0) + 1

    def reachable(self) -> None:
        """The model server was found reachable another way (a connection the daemon made)."""
        self._failing_since = None
        self._failed_since = 0

    def _fail(self, outcome: str, message: str) -> None:
        if self._failing_since is None:
            self._failing_since = self._clock()
        self._failed_since += 1
        self._last = (outcome, message)

    def snapshot(self) -> ProxySnapshot:
        """A copy of the counts, safe to read from another thread."""
        last = self._last
        return ProxySnapshot(
            requests=dict(self._requests),
            buckets=tuple(self._buckets),
            seconds_sum=self._seconds,
            failing_since=self._failing_since,
            failed_since=self._failed_since,
            last_failure=last[1] if last else None,
            last_outcome=last[0] if last else None,
        )
