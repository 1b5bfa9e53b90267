"""``canary status`` of a guard whose definition file is broken: its status is the store's last record,
and its firing counts are what the store holds now, never the figures of that old record."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner, Result
from sqlalchemy import insert

from canary.cli.main import main
from canary.store.engine import Store
from canary.store.tables import Transition
from tests.cli.test_status_faults import GUARD, heartbeat

#: The reason of the last transition, two hours old: its figure is stale by now.
OLD_REASON = "7 firing(s) in the last 1d, last at 08:00"


def project(tmp_path: Path) -> Path:
    """Two guards, four of quote's lines counted into the store by ``canary collect --once`` (one of them
    30 hours old, inside quote's window of 2d), and an old transition of quote whose reason carries a
    figure."""
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "citation.toml").write_text(GUARD.format(name="citation"))
    (tmp_path / "defs" / "quote.toml").write_text(GUARD.format(name="quote").replace("'24h'", "'2d'"))
    now = datetime.now(UTC)
    stamps = [now - timedelta(hours=30), *(now - timedelta(minutes=n) for n in (3, 2, 1))]
    (tmp_path / "agent.log").write_text("".join(f"{t.strftime('%Y-%m-%dT%H:%M:%SZ')} quote: rejected answer {n}\n"
                                                for n, t in enumerate(stamps)))
    (tmp_path / "canary.toml").write_text(
        f"defs = ['defs/*.toml']\n[logs]\npaths = ['{tmp_path / 'agent.log'}']\n[alerts]\ndesktop = false\n"
        f"[store]\nurl = 'sqlite:///{tmp_path / 'c.db'}'\n"
    )
    collected = cli("collect", "--once", "--config", str(tmp_path / "canary.toml"))
    assert collected.exit_code == 0 and "quote=4" in collected.stdout, collected.output
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    with store.engine.begin() as conn:
        conn.execute(insert(Transition), [{
            "guard": "quote", "at": datetime.now(UTC) - timedelta(hours=2), "status": "alive",
            "previous": "new", "reason": OLD_REASON, "evidence": None}])
    store.close()
    heartbeat(tmp_path)
    return tmp_path


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def status(path: Path, *args: str) -> Result:
    return cli("status", "--config", str(path / "canary.toml"), *args)


def quote_row(path: Path) -> tuple[dict[str, object], str]:
    """quote's row of ``canary status --json`` and its line of the text table, both exit 2."""
    done = status(path, "--json")
    assert done.exit_code == 2, done.output
    row = next(g for g in json.loads(done.stdout)["guards"] if g["guard"] == "quote")
    text = status(path)
    assert text.exit_code == 2, text.output
    return row, next(line for line in text.stdout.splitlines() if line.startswith("quote"))


def test_a_broken_guard_shows_the_stores_count_now_not_its_last_records(tmp_path: Path) -> None:
    path = project(tmp_path)
    quote = path / "defs" / "quote.toml"
    quote.write_text(quote.read_text().replace("every = '6h'", "evry = '6h'"))  # its window of 2d still reads

    row, line = quote_row(path)
    assert (row["organic_firings"], row["canary_firings"]) == (4, 0), row
    assert row["status"] == "alive"  # the daemon's last word, said to be one
    assert "7 firing" not in str(row["reason"]) and "7 firing" not in line, line
    assert "last recorded: alive at" in str(row["reason"]) and "over the last 2d" in str(row["reason"])
    assert line.split()[:4] == ["quote", "ALIVE", "4", "0"], line


def test_a_broken_guard_that_names_no_window_is_counted_over_the_default_one(tmp_path: Path) -> None:
    path = project(tmp_path)
    quote = path / "defs" / "quote.toml"
    quote.write_text(quote.read_text().replace("window = '2d'\n", "").replace("every = '6h'", "evry = '6h'"))

    row, _line = quote_row(path)
    assert (row["organic_firings"], row["canary_firings"]) == (3, 0), row  # the 30-hour-old one is out
    assert "over the last 1d" in str(row["reason"]), row["reason"]


def test_a_broken_guard_whose_window_cannot_be_read_shows_no_count(tmp_path: Path) -> None:
    path = project(tmp_path)
    quote = path / "defs" / "quote.toml"
    quote.write_text(quote.read_text().replace("window = '2d'", "windw = '7d'"))  # which window is meant?

    row, line = quote_row(path)
    assert (row["organic_firings"], row["canary_firings"]) == (None, None), row
    assert "7 firing" not in str(row["reason"]) and "7 firing" not in line, line
    assert "window cannot be read" in str(row["reason"]), row["reason"]
    assert line.split()[:4] == ["quote", "ALIVE", "-", "-"], line
