"""The reference of ``bench_dashboard.py``: a minimal Textual app over the same store.

    python tests/bench/minimal_dashboard.py STORE.db PERIOD

A DataTable of the guards (latest status, firings in the last 24 hours, last firing),
read in a thread worker with bare ``sqlite3`` and drawn again every PERIOD seconds:
the simplest dashboard a user could write over the store, refreshed as often as
``canary dashboard`` looks at it.
"""

from __future__ import annotations

import sqlite3
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from textual.app import App, ComposeResult
from textual.widgets import DataTable

QUERY = """
SELECT g.guard,
       (SELECT status FROM transitions t WHERE t.guard = g.guard ORDER BY t.id DESC LIMIT 1),
       (SELECT coalesce(sum(count), 0) FROM hourly_counts h WHERE h.guard = g.guard AND h.hour >= ?),
       (SELECT max(ts) FROM firings f WHERE f.guard = g.guard)
FROM (SELECT DISTINCT guard FROM transitions) g ORDER BY g.guard
"""


class Minimal(App[None]):
    """Every guard's latest status and 24-hour count, refreshed on a timer."""

    def __init__(self, path: str, period: float) -> None:
        super().__init__()
        self.path, self.period = path, period

    def compose(self) -> ComposeResult:
        yield DataTable()

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns("guard", "status", "firings/24h", "last firing")
        self.reload()
        self.set_interval(self.period, self.reload)

    def reload(self) -> None:
        self.run_worker(self.read, thread=True, group="read", exclusive=True)

    def read(self) -> None:
        since = (datetime.now(UTC) - timedelta(hours=24)).strftime("%Y-%m-%d %H:%M:%S.%f")
        with sqlite3.connect(self.path) as conn:
            rows = conn.execute(QUERY, (since,)).fetchall()
        self.call_from_thread(self.show, rows)

    def show(self, rows: list[tuple[Any, ...]]) -> None:
        table = self.query_one(DataTable)
        table.clear()
        for row in rows:
            table.add_row(*(str(v) for v in row))


if __name__ == "__main__":
    Minimal(sys.argv[1], float(sys.argv[2])).run()
