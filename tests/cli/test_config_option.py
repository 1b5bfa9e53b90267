"""``--config PATH`` is one global option: every command and sub-command takes it, before or after its name."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from canary.cli.main import main


def command_paths(group: click.Group = main, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every runnable command, as the names typed to reach it (``('service', 'install')``)."""
    paths: list[tuple[str, ...]] = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        if isinstance(command, click.Group):
            paths += command_paths(command, (*prefix, name))
        else:
            paths.append((*prefix, name))
    return paths


def placements(path: tuple[str, ...]) -> list[list[str]]:
    """``--config X`` before the first name, after each name, and last."""
    option = ["--config", "elsewhere/canary.toml"]
    return [[*path[:i], *option, *path[i:]] for i in range(len(path) + 1)]


PATHS = command_paths()


def test_the_tree_holds_the_nested_commands() -> None:
    assert {("service", "install"), ("service", "status"), ("alerts", "test"), ("init",),
            ("templates",), ("check",)} <= set(PATHS)


@pytest.mark.parametrize("path", PATHS, ids=["-".join(p) for p in PATHS])
def test_every_command_takes_config_in_every_position(path: tuple[str, ...]) -> None:
    for args in placements(path):
        result = CliRunner().invoke(main, [*args, "--help"])
        assert result.exit_code == 0, f"canary {' '.join(args)} --help: {result.output}"
        assert "No such option" not in result.output


def _broken(tmp_path: Path) -> Path:
    """A canary.toml elsewhere whose one problem names it."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    config = folder / "canary.toml"
    config.write_text("defs = []\n[logs]\npaths = []\nformt = 'text'\n")
    return config


@pytest.mark.parametrize("args", [
    ["check", "--config", "{c}"], ["--config", "{c}", "check"],
    ["status", "--config", "{c}"], ["audit", "--config", "{c}"],
    ["service", "--config", "{c}", "uninstall"], ["service", "uninstall", "--config", "{c}"],
    ["service", "--config", "{c}", "status"], ["service", "status", "--config", "{c}"],
    ["service", "--config", "{c}", "install", "--dry-run"], ["service", "install", "--dry-run", "--config", "{c}"],
    ["alerts", "--config", "{c}", "test"], ["alerts", "test", "--config", "{c}"],
    ["mute", "a", "--for", "1h", "--config", "{c}"], ["unmute", "--config", "{c}", "a"],
    ["run", "--config", "{c}"], ["collect", "--once", "--config", "{c}"],
])
def test_the_config_given_anywhere_is_the_one_read(tmp_path: Path, args: list[str]) -> None:
    config = _broken(tmp_path)
    Path("canary.toml").write_text("defs = []\n")  # the one used if --config were ignored: valid
    result = CliRunner().invoke(main, [a.format(c=config) for a in args])
    assert result.exit_code == 2, result.output
    assert "formt" in result.stderr and "canary.toml" in result.stderr


def test_init_writes_the_config_named_by_config(tmp_path: Path) -> None:
    target = tmp_path / "agent" / "canary.toml"
    target.parent.mkdir()
    for args in (["init", "--config", str(target), "--yes"], ["--config", str(target), "init", "--yes"]):
        result = CliRunner().invoke(main, [*args, "--agent-url", "http://127.0.0.1:9/ask"])
        assert result.exit_code == 0, result.output
        assert target.is_file()
        assert not Path("canary.toml").exists()


def test_init_refuses_a_config_and_a_dir_that_disagree(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["init", "--yes", "--dir", "a", "--config", "b/canary.toml"])
    assert result.exit_code == 2
    assert "--dir" in result.stderr and "--config" in result.stderr


def test_templates_takes_config_and_reads_no_config(tmp_path: Path) -> None:
    config = _broken(tmp_path)
    for args in (["templates", "--config", str(config)], ["--config", str(config), "templates"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        assert "citation" in result.stdout
