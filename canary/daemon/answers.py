"""What the daemon's control API answers: health, status, runs asked for, and metrics.

``canary.daemon.control`` serves these over HTTP; each reads the running daemon
(``canary.daemon.loop.Daemon``) as it is at the moment of the request.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from canary.errors import UnavailableError, UsageError

if TYPE_CHECKING:
    from canary.daemon.loop import Daemon


class Answers:
    """What the control API calls, over one daemon."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self._scrape: Any = None  # canary.daemon.scrape.Scrape, made at the first scrape

    def health(self) -> dict[str, object]:
        """What /health answers."""
        daemon = self.daemon
        session = daemon.session
        watch = daemon.watch
        return {
            "ok": True,
            "pid": os.getpid(),
            "since": daemon.started.isoformat(),
            "heartbeat": daemon.clock().isoformat(),
            "files": len(session.collection.files()) if session and session.collection else 0,
            "proxy": session.proxy.url if session and session.proxy else None,
            "fixtures": session.fixtures.url if session and session.fixtures else None,
            "store_error": watch.problem.sentence() if watch and watch.problem else None,
        }

    def status(self) -> dict[str, object]:
        from canary.status.overview import status_document

        daemon = self.daemon
        return status_document(daemon.store, daemon.config, now=daemon.clock())

    def run_now(self, selection: list[str], wait: bool) -> dict[str, object]:
        """Run the selected canaries now (through the runner's per-guard locks)."""
        from canary.runs.runner import select_canaries

        daemon = self.daemon
        try:
            pairs = select_canaries(daemon.config, selection)
        except UsageError:
            with daemon.steps:  # a definition file changed since the last tick: load it before refusing
                reloaded = daemon.reload_step(daemon.clock())
            if not reloaded:
                raise
            pairs = select_canaries(daemon.config, selection)
        session = daemon.session
        if session is None or session.runner is None:
            raise UnavailableError("the daemon is starting or stopping")
        if daemon.stop_event.is_set():
            doing = "restarting" if daemon.successor is not None else "stopping"
            raise UnavailableError(f"the daemon is {doing}: run it again in a moment")
        runner = session.runner
        if not wait:
            threading.Thread(target=runner.run_many, args=(pairs,), daemon=True).start()
            return {"queued": [f"{g.name}/{c.name}" for g, c in pairs]}
        return {"runs": [r.to_wire() for r in runner.run_many(pairs)]}

    def metrics(self) -> bytes:
        """What /metrics answers: the store's figures, the collectors' lag and the proxy's counts."""
        daemon = self.daemon
        if self._scrape is None:
            from canary.daemon.scrape import Scrape

            self._scrape = Scrape(daemon.clock)
        session = daemon.session
        lag = None
        if session and session.collection:
            lag = [(f.path, f.lag) for f in session.collection.files()]
        proxy = session.counts.snapshot() if session else None
        store_up = daemon.watch is None or daemon.watch.problem is None
        text: bytes = self._scrape.render(daemon.store, daemon.config, lag=lag, store_up=store_up,
                                          proxy=proxy)
        return text
