"""The trace receiver as a fact of the store: what the running daemon's receiver took in.

The daemon stores its receiver's counts in ``meta`` under ``traces.receiver`` each tick, so
``canary status`` and the dashboard read them without the daemon (``daemon.traces``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from canary.store.reads import Reader

if TYPE_CHECKING:
    from canary.store.engine import Store

#: The ``meta`` key of the stored counts.
TRACES_KEY = "traces.receiver"


def record(store: Store, counts: dict[str, Any]) -> None:
    """Store the receiver's counts (``ReceiverCounts.to_json``)."""
    from canary.store.tables import Meta

    row = {"key": TRACES_KEY, "value": json.dumps(counts)}
    with store.engine.begin() as conn:
        store.upsert(conn, Meta, [row], keys=["key"], set_={"value": row["value"]})


def load(reader: Reader) -> dict[str, Any] | None:
    """The stored counts, or None before a daemon with a receiver stored any."""
    rows = reader.rows("SELECT value FROM meta WHERE key = :key", key=TRACES_KEY)
    try:
        doc = json.loads(rows[0][0]) if rows and rows[0][0] else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None
