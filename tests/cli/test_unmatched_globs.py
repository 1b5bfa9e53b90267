"""A log glob that matches no file is said out loud by ``canary init --logs`` and ``canary check``."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from canary.cli.init import init_command
from canary.cli.main import main


def test_init_warns_when_a_logs_glob_matches_no_file_and_does_not_send_the_user_to_run(
    tmp_path: Path,
) -> None:
    present = tmp_path / "agent.log"
    present.write_text("2026-11-29T10:00:00Z INFO agent task finished id=1\n")
    missing = str(tmp_path / "logz" / "*.log")
    result = CliRunner().invoke(init_command, ["--yes", "--agent-url", "http://127.0.0.1:9/ask",
                                               "--logs", missing, "--logs", str(present),
                                               "--dir", str(tmp_path / "p")])
    assert result.exit_code == 0, result.output
    assert f"warning: --logs {missing!r} matches no file" in result.stderr
    assert str(present) not in result.stderr  # the glob that matches is not flagged
    assert "3. canary run" not in result.output
    assert "fix [logs] paths" in result.output


def test_check_warns_for_each_logs_glob_that_matches_no_file(tmp_path: Path) -> None:
    (tmp_path / "agent.log").write_text("x\n")
    (tmp_path / "canary.toml").write_text(
        "defs = []\n[logs]\npaths = ['agent.log', 'nowhere/*.log']\n")
    result = CliRunner().invoke(main, ["check", "--config", str(tmp_path / "canary.toml")])
    assert result.exit_code == 0, result.output
    assert "[logs] paths: 'nowhere/*.log' matches no file" in result.stderr
    assert "agent.log" not in result.stderr
