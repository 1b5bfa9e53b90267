"""The command line: every command has help, and the thin commands do what they say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from canary.cli.main import main


def all_commands() -> list[str]:
    return main.list_commands(click.Context(main))


@pytest.mark.parametrize("name", all_commands())
def test_every_command_has_help(name: str) -> None:
    result = CliRunner().invoke(main, [name, "--help"])
    assert result.exit_code == 0
    command = main.get_command(click.Context(main), name)
    assert isinstance(command, click.Command)
    assert command.help and len(command.help) > 20


def test_check_lists_problems_and_exits_2(tmp_path: Path) -> None:
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "a.toml").write_text("[guard]\nname = 'a'\nmatch = '(unclosed'\nwindw = '1h'\n")
    (tmp_path / "canary.toml").write_text("defs = ['defs/*.toml']\n[logs]\npaths = []\n")
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 2
    assert "a.toml" in result.stderr
    assert "windw" in result.stderr and "did you mean 'window'" in result.stderr
    assert "match" in result.stderr


def test_check_summarises_a_valid_config(tmp_path: Path) -> None:
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "a.toml").write_text("[guard]\nname = 'a'\nmatch = 'A: rejected'\n")
    (tmp_path / "canary.toml").write_text("defs = ['defs/*.toml']\n[logs]\npaths = ['x.log']\n"
                                          "correlate = 'task=(?P<id>\\w+)'\n")
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 0, result.output
    assert "A: rejected" in result.stdout
    assert "task ids 'task=(?P<id>\\\\w+)'" in result.stdout


def test_bundled_definitions_check_clean() -> None:
    from canary.locations import bundled_defs_dir

    root = bundled_defs_dir()
    Path("canary.toml").write_text(f"defs = ['{root.as_posix()}/*.toml']\n")
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 0, result.output + result.stderr
    for name in ("citation", "quote", "version", "date", "number", "denial"):
        assert name in result.stdout


def test_collect_once_counts_into_the_store(tmp_path: Path) -> None:
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "a.toml").write_text("[guard]\nname = 'a'\nmatch = 'A: rejected'\n")
    (tmp_path / "canary.toml").write_text(
        "defs = ['defs/*.toml']\n[logs]\npaths = ['x.log']\nactivity = 'task done'\n"
        f"[store]\nurl = 'sqlite:///{tmp_path / 'c.db'}'\n"
    )
    (tmp_path / "x.log").write_text("A: rejected\nnoise\ntask done\nA: rejected\n")
    result = CliRunner().invoke(main, ["collect", "--once"])
    assert result.exit_code == 0, result.output
    assert "a=2" in result.stdout
    assert "activity 24h=1" in result.stdout  # the activity line, by the status's own query
    with (tmp_path / "x.log").open("a") as f:
        f.write("A: rejected\n")
    result = CliRunner().invoke(main, ["collect", "--once"])
    assert "a=3" in result.stdout


def test_core_packages_load_no_tui_or_server() -> None:
    code = (
        "import sys, canary, canary.cli.main, canary.store.engine, canary.logs.audit, canary.logs.collect, collectors.watch\n"
        "bad = [m for m in ('textual', 'uvicorn') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_collectors_know_nothing_of_canary() -> None:
    code = (
        "import sys, collectors.watch, collectors.tailer, collectors.scan, collectors.files\n"
        "bad = [m for m in sys.modules if m == 'canary' or m.startswith('canary.')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
