"""The commands ``canary init`` tells a user to run next carry the ``--config`` it was given, shell-quoted,
so running them as printed reads the config init wrote; with the default config they carry none."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from canary.cli.main import main
from canary.config.commandline import command_line
from canary.sentences import POINT_AT_THE_PROXY
from tests.cli.test_init import sample_log

CONFIG = "conf dir/other.toml"  # a folder with a space: the path must be quoted for a shell
#: A command init prints for the user, up to the prose that follows it; ``canary templates`` reads no config.
COMMAND = re.compile(r"canary (?:service install|daemon|run|check|audit|init|status|dashboard)\b[^\n,(#`]*")


def init(*args: str) -> Result:
    result = CliRunner().invoke(main, ["init", "--yes", "--agent-url", "http://127.0.0.1:9/ask", *args])
    assert result.exit_code == 0, result.output
    return result


def commands(text: str) -> list[str]:
    """The commands in ``text``, but those the rule for pointing at the proxy names (one sentence,
    the same in init, check, run and the docs, that says when, not what to run)."""
    flat = " ".join(text.split()).replace(" ".join(POINT_AT_THE_PROXY.split()), "")
    return [m.group(0).rstrip() for m in COMMAND.finditer(flat)]


def test_every_next_step_carries_the_config_given(tmp_path: Path) -> None:
    Path("conf dir").mkdir()
    result = init("--config", CONFIG, "--logs", str(sample_log(tmp_path)))
    steps = commands(result.output[result.output.index("Next:"):])
    assert len(steps) >= 3, result.output  # canary service install, canary daemon, canary run
    for command in steps:
        assert f"--config {shlex.quote(CONFIG)}" in command, command


def test_a_definitionless_project_and_unmatched_logs_name_the_config_too(tmp_path: Path) -> None:
    Path("conf dir").mkdir()
    result = init("--config", CONFIG, "--logs", "nowhere/*.log")
    printed = commands(result.output)
    assert any(c.startswith("canary init --template") for c in printed), result.output
    assert any(c.startswith("canary check") for c in printed), result.output
    for command in printed:
        assert f"--config {shlex.quote(CONFIG)}" in command, command
    assert "fix [logs] paths in other.toml" in result.output  # the file written, by its name


def test_the_printed_check_runs_against_the_config_init_wrote(tmp_path: Path) -> None:
    Path("conf dir").mkdir()
    result = init("--config", CONFIG, "--logs", "nowhere/*.log")
    printed = next(c for c in commands(result.output[result.output.index("Next:"):])
                   if c.startswith("canary check"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    ran = subprocess.run(["/bin/sh", "-c", printed], check=False, env=env, capture_output=True, text=True,
                         timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"config   {tmp_path / CONFIG}" in ran.stdout
    bare = subprocess.run(["/bin/sh", "-c", "canary check"], check=False, env=env, capture_output=True,
                          text=True, timeout=60)
    assert bare.returncode == 2 and "no canary.toml found" in bare.stderr  # without it, no config is read


def test_with_the_default_config_the_commands_carry_no_config(tmp_path: Path) -> None:
    result = init("--logs", str(sample_log(tmp_path)))
    assert Path("canary.toml").is_file()
    steps = commands(result.output[result.output.index("Next:"):])
    assert "canary run" in steps, result.output
    assert not any("--config" in c for c in steps), steps


def test_templates_added_later_point_at_the_config(tmp_path: Path) -> None:
    Path("conf dir").mkdir()
    init("--config", CONFIG)
    result = CliRunner().invoke(main, ["init", "--config", CONFIG, "--template", "citation"])
    assert result.exit_code == 0, result.output
    assert f"then `canary run --config {shlex.quote(CONFIG)}`" in result.output


def test_the_flag_is_left_out_only_for_the_config_found_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = tmp_path / "canary.toml"
    # none written yet: ./canary.toml is where the lookup looks first
    assert command_line("canary run", here) == "canary run"
    here.write_text("defs = []\n")
    assert command_line("canary run", here) == "canary run"
    assert command_line("canary run", Path("canary.toml")) == "canary run"  # the same file, relative
    assert command_line("canary run", None) == "canary run"
    elsewhere = tmp_path.parent / "it's here.toml"  # outside the current directory: absolute, quoted
    assert command_line("canary run", elsewhere) == f"canary run --config {shlex.quote(str(elsewhere))}"
    monkeypatch.setenv("CANARY_CONFIG", str(tmp_path / "other.toml"))  # names no file
    assert command_line("canary run", here) == "canary run --config canary.toml"
    (tmp_path / "other.toml").write_text("defs = []\n")  # the lookup now reads other.toml
    assert command_line("canary run", here) == "canary run --config canary.toml"
    assert command_line("canary run", tmp_path / "other.toml") == "canary run"


def _other_project(tmp_path: Path, *, desktop: bool) -> Path:
    """other.toml: no daemon has run on its store; a webhook, and a desktop channel if asked."""
    config = tmp_path / "conf dir" / "other.toml"
    config.parent.mkdir(exist_ok=True)
    config.write_text(f"defs = []\n[store]\nurl = 'sqlite:///{tmp_path / 'c.db'}'\n"
                      f"[alerts]\ndesktop = {str(desktop).lower()}\nwebhook = 'http://127.0.0.1:9/hook'\n")
    return config


def test_status_suggests_commands_for_the_config_it_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _other_project(tmp_path, desktop=True)
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))  # no desktop notifier on this machine
    result = CliRunner().invoke(main, ["status", "--config", CONFIG])
    flag = f"--config {shlex.quote(CONFIG)}"
    assert f"start one with `canary daemon {flag}`, or `canary service install {flag}`" in result.stdout, (
        result.output)
    assert f"`canary check {flag}` says what to do" in result.stdout, result.output


def test_check_suggests_commands_for_the_config_it_read(tmp_path: Path) -> None:
    _other_project(tmp_path, desktop=False)
    result = CliRunner().invoke(main, ["check", "--config", CONFIG])
    assert f"(`canary alerts test --config {shlex.quote(CONFIG)}` sends a test through each)" in result.stdout, (
        result.output)
