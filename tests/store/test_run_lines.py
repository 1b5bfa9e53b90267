"""A line that belongs to a run belongs to it for every guard whose pattern it matches.

A catch-all guard (``match = 'Guard: rejected'``) matches the line another guard writes when it
rejects a canary's fabrication. That line is the run's, whichever rule tied it: never an organic
firing of the catch-all, which would then look awake on the strength of another guard's canary.
Live collection, the verdict's rule-4 claim, a recount and ``canary audit`` agree, on SQLite and
PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from canary.config.settings import load_config
from canary.logs.audit import audit
from canary.runs.attribution import Attribution
from canary.runs.inflight import ActiveRun
from canary.runs.marks import run_marks
from canary.runs.registry import Registry
from canary.runs.runlog import RunLog
from canary.runs.values import new_nonce
from canary.store.engine import Store
from canary.store.queries import window_counts
from canary.store.sites import Site
from collectors.positions import Batch, FileState
from collectors.scan import Hit

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
BOTH = ("any-rejection", "number")


def batch(*texts: str, guards: tuple[str, ...] = BOTH) -> Batch:
    hits = [Hit(i * 100, t, guards, False, T0) for i, t in enumerate(texts)]
    return Batch(FileState("1:2", 1, 2, "/logs/a.log", 100 * len(texts), 10, b"h" * 16, 100 * len(texts)),
                 hits, len(texts), 100 * len(texts))


def in_flight(store: Store, registry: Registry) -> ActiveRun:
    """A run of the number guard, its fabrication in the agent's hands."""
    nonce = new_nonce()
    rid = RunLog(store).start(guard="number", canary="fake-number", variant=0, expect="reject", nonce=nonce,
                              started=T0, injected_text="x", leak_text="8668")
    run = ActiveRun(run_id=rid, guard="number", nonce=nonce, inject_at="first", inject_text="It is 8668.",
                    repair_text=None, page="", started=T0.timestamp() - 5, deadline=T0.timestamp() + 60,
                    inject_in_request=True)
    run.marks = run_marks({"fake_number": "8668"}, ["It is {fake_number}."], [])
    registry.add(run)
    run.injected = T0.timestamp() - 4
    return run


@pytest.fixture
def live(open_store: Callable[..., Store]) -> tuple[Store, ActiveRun]:
    """A store whose attribution sees a run of the number guard in flight (closed by ``open_store``)."""
    registry = Registry(has_upstream=True, clock=T0.timestamp)
    store = open_store(clock=lambda: T0, attribution=Attribution(registry, clock=T0.timestamp))
    return store, in_flight(store, registry)


def counts(store: Store) -> dict[str, tuple[int, int]]:
    found = window_counts(store.engine, T0 - timedelta(hours=1))
    return {g: (c.organic, c.canary) for g, c in found.items()}


def run_ids(store: Store) -> list[tuple[str, int | None]]:
    with store.engine.connect() as conn:
        return [(str(g), r) for g, r in conn.exec_driver_sql("SELECT guard, run_id FROM firings ORDER BY guard, id")]


def test_a_line_tied_by_value_is_the_runs_for_every_guard_it_matches(live: tuple[Store, ActiveRun]) -> None:
    store, run = live
    store.commit(batch("NumberGuard: rejected number=8668 not in observations",
                       "NumberGuard: rejected number=5120 not in observations"))
    assert [c.mark for c in run.claims] == ["value"]
    assert run_ids(store) == [("any-rejection", run.run_id), ("any-rejection", None),
                              ("number", run.run_id), ("number", None)]
    assert counts(store) == {"any-rejection": (1, 1), "number": (1, 1)}


def test_a_line_claimed_at_the_verdict_moves_for_every_guard(live: tuple[Store, ActiveRun]) -> None:
    store, run = live
    store.commit(batch("NumberGuard: rejected a figure"))  # no mark of the run: rule 4, at the verdict
    assert counts(store) == {"any-rejection": (1, 0), "number": (1, 0)}
    [candidate] = run.candidates
    moved = RunLog(store).claim(run.run_id, [(candidate.offset, candidate.line)], T0 - timedelta(minutes=1))
    assert moved == 2
    assert run_ids(store) == [("any-rejection", run.run_id), ("number", run.run_id)]
    assert counts(store) == {"any-rejection": (0, 1), "number": (0, 1)}


def test_a_recount_keeps_a_runs_line_out_of_the_organic_firings(live: tuple[Store, ActiveRun]) -> None:
    store, run = live
    tied = batch("NumberGuard: rejected number=8668 not in observations", guards=("number",))
    store.commit(tied)
    # a catch-all guard defined later: its recount reads the run's line again
    again = [("/logs/a.log", "1:2", Hit(h.offset, h.text, BOTH, False, h.ts)) for h in tied.hits]
    assert store.recount(["any-rejection"], T0 - timedelta(hours=1), again) == 1  # stored with the run
    assert counts(store) == {"any-rejection": (0, 1), "number": (0, 1)}
    assert run_ids(store) == [("any-rejection", run.run_id), ("number", run.run_id)]
    assert store.recount(["any-rejection"], T0 - timedelta(hours=1), again) == 0  # twice: nothing doubles
    assert counts(store) == {"any-rejection": (0, 1), "number": (0, 1)}


def test_the_audit_counts_a_runs_line_canary_for_every_guard(
    open_store: Callable[..., Store], store_url: str, test_site: Site, backend: str, tmp_path: Path,
) -> None:
    """As the store holds them: the line tied at the verdict is canary for both guards, the other organic."""
    store = open_store(clock=lambda: T0)
    try:
        nonce = new_nonce()
        rid = RunLog(store).start(guard="number", canary="fake-number", variant=0, expect="reject", nonce=nonce,
                                  started=T0, injected_text="x", leak_text="8668")
        tied = "2026-11-29T10:00:00Z NumberGuard: rejected a figure"
        organic = "2026-11-29T10:00:01Z NumberGuard: rejected a figure"
        store.commit(batch(tied, organic))
        RunLog(store).claim(rid, [(0, tied)], T0 - timedelta(minutes=1))
    finally:
        store.close()
    log = tmp_path / "agent.log"
    log.write_text(f"{tied}\n".ljust(100) + f"{organic}\n")  # the lines at offsets 0 and 100, as committed
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "number.toml").write_text("[guard]\nname = 'number'\nmatch = 'NumberGuard: rejected'\n")
    (tmp_path / "defs" / "any.toml").write_text("[guard]\nname = 'any-rejection'\nmatch = 'Guard: rejected'\n")
    machine = f"machine = '{test_site.machine}'\n" if backend == "postgresql" else ""
    config = tmp_path / "canary.toml"
    config.write_text(f"project = '{test_site.project}'\ndefs = ['defs/*.toml']\n[logs]\npaths = ['{log}']\n"
                      f"[store]\nurl = '{store_url}'\n{machine}")
    report = audit(load_config(path=config), since=None, now=T0 + timedelta(hours=1))
    assert report.store_problem is None
    assert {g.guard: (g.organic, g.canary) for g in report.guards} == {"number": (1, 1), "any-rejection": (1, 1)}
