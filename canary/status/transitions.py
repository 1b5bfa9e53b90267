"""Changes of status are rows: a transition is written whenever a guard's status changes.

Alerts are sent from these rows (``canary.alerts.planning``), so a crash between
"decided" and "sent" loses nothing.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, select
from sqlmodel import col

from canary.status.evaluate import GuardStatus
from canary.store.engine import Store
from canary.store.tables import Meta, Transition

#: Longest evidence line kept with a transition (characters).
EVIDENCE_KEEP = 500
#: The ``meta`` row that holds each guard's status and reason as last decided (the team's views
#: read it: a transition's reason is the one of when the status began).
REASONS_KEY = "statuses.now"


def latest_statuses(store: Store) -> dict[str, str]:
    """Each guard's status as last recorded in a transition."""
    latest = (
        select(col(Transition.guard), func.max(col(Transition.id)).label("id"))
        .group_by(col(Transition.guard))
        .subquery()
    )
    stmt = select(col(Transition.guard), col(Transition.status)).join(
        latest, col(Transition.id) == latest.c.id
    )
    with store.engine.connect() as conn:
        return {str(row[0]): str(row[1]) for row in conn.execute(stmt)}


def clean_line(line: str | None) -> str | None:
    """A log line fit to travel in an alert: one line, no control characters, cut to ``EVIDENCE_KEEP``."""
    if line is None:
        return None
    text = "".join(ch if ch.isprintable() else " " for ch in line).strip()
    return text if len(text) <= EVIDENCE_KEEP else text[: EVIDENCE_KEEP - 1] + "…"


def record_transitions(store: Store, statuses: list[GuardStatus], *, now: datetime) -> list[dict[str, Any]]:
    """Insert a transition for every guard whose status differs from its last recorded one."""
    previous = latest_statuses(store)
    rows = [
        {
            "guard": s.guard,
            "at": now,
            "status": s.status.value,
            "previous": previous.get(s.guard),
            "reason": s.reason,
            "evidence": clean_line(s.evidence),
        }
        for s in statuses
        if previous.get(s.guard) != s.status.value
    ]
    now_value = json.dumps({s.guard: [s.status.value, s.reason] for s in statuses}, sort_keys=True)
    with store.engine.begin() as conn:
        if rows:
            conn.execute(insert(Transition), rows)
        store.upsert(conn, Meta, [{"key": REASONS_KEY, "value": now_value}], keys=["key"],
                     set_={"value": now_value})
    return rows
