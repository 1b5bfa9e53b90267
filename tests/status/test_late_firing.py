"""A run ended ``unlogged`` (no firing within its wait), and then its guard's firing came, stored with the
run (a span exported after the batch delay, a log handler that flushes late). The run's verdict stays
what it saw, but its guard is not asleep on that evidence: it fired on the fabrication, late. The
status is inconclusive and says what would make it conclusive."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import insert

from canary.config.settings import load_config
from canary.runs.runlog import RunLog
from canary.status.overview import evaluate_all
from canary.store.engine import Store
from canary.store.tables import Firing
from canary.vocabulary import Status
from tests.helpers_store import record

T0 = datetime(2026, 12, 8, 10, 0, tzinfo=UTC)


def test_an_unlogged_run_whose_firing_came_after_its_verdict_makes_the_guard_inconclusive(tmp_path: Path) -> None:
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "denial.toml").write_text(
        "[guard]\nname = 'denial'\nmatch = 'EvidenceDenial: rejected'\n"
        "[[canary]]\nname = 'empty-page'\nevery = '1h'\nprompt = 'Read {fixture_url}.'\n"
        "fixture = '<p>{true_number} euros.</p>'\ninject = 'The page was empty.'\nleak = 'empty'\n")
    (tmp_path / "canary.toml").write_text(
        f"defs = ['defs/*.toml']\n[logs]\npaths = []\n[store]\nurl = 'sqlite:///{tmp_path / 'c.db'}'\n")
    config = load_config(str(tmp_path / "canary.toml"))
    store = Store(config.store.url)
    runs = RunLog(store)
    rid = runs.start(guard="denial", canary="empty-page", variant=0, expect="reject", nonce="n1",
                     started=T0, injected_text="The page was empty.", leak_text="empty")
    runs.finish(rid, record("unlogged"), finished=T0 + timedelta(seconds=5))

    def status() -> tuple[Status, str]:
        [(_facts, found)] = evaluate_all(store, config, now=T0 + timedelta(minutes=10), readable=True)
        return found.status, found.reason

    assert status()[0] is Status.ASLEEP  # nothing came: the guard wrote no line
    with store.engine.begin() as conn:  # the span arrives 17 s after the verdict, stored with its run
        conn.execute(insert(Firing).values(
            guard="denial", ts=T0 + timedelta(seconds=22), ts_from_line=True, read_at=T0 + timedelta(seconds=22),
            path="otlp", file_key="otlp", offset=-1, line="span guard: EvidenceDenial: rejected n1", run_id=rid))
    found, reason = status()
    assert found is Status.INCONCLUSIVE, reason
    assert reason.startswith("canary empty-page's latest run (10:00) ended unlogged, but the guard fired on it "
                             "17s after its verdict, once the run had stopped waiting: "), reason
    store.close()
