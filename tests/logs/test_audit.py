"""``canary audit`` over real files: rotated and gzipped copies, windows, JSON, exit codes."""

from __future__ import annotations

import gzip
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from canary.cli.main import main
from canary.config.settings import load_config
from canary.demo.sample import FIRINGS, write_demo
from canary.logs.audit import audit

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def write_setup(root: Path, *, fmt: str = "text") -> Path:
    (root / "defs").mkdir()
    if fmt == "text":
        (root / "defs" / "citation.toml").write_text(
            "[guard]\nname = 'citation'\nmatch = 'CitationGuard: rejected'\n"
        )
        (root / "defs" / "date.toml").write_text("[guard]\nname = 'date'\nmatch = 'DateGuard: rejected'\n")
        activity = "activity = 'task finished'"
    else:
        (root / "defs" / "citation.toml").write_text(
            "[guard]\nname = 'citation'\nmatch = { event = 'guard_reject', guard = 'citation' }\n"
        )
        (root / "defs" / "date.toml").write_text(
            "[guard]\nname = 'date'\nmatch = { event = 'guard_reject', guard = 'date' }\n"
        )
        activity = "activity = { event = 'task_finished' }"
    config = root / "canary.toml"
    config.write_text(
        f"defs = ['defs/*.toml']\n[logs]\npaths = ['logs/agent.log']\nformat = '{fmt}'\n{activity}\n"
    )
    (root / "logs").mkdir()
    return config


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_audit_reads_live_rotated_and_gzipped_files_once(tmp_path: Path) -> None:
    config_path = write_setup(tmp_path)
    logs = tmp_path / "logs"
    old = NOW - timedelta(hours=30)
    with gzip.open(logs / "agent.log.2.gz", "wt") as f:
        f.write(f"{stamp(old)} WARN CitationGuard: rejected a\n" * 4)
    (logs / "agent.log.1").write_text(f"{stamp(NOW - timedelta(hours=5))} WARN CitationGuard: rejected b\n")
    (logs / "agent.log").write_text(
        f"{stamp(NOW - timedelta(hours=1))} INFO task finished\n"
        f"{stamp(NOW - timedelta(minutes=5))} WARN CitationGuard: rejected c\n"
        "CitationGuard: rejected with no stamp\n"
        "a partial last line CitationGuard: rejected"
    )
    # A hard link is the same file under another name: read once.
    os.link(logs / "agent.log.1", logs / "agent.log-20261128")
    config = load_config(str(config_path))
    report = audit(config, now=NOW)
    by = {g.guard: g for g in report.guards}
    assert by["citation"].firings == 7
    assert by["citation"].first == old
    assert by["citation"].last == NOW - timedelta(minutes=5)
    assert by["date"].firings == 0
    assert by["date"].flag == "asleep"
    assert report.activity == 1
    assert report.lines == 4 + 1 + 3


def test_window_uses_the_lines_own_time_and_reports_untimed(tmp_path: Path) -> None:
    config_path = write_setup(tmp_path)
    (tmp_path / "logs" / "agent.log").write_text(
        f"{stamp(NOW - timedelta(hours=30))} WARN CitationGuard: rejected old\n"
        f"{stamp(NOW - timedelta(hours=2))} WARN CitationGuard: rejected new\n"
        "CitationGuard: rejected untimed\n"
        f"{stamp(NOW - timedelta(hours=3))} WARN DateGuard: rejected new\n"
    )
    config = load_config(str(config_path))
    report = audit(config, since=NOW - timedelta(hours=24), now=NOW)
    by = {g.guard: g for g in report.guards}
    assert (by["citation"].firings, by["citation"].untimed) == (1, 1)
    assert by["date"].firings == 1
    assert report.asleep == []


def test_jsonl_logs_with_garbage_lines(tmp_path: Path) -> None:
    config_path = write_setup(tmp_path, fmt="jsonl")
    lines = [
        {"ts": stamp(NOW), "event": "guard_reject", "guard": "citation", "url": "x"},
        {"ts": stamp(NOW), "event": "task_finished"},
        {"ts": stamp(NOW), "event": "guard_reject", "guard": "quote"},
    ]
    body = "\n".join(json.dumps(x) for x in lines) + "\n{not json guard_reject citation\n"
    (tmp_path / "logs" / "agent.log").write_bytes(body.encode() + b"\xff\xfe\n")
    report = audit(load_config(str(config_path)), now=NOW)
    by = {g.guard: g for g in report.guards}
    assert by["citation"].firings == 1
    assert by["date"].firings == 0
    assert report.activity == 1


