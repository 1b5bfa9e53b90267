"""The model server's health: decided from the proxy's counts, stored, and alerted like a guard."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlmodel import col

from canary.alerts.planning import plan_alerts
from canary.config.settings import AlertsConfig
from canary.status import upstream
from canary.store.engine import Store
from canary.store.tables import Delivery

T0 = datetime(2026, 11, 29, 10, 2, tzinfo=UTC)
URL = "http://127.0.0.1:11434"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(f"sqlite:///{tmp_path}/c.db")
    yield opened
    opened.close()


def down(failed: int, since: datetime = T0) -> upstream.UpstreamHealth:
    return upstream.decide(URL, failing_since=since.timestamp(), failed=failed,
                           failure="refused the connection", per_minute=12.0)


def up() -> upstream.UpstreamHealth:
    return upstream.decide(URL, failing_since=None, failed=0, failure=None, per_minute=12.0)


def test_decide() -> None:
    assert up().state == upstream.REACHABLE
    assert down(37).state == upstream.UNREACHABLE
    assert down(37).since == T0
    # a failing spell with no failure counted yet is not one
    assert upstream.decide(URL, failing_since=T0.timestamp(), failed=0, failure=None, per_minute=0).state == "reachable"


def test_summary_is_the_sentence_status_and_the_dashboard_show() -> None:
    local = T0.astimezone().strftime("%H:%M")
    assert upstream.summary(down(37)) == f"model server unreachable since {local}: 37 agent requests failed"
    assert upstream.summary(down(1)) == f"model server unreachable since {local}: 1 agent request failed"
    assert upstream.summary(up()) is None


def test_json_round_trip() -> None:
    health = down(5)
    assert upstream.UpstreamHealth.from_json(health.to_json()) == health


def test_only_changes_are_transitions(store: Store) -> None:
    assert upstream.record(store, up(), now=T0) is None  # reachable from the start: no news
    change = upstream.record(store, down(3), now=T0 + timedelta(seconds=5))
    assert change is not None
    assert (change["guard"], change["status"], change["previous"]) == ("model server", "unreachable", "reachable")
    assert "refused the connection" in change["reason"] and URL in change["reason"]
    assert upstream.record(store, down(9), now=T0 + timedelta(seconds=10)) is None  # still down: the count grows
    assert upstream.load(store) == down(9)
    back = upstream.record(store, up(), now=T0 + timedelta(minutes=3))
    assert back is not None and back["status"] == "reachable" and back["previous"] == "unreachable"
    assert "answers again" in back["reason"] and "9 agent requests failed" in back["reason"]


def test_change_and_recovery_are_alerted_through_the_guards_pipeline(store: Store) -> None:
    alerts = AlertsConfig(desktop=False, webhook="http://127.0.0.1:9/hook")
    upstream.record(store, down(3), now=T0)
    upstream.record(store, up(), now=T0 + timedelta(minutes=1))

    assert plan_alerts(store, alerts, now=T0 + timedelta(minutes=1)) == 2
    with store.engine.connect() as conn:
        kinds = conn.execute(
            select(col(Delivery.guard), col(Delivery.kind)).order_by(col(Delivery.id))
        ).all()
    assert [tuple(k) for k in kinds] == [("model server", "change"), ("model server", "recovery")]


def test_a_long_outage_is_reminded(store: Store) -> None:
    alerts = AlertsConfig(desktop=False, webhook="http://127.0.0.1:9/hook", repeat=timedelta(hours=1))
    upstream.record(store, down(3), now=T0)
    plan_alerts(store, alerts, now=T0)
    assert plan_alerts(store, alerts, now=T0 + timedelta(hours=2)) == 1
