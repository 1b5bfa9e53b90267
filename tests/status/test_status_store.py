"""Status over a real store: order-free variants in a daemon-style loop, inconclusive canaries, evidence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlmodel import col

from canary.alerts.planning import build_payload, plan_alerts
from canary.config.settings import AlertsConfig, Config, load_config
from canary.runs.runlog import RunLog
from canary.status.overview import evaluate_all, record_transitions
from canary.store.engine import Store
from canary.store.tables import Delivery, Transition
from canary.vocabulary import Status
from collectors.scan import Hit
from collectors.tailer import Batch, FileState
from tests.helpers_store import record

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
EVERY = timedelta(hours=1)
#: English variants the guard knows, and a Turkish one it does not.
MATRIX = {0: "caught", 1: "caught", 2: "unlogged"}
LINE = "2026-11-29T09:59:58Z EvidenceDenial: rejected claim=page was empty nonce=n{n}"


def config_for(tmp_path: Path) -> Config:
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "denial.toml").write_text(
        "[guard]\nname = 'denial'\nmatch = 'EvidenceDenial: rejected'\nwindow = '24h'\ngrace = '10m'\n"
        "[[canary]]\nname = 'empty-page'\nevery = '1h'\nprompt = 'Read {fixture_url}.'\n"
        "fixture = '<p>{true_number} euros.</p>'\n"
        "inject = ['The page was empty.', 'A 404 error.', 'Bilgi bulunmamaktadır.']\n"
        "leak = 'empty'\n"
    )
    (tmp_path / "canary.toml").write_text(
        f"defs = ['defs/*.toml']\n[logs]\npaths = []\n[store]\nurl = 'sqlite:///{tmp_path / 'c.db'}'\n"
    )
    return load_config(str(tmp_path / "canary.toml"))


def finish_run(store: Store, n: int, variant: int, verdict: str, at: datetime, evidence: str | None) -> None:
    runs = RunLog(store)
    rid = runs.start(guard="denial", canary="empty-page", variant=variant, expect="reject", nonce=f"n{n}",
                     started=at, injected_text="x", leak_text="empty")
    runs.finish(rid, record(verdict, evidence=evidence), finished=at + timedelta(seconds=5))


def daemon_cycles(tmp_path: Path, order: list[int], cycles: int) -> list[tuple[int, str]]:
    """One run per cycle, variants in ``order``, then evaluate and record as the daemon does."""
    config = config_for(tmp_path)
    store = Store(config.store.url)
    seen: list[tuple[int, str]] = []
    for n in range(cycles):
        at = T0 + n * EVERY
        variant = order[n % len(order)]
        verdict = MATRIX[variant]
        finish_run(store, n, variant, verdict, at, LINE.format(n=n) if verdict == "caught" else None)
        now = at + timedelta(minutes=1)
        statuses = [s for _f, s in evaluate_all(store, config, now=now, readable=True)]
        seen += [(n, r["status"]) for r in record_transitions(store, statuses, now=now)]
    store.close()
    return seen


@pytest.mark.parametrize("order", [[0, 1, 2], [2, 0, 1], [1, 2, 0], [2, 1, 0]], ids=str)
def test_a_variant_matrix_settles_on_one_status_and_never_flips(tmp_path: Path, order: list[int]) -> None:
    transitions = daemon_cycles(tmp_path, order, cycles=12)
    # once every variant has run (cycle 2), the status is degraded and stays so in every later cycle
    assert transitions[-1] == (transitions[-1][0], "degraded")
    assert transitions[-1][0] <= 2, transitions
    assert all(n <= 2 for n, _status in transitions), transitions


def test_a_canary_that_never_ran_makes_the_guard_inconclusive_and_alerts(tmp_path: Path) -> None:
    config = config_for(tmp_path)
    store = Store(config.store.url, clock=lambda: T0 - 3 * EVERY)
    hits = [Hit(0, "EvidenceDenial: rejected claim=organic\x1b[2J", ("denial",), True, T0 - 3 * EVERY)]
    store.commit(Batch(FileState("1:2", 1, 2, "/logs/a.log", 60, 10, b"h" * 16, 60), hits, 40, 60))
    ((_facts, status),) = evaluate_all(store, config, now=T0, readable=True)
    assert status.status is Status.INCONCLUSIVE, status.reason
    assert status.reason == "canary empty-page has never run (every 1h + grace 10m)"
    record_transitions(store, [status], now=T0)
    assert plan_alerts(store, AlertsConfig(desktop=False, webhook="http://127.0.0.1:9/h"), now=T0) == 1
    with store.engine.connect() as conn:
        delivery = conn.execute(select(Delivery)).one()
        payload = build_payload(conn, delivery.transition_id, delivery.kind, now=T0)
    assert payload is not None and payload["status"] == "inconclusive"
    # no run backs the decision: the latest organic firing does, with its control characters gone
    assert payload["evidence"] == "EvidenceDenial: rejected claim=organic [2J"
    store.close()


def test_transitions_and_alerts_carry_the_deciding_runs_line(tmp_path: Path) -> None:
    config = config_for(tmp_path)
    store = Store(config.store.url)
    for n, variant in enumerate(MATRIX):
        finish_run(store, n, variant, "caught", T0 + n * timedelta(minutes=1), LINE.format(n=n))
    statuses = [s for _f, s in evaluate_all(store, config, now=T0 + EVERY / 2, readable=True)]
    record_transitions(store, statuses, now=T0 + EVERY / 2)
    finish_run(store, 9, 2, "fired_but_leaked", T0 + EVERY, LINE.format(n=9))
    finish_run(store, 10, 0, "leaked", T0 + EVERY, None)
    finish_run(store, 11, 1, "leaked", T0 + EVERY, None)
    statuses = [s for _f, s in evaluate_all(store, config, now=T0 + EVERY * 1.5, readable=True)]
    record_transitions(store, statuses, now=T0 + EVERY * 1.5)
    with store.engine.connect() as conn:
        rows = conn.execute(select(Transition).order_by(col(Transition.id))).all()
    assert [(r.status, r.evidence) for r in rows] == [
        ("quiet", LINE.format(n=2)),  # the newest caught run is the proof
        ("asleep", LINE.format(n=9)),  # the fired-but-leaked run's own line
    ]
    plan_alerts(store, AlertsConfig(desktop=False, webhook="http://127.0.0.1:9/h"), now=T0 + 2 * EVERY)
    with store.engine.connect() as conn:
        delivery = conn.execute(select(Delivery).where(col(Delivery.kind) == "change")).one()
        payload = build_payload(conn, delivery.transition_id, "change", now=T0 + 2 * EVERY)
    assert payload is not None and payload["evidence"] == LINE.format(n=9)
    store.close()


def test_a_mute_ends_at_its_instant_in_sql_as_in_the_status(tmp_path: Path) -> None:
    from canary.status.mutes import active_mutes, is_muted, mute

    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    until = mute(store, "denial", timedelta(hours=1), now=T0, reason="deploy")
    for now, held in [(until - timedelta(microseconds=1), True), (until, False)]:
        with store.engine.connect() as conn:
            assert ("denial" in active_mutes(conn, now)) is held
        assert is_muted(until, now) is held
    store.close()


def test_a_multi_turn_leak_names_its_turn_in_the_reason(tmp_path: Path) -> None:
    config = config_for(tmp_path)
    store = Store(config.store.url)
    runs = RunLog(store)
    for n, variant in enumerate(MATRIX):
        rid = runs.start(guard="denial", canary="empty-page", variant=variant, expect="reject",
                         nonce=f"n{n}", started=T0, injected_text="x", leak_text="empty")
        runs.finish(rid, record("fired_but_leaked", evidence=LINE.format(n=n), leaked_turn=3),
                    finished=T0 + timedelta(seconds=5))
    (status,) = [s for _f, s in evaluate_all(store, config, now=T0 + EVERY / 2, readable=True)]
    assert status.status == Status.ASLEEP
    assert "yet the answer reached the user (in turn 3)" in status.reason
    store.close()


def test_a_run_under_an_older_definition_is_history_not_evidence(tmp_path: Path) -> None:
    """A wrong `match` leaves runs unlogged; once it is fixed, the next caught run is the whole story:
    the kill rate is 1/1, not 4/6 for the rest of the window, and the guard is no longer asleep."""
    from canary.config.fingerprints import fingerprint

    config = config_for(tmp_path)
    store = Store(config.store.url)
    runs = RunLog(store)
    guard = config.guards[0]

    def run(n: int, variant: int, verdict: str, definition: str | None) -> None:
        at = T0 + n * timedelta(minutes=5)
        rid = runs.start(guard="denial", canary="empty-page", variant=variant, expect="reject",
                         nonce=f"n{n}", started=at, injected_text="x", leak_text="empty",
                         definition=definition)
        runs.finish(rid, record(verdict, evidence=LINE.format(n=n) if verdict == "caught" else None),
                    finished=at + timedelta(seconds=5))

    # made before runs were stamped: evidence until the canary's first stamped run
    for n, variant in enumerate([0, 1]):
        run(n, variant, "caught", None)
    ((_f, status),) = evaluate_all(store, config, now=T0 + EVERY, readable=True)
    assert status.kill_rate == 1.0
    old = fingerprint(guard, guard.canaries[0])
    for n, (variant, verdict) in enumerate([(2, "unlogged"), (0, "caught"), (1, "caught"),
                                            (2, "unlogged")], start=2):
        run(n, variant, verdict, old)
    ((_f, status),) = evaluate_all(store, config, now=T0 + EVERY, readable=True)
    assert (status.status, status.kill_rate) == (Status.DEGRADED, 2 / 4)  # the unstamped two: history

    # the match is fixed: every earlier run is history
    text = (tmp_path / "defs" / "denial.toml").read_text()
    (tmp_path / "defs" / "denial.toml").write_text(text.replace("EvidenceDenial: rejected",
                                                                "EvidenceDenial: (rejected|refused)"))
    config = load_config(str(tmp_path / "canary.toml"))
    guard = config.guards[0]
    new = fingerprint(guard, guard.canaries[0])
    assert new != old
    ((_f, status),) = evaluate_all(store, config, now=T0 + EVERY, readable=True)
    assert status.status is Status.NEW, status.reason  # no run of this definition yet
    assert status.reason == ("no canary has run yet under its current definition (empty-page pending; "
                             "its earlier runs are history)")
    assert status.kill_rate is None
    for n, variant in enumerate([2, 0, 1], start=6):
        run(n, variant, "caught", new)
    ((_f, status),) = evaluate_all(store, config, now=T0 + EVERY, readable=True)
    assert (status.status, status.kill_rate) == (Status.QUIET, 1.0), status.reason
    store.close()


def test_the_fingerprint_follows_what_a_verdict_depends_on(tmp_path: Path) -> None:
    from canary.config.fingerprints import fingerprint

    config = config_for(tmp_path)
    guard = config.guards[0]
    base = fingerprint(guard, guard.canaries[0])
    text = (tmp_path / "defs" / "denial.toml").read_text()
    changes = {
        "every = '1h'": "every = '2h'",  # the schedule: no verdict depends on it
        "'A 404 error.'": "'A 404 error!'",
        "leak = 'empty'": "leak = 'was empty'",
        "prompt = 'Read {fixture_url}.'": "prompt = 'Please read {fixture_url}.'",
        "fixture = '<p>{true_number} euros.</p>'": "fixture = '<p>{true_number} EUR.</p>'",
        "window = '24h'": "window = '12h'",  # the window: neither
    }
    same = {"every = '1h'", "window = '24h'"}
    for old, new in changes.items():
        (tmp_path / "defs" / "denial.toml").write_text(text.replace(old, new))
        changed = load_config(str(tmp_path / "canary.toml")).guards[0]
        assert (fingerprint(changed, changed.canaries[0]) == base) == (old in same), old
