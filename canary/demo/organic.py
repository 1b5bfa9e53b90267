"""The demo amid organic traffic: why a guard's line must carry a mark of the run.

Users keep the demo agent busy through the same proxy while the citation
canary runs. The agent's guard lines name only the guard and the task, so the
first run cannot tell its own firing from the users' and ends ``ambiguous``;
the second run sets ``[logs] correlate``, learns its task id from the line
that fetched its fixture, and ends ``caught``.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import httpx

from canary.demo.live import start_demo
from canary.runs.record import RunRecord

#: The canary the organic demo runs: the citation guard is live on every path of the demo agent.
GUARD, CANARY = "citation", "fake-url"


#: How long the run waits for the users' first task to be answered before it starts anyway.
FLOWING_WAIT = 30.0


def _traffic(url: str, stop: threading.Event, every: float, flowing: threading.Event) -> None:
    """Users' tasks, one after another; each asks the model through the proxy."""
    with httpx.Client(timeout=30, trust_env=False) as http:
        while not stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                http.post(url, json={"prompt": "Where can I read about residence permits?"})
                flowing.set()
            stop.wait(every)


def run_organic_demo(directory: Path, *, every: float = 0.05, grace: float = 2.0) -> list[RunRecord]:
    """The citation canary once without and once with ``[logs] correlate``, amid users' tasks."""
    results: list[RunRecord] = []
    for correlate in (False, True):
        running = start_demo(directory / ("correlate" if correlate else "plain"), fabricate_every=1,
                             kinds=("url",), terse=True, correlate=correlate, grace=grace)
        stop, flowing = threading.Event(), threading.Event()
        assert running.config.agent is not None and running.config.agent.url is not None
        users = threading.Thread(target=_traffic, args=(running.config.agent.url, stop, every, flowing),
                                 name="demo users", daemon=True)
        try:
            users.start()
            flowing.wait(FLOWING_WAIT)  # the run starts amid the users' work, not before it
            guard = next(g for g in running.config.guards if g.name == GUARD)
            canary = next(c for c in guard.canaries if c.name == CANARY)
            assert running.session.runner is not None
            results.append(running.session.runner.run(guard, canary))
        finally:
            stop.set()
            users.join(timeout=35)
            running.stop()
    return results
