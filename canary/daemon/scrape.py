"""One scrape of the daemon's ``/metrics``: a snapshot of the store, or the last one while it fails.

A store that cannot be read (a database server down) must not take ``/metrics`` down with it:
Prometheus would then only see the scrape fail, as if the daemon were gone. The daemon is up,
so the scrape shows the last values it read, ``canary_store_up`` 0, and the daemon's own time
as its heartbeat. Before it has read any, the guards' series are absent: a counter at 0 that
later reads N would be taken for a reset, and ``new`` is a status nobody decided.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from canary.config.settings import Config
from canary.daemon.metrics import MetricsSnapshot, render, snapshot_from_store
from canary.daemon.storewatch import store_failure
from canary.proxy.health import ProxySnapshot

if TYPE_CHECKING:
    from canary.store.engine import Store

__all__ = ["Scrape"]


class Scrape:
    """Renders the daemon's metrics, keeping the last snapshot the store gave."""

    def __init__(self, clock: Callable[[], datetime]) -> None:
        self.clock = clock
        self.last: MetricsSnapshot | None = None

    def snapshot(self, store: Store, config: Config, *, lag: list[tuple[str, int]] | None,
                 store_up: bool) -> MetricsSnapshot:
        """What a scrape shows now; ``store_up`` False when the daemon's writes of the store fail."""
        from canary.status.overview import evaluate_all

        guards = [g.name for g in config.guards]
        canaries: dict[str, tuple[tuple[str, str], ...]] = {
            g.name: tuple((c.name, str(c.expect)) for c in g.canaries) for g in config.guards}
        try:
            evaluated = evaluate_all(store, config, now=self.clock())
            statuses = {s.guard: s.status.value for _f, s in evaluated}
            fresh = snapshot_from_store(store, guards, statuses, lag, project=config.project,
                                        canaries=canaries)
        except Exception as exc:
            if store_failure(exc) is None:
                raise
            if self.last is None:  # nothing read yet: no figure at all, never zeros or ``new``
                return MetricsSnapshot(guards=[], project=config.project, store_up=False,
                                       heartbeat=self.clock().timestamp(), collector_lag=dict(lag or []))
            return replace(self.last, guards=guards, canaries=canaries, store_up=False,
                           heartbeat=self.clock().timestamp(),
                           collector_lag=dict(lag or self.last.collector_lag))
        self.last = fresh
        return replace(fresh, store_up=store_up)

    def render(self, store: Store, config: Config, *, lag: list[tuple[str, int]] | None, store_up: bool,
               proxy: ProxySnapshot | None) -> bytes:
        """The Prometheus text of ``snapshot``."""
        return render(self.snapshot(store, config, lag=lag, store_up=store_up), proxy)
