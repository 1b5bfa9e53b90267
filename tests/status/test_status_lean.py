"""The lean status path: the few runs it reads decide exactly what every run would, and
``canary status`` answers from a real SQLite file without importing SQLAlchemy."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlmodel import col

from canary.cli import quick
from canary.config import fabrications, positions, settings, urls
from canary.config.settings import Config, load_config
from canary.runs.runlog import RunLog
from canary.status.evaluate import CanaryFact, GuardFacts, RunFact, evaluate
from canary.status.facts import canary_period
from canary.status.overview import evaluate_all, status_document, status_for
from canary.store import reads
from canary.store.engine import Store
from canary.store.migrations import SCHEMA_VERSION
from canary.store.tables import Run
from tests.helpers_store import record

NOW = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
VERDICTS = ["caught", "caught", "leaked", "unlogged", "fired_but_leaked", "error", "not_injected", "ambiguous"]
CONTROL_VERDICTS = ["passed", "false_rejection", "error", "ambiguous"]


def write_config(tmp_path: Path) -> Config:
    (tmp_path / "defs").mkdir(exist_ok=True)
    for name, window in (("alpha", "24h"), ("beta", "6h"), ("gamma", "3d")):
        (tmp_path / "defs" / f"{name}.toml").write_text(
            f"[guard]\nname = '{name}'\nmatch = '{name}: rejected'\nwindow = '{window}'\ngrace = '30m'\n"
            "[[canary]]\nname = 'one'\nevery = '2h'\nprompt = 'Read {fixture_url}.'\n"
            "fixture = '<p>{true_number}</p>'\ninject = ['a {fake_number}', 'b {fake_number}', 'c']\n"
            "leak = '{fake_number}'\n"
            "[[canary]]\nname = 'two'\nevery = '6h'\nprompt = 'Read {fixture_url}.'\n"
            "fixture = '<p>{true_number}</p>'\ninject = 'd {fake_number}'\nleak = '{fake_number}'\n"
            "[[canary]]\nname = 'ctl'\nevery = '12h'\nexpect = 'accept'\nprompt = 'Read {fixture_url}.'\n"
            "fixture = '<p>{true_number}</p>'\ninject = 'e {true_number}'\ngrounded = '{true_number}'\n"
        )
    (tmp_path / "canary.toml").write_text(
        f"defs = ['defs/*.toml']\n[logs]\npaths = []\n[store]\nurl = 'sqlite:///{tmp_path / 'c.db'}'\n"
    )
    return load_config(str(tmp_path / "canary.toml"))


def seed_runs(store: Store, rng: random.Random, n: int) -> None:
    """Runs of every guard and canary over ten days; many share a start time (ties)."""
    log = RunLog(store)
    for i in range(n):
        guard = rng.choice(["alpha", "beta", "gamma"])
        canary = rng.choice(["one", "one", "two", "ctl", "gone"])  # "gone" is no longer declared
        expect = "accept" if canary == "ctl" else "reject"
        variant = rng.randrange(3) if canary == "one" else 0
        at = NOW - timedelta(minutes=15 * rng.randrange(960))
        rid = log.start(guard=guard, canary=canary, variant=variant, expect=expect, nonce=f"n{i}",
                        started=at, injected_text="x", leak_text="y")
        if rng.random() < 0.03:
            continue  # still in flight
        verdict = rng.choice(CONTROL_VERDICTS if expect == "accept" else VERDICTS)
        log.finish(rid, record(verdict, evidence=f"line of run {i}" if rng.random() < 0.5 else None),
                   finished=at)


def every_run_facts(store: Store, config: Config, lean: GuardFacts) -> GuardFacts:
    """The same facts with every finished run of the guard, read through the ORM, as before."""
    guard = next(g for g in config.guards if g.name == lean.guard)
    with store.engine.connect() as conn:
        rows = conn.execute(
            select(Run).where(col(Run.guard) == guard.name, col(Run.verdict).is_not(None))
            .order_by(col(Run.started).desc(), col(Run.id).desc())
        ).all()
    runs = [RunFact(r.canary, r.variant, r.expect, str(r.verdict), r.started, r.evidence) for r in rows]
    canaries = [CanaryFact(c.name, canary_period(c, NOW), tuple(r for r in runs if r.canary == c.name))
                for c in guard.canaries]
    return GuardFacts(**{**lean.__dict__, "canaries": canaries})


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("later", [timedelta(0), timedelta(hours=5), timedelta(days=2)])
def test_the_runs_read_decide_what_every_run_decides(tmp_path: Path, seed: int, later: timedelta) -> None:
    config = write_config(tmp_path)
    store = Store(config.store.url)
    seed_runs(store, random.Random(seed), 300)
    now = NOW + later
    lean = evaluate_all(store, config, now=now, readable=True)
    assert len(lean) == 3
    for facts, status in lean:
        full = every_run_facts(store, config, facts)
        assert sum(len(c.runs) for c in facts.canaries) < sum(len(c.runs) for c in full.canaries)
        assert status == evaluate(full, now=now), facts.guard


def test_the_raw_sqlite_reader_and_the_engine_give_one_document(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    store = Store(config.store.url)
    seed_runs(store, random.Random(7), 200)
    with reads.open_sqlite(config.store.url) as reader:
        assert reader is not None
        raw = status_document(reader, config, now=NOW, readable=True)
    assert raw == status_document(store, config, now=NOW, readable=True)
    assert [g["guard"] for g in raw["guards"]] == ["alpha", "beta", "gamma"]


def test_the_lean_queries_read_the_schema_the_store_writes() -> None:
    assert reads.SCHEMA_VERSION == SCHEMA_VERSION


def test_a_store_not_made_yet_is_read_as_empty_and_never_created(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    assert not (tmp_path / "c.db").exists()
    with reads.open_sqlite(config.store.url) as reader:
        assert reader is None
    doc = status_for(config, now=NOW)
    assert not (tmp_path / "c.db").exists()  # status never creates a store (issue 15)
    assert [g["guard"] for g in doc["guards"]] == ["alpha", "beta", "gamma"]
    assert doc["daemon"]["running"] is False


def test_a_store_of_an_older_schema_is_migrated_not_read_raw(tmp_path: Path) -> None:
    import sqlite3

    config = write_config(tmp_path)
    Store(config.store.url).close()
    with sqlite3.connect(tmp_path / "c.db") as db:
        db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    with reads.open_sqlite(config.store.url) as reader:
        assert reader is None
    status_for(config, now=NOW)
    with reads.open_sqlite(config.store.url) as reader:
        assert reader is not None


@pytest.mark.slow
def test_canary_status_answers_without_importing_sqlalchemy_or_the_log_matchers(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    store = Store(config.store.url)
    seed_runs(store, random.Random(3), 100)
    expected = status_document(store, config, now=datetime.now(UTC))
    store.close()
    probe = (
        "import sys, runpy\n"
        "sys.argv = ['canary', '--config', sys.argv[1], 'status', '--json']\n"
        "try:\n"
        "    runpy.run_module('canary.cli.main', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    print('EXIT', exc.code, sorted(m for m in sys.modules if m.split('.')[0] in "
        "('sqlalchemy', 'sqlmodel', 'pydantic', 'httpx', 'textual', 'hyperscan') "
        "or m.startswith(('canary.logs', 'collectors.scan'))), file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CANARY_CONFIG"}
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "canary.toml")], capture_output=True,
                         text=True, env=env, timeout=60, check=False)
    assert out.stderr.startswith("EXIT ") and out.stderr.rstrip().endswith(" []"), out.stderr
    doc = json.loads(out.stdout)
    assert [(g["guard"], g["status"], g["reason"]) for g in doc["guards"]] == [
        (g["guard"], g["status"], g["reason"]) for g in expected["guards"]
    ]


#: What the console script's ``canary status`` must not load on a sound config and store: the ORM, the
#: log matchers and the TUI; ``dataclasses`` with the ``inspect``, ``ast`` and ``dis`` it brings (its
#: values are ``canary.records.frozen``); and what only a fault needs (a did-you-mean, a TOML syntax
#: error's place, the matcher's rules for a slow-pattern warning, the daemon's lock) and the patterns
#: of what this config does not write (compiled by ``re`` on first use: none is in ``re``'s cache).
OFF_THE_STATUS_PATH = (
    "sqlalchemy", "sqlmodel", "pydantic", "httpx", "textual", "hyperscan", "click", "canary.logs",
    "collectors.scan", "collectors.rules", "dataclasses", "inspect", "ast", "dis", "tokenize", "difflib",
    "threading", "canary.config.tomlsyntax",
)


UNCOMPILED = (settings._ENV_NAME, settings._MACHINE, urls._SECRET_PARAMETER, urls._USERINFO,
              fabrications.TOOL_NAME, positions._HEADER, quick._STYLE)


def test_the_console_status_loads_nothing_the_status_document_does_not_need(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    store = Store(config.store.url)
    seed_runs(store, random.Random(5), 60)
    store.close()
    probe = (
        "import sys\n"
        "from canary.cli.entry import main\n"
        "sys.argv = ['canary', 'status', '--json', '--config', sys.argv[1]]\n"
        "try:\n"
        "    main()\n"
        "finally:\n"
        f"    off = {OFF_THE_STATUS_PATH!r}\n"
        "    print('LOADED', sorted(m for m in sys.modules if m in off or m.startswith(tuple(o + '.' for o in off))),"
        " file=sys.stderr)\n"
        "    import re\n"
        f"    print('COMPILED', sorted(p for p in {UNCOMPILED!r} if any(k[1] == p for k in re._cache)), file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CANARY_CONFIG"}
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "canary.toml")], capture_output=True,
                         text=True, env=env, timeout=60, check=False)
    assert "LOADED []\n" in out.stderr and out.stderr.rstrip().endswith("COMPILED []"), out.stderr
    assert [g["guard"] for g in json.loads(out.stdout)["guards"]] == ["alpha", "beta", "gamma"]


def test_the_run_queries_walk_indexes_not_the_table(tmp_path: Path) -> None:
    import sqlite3

    config = write_config(tmp_path)
    Store(config.store.url).close()
    params = {"guard": "alpha", "canary": "one", "variant": 0, "since": "2026-11-28 00:00:00.000000",
              "definition": "0123456789abcdef", "legacy": 0}
    with sqlite3.connect(tmp_path / "c.db") as db:
        for sql in (reads._VARIANTS, reads._PAIR, reads._PAIR_ANY, reads._WINDOW, reads._STAMPED):
            plan = " / ".join(str(row[-1]) for row in db.execute("EXPLAIN QUERY PLAN " + sql, params))
            assert "SCAN runs" not in plan, plan
            assert "USING" in plan and "INDEX" in plan, plan
