"""The writes of canary runs: a row at the start, the record at the verdict, firings claimed by time."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select

from canary.runs.record import RunRecord
from canary.runs.runlog import RunLog
from canary.store.engine import Store
from canary.store.queries import window_counts
from canary.store.tables import Firing, Run
from canary.vocabulary import CORRELATE_RULE, Stage, Verdict
from collectors.scan import Hit
from collectors.tailer import Batch, FileState

NOW = datetime(2026, 11, 29, 10, 30, tzinfo=UTC)


def state(offset: int) -> FileState:
    return FileState("1:2", 1, 2, "/logs/a.log", offset, 10, b"h" * 16, offset)


def test_finish_stores_the_record_of_the_run(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'c.db'}", clock=lambda: NOW)
    runs = RunLog(store)
    run_id = runs.start(guard="tool", canary="c", variant=1, expect="reject", nonce="n1",
                        started=NOW, injected_text="x", leak_text="fetched http://h/admin")
    trace = dict.fromkeys(Stage) | {Stage.SENT: 0.0, Stage.ANSWERED: 2.5}
    record = RunRecord(
        guard="tool", canary="c", variant=1, expect="reject", verdict=Verdict.NOT_INJECTED, nonce="n1",
        started=NOW, duration_s=2.61234, trace=trace, leaked=False, firings=0, attribution=None,
        foreign_calls=3, evidence=None, answer="done", error=None, model_calls=2, turns=2, leaked_turn=None,
        toolless_calls=2,
    )
    runs.finish(run_id, record, finished=NOW + timedelta(seconds=3))
    with store.engine.connect() as conn:
        row = conn.execute(select(Run).where(Run.id == run_id)).one()  # type: ignore[arg-type]
    assert (row.verdict, row.duration_s, row.finished, row.foreign_calls, row.answer, row.leak_text) == (
        "not_injected", 2.612, NOW + timedelta(seconds=3), 3, "done", "fetched http://h/admin")
    # the trace's keys in stage order, and the tool calls that offered no tools beside them
    assert json.loads(row.trace) == {"sent": 0.0, "fixture_fetched": None, "injected": None, "fired": None,
                                     "repair_requested": None, "answered": 2.5, "toolless_calls": 2}
    assert list(json.loads(row.trace)) == [*(s.value for s in Stage), "toolless_calls"]
    store.close()


def test_claimed_firings_move_from_organic_to_the_run(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'c.db'}", clock=lambda: NOW)
    runs = RunLog(store)
    run_id = runs.start(guard="g", canary="c", variant=0, expect="reject", nonce="n1",
                        started=NOW - timedelta(seconds=5), injected_text="x", leak_text=None)
    hits = [Hit(0, "G: rejected", ("g",), False, NOW), Hit(20, "G: rejected", ("g",), False, NOW),
            Hit(40, "task=7 fetched", (CORRELATE_RULE,), False, NOW)]
    store.commit(Batch(state(60), hits, 3, 60))
    assert runs.claim(run_id, [(20, "G: rejected")], NOW - timedelta(seconds=5)) == 1
    assert runs.claim(run_id, [(20, "G: rejected")], NOW - timedelta(seconds=5)) == 0  # once
    counts = window_counts(store.engine, NOW)["g"]
    assert (counts.organic, counts.canary) == (1, 1)
    with store.engine.connect() as conn:
        rows = conn.execute(select(Firing.offset, Firing.run_id, Firing.guard)).all()
    assert sorted(tuple(r) for r in rows) == [(0, None, "g"), (20, run_id, "g")]  # no correlate row
    store.close()
