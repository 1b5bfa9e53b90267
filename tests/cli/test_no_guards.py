"""A project whose ``defs`` name no definition file watches nothing: ``canary status`` and ``canary audit``
say so and exit 1 (nothing is proven, so nothing reads healthy), and ``canary check`` says it under its
guard count; each names the commands that propose or list guards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from canary.cli.main import main

SAID = ("no guard is defined (defs in canary.toml names no definition file), so nothing is watched: "
        "`canary init` proposes guards from the agent's logs; `canary templates` lists the bundled canaries")


@pytest.fixture
def empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "agent.log").write_text("2026-12-07T10:00:00Z task finished\n")
    path = tmp_path / "canary.toml"
    path.write_text(f"defs = []\n[logs]\npaths = ['agent.log']\n"
                    f"[store]\nurl = 'sqlite:///{(tmp_path / 'canary.db').as_posix()}'\n")
    return path


def test_status_of_a_project_with_no_guard_says_nothing_is_watched_and_exits_1(empty: Path) -> None:
    result = CliRunner().invoke(main, ["status", "--json"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["guards"] == []
    assert {"kind": "no_guards", "message": SAID} in doc["problems"], doc["problems"]
    text = CliRunner().invoke(main, ["status"])
    assert text.exit_code == 1
    assert text.stdout.splitlines()[0] == SAID


def test_audit_of_a_project_with_no_guard_says_nothing_was_counted_and_exits_1(empty: Path) -> None:
    result = CliRunner().invoke(main, ["audit"])
    assert result.exit_code == 1, result.output
    assert SAID in result.output
    assert CliRunner().invoke(main, ["audit", "--json"]).exit_code == 1


def test_check_says_it_under_the_guard_count(empty: Path) -> None:
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 0, result.output  # a config with no guard yet is valid: init writes one
    lines = result.stdout.splitlines()
    assert lines[lines.index("guards   0") + 1] == f"  ({SAID})"
