"""A log written before collection starts: the window is read back, and status and audit agree."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner

from canary.cli.main import main


def stamp(hours_ago: float) -> str:
    return (datetime.now(UTC) - timedelta(hours=hours_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_status_and_audit_count_the_window_read_back_on_first_sight(tmp_path: Path) -> None:
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "citation.toml").write_text(
        "[guard]\nname = 'citation'\nmatch = 'CitationGuard: rejected'\n"
    )
    db = tmp_path / "canary.db"
    config = tmp_path / "canary.toml"
    config.write_text(
        f"defs = ['defs/*.toml']\n[logs]\npaths = ['{tmp_path / 'logs' / 'agent.log'}']\n"
        f"[store]\nurl = 'sqlite:///{db}'\n[alerts]\ndesktop = false\n"
    )
    (tmp_path / "logs").mkdir()
    log = tmp_path / "logs" / "agent.log"
    old = "".join(f"{stamp(30)} INFO step {i}\n" for i in range(2000))
    log.write_text(
        old + f"{stamp(30)} WARN CitationGuard: rejected 30h\n"
        f"{stamp(20)} WARN CitationGuard: rejected 20h\n{stamp(1)} WARN CitationGuard: rejected 1h\n"
    )
    runner = CliRunner()
    for _ in range(2):  # the second run resumes from the stored position: nothing is read back again
        result = runner.invoke(main, ["--config", str(config), "collect", "--once"])
        assert result.exit_code == 0, result.output
    with sqlite3.connect(db) as conn:
        rows = sorted(r[0] for r in conn.execute("SELECT line FROM firings"))
        (offset,) = conn.execute("SELECT \"offset\" FROM firings ORDER BY \"offset\" LIMIT 1").fetchone()
    assert sorted(r.rsplit(" ", 1)[1] for r in rows) == ["1h", "20h"]
    assert offset > len(old)  # what lies before the window was not read
    status = json.loads(runner.invoke(main, ["--config", str(config), "status", "--json"]).stdout)
    audit = json.loads(runner.invoke(main, ["--config", str(config), "audit", "--window", "24h",
                                            "--json"]).stdout)
    assert [g["organic_firings"] for g in status["guards"]] == [2]
    assert [g["firings"] for g in audit["guards"]] == [2]