def test_cli_audit_json_and_exit_codes(tmp_path: Path) -> None:
    config_path = write_setup(tmp_path)
    (tmp_path / "logs" / "agent.log").write_text(
        f"{stamp(NOW)} WARN CitationGuard: rejected\n{stamp(NOW)} WARN DateGuard: rejected\n"
    )
    runner = CliRunner()
    result = runner.invoke(main, ["--config", str(config_path), "audit", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [g["firings"] for g in doc["guards"]] == [1, 1]
    assert doc["since"] is None and doc["lines"] == 2
    (tmp_path / "logs" / "agent.log").write_text(
        f"{stamp(NOW)} WARN CitationGuard: rejected\n{stamp(NOW)} INFO task finished\n")
    result = runner.invoke(main, ["--config", str(config_path), "audit"])
    assert result.exit_code == 1
    assert "ASLEEP" in result.stdout and "date" in result.stdout
    result = runner.invoke(main, ["--config", str(config_path), "audit", "--since", "yesterday"])
    assert result.exit_code == 2
    assert "--since" in result.stderr
    result = runner.invoke(main, ["--config", str(config_path), "audit", "--since", "1h", "--window", "2h"])
    assert result.exit_code == 2


def test_audit_with_no_readable_log_exits_3(tmp_path: Path) -> None:
    config_path = write_setup(tmp_path)
    result = CliRunner().invoke(main, ["--config", str(config_path), "audit"])
    assert result.exit_code == 3
    assert "no log file matches" in result.stderr


def test_demo_audit_shows_the_sample_counts(tmp_path: Path) -> None:
    config_path = write_demo(tmp_path / "demo", now=NOW)
    report = audit(load_config(str(config_path)), now=NOW)
    assert {g.guard: g.firings for g in report.guards} == FIRINGS
    assert sorted(report.asleep) == ["date", "version"]
    assert len(report.files) == 3
    windowed = audit(load_config(str(config_path)), since=NOW - timedelta(hours=24), now=NOW)
    assert 0 < sum(g.firings for g in windowed.guards) < sum(FIRINGS.values())


def test_demo_command(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["demo", "--sample-audit", "--json"])
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert {g["guard"]: g["firings"] for g in doc["guards"]} == FIRINGS


def test_audit_counts_every_line_of_an_anchored_alternation_like_grep(tmp_path: Path) -> None:
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "g.toml").write_text(
        "[guard]\nname = 'g'\nmatch = '^(?:CitationGuard|QuoteGuard)\\b'\n"
    )
    config = tmp_path / "canary.toml"
    config.write_text("defs = ['defs/*.toml']\n[logs]\npaths = ['logs/agent.log']\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "agent.log").write_text(
        "CitationGuard: rejected url=https://a.example.org\n"
        "QuoteGuard: rejected quote\n"
        "INFO planner CitationGuard is loaded\n"
        "CitationGuard rejected again\n"
    )
    report = audit(load_config(path=config), now=NOW)
    assert {g.guard: g.firings for g in report.guards} == {"g": 3}


def test_audit_warns_of_a_line_cut_at_max_line_naming_file_and_offset(tmp_path: Path) -> None:
    config_path = write_setup(tmp_path)
    log = tmp_path / "logs" / "agent.log"
    head = f"{stamp(NOW)} WARN CitationGuard: rejected a\n"
    log.write_text(head + "x" * (3 << 20) + " DateGuard: rejected\n" + head)
    runner = CliRunner()
    result = runner.invoke(main, ["--config", str(config_path), "audit", "--json"])
    document = json.loads(result.stdout)
    firings = {g["guard"]: g["firings"] for g in document["guards"]}
    assert firings == {"citation": 2, "date": 0}
    (warning,) = document["files"][0]["warnings"]
    assert str(log) in warning and f"offset {len(head)}" in warning
    assert f"warning: {warning}" in result.stderr


def test_audit_over_many_reads_counts_lines_and_activity_like_a_per_line_search(
    tmp_path: Path,
) -> None:
    import random
    import re

    config_path = write_setup(tmp_path)
    rng = random.Random(7)
    kinds = [
        "INFO task finished steps=3",
        "INFO task finished, then task finished again",
        "WARN CitationGuard: rejected url=x after task finished",
        "WARN DateGuard: rejected date=2020-01-01",
        "DEBUG CitationGuard: accepted urls=2",
        "INFO tool result " + "w" * 200,
        "INFO résumé task finished",
        "INFO task finished\r",
        "",
    ]
    body = "".join(
        f"{stamp(NOW - timedelta(seconds=i))} {rng.choice(kinds)}\n" for i in range(40_000)
    )
    log = tmp_path / "logs" / "agent.log"
    log.write_text(body, encoding="utf-8", newline="")
    assert log.stat().st_size > 2 << 20  # several reads, lines straddling them
    lines = body.split("\n")[:-1]
    want_activity = sum(1 for line in lines if "task finished" in line)
    want = {
        name: sum(1 for line in lines if re.search(pattern, line.removesuffix("\r")))
        for name, pattern in (("citation", "CitationGuard: rejected"), ("date", "DateGuard: rejected"))
    }
    config = load_config(str(config_path))
    for since in (None, NOW - timedelta(days=1)):
        report = audit(config, since=since, now=NOW)
        assert report.lines == len(lines)
        assert report.activity == want_activity
        assert {g.guard: g.firings for g in report.guards} == want


def test_a_guard_silent_while_the_agent_was_idle_is_idle_not_asleep(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """No activity line in the window: a zero proves nothing, and no row says ASLEEP beside the
    sentence that says so."""
    config_path = write_setup(tmp_path)
    (tmp_path / "logs" / "agent.log").write_text(
        f"{stamp(NOW - timedelta(hours=2))} WARN CitationGuard: rejected a\n"
        f"{stamp(NOW - timedelta(hours=1))} INFO cache warmed\n"
    )
    report = audit(load_config(str(config_path)), now=NOW)
    by = {g.guard: g for g in report.guards}
    assert (by["citation"].flag, by["date"].flag) == (None, "idle")
    assert report.asleep == []
    monkeypatch.chdir(tmp_path)
    text = CliRunner().invoke(main, ["audit"])
    assert text.exit_code == 1, text.output  # nothing proven
    assert "ASLEEP" not in text.output
    row = next(line for line in text.output.splitlines() if line.startswith("date"))
    assert row.endswith("idle: no agent activity"), row
    assert ("Inconclusive: date: no agent activity in the audited lines (no line matched [logs] activity), "
            "so its zero proves nothing either way.") in text.output
    doc = json.loads(CliRunner().invoke(main, ["audit", "--json"]).stdout)
    assert [g["flag"] for g in doc["guards"]] == [None, "idle"]


def test_a_since_after_now_is_bad_usage_not_an_empty_window(tmp_path: Path) -> None:
    """An inverted window counts nothing and would flag every guard: it is refused, saying why."""
    config_path = write_setup(tmp_path)
    (tmp_path / "logs" / "agent.log").write_text(f"{stamp(NOW)} INFO task finished\n")
    result = CliRunner().invoke(main, ["--config", str(config_path), "audit", "--since", "2099-01-01"])
    assert result.exit_code == 2, result.output
    assert "--since: 2099-01-01 is after now (" in result.stderr, result.stderr
    negative = CliRunner().invoke(main, ["--config", str(config_path), "audit", "--window", "0s"])
    assert negative.exit_code == 2, negative.output


def test_an_empty_log_is_said_to_hold_no_line_not_to_be_the_wrong_file(tmp_path: Path) -> None:
    config_path = write_setup(tmp_path)
    (tmp_path / "logs" / "agent.log").write_text("")
    report = audit(load_config(str(config_path)), now=NOW)
    assert {g.guard: g.unread for g in report.guards}["date"] == (
        "no log line was read: the files [logs] paths matches hold none yet")


def test_a_line_stamped_ahead_of_the_clock_is_counted_now_with_a_warning(tmp_path: Path) -> None:
    """As the daemon does: counted at the audit's moment, and said, naming the file and offset."""
    config_path = write_setup(tmp_path)
    log = tmp_path / "logs" / "agent.log"
    first = f"{stamp(NOW)} INFO task finished\n"
    log.write_text(first + f"{stamp(NOW + timedelta(hours=2))} WARN DateGuard: rejected y\n")
    report = audit(load_config(str(config_path)), now=NOW)
    date = {g.guard: g for g in report.guards}["date"]
    assert (date.firings, date.last) == (1, NOW)
    (file,) = report.files
    assert file.warnings == [f"{log}: a line at offset {len(first)} is stamped {(NOW + timedelta(hours=2)).isoformat()}, "
                             "more than 300 s ahead of this clock (clock skew?); such lines count at the time "
                             "they are read"], file.warnings
