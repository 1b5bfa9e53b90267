"""What ``canary status`` says of a guard: the failing canary of an asleep one, and why its runs erred."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner

from canary.cli.main import main
from canary.runs.runlog import RunLog
from canary.store.engine import Store
from tests.helpers_store import record

CANARY = ("[[canary]]\nname = '{name}'\nevery = '1h'\nexpect = '{expect}'\nprompt = 'Read {{fixture_url}}.'\n"
          "fixture = '<p>{{true_number}} euros.</p>'\ninject = 'x'\n{tail}\n")


def _setup(root: Path, runs: list[tuple[str, str, str, int, str | None]]) -> Path:
    (root / "defs").mkdir()
    (root / "defs" / "citation.toml").write_text(
        "[guard]\nname = 'citation'\nmatch = 'CitationGuard: rejected'\n"
        + CANARY.format(name="fake-url", expect="reject", tail="leak = 'x'")
        + CANARY.format(name="real-url", expect="accept", tail="grounded = '{true_number}'"))
    (root / "agent.log").write_text("")
    config = root / "canary.toml"
    config.write_text(f"defs = ['defs/*.toml']\n[logs]\npaths = ['agent.log']\n"
                      f"[store]\nurl = 'sqlite:///{root / 'c.db'}'\n")
    store = Store(f"sqlite:///{root / 'c.db'}")
    log, now = RunLog(store), datetime.now(UTC)
    try:
        for n, (canary, expect, verdict, minutes, error) in enumerate(runs):
            at = now - timedelta(minutes=minutes)
            rid = log.start(guard="citation", canary=canary, variant=0, expect=expect, nonce=f"n{n}",
                            started=at, injected_text="x", leak_text="x")
            done = record(verdict)
            if error is not None:
                done = done.__class__(**{**done.__dict__, "error": error})
            log.finish(rid, done, finished=at + timedelta(seconds=2))
    finally:
        store.close()
    return config


def test_an_asleep_guard_names_its_failing_canary_not_the_control_that_passed(tmp_path: Path) -> None:
    config = _setup(tmp_path, [("fake-url", "reject", "leaked", 10, None), ("real-url", "accept", "passed", 5, None)])
    result = CliRunner().invoke(main, ["--config", str(config), "status"])
    row = next(line for line in result.stdout.splitlines() if line.startswith("citation"))
    guard, status, _organic, _canary, _rate, last, _reason = re.split(r"\s{2,}", row, maxsplit=6)
    assert (guard, status) == ("citation", "ASLEEP"), result.stdout
    assert last == "fake-url leaked", row
    doc = json.loads(CliRunner().invoke(main, ["--config", str(config), "status", "--json"]).stdout)
    assert doc["guards"][0]["last_verdict"] == "passed"  # the contract's field: the latest run, as it was


def test_status_names_why_the_agent_could_not_be_used(tmp_path: Path) -> None:
    why = "the agent is unreachable at http://127.0.0.1:8700/ask: [Errno 111] Connection refused"
    config = _setup(tmp_path, [("fake-url", "reject", "error", 10, why), ("real-url", "accept", "error", 9, why)])
    result = CliRunner().invoke(main, ["--config", str(config), "status"])
    row = next(line for line in result.stdout.splitlines() if line.startswith("citation"))
    assert "INCONCLUSIVE" in row, result.stdout
    assert "http://127.0.0.1:8700/ask" in row and "Connection refused" in row, row
