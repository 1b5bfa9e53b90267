"""What the daemon's store watch (``canary.daemon.storewatch``) does to the rest of the daemon.

Before the store is moved or re-opened the collectors hold their commits; once
it is re-opened they re-read from the positions it holds. A problem and its end
are alerted. A store that refuses the collectors' commits while the heartbeat
still writes is a daemon error too, reported beside a tick that worked.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from canary.daemon.loop import Daemon
    from canary.daemon.storewatch import StoreWatch
    from canary.store.health import StoreProblem


class StoreHooks:
    """The store watch's callbacks, over one daemon."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    def watch(self) -> StoreWatch:
        """A store watch over the daemon's store, calling back here."""
        from canary.daemon.storewatch import StoreWatch

        return StoreWatch(self.daemon.store, on_reopen=self.reopened, alert=self.alert,
                          recovered=self.recovered, on_hold=self.hold)

    def refusals(self) -> list[str]:
        """Why the store refuses the collectors' commits now (none when it takes them)."""
        session = self.daemon.session
        collection = session.collection if session is not None else None
        return collection.tailer.refusals() if collection is not None else []

    def hold(self) -> None:
        session = self.daemon.session
        if session is not None and session.collection is not None:
            session.collection.tailer.hold()

    def reopened(self) -> None:
        """The store was re-opened: the collectors re-read from the positions it holds."""
        session = self.daemon.session
        if session is not None and session.collection is not None:
            session.collection.tailer.request_reload()

    def alert(self, problem: StoreProblem) -> None:
        from canary.daemon.storewatch import alert_problem

        alert_problem(self.daemon.config.alerts, problem)

    def recovered(self, problem: StoreProblem, ended: datetime) -> None:
        from canary.daemon.storewatch import alert_problem

        alert_problem(self.daemon.config.alerts, problem, ended)
