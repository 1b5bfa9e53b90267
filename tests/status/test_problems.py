"""``canary status --json`` lists every fault in ``problems``, the daemon's store error first: a script
reading ``problems`` alone never takes a daemon that cannot write its store for a healthy one."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from canary.config.settings import load_config
from canary.status.problems import exit_code, problems

NOW = datetime(2026, 12, 8, 10, 0, tzinfo=UTC)
SAID = "the store cannot be written since 2026-12-08T09:58:00Z: database or disk is full"


def test_a_daemon_that_cannot_write_its_store_is_the_first_problem(tmp_path: Path) -> None:
    (tmp_path / "canary.toml").write_text("defs = []\n[logs]\npaths = []\n")
    config = load_config(str(tmp_path / "canary.toml"))
    doc = {"guards": [{"guard": "quote", "status": "alive"}],
           "daemon": {"running": True, "error": SAID, "heartbeat": None}}
    found = problems(doc, config, now=NOW)
    assert found[0] == {"kind": "store_error", "message": SAID}, found
    assert exit_code({**doc, "problems": found}) == 3
    healthy = problems({**doc, "daemon": {"running": True, "error": None, "heartbeat": None}}, config, now=NOW)
    assert all(p["kind"] != "store_error" for p in healthy)
