"""The README's commands table names every command of the CLI, each with every option it takes."""

from __future__ import annotations

import re
from pathlib import Path

import click

from canary.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SHARED = {"--config", "--help"}  # every command takes them; the README says so once


def leaves(group: click.Group = main, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    """Every command that runs something, by its words after ``canary``."""
    ctx = click.Context(group)
    found: list[tuple[tuple[str, ...], click.Command]] = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        if isinstance(command, click.Group):
            found += leaves(command, (*prefix, name))
        else:
            found.append(((*prefix, name), command))
    return found


def table_cells() -> list[str]:
    """The first cell of every row of the README's table under "## Commands"."""
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `canary ")]
    return [re.split(r"(?<!\\)\|", row)[1] for row in rows]


def row_for(words: tuple[str, ...], cells: list[str]) -> str | None:
    """The cell naming ``canary WORD ...``: its first word right after ``canary``, the rest anywhere in it."""
    first = re.compile(rf"`canary {re.escape(words[0])}\b|/ `canary {re.escape(words[0])}\b")
    return next((c for c in cells if first.search(c) and all(re.search(rf"\b{w}\b", c) for w in words[1:])), None)


def test_every_command_and_option_is_in_the_readmes_table() -> None:
    cells = table_cells()
    missing: list[str] = []
    for words, command in leaves():
        cell = row_for(words, cells)
        if cell is None:
            missing.append(" ".join(words))
            continue
        options = {o for p in command.params if isinstance(p, click.Option) for o in p.opts if o.startswith("--")}
        missing += [f"{' '.join(words)} {o}" for o in sorted(options - SHARED) if not re.search(rf"{o}\b", cell)]
    assert missing == []


def test_a_command_missing_from_the_table_is_found() -> None:
    cells = ["`canary run [--json]`", "`canary mute GUARD` / `canary unmute GUARD`"]
    assert row_for(("run",), cells) == cells[0]
    assert row_for(("unmute",), cells) == cells[1]
    assert row_for(("alerts", "test"), cells) is None
    assert row_for(("mu",), cells) is None
