"""The daemon watches its own store: deleted, replaced, full or corrupt is a daemon error.

Every tick the daemon checks that the store file is still the one it opened,
and every failed write of the store is caught here. A problem is logged once,
written beside the store (``canary.store.health``) where ``canary status`` and
the dashboard read it, and alerted. A deleted or replaced store is re-opened
(re-created if gone), and the collectors re-read from the positions it holds;
a corrupt one is moved aside first, each time it is found corrupt. Before a file
is moved or re-opened, every user of the store is stopped (``Store.stop``): no
connection of the old file is left to touch the new one.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from canary.config.settings import AlertsConfig
from canary.errors import CanaryError, StoreError
from canary.store.engine import Store
from canary.store.health import StoreProblem, clear_problem, prepare_problem, write_problem
from canary.vocabulary import iso

log = logging.getLogger("canary.daemon.storewatch")

#: How long a deleted or replaced store stays reported after it was re-opened.
STICKY = timedelta(minutes=10)


def store_failure(exc: BaseException) -> str | None:
    """The reason, when ``exc`` is the store failing (locked, full, corrupt, gone); else None."""
    if isinstance(exc, SQLAlchemyError):
        orig = getattr(exc, "orig", None)
        return str(orig or exc).splitlines()[0]
    if isinstance(exc, StoreError):
        return str(exc).splitlines()[0]
    return None


def _identity(path: Path | None) -> tuple[int, int] | None:
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class StoreWatch:
    """Keeps the daemon's store honest: ``on_hold`` is told before the store is re-opened (the
    collectors commit nothing more), ``on_reopen`` after (they re-read from its positions)."""

    def __init__(
        self,
        store: Store,
        *,
        on_reopen: Callable[[], None] | None = None,
        on_hold: Callable[[], None] | None = None,
        alert: Callable[[StoreProblem], None] | None = None,
        recovered: Callable[[StoreProblem, datetime], None] | None = None,
        sticky: timedelta = STICKY,
    ) -> None:
        self.store = store
        self.path = store.path
        self.stem = store.stem  # where the problem is written: beside the SQLite file, or the project's
        self.on_reopen = on_reopen
        self.on_hold = on_hold
        self.alert = alert
        self.recovered = recovered  # told the problem that is over, and when it ended
        self.sticky = sticky
        self.problem: StoreProblem | None = None
        self._until: datetime | None = None
        self._identity = _identity(self.path)
        self._aside_due = False  # a corrupt store waits to be moved aside
        if self.stem is not None:
            prepare_problem(self.stem)

    def check(self, now: datetime) -> None:
        """Find a store that was deleted or replaced under the daemon, and re-open it (or move a
        corrupt one aside, if that had to wait)."""
        if self._aside_due:
            self._set_aside(now)
            return
        if self.path is None or self._identity is None:
            return
        current = _identity(self.path)
        if current == self._identity:
            return
        what = "deleted" if current is None else "replaced by another file"
        self.failed(f"the store file {self.path} was {what}", now)
        self.reopen(now)
        self._until = now + self.sticky

    def failed(self, reason: str, now: datetime, *, aside: bool = True) -> None:
        """A write failed, or the file went: record, log and alert it once; a corrupt store is
        moved aside every time (unless not ``aside``: the collectors' refusals only report).

        While a problem holds, a new reason (a server going away: "terminating connection", then
        "connection refused") is the same outage: its reason is updated, its start and alert kept."""
        if self.problem is None:
            self._record(StoreProblem(now, reason))
        elif self.problem.reason != reason:
            self.problem = StoreProblem(self.problem.since, reason)
            log.error("%s", self.problem.sentence())
            if self.stem is not None:
                write_problem(self.stem, self.problem)
        if aside and ("malformed" in reason or "not a database" in reason):
            self._set_aside(now)

    def _record(self, problem: StoreProblem) -> None:
        self.problem = problem
        log.error("%s", self.problem.sentence())
        if self.stem is not None and not write_problem(self.stem, self.problem):
            log.error("the problem could not be written beside the store either")
        if self.alert is not None:
            try:
                self.alert(self.problem)
            except Exception as exc:
                log.error("the store problem could not be alerted: %s", exc)

    def worked(self, now: datetime) -> None:
        """A tick wrote the store: a problem is over (a re-created store's stays a while)."""
        if self.problem is None or (self._until is not None and now < self._until):
            return
        log.warning("the store works again (it failed since %s: %s)", iso(self.problem.since),
                    self.problem.reason)
        over, self.problem = self.problem, None
        self._until = None
        if self.stem is not None:
            clear_problem(self.stem)
        if self.recovered is not None:
            try:
                self.recovered(over, now)
            except Exception as exc:
                log.error("the store's recovery could not be alerted: %s", exc)

    def reopen(self, now: datetime) -> None:
        """Open the store's file again (creating it if it is gone); the collectors re-read.

        They are told first, so that nothing they read before is committed to the new file.
        """
        if self.on_hold is not None:
            self.on_hold()
        try:
            self.store.reopen()
        except CanaryError as exc:
            self.failed(str(exc).splitlines()[0], now)
            return
        self._identity = _identity(self.path)
        if self.problem is not None and self.stem is not None:
            write_problem(self.stem, self.problem)
        if self.on_reopen is not None:
            self.on_reopen()

    def _set_aside(self, now: datetime) -> None:
        """A corrupt store is kept as ``<name>.corrupt-<time>`` and a new one is created."""
        if self.path is None:
            return
        aside = self.path.with_name(f"{self.path.name}.corrupt-{now:%Y%m%dT%H%M%S}")
        n = 1
        while aside.exists():  # another one set aside in the same second
            n += 1
            aside = self.path.with_name(f"{self.path.name}.corrupt-{now:%Y%m%dT%H%M%S}-{n}")
        if self.on_hold is not None:
            self.on_hold()
        self._aside_due = not self.store.stop()
        if self._aside_due:
            log.error("the corrupt store could not be moved aside yet: a connection is still in use; "
                      "the next tick tries again")
            return
        try:
            os.replace(self.path, aside)
            for suffix in ("-wal", "-shm"):
                extra = Path(str(self.path) + suffix)
                if extra.exists():
                    os.replace(extra, Path(str(aside) + suffix))
        except OSError as exc:
            log.error("the corrupt store could not be moved aside: %s", exc)
            return
        log.error("the corrupt store was moved to %s; a new one is created", aside)
        self.reopen(now)
        self._until = now + self.sticky


def alert_problem(config: AlertsConfig, problem: StoreProblem, ended: datetime | None = None) -> None:
    """Tell every alert channel of a store problem, or (``ended``) that it is over, in a thread of its own."""
    from canary.alerts.channels import AlertPayload, default_sender, enabled_channels

    sentence = problem.sentence()
    if ended is not None:
        sentence = (f"the store works again since {iso(ended)} (it failed since {iso(problem.since)}: "
                    f"{problem.reason})")
    payload: AlertPayload = {
        "guard": "(daemon)", "status": "error" if ended is None else "ok",
        "previous": None if ended is None else "error", "reason": sentence,
        "since": iso(ended or problem.since) or "", "evidence": None,
        "kind": "change" if ended is None else "recovery", "text": f"guard-canary daemon: {sentence}",
    }
    send = default_sender(config)

    def deliver() -> None:
        for channel in enabled_channels(config):
            try:
                send(channel, payload)
            except Exception as exc:
                log.error("the store problem could not be sent on %s: %s", channel, exc)

    threading.Thread(target=deliver, name="canary-store-alert", daemon=True).start()
