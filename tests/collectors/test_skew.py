"""Time you can trust: a line stamped too far in the future counts when it is read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import text

from canary.config.settings import load_config
from canary.logs.audit import audit
from canary.store.engine import Store
from tests.collectors.fakes import Clock
from tests.collectors.test_tailer import append, make_tailer


def test_a_future_stamp_counts_at_read_time_and_is_reported_once(tmp_path: Path, store: Store) -> None:
    log = tmp_path / "a.log"
    now = datetime.now(UTC)
    soon = (now + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    append(log, b"2030-01-01T00:00:00Z line 1 HIT\n2030-01-01T00:00:01Z line 2 HIT\n")
    append(log, f"{soon} line 3 HIT\n".encode())
    t = make_tailer(store, str(log), Clock())
    t.poll()
    with store.engine.connect() as conn:
        rows = conn.execute(text("SELECT ts, ts_from_line FROM firings ORDER BY offset")).all()
    stamps = [datetime.fromisoformat(str(r[0])).replace(tzinfo=UTC) for r in rows]
    assert [r[1] for r in rows] == [0, 0, 1]
    assert all(abs(s - now) < timedelta(minutes=2) for s in stamps)  # none in 2030
    skew = [e for e in t.errors if "clock skew" in e]  # type: ignore[attr-defined]
    assert len(skew) == 1 and str(log) in skew[0]
    t.close()


def test_status_window_and_audit_agree_on_a_future_stamp(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_bytes(b"2030-01-01T00:00:00Z Guard: rejected\n")
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "g.toml").write_text("[guard]\nname = 'g'\nmatch = 'Guard: rejected'\n")
    (tmp_path / "canary.toml").write_text(
        f"defs = ['defs/*.toml']\n[logs]\npaths = ['{log}']\nclock_skew = '10m'\n"
        f"[store]\nurl = 'sqlite:///{tmp_path / 'c.db'}'\n"
    )
    config = load_config(str(tmp_path / "canary.toml"))
    assert config.logs.clock_skew == timedelta(minutes=10)
    now = datetime.now(UTC)
    report = audit(config, since=now - timedelta(hours=24), now=now)
    assert [(g.guard, g.firings) for g in report.guards] == [("g", 1)]
