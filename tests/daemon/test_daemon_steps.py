"""The daemon's steps, each called alone: retention, heartbeat, transitions, the store lock, the
model server's health."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trustme
from sqlalchemy import text

from canary.config.settings import Config, load_config
from canary.daemon.health import upstream_step
from canary.daemon.steps import beat, decide_statuses, prune, store_lock
from canary.errors import UnavailableError
from canary.proxy.health import ProxyCounts
from canary.runs.runlog import RunLog
from canary.status.overview import daemon_info
from canary.store.engine import Store
from collectors.scan import Hit
from collectors.tailer import Batch, FileState
from tests.helpers_tls import ca_pem, plain_http_server, tls_server

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


def test_prune_drops_the_trace_ids_of_runs_older_than_the_retention(tmp_path: Path) -> None:
    store = seeded(tmp_path)
    log = RunLog(store)
    old = log.start(guard="g", canary="c", variant=0, expect="reject", nonce="n-old", injected_text="x", leak_text=None,
                    started=NOW - timedelta(days=40))
    new = log.start(guard="g", canary="c", variant=0, expect="reject", nonce="n-new", injected_text="x", leak_text=None,
                    started=NOW - timedelta(days=2))
    log.traced(old, ["a" * 32, "b" * 32])
    log.traced(new, ["c" * 32])
    prune(store, older_than=timedelta(days=30), now=NOW)
    with store.engine.connect() as conn:
        kept = sorted((r[0], r[1]) for r in conn.execute(text("SELECT trace_id, run_id FROM run_traces")))
    assert kept == [("c" * 32, new)]
    assert store.traced_runs(["a" * 32, "c" * 32]).keys() == {"c" * 32}


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


def _https_upstream(tmp_path: Path, port: int, ca_file: str | None) -> tuple[Store, ProxyCounts, Config]:
    """A store, the proxy's counts after one refused agent request, and a config naming the upstream."""
    trust = f"ca_file = '{ca_file}'\n" if ca_file else ""
    (tmp_path / "canary.toml").write_text(
        f"defs = []\n[model]\nupstream = 'https://127.0.0.1:{port}'\n{trust}[logs]\npaths = []\n"
        f"[store]\nurl = 'sqlite:///{tmp_path / 'c.db'}'\n"
    )
    counts = ProxyCounts(clock=NOW.timestamp)
    counts.failed("refused", "presented a TLS certificate that was refused (the proxy's words)", b"")
    return seeded(tmp_path), counts, load_config(str(tmp_path / "canary.toml"))


@pytest.mark.parametrize(("name", "with_ca", "said"), [
    ("127.0.0.1", False, "add the CA that signed it with [model] ca_file"),  # a CA the system does not know
    ("other.example", True, "mismatch, certificate is not valid for '127.0.0.1'"),  # signed, but for another host
    (None, False, "TLS handshake"),  # https to a plain-HTTP port
])
def test_a_model_server_that_fails_the_tls_handshake_stays_unreachable(
    tmp_path: Path, name: str | None, with_ca: bool, said: str
) -> None:
    ca = trustme.CA()
    with plain_http_server() if name is None else tls_server(ca.issue_cert(name)) as port:
        store, counts, config = _https_upstream(tmp_path, port, ca_pem(ca, tmp_path) if with_ca else None)
        change = upstream_step(store, config, counts, now=NOW, per_minute=0.0)
    assert change is not None and (change["previous"], change["status"]) == ("reachable", "unreachable")
    assert "model server unreachable since" in change["reason"] and "1 agent request failed" in change["reason"]
    assert said in change["reason"] and "[model] upstream" in change["reason"], change["reason"]
    assert counts.snapshot().failed_since == 1


def test_a_model_server_whose_certificate_is_trusted_is_reachable_again(tmp_path: Path) -> None:
    ca = trustme.CA()
    with tls_server(ca.issue_cert("127.0.0.1")) as port:
        store, counts, config = _https_upstream(tmp_path, port, ca_pem(ca, tmp_path))
        assert upstream_step(store, config, counts, now=NOW, per_minute=0.0) is None
    assert counts.snapshot().failing_since is None


def test_a_ca_file_gone_since_loading_keeps_the_model_server_unreachable(tmp_path: Path) -> None:
    ca = trustme.CA()
    with tls_server(ca.issue_cert("127.0.0.1")) as port:
        store, counts, config = _https_upstream(tmp_path, port, ca_pem(ca, tmp_path))
        Path(ca_pem(ca, tmp_path)).unlink()
        change = upstream_step(store, config, counts, now=NOW, per_minute=0.0)
    assert change is not None and change["status"] == "unreachable"
    assert "[model] ca_file cannot be read" in change["reason"], change["reason"]
