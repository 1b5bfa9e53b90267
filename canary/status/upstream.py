"""The model server's health as a fact of the store, decided from what the proxy counted.

The daemon gives ``advance`` the proxy's counts each tick; the result is kept in ``meta`` under
``model.health`` so ``canary status`` and the dashboard read it without the daemon, and each
change between ``reachable`` and ``unreachable`` is stored as a transition of the pseudo-guard
``model server`` (a name no guard can have), so alerts go out through the guards' pipeline.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from canary.records import asdict, frozen
from canary.store.reads import Reader
from canary.vocabulary import as_utc, iso

if TYPE_CHECKING:
    from canary.store.engine import Store

#: The name its transitions and alerts carry; guard names are ``[a-z0-9_-]+``, so none clashes.
MODEL_SERVER = "model server"
REACHABLE = "reachable"
UNREACHABLE = "unreachable"
#: The ``meta`` key of the stored health.
HEALTH_KEY = "model.health"


@frozen
class UpstreamHealth:
    """The model server as the proxy sees it."""

    state: str  # REACHABLE | UNREACHABLE
    upstream: str  # its URL, credentials removed
    since: datetime | None = None  # when it started failing
    failed: int = 0  # agent requests failed since then
    failure: str | None = None  # what the latest failure was, after "the model server at URL"
    per_minute: float = 0.0  # agent requests per minute through the proxy, lately

    def to_json(self) -> dict[str, Any]:
        """The health as stored and as ``canary status --json`` shows it under ``model``."""
        doc = asdict(self)
        doc["since"] = iso(self.since)
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> UpstreamHealth:
        """The health read back from ``to_json``."""
        since = doc.get("since")
        return cls(
            state=str(doc.get("state", REACHABLE)), upstream=str(doc.get("upstream", "")),
            since=datetime.fromisoformat(since.replace("Z", "+00:00")) if since else None,
            failed=int(doc.get("failed", 0)), failure=doc.get("failure"),
            per_minute=float(doc.get("per_minute", 0.0)),
        )


def decide(
    upstream: str, *, failing_since: float | None, failed: int, failure: str | None, per_minute: float
) -> UpstreamHealth:
    """Unreachable while every request since the first failure failed; reachable otherwise."""
    if failing_since is None or failed <= 0:
        return UpstreamHealth(REACHABLE, upstream, per_minute=per_minute)
    return UpstreamHealth(
        UNREACHABLE, upstream, since=datetime.fromtimestamp(failing_since, UTC), failed=failed,
        failure=failure, per_minute=per_minute,
    )


def clock(moment: datetime) -> str:
    """``10:02`` in local time."""
    return as_utc(moment).astimezone().strftime("%H:%M")


def summary(health: UpstreamHealth) -> str | None:
    """"model server unreachable since 10:02: 37 agent requests failed", or None while it answers."""
    if health.state != UNREACHABLE or health.since is None:
        return None
    requests = f"{health.failed} agent request{'s' if health.failed != 1 else ''}"
    return f"model server unreachable since {clock(health.since)}: {requests} failed"


def reason(health: UpstreamHealth, previous: UpstreamHealth | None) -> str:
    """The sentence a transition and its alert carry."""
    where = f"the model server at {health.upstream}"
    if health.state == UNREACHABLE:
        line = summary(health) or "model server unreachable"
        return f"{line}; {where} {health.failure or 'failed'}"
    if previous is not None and previous.since is not None:
        return (
            f"{where} answers again; it was unreachable from {clock(previous.since)}, "
            f"and {previous.failed} agent request{'s' if previous.failed != 1 else ''} failed"
        )
    return f"{where} answers again"


def load(store: Store | Reader) -> UpstreamHealth | None:
    """The stored health, or None before the daemon stored one."""
    if isinstance(store, Reader):
        rows = store.rows("SELECT value FROM meta WHERE key = :key", key=HEALTH_KEY)
        text = rows[0][0] if rows else None
    else:
        # The ORM is imported only on the store's side: ``canary status`` reads through a Reader.
        from sqlalchemy import select
        from sqlmodel import col

        from canary.store.tables import Meta

        with store.engine.connect() as conn:
            text = conn.execute(select(col(Meta.value)).where(col(Meta.key) == HEALTH_KEY)).scalar()
    if not text:
        return None
    try:
        return UpstreamHealth.from_json(json.loads(text))
    except (ValueError, TypeError, AttributeError):
        return None


def record(store: Store, health: UpstreamHealth, *, now: datetime) -> dict[str, Any] | None:
    """Store the health; on a change of state, also a transition row, which is returned."""
    from sqlalchemy import insert

    from canary.store.tables import Meta, Transition

    previous = load(store)
    row = {"key": HEALTH_KEY, "value": json.dumps(health.to_json())}
    change = None
    was = previous.state if previous is not None else REACHABLE
    if health.state != was:
        change = {
            "guard": MODEL_SERVER, "at": as_utc(now), "status": health.state, "previous": was,
            "reason": reason(health, previous), "evidence": None,
        }
    with store.engine.begin() as conn:
        store.upsert(conn, Meta, [row], keys=["key"], set_={"value": row["value"]})
        if change is not None:
            conn.execute(insert(Transition), [change])
    return change
