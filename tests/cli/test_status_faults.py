"""``canary status`` over a real store: a fault of the daemon or the model server is never a clean exit,
and a broken definition file never hides what the running daemon knows."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import insert

from canary.cli.main import main
from canary.config.settings import load_config
from canary.daemon.steps import beat
from canary.runs.runlog import RunLog
from canary.status import upstream
from canary.store.engine import Store
from canary.store.tables import Transition
from tests.helpers_store import record

GUARD = (
    "[guard]\nname = '{name}'\nmatch = '{name}: rejected'\nwindow = '24h'\ngrace = '1h'\n"
    "[[canary]]\nname = 'fake'\nevery = '6h'\nprompt = 'Read {{fixture_url}}.'\n"
    "fixture = '<p>{{true_number}}</p>'\ninject = 'It is {{fake_number}}.'\nleak = '{{fake_number}}'\n"
)


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    """A config of two guards whose canaries were caught ten minutes ago (both quiet: exit 0 material)."""
    (tmp_path / "defs").mkdir()
    (tmp_path / "agent.log").write_text("started\n")
    for name in ("citation", "quote"):
        (tmp_path / "defs" / f"{name}.toml").write_text(GUARD.format(name=name))
    (tmp_path / "canary.toml").write_text(
        f"defs = ['defs/*.toml']\n[logs]\npaths = ['{tmp_path / 'agent.log'}']\n[alerts]\ndesktop = false\n"
        f"[model]\nupstream = 'http://127.0.0.1:9'\n[store]\nurl = 'sqlite:///{tmp_path / 'c.db'}'\n"
    )
    store = Store(load_config(str(tmp_path / "canary.toml")).store.url)
    runs = RunLog(store)
    at = datetime.now(UTC) - timedelta(minutes=10)
    for n, name in enumerate(("citation", "quote")):
        rid = runs.start(guard=name, canary="fake", variant=0, expect="reject", nonce=f"n{n}", started=at,
                         injected_text="x", leak_text="y")
        runs.finish(rid, record("caught", evidence=f"{name}: rejected n{n}"), finished=at)
    store.close()
    yield tmp_path


def heartbeat(path: Path, *, age: timedelta = timedelta(seconds=5)) -> None:
    """The heartbeat a running daemon writes each tick."""
    store = Store(f"sqlite:///{path / 'c.db'}")
    now = datetime.now(UTC)
    beat(store, pid=os.getpid(), started=now - timedelta(hours=1), now=now - age, files=1, addresses={})
    store.close()


def status(path: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["status", "--config", str(path / "canary.toml"), *args])


def test_a_live_daemon_and_quiet_guards_exit_0(project: Path) -> None:
    heartbeat(project)
    result = status(project)
    assert result.exit_code == 0, result.output
    assert json.loads(status(project, "--json").stdout)["problems"] == []


def test_no_daemon_collecting_exits_1_and_says_so_first(project: Path) -> None:
    result = status(project)
    assert result.exit_code == 1, result.output
    first = result.stdout.splitlines()[0]
    assert "no daemon is collecting" in first and "project" in first, result.stdout
    doc = json.loads(status(project, "--json").stdout)
    assert [p["kind"] for p in doc["problems"]] == ["no_daemon"]
    assert [g["status"] for g in doc["guards"]] == ["quiet", "quiet"]  # the store's facts, still shown


def test_a_stale_heartbeat_is_no_daemon(project: Path) -> None:
    heartbeat(project, age=timedelta(minutes=10))
    result = status(project)
    assert result.exit_code == 1, result.output
    assert "no daemon is collecting" in result.stdout.splitlines()[0]
    assert "last heartbeat" in result.stdout.splitlines()[0]


def test_an_unreachable_model_server_exits_1_and_says_so_first(project: Path) -> None:
    heartbeat(project)
    store = Store(f"sqlite:///{project / 'c.db'}")
    since = datetime.now(UTC) - timedelta(minutes=3)
    upstream.record(store, upstream.decide("http://127.0.0.1:9", failing_since=since.timestamp(), failed=4,
                                           failure="refused the connection", per_minute=2.0),
                    now=datetime.now(UTC))
    store.close()
    result = status(project)
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines()[0].startswith("model server unreachable since"), result.stdout
    doc = json.loads(status(project, "--json").stdout)
    assert [p["kind"] for p in doc["problems"]] == ["model_unreachable"]


def broken(project: Path) -> None:
    """quote.toml edited into an error while the daemon runs on the definition it loaded."""
    (project / "defs" / "quote.toml").write_text(GUARD.format(name="quote").replace("window = '24h'",
                                                                                    "windw = '24h'"))
    store = Store(f"sqlite:///{project / 'c.db'}")
    with store.engine.begin() as conn:
        conn.execute(insert(Transition), [{
            "guard": "quote", "at": datetime.now(UTC) - timedelta(hours=2), "status": "asleep",
            "previous": "alive", "reason": "canary fake leaked", "evidence": None}])
    store.close()


def test_a_broken_definition_shows_the_daemons_status_beside_the_problem(project: Path) -> None:
    heartbeat(project)
    broken(project)
    result = status(project)
    assert result.exit_code == 2, result.output
    assert "windw" in result.stderr and "did you mean" in result.stderr
    assert "nothing was run" not in result.output
    assert "citation" in result.stdout and "QUIET" in result.stdout  # the guards it can still read
    quote = next(line for line in result.stdout.splitlines() if line.startswith("quote"))
    assert "ASLEEP" in quote and "definition" in quote  # the daemon's last word on it, and why
    doc = json.loads(status(project, "--json").stdout)
    assert doc["daemon"]["running"] is True
    assert [p["kind"] for p in doc["problems"]] == ["definitions"]
    assert "windw" in doc["problems"][0]["message"]
    assert [(g["guard"], g["status"]) for g in doc["guards"]] == [("citation", "quiet"), ("quote", "asleep")]


def test_a_broken_canary_toml_is_still_a_config_error(project: Path) -> None:
    (project / "canary.toml").write_text((project / "canary.toml").read_text() + "bogus = 1\n")
    result = status(project)
    assert result.exit_code == 2
    assert "bogus" in result.stderr


def test_an_alert_channel_that_cannot_deliver_is_a_warning_in_status(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    heartbeat(project)
    (project / "canary.toml").write_text((project / "canary.toml").read_text().replace(
        "desktop = false", "desktop = true"))
    monkeypatch.setenv("PATH", str(project / "nowhere"))  # no desktop notifier on this machine
    result = status(project)
    assert result.exit_code == 0, result.output  # a warning: the guards are what they are
    assert result.stdout.splitlines()[0].startswith("alerts: desktop notifications cannot be shown"), result.stdout
    doc = json.loads(status(project, "--json").stdout)
    assert [p["kind"] for p in doc["problems"]] == ["alerts"]
