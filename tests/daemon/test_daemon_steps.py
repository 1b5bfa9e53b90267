"""The daemon's steps, each called alone: retention, heartbeat, transitions, the store lock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from canary.config.settings import load_config
from canary.daemon.steps import beat, decide_statuses, prune, store_lock
from canary.errors import UnavailableError
from canary.status.overview import daemon_info
from canary.store.engine import Store
from collectors.scan import Hit
from collectors.tailer import Batch, FileState

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def seeded(tmp_path: Path) -> Store:
    store = Store(f"sqlite:///{tmp_path / 'c.db'}", clock=lambda: NOW)
    hits = [
        Hit(0, "old", ("g",), False, NOW - timedelta(days=40)),
        Hit(10, "recent", ("g",), False, NOW - timedelta(days=2)),
    ]
    store.commit(Batch(FileState("1:2", 1, 2, "/a.log", 20, 0, b"", 20), hits, 2, 20))
    return store


def test_prune_drops_old_rows_and_keeps_hourly_counts(tmp_path: Path) -> None:
    store = seeded(tmp_path)
    assert prune(store, older_than=timedelta(days=30), now=NOW) == 1
    with store.engine.connect() as conn:
        lines = [r[0] for r in conn.execute(text("SELECT line FROM firings"))]
        total = conn.execute(text("SELECT sum(count) FROM hourly_counts")).scalar()
    assert lines == ["recent"]
    assert total == 2
    assert prune(store, older_than=timedelta(days=30), now=NOW) == 0


def test_heartbeat_says_running_then_stopped(tmp_path: Path) -> None:
    store = seeded(tmp_path)
    addresses = {"proxy": "http://127.0.0.1:1", "fixtures": None, "control": None}
    beat(store, pid=42, started=NOW - timedelta(minutes=5), now=NOW, files=3, addresses=addresses)
    info = daemon_info(store, now=NOW + timedelta(seconds=30))
    assert info.running and info.pid == 42 and info.files == 3
    assert not daemon_info(store, now=NOW + timedelta(minutes=10)).running  # the heartbeat went stale
    beat(store, pid=42, started=NOW, now=NOW, files=3, addresses=addresses, stopped=NOW)
    assert not daemon_info(store, now=NOW).running


def test_transitions_are_stored_once_per_change(tmp_path: Path) -> None:
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "g.toml").write_text("[guard]\nname = 'g'\nmatch = 'G: rejected'\nwindow = '24h'\n")
    (tmp_path / "canary.toml").write_text(
        f"defs = ['defs/*.toml']\n[logs]\npaths = []\n[store]\nurl = 'sqlite:///{tmp_path / 'c.db'}'\n"
    )
    config = load_config(str(tmp_path / "canary.toml"))
    store = seeded(tmp_path)
    first = decide_statuses(store, config, now=NOW, readable=True)
    assert [(c["guard"], c["previous"], c["status"]) for c in first] == [("g", None, "new")]
    assert decide_statuses(store, config, now=NOW, readable=True) == []
    later = decide_statuses(store, config, now=NOW + timedelta(hours=1), readable=False)
    assert [(c["previous"], c["status"]) for c in later] == [("new", "inconclusive")]


def test_one_daemon_per_store(tmp_path: Path) -> None:
    store = seeded(tmp_path)
    with store_lock(store) as path:
        assert path.name == "c.db.lock"
        with pytest.raises(UnavailableError, match="another daemon"), store_lock(store):
            pass
    with store_lock(store):
        pass
