"""The shipped alert rules and Alertmanager route, checked by Prometheus's own tools on a real daemon's series.

A real ``canary daemon`` runs a project with a guard that is asleep (``date``), one that is
asleep but muted (``quote``) and one that is alive (``citation``). Its ``/metrics`` is scraped;
``promtool check metrics`` lints it, and ``promtool test rules`` evaluates the shipped rules on
exactly the series it exported (their names, labels and values, as a scrape sees them, with the
heartbeat advancing as a live daemon's does).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from canary.locations import package_dir
from tests.daemon.projects import (
    Project,
    canary,
    make_project,
    scrape,
    seed_leaked_runs,
    start_daemon,
    stop,
    wait_for,
)

yaml = pytest.importorskip("yaml")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("promtool") is None or shutil.which("amtool") is None,
                       reason="promtool and amtool are not installed (Debian: apt install prometheus "
                              "prometheus-alertmanager)"),
]

EXAMPLES = package_dir() / "examples"
RULES = EXAMPLES / "prometheus-rules.yml"
ROUTES = EXAMPLES / "alertmanager.yml"
SCRAPE = {"instance": "laptop:20001", "job": "guard-canary"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Project, str]]:
    """A real daemon's /metrics, once ``date`` is asleep and ``quote`` is muted."""
    root = tmp_path_factory.mktemp("prom")
    project = make_project(root, "alpha", store_url=f"sqlite:///{(root / 'alpha.db').as_posix()}")
    seed_leaked_runs(f"sqlite:///{(root / 'alpha.db').as_posix()}")
    muted = canary("mute", "quote", "--for", "2h", "--reason", "deploying", cwd=project.folder)
    assert muted.returncode == 0, muted.stderr
    proc = start_daemon(project, root / "daemon.err")
    try:
        def settled() -> str | None:
            text = scrape(project)
            want = [f'guard="{g}",project="alpha",status="{s}"}} 1.0'
                    for g, s in (("date", "asleep"), ("quote", "paused"), ("citation", "alive"))]
            return text if all(w in text for w in want) else None

        yield project, wait_for(settled, 60, "the statuses in the metrics")
    finally:
        stop(proc)


