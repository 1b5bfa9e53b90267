"""The collectors' commit: a batch's firings, its hourly counts, activity and read position.

``commit`` puts them in one transaction, so a SIGKILL at any moment neither loses
nor doubles a firing after restart (``tests/daemon/test_crash_restart.py`` kills a
real collector mid-file to check it). A retry after commits whose answer was lost
stores only what none of them stored (``canary.store.positions``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, insert, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import SQLModel

from canary.store.attributing import Attributor, Sighting
from canary.store.nonces import cut_line
from canary.store.positions import committed_before, held_part, pack_head, pack_marks, past
from canary.store.tables import FilePosition, Firing, HourlyActivity, HourlyCount, MinuteActivity
from canary.vocabulary import CORRELATE_RULE, as_utc, hour_floor
from collectors.positions import Batch
from collectors.scan import Hit

if TYPE_CHECKING:
    from canary.store.engine import Store


def _minute(moment: datetime) -> datetime:
    return as_utc(moment).replace(second=0, microsecond=0)


def commit(store: Store, batch: Batch) -> None:
    """Firings, hourly counts, activity and the new position, in one transaction."""
    now = as_utc(store.clock())
    held = None
    if batch.in_doubt:  # a retry after failed commits: what one of them stored is not counted again
        with store.engine.connect() as conn:
            held = held_part(conn, batch)
    whole, batch = batch, past(batch, held)
    firings, counts, activity = firing_rows(store, batch.hits, batch.state.path, batch.state.key, now=now,
                                            attribution=store.attribution)
    state = batch.state
    extra = {
        "head": pack_head(state.head, state.lead), "tail_len": state.tail_len,
        "tail_hash": state.tail_hash, "prior": pack_marks(state.prior, state.earlier),
    }
    with store.engine.begin() as conn:
        if committed_before(conn, whole, held):
            return
        if firings:
            conn.execute(insert(Firing), firings)
        add_counts(conn, counts)
        hourly: Counter[datetime] = Counter()
        for minute, n in activity.items():
            hourly[hour_floor(minute)] += n
        read_hour = hour_floor(now)
        hourly.setdefault(read_hour, 0)
        for hour, n in sorted(hourly.items()):
            scanned = (batch.lines, batch.bytes) if hour == read_hour else (0, 0)
            table = HourlyActivity.__table__  # type: ignore[attr-defined]
            upsert(
                conn, HourlyActivity,
                [{"hour": hour, "activity": n, "lines": scanned[0], "bytes": scanned[1]}],
                keys=["hour"],
                set_={
                    "activity": table.c.activity + n,
                    "lines": table.c.lines + scanned[0],
                    "bytes": table.c.bytes + scanned[1],
                },
            )
        add_minutes(store, conn, activity, batch.lines, now=now)
        upsert(
            conn, FilePosition,
            [{
                "key": state.key, "dev": state.dev, "ino": state.ino, "path": state.path,
                "offset": state.offset, "head_len": state.head_len,
                "head_hash": state.head_hash, "size": state.size, "lines": batch.lines,
                "updated_at": now, **extra,
            }],
            keys=["key"],
            set_={
                "path": state.path, "offset": state.offset, "head_len": state.head_len,
                "head_hash": state.head_hash, "size": state.size, "updated_at": now, **extra,
                "lines": FilePosition.__table__.c.lines + batch.lines,  # type: ignore[attr-defined]
            },
        )


def firing_rows(
    store: Store, hits: Iterable[Hit], path: str, key: str, *, now: datetime, attribution: Attributor
) -> tuple[list[dict[str, Any]], Counter[tuple[str, datetime, str]], Counter[datetime]]:
    """The firing rows of some hits, their hourly counts, and activity per minute."""
    firings: list[dict[str, Any]] = []
    counts: Counter[tuple[str, datetime, str]] = Counter()
    activity: Counter[datetime] = Counter()
    for hit in hits:
        ts = as_utc(hit.ts) if hit.ts is not None else now
        if hit.activity:
            activity[_minute(ts)] += 1
        moment = hit.ts.timestamp() if hit.ts is not None else None
        attribution.observe(hit.text, moment, activity=hit.activity)
        guards = [g for g in hit.guards if g != CORRELATE_RULE]
        stored = store.stored_run(hit.text) if guards else None
        tied = [attribution.attribute(Sighting(g, hit.text, moment, hit.offset), stored) for g in guards]
        # A line that belongs to a run belongs to it for every guard that matches it.
        line_run = next((r for r in tied if r is not None), None)
        for guard, own in zip(guards, tied, strict=True):
            run_id = line_run if own is None else own
            firings.append(
                {
                    "guard": guard, "ts": ts, "ts_from_line": hit.ts is not None,
                    "read_at": now, "path": path, "file_key": key, "offset": hit.offset,
                    "line": cut_line(hit.text), "run_id": run_id,
                }
            )
            source = "organic" if run_id is None else "canary"
            counts[(guard, hour_floor(ts), source)] += 1
    return firings, counts, activity


def add_counts(conn: Connection, counts: Counter[tuple[str, datetime, str]]) -> None:
    """Add firings to the hourly counts of (guard, hour, source)."""
    # In key order: two transactions moving the same rows lock them in the same order (no deadlock).
    for (guard, hour, source), n in sorted(counts.items()):
        upsert(
            conn, HourlyCount,
            [{"guard": guard, "hour": hour, "source": source, "count": n}],
            keys=["guard", "hour", "source"],
            set_={"count": HourlyCount.__table__.c["count"] + n},  # type: ignore[attr-defined]
        )


def add_minutes(store: Store, conn: Connection, activity: Counter[datetime], lines: int, *,
                now: datetime) -> None:
    """Add activity per minute, and ``lines`` read at ``now``, to the minutes kept; once an hour,
    drop the minutes older than that."""
    kept = now - store.minutes_kept
    read_minute = _minute(now)
    minutes = Counter({m: n for m, n in activity.items() if m + timedelta(minutes=1) > kept})
    minutes.setdefault(read_minute, 0)
    table = MinuteActivity.__table__  # type: ignore[attr-defined]
    for minute, n in sorted(minutes.items()):
        scanned = lines if minute == read_minute else 0
        if n or scanned:
            upsert(
                conn, MinuteActivity, [{"minute": minute, "activity": n, "lines": scanned}],
                keys=["minute"],
                set_={"activity": table.c.activity + n, "lines": table.c.lines + scanned},
            )
    if store.minutes_pruned != hour_floor(now):
        conn.execute(table.delete().where(table.c.minute < _minute(kept)))
        store.minutes_pruned = hour_floor(now)


def upsert(
    conn: Connection,
    model: type[SQLModel],
    rows: Sequence[dict[str, Any]],
    *,
    keys: Iterable[str],
    set_: dict[str, Any],
) -> None:
    """Insert ``rows``, or where ``keys`` are taken, update the row by ``set_``."""
    table = model.__table__  # type: ignore[attr-defined]
    backend = conn.dialect.name
    if backend in ("sqlite", "postgresql"):
        dialect_insert = sqlite.insert if backend == "sqlite" else postgresql.insert
        stmt = dialect_insert(table).values(list(rows))
        conn.execute(stmt.on_conflict_do_update(index_elements=list(keys), set_=set_))
        return
    for row in rows:
        where = [table.c[k] == row[k] for k in keys]
        result = conn.execute(update(table).where(*where).values(**set_))
        if result.rowcount == 0:
            conn.execute(insert(table).values(**row))
