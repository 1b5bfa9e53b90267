"""The trace receiver as a fact of the store: what the running daemon's receiver took in.

The daemon stores its receiver's counts in ``meta`` under ``traces.receiver`` each tick, so
``canary status`` and the dashboard read them without the daemon (``daemon.traces``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from canary.store.reads import Reader

if TYPE_CHECKING:
    from canary.store.engine import Store

#: The ``meta`` keys of the stored counts and of the guard-shaped spans seen (``canary.traces.shapes``).
TRACES_KEY = "traces.receiver"
SHAPES_KEY = "traces.shapes"


#: When a receiver last took in a span, a log record: the latest of every daemon's, kept across restarts.
SEEN_KEYS = ("span_seen_at", "record_seen_at")


def record(store: Store, counts: dict[str, Any], shapes: list[dict[str, Any]] | None = None) -> None:
    """Store the receiver's counts (``ReceiverCounts.to_json``) and the shapes it saw; when a span and
    a log record were last taken in is the latest of these counts' and the stored ones' (a restarted
    daemon's receiver counts from zero)."""
    from canary.store.tables import Meta

    with store.engine.begin() as conn:
        before = load(Reader.over(conn)) or {}
        counts = {**counts, **{key: _latest(counts.get(key), before.get(key)) for key in SEEN_KEYS}}
        rows = [{"key": TRACES_KEY, "value": json.dumps(counts)}]
        if shapes:
            rows.append({"key": SHAPES_KEY, "value": json.dumps(shapes)})
        for row in rows:
            store.upsert(conn, Meta, [row], keys=["key"], set_={"value": row["value"]})


def _latest(*moments: object) -> float | None:
    seen = [m for m in moments if isinstance(m, (int, float)) and not isinstance(m, bool)]
    return max(seen) if seen else None


def _json(reader: Reader, key: str) -> Any:
    rows = reader.rows("SELECT value FROM meta WHERE key = :key", key=key)
    try:
        return json.loads(rows[0][0]) if rows and rows[0][0] else None
    except ValueError:
        return None


def shown(counts: dict[str, Any] | None) -> dict[str, Any] | None:
    """The stored counts as a status document shows them: when a span and a log record were last taken
    in as ISO times, like every other time in it (they are stored as unix seconds)."""
    if counts is None:
        return None
    from canary.vocabulary import iso

    return {**counts, **{key: iso(seen_at(counts.get(key))) for key in SEEN_KEYS}}


def seen_at(value: object) -> datetime | None:
    """A stored ``*_seen_at`` (unix seconds) as a time; None for none, or for what is no time."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def load(reader: Reader) -> dict[str, Any] | None:
    """The stored counts, or None before a daemon with a receiver stored any."""
    doc = _json(reader, TRACES_KEY)
    return doc if isinstance(doc, dict) else None


def load_shapes(reader: Reader) -> list[dict[str, Any]]:
    """The guard-shaped spans and events the daemon's receiver saw, most frequent first."""
    doc = _json(reader, SHAPES_KEY)
    return [s for s in doc if isinstance(s, dict)] if isinstance(doc, list) else []
