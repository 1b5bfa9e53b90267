"""Subcommands load their modules only when run: ``canary status`` pays for no other command,
while ``canary --help`` still lists every command with its own help line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
from click.testing import CliRunner

from canary.cli.main import main

#: Modules only other commands need (the wizard, runs, templates, alerts, the daemon, the TUI).
OTHER_COMMANDS = ("canary.cli.init", "canary.cli.running", "canary.cli.templates", "canary.cli.alerts_cmd",
                  "canary.daemon", "canary.runs.runner", "canary.alerts", "dashboard",
                  # and what only reading files or logging to one needs
                  "gzip", "logging.handlers", "platformdirs")


def write_project(root: Path) -> Path:
    (root / "defs").mkdir()
    for guard in ("citation", "quote"):
        (root / "defs" / f"{guard}.toml").write_text(
            f"[guard]\nname = '{guard}'\nmatch = '{guard.title()}Guard: rejected'\n")
    path = root / "canary.toml"
    path.write_text(f"defs = ['defs/*.toml']\n[logs]\npaths = ['agent.log']\n"
                    f"[store]\nurl = 'sqlite:///{(root / 'canary.db').as_posix()}'\n")
    return path


def test_status_loads_no_other_commands_modules(tmp_path: Path) -> None:
    config = write_project(tmp_path)
    probe = (
        "import sys, runpy\n"
        "sys.argv = ['canary', '--config', sys.argv[1], 'status', '--json']\n"
        "try:\n"
        "    runpy.run_module('canary.cli.main', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        f"    loaded = sorted(m for m in sys.modules if m.startswith({OTHER_COMMANDS!r}))\n"
        "    print('EXIT', exc.code, loaded, file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CANARY_CONFIG"}
    out = subprocess.run([sys.executable, "-c", probe, str(config)], capture_output=True, text=True,
                         env=env, timeout=60, check=False)
    assert out.stderr.startswith("EXIT ") and out.stderr.rstrip().endswith(" []"), out.stderr
    assert '"guards"' in out.stdout


def test_help_lists_every_command_with_its_own_help_line() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0, result.output
    ctx = click.Context(main)
    names = main.list_commands(ctx)
    assert {"status", "check", "audit", "run", "demo", "init", "templates", "alerts", "service"} <= set(names)
    listing = result.output.split("Commands:", 1)[1]
    for name in names:
        command = main.get_command(ctx, name)
        assert command is not None, name
        line = next(line for line in listing.splitlines() if line.strip().startswith(name + " "))
        assert command.get_short_help_str(limit=45)[:20] in line, (name, line)


def test_a_lazy_command_runs_inside_the_error_boundary(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.toml"
    result = CliRunner().invoke(main, ["run", "--config", str(missing), "citation"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "nowhere.toml" in result.stderr


def test_an_unknown_command_is_a_usage_error_naming_it() -> None:
    result = CliRunner().invoke(main, ["stauts"])
    assert result.exit_code == 2
    assert "stauts" in result.stderr


def test_the_daemons_rotating_log_is_built_on_first_use_and_private(tmp_path: Path) -> None:
    from canary import locations

    logs = tmp_path / "logs"
    logs.mkdir()
    handler = locations.PrivateRotatingFileHandler(logs / "daemon.log", maxBytes=64, backupCount=2)
    try:
        import logging

        for i in range(20):
            handler.emit(logging.LogRecord("t", logging.INFO, __file__, 1, f"line {i:04d}", None, None))
    finally:
        handler.close()
    files = sorted(logs.iterdir())
    assert [f.name for f in files] == ["daemon.log", "daemon.log.1", "daemon.log.2"]
    assert all(f.stat().st_mode & 0o077 == 0 for f in files), [oct(f.stat().st_mode) for f in files]