def series(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample of a scrape."""
    return [(s.name, dict(s.labels), s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def selector(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def input_series(text: str, *, minutes: int, beat_until: int | None = None) -> list[dict[str, str]]:
    """The scraped series as promtool input, one sample a minute for ``minutes`` minutes.

    Values stay as scraped, except the heartbeat (unix time), which is made to read "now" at
    every sample, as a live daemon's does; with ``beat_until`` the daemon stops answering after
    that many minutes, and its series go stale.
    """
    out = []
    for name, labels, value in series(text):
        if name == "canary_daemon_heartbeat_timestamp_seconds":
            values = f"0+60x{minutes}" if beat_until is None else f"0+60x{beat_until} stale"
        else:
            values = f"{value!r}+0x{minutes}" if beat_until is None else f"{value!r}+0x{beat_until} stale"
        out.append({"series": selector(name, {**labels, **SCRAPE}), "values": values})
    return out


def promtool_test(tmp_path: Path, tests: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "rules_test.yml"
    path.write_text(yaml.safe_dump({"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": tests}))
    return subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True,
                          timeout=60, check=False)


def annotations(alert: str, labels: dict[str, str], value: str = "") -> dict[str, str]:
    """The rule's annotations with its {{ $labels.x }} (and {{ $value ... }}) filled in, as Prometheus does."""
    rule = next(r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if r["alert"] == alert)
    rendered = {}
    for key, template in rule["annotations"].items():
        text = template
        for name, label in labels.items():
            text = text.replace(f"{{{{ $labels.{name} }}}}", label)
        rendered[key] = text.replace("{{ $value | humanizeDuration }}", value)
    return rendered


def test_promtool_checks_the_shipped_rules() -> None:
    done = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 8 rules found" in done.stdout


def test_promtool_check_metrics_passes_on_a_real_daemons_metrics(exported: tuple[Project, str]) -> None:
    _project, text = exported
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (done.stdout + done.stderr).strip() == ""


def test_promtool_check_metrics_can_fail() -> None:
    """The check above can fail: a counter without its _total suffix is a lint problem."""
    bad = "# HELP canary_x A count.\n# TYPE canary_x counter\ncanary_x 1\n"
    done = subprocess.run(["promtool", "check", "metrics"], input=bad, capture_output=True, text=True, check=False)
    assert done.returncode != 0


def test_every_series_carries_the_project_and_starts_from_zero(exported: tuple[Project, str]) -> None:
    _project, text = exported
    found = series(text)
    assert {labels.get("project") for _n, labels, _v in found} == {"alpha"}
    runs = {(labels["guard"], labels["verdict"]): v for n, labels, v in found if n == "canary_runs_total"}
    assert runs[("date", "leaked")] == 1.0
    assert runs[("date", "caught")] == 0.0 and runs[("quote", "unlogged")] == 0.0  # present, from zero
    firings = {(labels["guard"], labels["source"]): v for n, labels, v in found if n == "canary_guard_firings_total"}
    assert firings == {("citation", "organic"): 1.0, ("citation", "canary"): 0.0, ("date", "organic"): 0.0,
                       ("date", "canary"): 0.0, ("quote", "organic"): 0.0, ("quote", "canary"): 0.0}
    assert [v for n, _l, v in found if n == "canary_store_up"] == [1.0]


def test_an_asleep_guard_fires_for_ten_minutes_and_a_muted_one_never(
    exported: tuple[Project, str], tmp_path: Path
) -> None:
    _project, text = exported
    labels = {"project": "alpha", "guard": "date", "status": "asleep", **SCRAPE}
    asleep = {"exp_labels": {**labels, "severity": "critical"}, "exp_annotations": annotations("GuardAsleep", labels)}
    done = promtool_test(tmp_path, [{
        "interval": "1m",
        "input_series": input_series(text, minutes=15),
        "alert_rule_test": [
            {"alertname": "GuardAsleep", "eval_time": "4m", "exp_alerts": []},  # not yet: `for: 5m`
            {"alertname": "GuardAsleep", "eval_time": "10m", "exp_alerts": [asleep]},  # date only: quote is muted
            {"alertname": "CanaryDaemonDown", "eval_time": "10m", "exp_alerts": []},  # it beats
            {"alertname": "CanaryDaemonAbsent", "eval_time": "10m", "exp_alerts": []},
            {"alertname": "CanaryStoreUnwritable", "eval_time": "10m", "exp_alerts": []},
        ],
    }])
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rules_test_can_fail(exported: tuple[Project, str], tmp_path: Path) -> None:
    """promtool fails when the muted guard is expected to fire: the test above can fail."""
    _project, text = exported
    labels = {"project": "alpha", "guard": "quote", "status": "asleep", **SCRAPE}
    done = promtool_test(tmp_path, [{
        "interval": "1m", "input_series": input_series(text, minutes=15),
        "alert_rule_test": [{"alertname": "GuardAsleep", "eval_time": "10m", "exp_alerts": [
            {"exp_labels": {**labels, "severity": "critical"}, "exp_annotations": annotations("GuardAsleep", labels)}]}],
    }])
    assert done.returncode != 0 and "FAILED" in done.stdout + done.stderr


def test_a_missing_daemon_fires(exported: tuple[Project, str], tmp_path: Path) -> None:
    _project, text = exported
    labels = {"project": "alpha", **SCRAPE}
    # the daemon answers for 3 minutes (last beat at 3m), then its series go stale
    down = {"exp_labels": {**labels, "severity": "critical"},
            "exp_annotations": annotations("CanaryDaemonDown", labels, "9m 0s")}
    done = promtool_test(tmp_path, [
        {
            "interval": "1m",
            "input_series": input_series(text, minutes=15, beat_until=3),
            "alert_rule_test": [
                {"alertname": "CanaryDaemonDown", "eval_time": "5m", "exp_alerts": []},  # 2m without a beat
                {"alertname": "CanaryDaemonDown", "eval_time": "12m", "exp_alerts": [down]},
            ],
        },
        {
            "interval": "1m",
            "input_series": [{"series": 'up{job="guard-canary"}', "values": "0+0x20"}],
            "alert_rule_test": [{"alertname": "CanaryDaemonAbsent", "eval_time": "15m", "exp_alerts": [{
                "exp_labels": {"severity": "critical"},
                "exp_annotations": annotations("CanaryDaemonAbsent", {})}]}],
        },
    ])
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_alertmanager_route_passes_amtool_and_routes_by_project() -> None:
    done = subprocess.run(["amtool", "check-config", str(ROUTES)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout

    def receiver(*labels: str) -> str:
        out = subprocess.run(["amtool", "config", "routes", "test", f"--config.file={ROUTES}", *labels],
                             capture_output=True, text=True, check=False)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    assert receiver("project=billing-bot", "severity=critical", "alertname=GuardAsleep") == "billing-oncall"
    assert receiver("project=billing-bot", "severity=warning") == "billing"
    assert receiver("project=research-rag", "severity=critical") == "research"
    assert receiver("project=alpha", "severity=critical") == "team"
