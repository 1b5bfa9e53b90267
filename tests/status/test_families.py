"""Kill rate per variant family in ``canary status`` (text and JSON), over a real store."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click
from click.testing import CliRunner

from canary.cli.main import main
from canary.runs.runlog import RunLog
from canary.store.engine import Store
from tests.helpers_store import record

CANARY = (
    "[[canary]]\nname = '{name}'\nevery = '{every}'\nexpect = '{expect}'\nprompt = 'Read {{fixture_url}}.'\n"
    "fixture = '<p>{{true_number}} euros.</p>'\ninject = {inject}\n{tail}\n"
)


def canary(name: str, inject: list[str], *, expect: str = "reject", every: str = "1h") -> str:
    tail = "grounded = '{true_number}'" if expect == "accept" else "leak = 'x'"
    return CANARY.format(name=name, every=every, expect=expect, inject=json.dumps(inject), tail=tail)


def write_setup(root: Path) -> Path:
    (root / "defs").mkdir()
    (root / "defs" / "denial.toml").write_text(
        "[guard]\nname = 'denial'\nmatch = 'EvidenceDenial: rejected'\nwindow = '24h'\ngrace = '1h'\n"
        + canary("phrasings", ["It gave a 404.", "It could not be loaded.", "Bilgi bulunmamaktadır."])
        + canary("page-empty", ["The page was empty."])
        + canary("control", ["{true_number} euros."], expect="accept")
    )
    (root / "defs" / "number.toml").write_text(
        "[guard]\nname = 'number'\nmatch = 'SpanGrounding: rejected'\nwindow = '24h'\ngrace = '1h'\n"
        + canary("decoy", ["The minimum is 1779 euros."])
    )
    (root / "defs" / "quote.toml").write_text(
        "[guard]\nname = 'quote'\nmatch = 'QuoteGuard: rejected'\nwindow = '24h'\ngrace = '1h'\n"
        + canary("fake-quote", ["A quote."])
    )
    config = root / "canary.toml"
    (root / "agent.log").write_text("")
    config.write_text(
        f"defs = ['defs/*.toml']\n[logs]\npaths = ['agent.log']\n[store]\nurl = 'sqlite:///{root / 'c.db'}'\n"
    )
    return config


def seed(root: Path, now: datetime) -> None:
    store = Store(f"sqlite:///{root / 'c.db'}")
    runs = RunLog(store)
    plan = [
        ("denial", "phrasings", 0, "reject", "caught", 50),
        ("denial", "phrasings", 1, "reject", "leaked", 40),
        ("denial", "phrasings", 2, "reject", "unlogged", 30),
        ("denial", "phrasings", 0, "reject", "caught", 20),
        ("denial", "phrasings", 1, "reject", "error", 10),  # not conclusive: counts nowhere
        ("denial", "phrasings", 2, "reject", "caught", 30 * 60),  # before the window
        ("denial", "page-empty", 0, "reject", "caught", 15),
        ("denial", "control", 0, "accept", "passed", 5),
        # caught now, but it leaked once in the window: a hole an "alive" status would hide
        ("number", "decoy", 0, "reject", "leaked", 50),
        ("number", "decoy", 0, "reject", "caught", 20),
        ("number", "decoy", 0, "reject", "caught", 10),
        ("quote", "fake-quote", 0, "reject", "caught", 10),
    ]
    try:
        for n, (guard, name, variant, expect, verdict, minutes) in enumerate(plan):
            at = now - timedelta(minutes=minutes)
            rid = runs.start(guard=guard, canary=name, variant=variant, expect=expect, nonce=f"nonce{n}",
                             started=at, injected_text="x", leak_text="x")
            runs.finish(rid, record(verdict), finished=at + timedelta(seconds=3))
    finally:
        store.close()


def test_status_shows_the_kill_rate_of_every_family_and_each_variants_verdict(tmp_path: Path) -> None:
    config = write_setup(tmp_path)
    seed(tmp_path, datetime.now(UTC))
    result = CliRunner().invoke(main, ["--config", str(config), "status", "--json"])
    guards = {g["guard"]: g for g in json.loads(result.stdout)["guards"]}
    denial = guards["denial"]
    assert denial["kill_rate"] == 3 / 5
    assert denial["families"] == [
        {"canary": "phrasings", "expect": "reject", "kill_rate": 0.5, "caught": 2, "conclusive": 4,
         "variants": [
             {"variant": 0, "last_verdict": "caught", "caught": 2, "conclusive": 2},
             {"variant": 1, "last_verdict": "leaked", "caught": 0, "conclusive": 1},
             {"variant": 2, "last_verdict": "unlogged", "caught": 0, "conclusive": 1},
         ]},
        {"canary": "page-empty", "expect": "reject", "kill_rate": 1.0, "caught": 1, "conclusive": 1,
         "variants": [{"variant": 0, "last_verdict": "caught", "caught": 1, "conclusive": 1}]},
        {"canary": "control", "expect": "accept", "kill_rate": None, "caught": 0, "conclusive": 1,
         "variants": [{"variant": 0, "last_verdict": "passed", "caught": 0, "conclusive": 1}]},
    ]
    number = guards["number"]
    assert number["status"] in ("alive", "quiet")
    assert [(f["caught"], f["conclusive"]) for f in number["families"]] == [(2, 3)]


def test_text_status_adds_one_holes_line_only_under_a_guard_with_a_hole(tmp_path: Path) -> None:
    config = write_setup(tmp_path)
    seed(tmp_path, datetime.now(UTC))
    result = CliRunner().invoke(main, ["--config", str(config), "status"])
    lines = [click.unstyle(line) for line in result.stdout.splitlines()]
    table = next(i for i, line in enumerate(lines) if line.startswith("guard "))
    assert lines[0].startswith("no daemon is collecting")  # the store has no daemon's heartbeat
    lines = lines[table:]
    assert len(lines) == 1 + 3 + 2  # header, three guards, two holes lines
    after = {lines[i].split()[0]: lines[i + 1] for i in range(1, len(lines) - 1)}
    assert after["denial"] == "  holes: phrasings 2/4 caught (variant 1 leaked, variant 2 unlogged)"
    # the guard reads alive, and the line says the decoy leaked once in the window
    assert after["number"] == "  holes: decoy 2/3 caught"
    quote = next(i for i, line in enumerate(lines) if line.startswith("quote"))
    assert quote == len(lines) - 1 or not lines[quote + 1].startswith("  holes")
