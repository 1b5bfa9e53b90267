"""A channel added while a guard is already asleep is told the current state, once."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import insert, select
from sqlmodel import col

from canary.alerts.planning import deliver_pending, plan_alerts
from canary.config.settings import AlertsConfig
from canary.status.mutes import mute
from canary.store.engine import Store
from canary.store.tables import Delivery, Transition

T0 = datetime(2026, 11, 29, 10, 2, tzinfo=UTC)
REPEAT = timedelta(hours=6)
COMMAND_ONLY = AlertsConfig(desktop=False, command=("true",), repeat=REPEAT)
COMMAND_AND_WEBHOOK = AlertsConfig(desktop=False, webhook="http://127.0.0.1:9/hook", command=("true",),
                                   repeat=REPEAT)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(f"sqlite:///{tmp_path}/c.db")
    yield opened
    opened.close()


def add(store: Store, guard: str, previous: str | None, status: str, at: datetime = T0) -> None:
    with store.engine.begin() as conn:
        conn.execute(insert(Transition).values(guard=guard, at=at, status=status, previous=previous,
                                               reason="canary x leaked", evidence=None))


def rows(store: Store) -> list[tuple[str, str, str]]:
    with store.engine.connect() as conn:
        return [(g, k, c) for g, k, c in conn.execute(
            select(col(Delivery.guard), col(Delivery.kind), col(Delivery.channel)).order_by(col(Delivery.id)))]




def test_a_new_channel_gets_the_current_state_once(store: Store) -> None:
    add(store, "citation", "alive", "asleep")
    add(store, "quote", "new", "alive")
    assert plan_alerts(store, COMMAND_ONLY, now=T0) == 1
    assert deliver_pending(store, COMMAND_ONLY, now=T0, send=lambda c, p: None) == 1
    later = T0 + timedelta(minutes=20)
    assert plan_alerts(store, COMMAND_AND_WEBHOOK, now=later) == 1
    assert rows(store)[-1] == ("citation", "change", "webhook")  # the asleep guard only, the new channel only
    told: list[tuple[str, str, str]] = []
    deliver_pending(store, COMMAND_AND_WEBHOOK, now=later,
                    send=lambda c, p: told.append((c, p["guard"], p["status"])) and None)
    assert told == [("webhook", "citation", "asleep")]
    assert plan_alerts(store, COMMAND_AND_WEBHOOK, now=later + timedelta(minutes=1)) == 0  # once


def test_a_muted_guard_is_not_told_to_a_new_channel(store: Store) -> None:
    add(store, "citation", "alive", "asleep")
    plan_alerts(store, COMMAND_ONLY, now=T0)
    mute(store, "citation", timedelta(hours=1), now=T0)
    assert plan_alerts(store, COMMAND_AND_WEBHOOK, now=T0 + timedelta(minutes=5)) == 0


def test_a_guard_that_recovered_is_not_told_to_a_new_channel(store: Store) -> None:
    add(store, "citation", "alive", "asleep")
    add(store, "citation", "asleep", "alive", T0 + timedelta(minutes=1))
    plan_alerts(store, COMMAND_ONLY, now=T0 + timedelta(minutes=2))
    before = rows(store)
    assert plan_alerts(store, COMMAND_AND_WEBHOOK, now=T0 + timedelta(minutes=5)) == 0
    assert rows(store) == before


@pytest.mark.parametrize(("toml", "warned"), [("", False), ("desktop = true\n", True)])
def test_desktop_alerts_never_enabled_give_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, toml: str, warned: bool
) -> None:
    from canary.alerts import channels
    from canary.config.settings import load_config

    monkeypatch.setattr(channels, "_warned_missing", set())
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "g.toml").write_text("[guard]\nname = 'g'\nmatch = 'G: rejected'\n")
    (tmp_path / "canary.toml").write_text(f"defs = ['defs/*.toml']\n[logs]\npaths = []\n[alerts]\n{toml}")
    config = load_config(str(tmp_path / "canary.toml"))
    send = channels.default_sender(config.alerts, platform="win32")  # a platform with no notifier
    with caplog.at_level("WARNING"):
        note = send("desktop", {"guard": "g", "status": "asleep", "previous": None, "reason": "r",
                                "since": "", "evidence": None, "kind": "change", "text": "t"})
    assert note is not None  # skipped, and the delivery row says why
    assert any("desktop alerts are skipped" in r.getMessage() for r in caplog.records) is warned
