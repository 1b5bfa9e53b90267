"""The daemon's steps for what it serves: the proxy's counts become a stored health and transitions,
the trace receiver's counts a stored fact."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from canary.config.settings import Config
from canary.status import upstream
from canary.store.engine import Store

log = logging.getLogger("canary.daemon.loop")


def upstream_step(store: Store, config: Config, counts: Any, *, now: datetime,
                  per_minute: float) -> dict[str, Any] | None:
    """Decide the model server's health from the proxy's counts, store it, and return a change."""
    from canary.config.tls import CONNECT, probe
    from canary.proxy.health import redact

    if not config.model.upstream:
        return None
    snap = counts.snapshot()
    failure = snap.last_failure
    if snap.failing_since is not None and snap.last_outcome == "refused":
        refusal = probe(config.model.upstream, ca_file=config.model.ca_file)
        if refusal is None:
            counts.reachable()  # refused, then accepting again: no agent request needed to see it is back
            snap = counts.snapshot()
        elif refusal.step != CONNECT:
            failure = refusal.predicate  # the proxy's words name no setting to change
    health = upstream.decide(
        redact(config.model.upstream), failing_since=snap.failing_since, failed=snap.failed_since,
        failure=failure, per_minute=per_minute,
    )
    change = upstream.record(store, health, now=now)
    if change is not None:
        log.warning("%s: %s", upstream.MODEL_SERVER, change["reason"])
    return change


def traces_step(store: Store, server: Any) -> None:
    """Store what the trace receiver (a ``BackgroundServer`` of ``canary.traces``, or None) took in."""
    if server is None:
        return
    from canary.status import receiver

    receiver.record(store, server.app.counts.to_json(), server.app.shapes.to_json())
