"""Writes of canary runs: a row when a run starts, its verdict and its claimed firings when it ends."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select, update

from canary.runs.record import RunRecord
from canary.store.engine import Store
from canary.store.nonces import cut_line
from canary.store.tables import Firing, HourlyCount, Run, RunTrace
from canary.vocabulary import Verdict, as_utc, hour_floor


def _run_table() -> Any:
    return Run.__table__  # type: ignore[attr-defined]


class RunLog:
    """Writes of canary runs: a row when a run starts, its verdict when it ends."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def start(self, *, guard: str, canary: str, variant: int, expect: str, nonce: str,
              started: datetime, injected_text: str, leak_text: str | None,
              definition: str | None = None) -> int:
        """Insert an in-flight run, stamped with its definition's fingerprint; return its id."""
        with self.store.engine.begin() as conn:
            result = conn.execute(
                insert(_run_table()).values(
                    guard=guard, canary=canary, variant=variant, expect=expect, nonce=nonce,
                    started=started, injected_text=injected_text, leak_text=leak_text,
                    trace="{}", firings=0, definition=definition,
                )
            )
            key = result.inserted_primary_key
            assert key is not None
            return int(key[0])

    def finish(self, run_id: int, record: RunRecord, *, finished: datetime) -> None:
        """Store a finished run's record in its row (what ``start`` stored stays)."""
        trace: dict[str, float | int | None] = {stage.value: at for stage, at in record.trace.items()}
        if record.toolless_calls:
            trace["toolless_calls"] = record.toolless_calls
        if record.thinking_calls:
            trace["thinking_calls"] = record.thinking_calls
        fields = {
            "finished": finished, "duration_s": round(record.duration_s, 3), "verdict": record.verdict,
            "trace": json.dumps(trace), "leaked": record.leaked, "firings": record.firings,
            "attribution": record.attribution, "foreign_calls": record.foreign_calls,
            "evidence": record.evidence, "answer": record.answer, "error": record.error,
            "leaked_turn": record.leaked_turn,
        }
        with self.store.engine.begin() as conn:
            conn.execute(update(_run_table()).where(_run_table().c.id == run_id).values(**fields))

    def traced(self, run_id: int, trace_ids: Sequence[str]) -> None:
        """Keep the trace ids of the run's model calls: a span in one of them that arrives after
        the run left the flight (after its verdict, say) is still the run's."""
        if trace_ids:
            with self.store.engine.begin() as conn:
                conn.execute(insert(RunTrace.__table__),  # type: ignore[attr-defined]
                             [{"trace_id": t, "run_id": run_id} for t in sorted(set(trace_ids))])

    def claim(self, run_id: int, firings: Sequence[tuple[int, str]], since: datetime) -> int:
        """Tie committed organic firings (offset, line, read since ``since``) to a run; return how many.

        A line that belongs to a run belongs to it for every guard that matched it."""
        table, counts = Firing.__table__, HourlyCount.__table__  # type: ignore[attr-defined]
        moved: Counter[tuple[str, datetime]] = Counter()
        with self.store.engine.begin() as conn:
            for offset, line in firings:
                where = (table.c.offset == offset, table.c.line == cut_line(line),
                         table.c.run_id.is_(None), table.c.read_at >= as_utc(since))
                rows = conn.execute(select(table.c.id, table.c.guard, table.c.ts).where(*where)).all()
                for row_id, matched, ts in rows:
                    conn.execute(update(table).where(table.c.id == row_id).values(run_id=run_id))
                    moved[(str(matched), hour_floor(as_utc(ts)))] += 1
            for (matched, hour), n in sorted(moved.items()):
                conn.execute(update(counts).where(counts.c.guard == matched, counts.c.hour == hour,
                                                  counts.c.source == "organic")
                             .values(count=counts.c["count"] - n))
                self.store.upsert(conn, HourlyCount,
                                  [{"guard": matched, "hour": hour, "source": "canary", "count": n}],
                                  keys=["guard", "hour", "source"],
                                  set_={"count": counts.c["count"] + n})
        return sum(moved.values())

    def interrupt_in_flight(self, reason: str) -> int:
        """Mark runs left in flight (by a crash or a stop) as errors; return how many."""
        table = _run_table()
        with self.store.engine.begin() as conn:
            result = conn.execute(
                update(table).where(table.c.verdict.is_(None)).values(verdict=Verdict.ERROR, error=reason)
            )
            return int(result.rowcount or 0)
