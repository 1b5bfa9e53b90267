"""Firings seen in spans, span events and OTLP log records, committed as firing rows.

A signal's firing is stored like a log line's: in ``firings`` (``path`` is ``SIGNAL_PATH``,
``file_key`` names the span, the line is its evidence) and in the hourly counts, organic and
canary apart, with the run its attribution names: a signal in a trace of a run's model calls is
the run's also once the run has left the flight (``RunLog.traced``). A span already stored for a
guard (an exporter that sent it again) is not stored twice.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, insert, select

from canary.store.attributing import Sighting
from canary.store.commits import add_counts
from canary.store.nonces import SIGNAL_PATH
from canary.store.tables import Firing
from canary.vocabulary import as_utc, hour_floor

if TYPE_CHECKING:
    from canary.store.engine import Store

__all__ = ["SIGNAL_PATH", "SignalHit", "commit_signals", "signal_counts"]

_LOCK = threading.Lock()  # one commit at a time: two copies of a span sent at once are stored once


@dataclass(frozen=True)
class SignalHit:
    """One guard firing seen in a signal, as the store is given it."""

    guard: str
    key: str  # names the span or record: the same one sent again has the same key
    trace_id: str | None
    ts: float | None  # seconds since the epoch; None: the time it was received
    evidence: str  # stored
    context: str = ""  # searched for a run's marks, never stored


def _stored(store: Store, hits: Sequence[SignalHit]) -> set[tuple[str, str]]:
    table = Firing.__table__  # type: ignore[attr-defined]
    keys = sorted({h.key for h in hits})
    found: set[tuple[str, str]] = set()
    with store.engine.connect() as conn:
        for start in range(0, len(keys), 500):
            stmt = select(table.c.guard, table.c.file_key).where(
                table.c.path == SIGNAL_PATH, table.c.file_key.in_(keys[start:start + 500]))
            found.update((str(g), str(k)) for g, k in conn.execute(stmt))
    return found


def commit_signals(store: Store, hits: Sequence[SignalHit], *, now: datetime | None = None,
                   skew: timedelta | None = None) -> int:
    """Store the firings not stored yet, each tied to its run (if any); return how many were new.

    A firing stamped more than ``skew`` ahead of ``now`` is counted when received, as a log line is.
    """
    if not hits:
        return 0
    from canary.store.nonces import cut_line

    received = as_utc(now or datetime.now(UTC))
    with _LOCK:
        seen = _stored(store, hits)
        traced = store.traced_runs(h.trace_id for h in hits if h.trace_id is not None)
        rows: list[dict[str, Any]] = []
        counts: Counter[tuple[str, datetime, str]] = Counter()
        for hit in hits:
            if (hit.guard, hit.key) in seen:
                continue
            seen.add((hit.guard, hit.key))
            stamp = hit.ts
            if stamp is not None and skew is not None and stamp > (received + skew).timestamp():
                stamp = None  # far ahead of this clock: counted when received
            sighting = Sighting(hit.guard, hit.evidence, stamp, -1, hit.trace_id, hit.context)
            stored = store.stored_run(sighting.marked)
            if stored is None and hit.trace_id is not None:
                stored = traced.get(hit.trace_id)  # a trace of a run that left the flight
            run_id = store.attribution.attribute(sighting, stored)
            ts = datetime.fromtimestamp(stamp, UTC) if stamp is not None else received
            rows.append({"guard": hit.guard, "ts": ts, "ts_from_line": stamp is not None,
                         "read_at": received, "path": SIGNAL_PATH, "file_key": hit.key, "offset": -1,
                         "line": cut_line(hit.evidence), "run_id": run_id})
            counts[(hit.guard, hour_floor(ts), "organic" if run_id is None else "canary")] += 1
        if rows:
            with store.engine.begin() as conn:
                conn.execute(insert(Firing), rows)
                add_counts(conn, counts)
    return len(rows)


def signal_counts(conn: Connection, guards: set[str], start: datetime) -> Counter[tuple[str, datetime, str]]:
    """The organic firings seen in signals, per guard and hour from ``start`` (a recount keeps them)."""
    t = Firing.__table__  # type: ignore[attr-defined]
    rows = conn.execute(select(t.c.guard, t.c.ts).where(
        t.c.guard.in_(guards), t.c.ts >= start, t.c.run_id.is_(None), t.c.path == SIGNAL_PATH))
    return Counter((str(guard), hour_floor(as_utc(ts)), "organic") for guard, ts in rows)
