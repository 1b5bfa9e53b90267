"""The log lines stored with a run: a line that belongs to a run is the run's for every guard it matches.

A recount reads lines again with no run in flight; a line one guard's firing tied to a run (by
any rule) is then the run's for the other guards too, never organic. ``canary audit`` reads the
same lines without SQLAlchemy (``canary.store.nonces.read_only_marks``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, insert, select

from canary.store.attributing import NoRunsInFlight
from canary.store.commits import add_counts, firing_rows
from canary.store.signals import SIGNAL_PATH, signal_counts
from canary.store.tables import Firing, HourlyCount
from canary.vocabulary import as_utc, hour_floor
from collectors.scan import Hit

if TYPE_CHECKING:
    from canary.store.engine import Store

#: A log line as the store keeps it: its offset and its (cut) text.
LineKey = tuple[int, str]


def run_lines(conn: Connection, start: datetime) -> tuple[dict[LineKey, int], set[tuple[str, LineKey]]]:
    """The log lines stored with a run from ``start`` on: line -> its run, and (guard, line) stored so."""
    t = Firing.__table__  # type: ignore[attr-defined]
    rows = conn.execute(select(t.c.guard, t.c.offset, t.c.line, t.c.run_id)
                        .where(t.c.run_id.is_not(None), t.c.path != SIGNAL_PATH, t.c.ts >= start)).all()
    lines = {(int(offset), str(line)): int(run_id) for _guard, offset, line, run_id in rows}
    stored = {(str(guard), (int(offset), str(line))) for guard, offset, line, _run in rows}
    return lines, stored


def recount(store: Store, guards: Sequence[str], since: datetime, hits: Iterable[tuple[str, str, Hit]], *,
            now: datetime) -> int:
    """Replace the organic log firings of ``guards`` from the hour of ``since`` on by ``hits``
    (path, file key, hit) read again from the logs; return how many were stored. Firings seen
    in spans are kept, and counted again. A line stored with a run stays the run's, and is
    stored with it for a guard that has no firing of it yet."""
    start = hour_floor(as_utc(since))
    wanted = set(guards)
    rows: list[dict[str, Any]] = []
    counts: Counter[tuple[str, datetime, str]] = Counter()
    with store.engine.connect() as conn:
        lines, stored = run_lines(conn, start)
    for path, key, hit in hits:
        kept = tuple(g for g in hit.guards if g in wanted)
        if not kept or (hit.ts is not None and as_utc(hit.ts) < start):
            continue
        one = Hit(hit.offset, hit.text, kept, False, hit.ts)
        # Lines read again are offered to no run in flight: only what the store holds ties them.
        for row in firing_rows(store, [one], path, key, now=now, attribution=NoRunsInFlight())[0]:
            line = (row["offset"], row["line"])
            row["run_id"] = row["run_id"] or lines.get(line)
            if row["run_id"] is not None and (row["guard"], line) in stored:
                continue
            stored.add((row["guard"], line))
            rows.append(row)
            source = "organic" if row["run_id"] is None else "canary"
            counts[(row["guard"], hour_floor(row["ts"]), source)] += 1
    with store.engine.begin() as conn:
        counts.update(signal_counts(conn, wanted, start))
        for table in (Firing, HourlyCount):
            t = table.__table__  # type: ignore[union-attr]
            column = t.c.ts if table is Firing else t.c.hour
            organic = (t.c.run_id.is_(None) & (t.c.path != SIGNAL_PATH)) if table is Firing else (
                t.c.source == "organic")
            conn.execute(t.delete().where(t.c.guard.in_(wanted), column >= start, organic))
        if rows:
            conn.execute(insert(Firing), rows)
        add_counts(conn, counts)
    return len(rows)
