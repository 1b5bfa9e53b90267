"""Metrics: the exact series rendered from a snapshot, a snapshot read from a real store, the rules file."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import insert

from canary.daemon.metrics import MetricsSnapshot, render, snapshot_from_store
from canary.demo.live import free_port as _free_port
from canary.locations import default_project, package_dir
from canary.runs.runlog import RunLog
from canary.store.engine import Store
from canary.store.tables import Heartbeat
from canary.vocabulary import Status
from collectors.scan import Hit
from collectors.tailer import Batch, FileState
from tests.helpers_store import TiedBy, record

NOW = datetime(2026, 11, 29, 10, 30, tzinfo=UTC)
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: bytes, project: str = "default") -> Samples:
    """Every sample as (name, sorted labels) -> value; each must carry ``project``, left out of the key."""
    found: Samples = {}
    for family in text_string_to_metric_families(text.decode("utf-8")):
        for sample in family.samples:
            labels = dict(sample.labels)
            assert labels.pop("project", None) == project, f"{sample.name} {sample.labels}: no project"
            key = (sample.name, tuple(sorted(labels.items())))
            assert key not in found, f"duplicate series {key}"
            found[key] = sample.value
    return found


def named(found: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (n, labels), value in found.items() if n == name}


SNAPSHOT = MetricsSnapshot(
    guards=["citation", "date"],
    firings={("citation", "organic"): 38, ("citation", "canary"): 4, ("gone", "organic"): 9},
    statuses={"citation": "alive", "date": "asleep"},
    runs={("citation", "fake-url", "caught"): 4, ("date", "fake-date", "leaked"): 2},
    last_caught={"citation": 1_795_000_000.0},
    collector_lines={"/logs/agent.log": 182_344},
    collector_lag={"/logs/agent.log": 512},
    heartbeat=1_795_000_100.5,
)


def test_firings_have_both_sources_from_zero_for_every_declared_guard() -> None:
    assert named(samples(render(SNAPSHOT)), "canary_guard_firings_total") == {
        (("guard", "citation"), ("source", "organic")): 38.0,
        (("guard", "citation"), ("source", "canary")): 4.0,
        (("guard", "date"), ("source", "organic")): 0.0,
        (("guard", "date"), ("source", "canary")): 0.0,
    }


def test_status_is_one_hot_over_every_status() -> None:
    status = named(samples(render(SNAPSHOT)), "canary_guard_status")
    assert len(status) == 2 * len(Status)
    for guard, current in [("citation", "alive"), ("date", "asleep")]:
        row = {dict(k)["status"]: value for k, value in status.items() if dict(k)["guard"] == guard}
        assert set(row) == {s.value for s in Status}
        assert row == {s.value: (1.0 if s.value == current else 0.0) for s in Status}


def test_a_guard_without_a_status_counts_as_new() -> None:
    status = named(samples(render(MetricsSnapshot(guards=["quote"]))), "canary_guard_status")
    assert [dict(labels)["status"] for labels, value in status.items() if value == 1.0] == ["new"]


def test_runs_lines_lag_last_caught_and_heartbeat() -> None:
    found = samples(render(SNAPSHOT))
    assert named(found, "canary_runs_total") == {
        (("canary", "fake-url"), ("guard", "citation"), ("verdict", "caught")): 4.0,
        (("canary", "fake-date"), ("guard", "date"), ("verdict", "leaked")): 2.0,
    }
    # Only guards with a caught run have a last-caught time: no series for "date".
    assert named(found, "canary_last_caught_timestamp_seconds") == {(("guard", "citation"),): 1_795_000_000.0}
    assert named(found, "canary_collector_lines_total") == {(("path", "/logs/agent.log"),): 182_344.0}
    assert named(found, "canary_collector_lag_bytes") == {(("path", "/logs/agent.log"),): 512.0}
    assert named(found, "canary_daemon_heartbeat_timestamp_seconds") == {(): 1_795_000_100.5}


def test_exposition_names_and_types() -> None:
    text = render(SNAPSHOT).decode()
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.M))
    assert types == {
        "canary_guard_firings_total": "counter",
        "canary_guard_status": "gauge",
        "canary_last_caught_timestamp_seconds": "gauge",
        "canary_runs_total": "counter",
        "canary_collector_lines_total": "counter",
        "canary_collector_lag_bytes": "gauge",
        "canary_daemon_heartbeat_timestamp_seconds": "gauge",
        "canary_store_up": "gauge",
    }
    assert "_total_total" not in text
    assert "_created" not in text
    assert 'guard="gone"' not in text  # only declared guards are exported


def test_no_heartbeat_means_no_heartbeat_sample() -> None:
    found = samples(render(MetricsSnapshot(guards=["citation"])))
    assert named(found, "canary_daemon_heartbeat_timestamp_seconds") == {}


def test_label_values_are_escaped() -> None:
    path = 'C:\\logs\\a "quoted"\nname.log'
    found = samples(render(MetricsSnapshot(guards=[], collector_lines={path: 3})))
    assert named(found, "canary_collector_lines_total") == {(("path", path),): 3.0}


def test_an_unknown_status_value_is_an_error() -> None:
    with pytest.raises(ValueError, match="snoozing"):
        render(MetricsSnapshot(guards=["citation"], statuses={"citation": "snoozing"}))


# -- from the store -----------------------------------------------------------------


def file_state(path: str, key: str, offset: int, size: int) -> FileState:
    ino = int(key.split(":")[1])
    return FileState(key, 1, ino, path, offset, 10, b"h" * 16, size)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store(f"sqlite:///{tmp_path / 'c.db'}", clock=lambda: NOW, attribution=TiedBy(1, lambda t: "nonce" in t))
    earlier = NOW - timedelta(days=3)
    store.commit(Batch(
        file_state("/logs/a.log", "1:2", 300, 1000),
        [
            Hit(0, "CitationGuard rejected", ("citation",), False, NOW),
            Hit(40, "CitationGuard rejected nonce", ("citation",), False, NOW),
            Hit(80, "CitationGuard rejected", ("citation",), False, earlier),
        ],
        10, 300,
    ))
    store.commit(Batch(file_state("/logs/a.log", "1:2", 400, 1000), [], 5, 100))
    # A rotated file under the same path: summed with the live one, never a duplicate series.
    store.commit(Batch(file_state("/logs/a.log", "1:9", 50, 50), [], 2, 50))
    store.commit(Batch(file_state("/logs/b.log", "1:3", 80, 80), [], 4, 80))
    runs = RunLog(store)
    rows = [
        ("citation", "fake-url", "caught", NOW - timedelta(hours=7)),
        ("citation", "fake-url", "caught", NOW - timedelta(hours=1)),
        ("citation", "fake-url", "leaked", NOW - timedelta(hours=2)),
        ("date", "fake-date", "unlogged", NOW - timedelta(hours=1)),
        ("date", "fake-date", None, NOW),  # in flight: not counted
    ]
    for n, (guard, canary, verdict, started) in enumerate(rows):
        run_id = runs.start(guard=guard, canary=canary, variant=0, expect="reject", nonce=f"n{n}",
                            started=started, injected_text="x", leak_text=None)
        if verdict is not None:
            runs.finish(run_id, record(verdict), finished=started + timedelta(seconds=3))
    with store.engine.begin() as conn:
        conn.execute(insert(Heartbeat).values(id=1, pid=7, started=NOW - timedelta(hours=1),
                                              beat=NOW - timedelta(seconds=20)))
    return store


def test_snapshot_from_store(store: Store) -> None:
    snap = snapshot_from_store(store, ["citation", "date"], {"citation": Status.ALIVE, "date": "asleep"})
    assert snap.guards == ["citation", "date"]
    assert snap.firings == {("citation", "organic"): 2, ("citation", "canary"): 1}
    assert snap.statuses == {"citation": "alive", "date": "asleep"}
    assert snap.runs == {
        ("citation", "fake-url", "caught"): 2,
        ("citation", "fake-url", "leaked"): 1,
        ("date", "fake-date", "unlogged"): 1,
    }
    assert snap.last_caught == {"citation": (NOW - timedelta(hours=1)).timestamp()}
    assert snap.collector_lines == {"/logs/a.log": 17, "/logs/b.log": 4}
    assert snap.collector_lag == {"/logs/a.log": 600, "/logs/b.log": 0}
    assert snap.heartbeat == (NOW - timedelta(seconds=20)).timestamp()


def test_live_lag_replaces_the_stored_lag_and_lines_stay_the_stored_ones(store: Store) -> None:
    lag = [("/logs/a.log", 4096), ("/logs/a.log", 0), ("/logs/c.log", 7)]
    snap = snapshot_from_store(store, ["citation"], {}, lag=lag)
    assert snap.collector_lines == {"/logs/a.log": 17, "/logs/b.log": 4}  # what the store committed
    assert snap.collector_lag == {"/logs/a.log": 4096, "/logs/c.log": 7}


def test_an_empty_store_renders_zeros_and_no_heartbeat(tmp_path: Path) -> None:
    empty = Store(f"sqlite:///{tmp_path / 'e.db'}")
    found = samples(render(snapshot_from_store(empty, ["citation"], {})))
    assert named(found, "canary_guard_firings_total") == {
        (("guard", "citation"), ("source", "organic")): 0.0,
        (("guard", "citation"), ("source", "canary")): 0.0,
    }
    assert named(found, "canary_daemon_heartbeat_timestamp_seconds") == {}
    assert named(found, "canary_runs_total") == {}
    empty.close()


def test_the_store_renders_end_to_end(store: Store) -> None:
    found = samples(render(snapshot_from_store(store, ["citation", "date"], {"citation": "alive"})))
    assert found[("canary_guard_firings_total", (("guard", "citation"), ("source", "canary")))] == 1.0
    caught = (("canary", "fake-url"), ("guard", "citation"), ("verdict", "caught"))
    assert found[("canary_runs_total", caught)] == 2.0
    assert found[("canary_guard_status", (("guard", "date"), ("status", "new")))] == 1.0


# -- the alerting rules ------------------------------------------------------------------

RULES = package_dir() / "examples" / "prometheus-rules.yml"
EXPECTED_ALERTS = {
    "GuardAsleep", "GuardDegraded", "GuardInconclusive", "NoCaughtCanaryForADay",
    "CanaryDaemonDown", "CanaryDaemonAbsent", "CanaryStoreUnwritable", "CollectorLagging",
}


def rules_outline() -> list[dict[str, str]]:
    """Each rule's alert, expr, for, severity and annotations, read line by line.

    PyYAML is not a dependency, so this checks the file's shape with the few rules it uses:
    two-space indentation, no tabs, one-line scalars.
    """
    rules: list[dict[str, str]] = []
    section = ""
    for number, line in enumerate(RULES.read_text().splitlines(), 1):
        assert "\t" not in line, f"line {number} has a tab"
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        assert indent % 2 == 0, f"line {number} is indented by {indent}"
        match = re.fullmatch(r"(- )?([a-z_]+):(?: (.+))?", stripped)
        assert match, f"line {number} is not a 'key: value' line: {line!r}"
        _, key, value = match.groups()
        value = (value or "").strip()
        if value.startswith('"'):
            assert value.endswith('"') and len(value) > 1, f"line {number} has an unterminated string"
            value = value[1:-1]
        if key == "alert":
            rules.append({"alert": value})
        elif rules and indent == 8:
            section = key
            rules[-1][key] = value
        elif rules and indent == 10:
            rules[-1][f"{section}.{key}"] = value
    return rules


def test_the_rules_file_has_every_alert_with_labels_and_annotations() -> None:
    text = RULES.read_text()
    assert text.startswith("#") and "\ngroups:\n  - name: guard-canary\n    rules:\n" in text
    rules = rules_outline()
    assert {r["alert"] for r in rules} == EXPECTED_ALERTS
    for rule in rules:
        assert rule.get("expr"), rule
        assert re.fullmatch(r"\d+[smh]", rule.get("for", "")), rule
        assert rule.get("labels.severity") in {"warning", "critical"}, rule
        assert rule.get("annotations.summary") and rule.get("annotations.description"), rule
    by_name = {r["alert"]: r for r in rules}
    for guard_alert in ("GuardAsleep", "GuardDegraded", "GuardInconclusive", "NoCaughtCanaryForADay"):
        assert "$labels.guard" in by_name[guard_alert]["annotations.description"]
    assert by_name["GuardAsleep"]["for"] == "5m"
    assert by_name["CollectorLagging"]["expr"] == "canary_collector_lag_bytes > 10485760"  # 10 MiB


def test_every_rule_expr_uses_a_rendered_metric() -> None:
    emitted = {name for name, _labels in samples(render(SNAPSHOT))}
    for rule in rules_outline():
        used = set(re.findall(r"\bcanary_[a-z_]+", rule["expr"]))
        assert used, rule
        assert used <= emitted, (rule["alert"], used - emitted)
        for status in re.findall(r'status="([a-z]+)"', rule["expr"]):
            assert status in {s.value for s in Status}


def test_the_rules_file_parses_as_yaml() -> None:
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load(RULES.read_text())
    rules = doc["groups"][0]["rules"]
    assert {r["alert"] for r in rules} == EXPECTED_ALERTS
    assert {r["alert"]: r for r in rules_outline()}["GuardAsleep"]["expr"] == next(
        r["expr"] for r in rules if r["alert"] == "GuardAsleep"
    )


def test_proxy_requests_by_outcome_and_the_upstream_latency_histogram() -> None:
    from canary.proxy.health import OUTCOMES, ProxyCounts

    counts = ProxyCounts()
    counts.answered(200, 0.004)
    counts.answered(200, 0.3)
    counts.answered(503, 0.02)
    counts.failed("refused", "refused the connection", b"")
    text = render(MetricsSnapshot(guards=[]), counts.snapshot())
    families = {f.name: f for f in text_string_to_metric_families(text.decode())}

    requests = {s.labels["outcome"]: s.value for s in families["canary_proxy_requests"].samples}
    assert requests == {o: {"ok": 2.0, "upstream_5xx": 1.0, "refused": 1.0}.get(o, 0.0) for o in OUTCOMES}
    hist = {(s.name, s.labels.get("le")): s.value for s in families["canary_proxy_upstream_seconds"].samples}
    assert hist[("canary_proxy_upstream_seconds_bucket", "0.005")] == 1.0
    assert hist[("canary_proxy_upstream_seconds_bucket", "0.025")] == 2.0
    assert hist[("canary_proxy_upstream_seconds_bucket", "0.5")] == 3.0
    assert hist[("canary_proxy_upstream_seconds_bucket", "+Inf")] == 3.0
    assert hist[("canary_proxy_upstream_seconds_count", None)] == 3.0
    assert hist[("canary_proxy_upstream_seconds_sum", None)] == pytest.approx(0.324)


def test_without_a_proxy_snapshot_there_is_no_proxy_series() -> None:
    assert b"canary_proxy" not in render(MetricsSnapshot(guards=[]))


def _lines_total(url: str, path: str, timeout: float = 60, *, project: str = "default") -> float:
    """The scraped ``canary_collector_lines_total`` of ``path``, once it is there."""
    import time

    import httpx

    deadline = time.monotonic() + timeout
    while True:
        try:
            found = samples(httpx.get(url, timeout=5, trust_env=False).content, project=project)
            value = named(found, "canary_collector_lines_total").get((("path", path),))
            if value:
                return value
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the daemon never served the line count"
        time.sleep(0.2)


@pytest.mark.slow
def test_collector_lines_survive_a_daemon_restart(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    log = tmp_path / "agent.log"
    log.write_text("".join(f"line {i} CitationGuard: rejected\n" if i % 10 == 0 else f"line {i}\n"
                           for i in range(250)))
    control = _free_port()
    (tmp_path / "canary.toml").write_text(
        f"defs = []\n[logs]\npaths = [{str(log)!r}]\n"
        f"[store]\nurl = 'sqlite:///{(tmp_path / 'canary.db').as_posix()}'\n"
        f"[model]\nlisten = '127.0.0.1:{_free_port()}'\n[fixtures]\nlisten = '127.0.0.1:{_free_port()}'\n"
        f"[daemon]\ncontrol = '127.0.0.1:{control}'\n")
    canary = str(Path(sys.executable).with_name("canary"))
    url = f"http://127.0.0.1:{control}/metrics"
    seen = []
    for _ in range(2):
        proc = subprocess.Popen([canary, "daemon", "--tick", "0.5"], cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            seen.append(_lines_total(url, str(log), project=default_project(tmp_path / "canary.toml")))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    assert seen == [250.0, 250.0]  # the restarted daemon read nothing new, yet the count holds


def test_runs_of_every_declared_canary_start_from_zero_for_each_verdict_it_can_end_in() -> None:
    snap = MetricsSnapshot(
        guards=["citation", "grounding"], runs={("citation", "fake-url", "caught"): 3},
        canaries={"citation": (("fake-url", "reject"),), "grounding": (("real-quote", "accept"),),
                  "undeclared": (("x", "reject"),)},
    )
    runs = named(samples(render(snap)), "canary_runs_total")
    by_canary: dict[str, dict[str, float]] = {}
    for labels, value in runs.items():
        row = dict(labels)
        by_canary.setdefault(row["canary"], {})[row["verdict"]] = value
    assert by_canary == {
        "fake-url": {"caught": 3.0, "fired_but_leaked": 0.0, "leaked": 0.0, "unlogged": 0.0,
                     "not_injected": 0.0, "error": 0.0, "ambiguous": 0.0},
        "real-quote": {"passed": 0.0, "false_rejection": 0.0, "not_injected": 0.0, "error": 0.0,
                       "ambiguous": 0.0},
    }


def test_every_series_names_its_project_and_the_store_state() -> None:
    from canary.proxy.health import ProxyCounts

    text = render(MetricsSnapshot(guards=["citation"], project="billing-bot", store_up=False),
                  ProxyCounts().snapshot())
    found = samples(text, project="billing-bot")  # fails on a series without project="billing-bot"
    assert named(found, "canary_store_up") == {(): 0.0}
    assert named(found, "canary_proxy_upstream_seconds_count") == {(): 0.0}


def test_a_store_down_at_the_first_scrape_shows_no_guard_figures_rather_than_zeros(tmp_path: Path) -> None:
    """A counter that reads 0 then N is a reset to Prometheus, and ``new`` a status nobody decided:
    with nothing read yet, the guards' series are absent, ``canary_store_up`` 0 says why; once the
    store answers they are its figures, and they stay while it goes away again."""
    import shutil

    from canary.config.settings import load_config
    from canary.daemon.scrape import Scrape

    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "citation.toml").write_text("[guard]\nname = 'citation'\nmatch = 'CitationGuard'\n")
    (tmp_path / "canary.toml").write_text(
        "project = 'p'\ndefs = ['defs/*.toml']\n[logs]\npaths = []\n"
        f"[store]\nurl = 'sqlite:///{tmp_path / 'state' / 'canary.db'}'\n")
    config = load_config(str(tmp_path / "canary.toml"))
    (tmp_path / "state").mkdir()
    store = Store(f"sqlite:///{tmp_path / 'state' / 'canary.db'}")
    state = tmp_path / "state"

    def gone() -> None:
        store.engine.dispose()
        shutil.move(state, tmp_path / "away")
        state.write_text("")  # the store's folder is a file now: nothing opens

    def back() -> None:
        state.unlink()
        shutil.move(tmp_path / "away", state)

    scrape = Scrape(lambda: datetime.now(UTC))
    gone()
    down = samples(scrape.render(store, config, lag=None, store_up=False, proxy=None), project="p")
    assert named(down, "canary_store_up") == {(): 0.0}
    assert named(down, "canary_guard_firings_total") == {}
    assert named(down, "canary_guard_status") == {}
    back()
    store.commit(Batch(FileState("1:2", 1, 2, "/logs/agent.log", 10, 10, b"h" * 16, 10),
                       [Hit(0, "CitationGuard x", ("citation",), False, datetime.now(UTC))], 1, 10))
    up = samples(scrape.render(store, config, lag=None, store_up=True, proxy=None), project="p")
    assert named(up, "canary_guard_firings_total")[(("guard", "citation"), ("source", "organic"))] == 1.0
    gone()
    again = samples(scrape.render(store, config, lag=None, store_up=False, proxy=None), project="p")
    assert named(again, "canary_guard_firings_total") == named(up, "canary_guard_firings_total")
    assert named(again, "canary_guard_status") == named(up, "canary_guard_status")
    assert named(again, "canary_store_up") == {(): 0.0}
    back()
    store.close()
