"""The store ties a firing to the stored run whose nonce its line carries, when no run in flight claims it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from canary.runs.attribution import Attribution
from canary.runs.registry import Registry
from canary.runs.runlog import RunLog
from canary.runs.values import new_nonce
from canary.store.engine import Store
from canary.store.queries import window_counts
from collectors.positions import Batch, FileState
from collectors.scan import Hit
from tests.helpers_store import record

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def a_finished_run(store: Store, nonce: str) -> int:
    runs = RunLog(store)
    rid = runs.start(guard="citation", canary="fake-url", variant=0, expect="reject", nonce=nonce,
                     started=T0 - timedelta(hours=1), injected_text="x", leak_text=None)
    runs.finish(rid, record("caught"), finished=T0 - timedelta(minutes=59))
    return rid


def batch(*texts: str) -> Batch:
    hits = [Hit(i * 100, t, ("citation",), False, T0) for i, t in enumerate(texts)]
    return Batch(FileState("1:2", 1, 2, "/logs/a.log", 100 * len(texts), 10, b"h" * 16, 100 * len(texts)),
                 hits, len(texts), 100 * len(texts))


def test_live_collection_stores_a_late_line_of_a_finished_run_as_canary(open_store: Callable[..., Store]) -> None:
    # as the daemon builds it: with the attribution of its runs in flight (none is in flight here)
    attribution = Attribution(Registry(has_upstream=False, clock=T0.timestamp), clock=T0.timestamp)
    store = open_store(clock=lambda: T0, attribution=attribution)
    try:
        nonce = new_nonce()
        rid = a_finished_run(store, nonce)
        store.commit(batch(
            f"CitationGuard: rejected https://{nonce}.example.org/permit",
            "CitationGuard: rejected https://organic.example.org/",
            f"CitationGuard: rejected https://{new_nonce()}.example.org/ (shaped like one, not stored)",
        ))
        counts = window_counts(store.engine, T0 - timedelta(hours=1))["citation"]
        assert (counts.organic, counts.canary) == (2, 1)
        with store.engine.connect() as conn:
            tied = conn.exec_driver_sql("SELECT run_id FROM firings WHERE run_id IS NOT NULL").all()
        assert tied == [(rid,)]
    finally:
        store.close()


def test_a_recount_replaces_organic_firings_only_and_keeps_nonce_lines_out(open_store: Callable[..., Store]) -> None:
    store = open_store(clock=lambda: T0)
    try:
        nonce = new_nonce()
        a_finished_run(store, nonce)
        store.commit(batch(f"CitationGuard: rejected https://{nonce}.example.org/", "CitationGuard: rejected x"))
        hits = [("/logs/a.log", "1:2", h) for h in batch(
            f"CitationGuard: rejected https://{nonce}.example.org/", "CitationGuard: rejected x").hits]
        assert store.recount(["citation"], T0 - timedelta(hours=1), hits) == 1
        counts = window_counts(store.engine, T0 - timedelta(hours=1))["citation"]
        assert (counts.organic, counts.canary) == (1, 1)
        assert store.count_firings() == 2
    finally:
        store.close()


def test_a_finished_runs_line_is_no_unmarked_candidate_of_a_run_in_flight(open_store: Callable[..., Store]) -> None:
    from canary.runs.inflight import ActiveRun

    registry = Registry(has_upstream=False, clock=T0.timestamp)
    store = open_store(clock=lambda: T0,
                  attribution=Attribution(registry, clock=T0.timestamp))
    try:
        old = new_nonce()
        old_id = a_finished_run(store, old)
        live = new_nonce()
        live_id = RunLog(store).start(guard="citation", canary="fake-url", variant=0, expect="reject",
                                      nonce=live, started=T0, injected_text="x", leak_text=None)
        run = ActiveRun(run_id=live_id, guard="citation", nonce=live, inject_at="first", inject_text="x",
                        repair_text=None, page="", started=T0.timestamp() - 5, deadline=T0.timestamp() + 60,
                        inject_in_request=True)
        registry.add(run)
        store.commit(batch(f"CitationGuard: rejected https://{old}.example.org/ (a late line)",
                           f"CitationGuard: rejected https://{live}.example.org/"))
        # the late line of the finished run is its own, never a maybe-firing of the run in flight
        assert run.candidates == []
        assert [c.mark for c in run.claims] == ["nonce"]
        with store.engine.connect() as conn:
            tied = conn.exec_driver_sql("SELECT run_id FROM firings ORDER BY id").all()
        assert tied == [(old_id,), (live_id,)]
    finally:
        store.close()
