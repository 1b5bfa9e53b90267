"""The bundled canary templates: listed by ``canary templates``, copied by ``canary init --template``.

Templates are read from the installed package, so they are there wherever the tool is
installed; a copy goes into the user's own ``canaries_defs/`` and is never read in place.
"""

from __future__ import annotations

import difflib
import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from canary.cli.boundary import epilog
from canary.errors import UsageError
from canary.locations import bundled_defs_dir
from canary.terminal import safe
from canary.vocabulary import EXIT_OK


@dataclass(frozen=True)
class Template:
    """One bundled definition file: its name (the file's stem), its guard and canaries."""

    name: str
    path: Path
    guard: str
    description: str
    canaries: tuple[str, ...]


def templates() -> list[Template]:
    """Every bundled template, by name."""
    from canary.config.definitions import load_definitions

    folder = bundled_defs_dir()
    found: list[Template] = []
    for path in sorted(folder.glob("*.toml")):
        guards, _problems = load_definitions([path.name], folder)
        for guard in guards:
            found.append(Template(path.stem, path, guard.name, guard.description,
                                  tuple(c.name for c in guard.canaries)))
    return found


def _named(names: Sequence[str]) -> list[Template]:
    by_name = {t.name: t for t in templates()}
    chosen = []
    for name in names:
        stem = name.removesuffix(".toml")
        if stem not in by_name:
            close = difflib.get_close_matches(stem, list(by_name), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UsageError(f"no template named {name!r}{hint}; templates: {', '.join(sorted(by_name))}",
                             option="--template")
        chosen.append(by_name[stem])
    return chosen


def copy_templates(names: Sequence[str], directory: Path) -> list[tuple[Path, str]]:
    """Copy the named templates into ``directory/canaries_defs``; an existing file is kept as it is."""
    done: list[tuple[Path, str]] = []
    target_dir = directory / "canaries_defs"
    for template in _named(names):
        target = target_dir / template.path.name
        if target.exists():
            done.append((target, "kept"))
            continue
        target_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(template.path, target)
        done.append((target, "copied"))
    return done


#: The distribution name in guard-canary's own ``pyproject.toml``.
PROJECT_NAME = "guard-canary"


def _is_the_checkout(directory: Path) -> bool:
    """Whether ``directory`` is guard-canary's own source folder (a clone), wherever ``canary`` runs from."""
    import tomllib

    try:
        with (directory / "pyproject.toml").open("rb") as handle:
            project = tomllib.load(handle).get("project")
    except (OSError, tomllib.TOMLDecodeError):
        return False
    return isinstance(project, dict) and project.get("name") == PROJECT_NAME


def refuse_the_bundled_folder(directory: Path) -> None:
    """``canary init`` in guard-canary's own folder would mix every bundled template into the guards.

    The folder is known by its templates being the ones this ``canary`` reads (``uv run`` in the
    clone), or by its ``pyproject.toml`` naming guard-canary (an installed ``canary`` run in a clone).
    """
    defs = directory / "canaries_defs"
    if defs.is_dir() and (defs.resolve() == bundled_defs_dir().resolve() or _is_the_checkout(directory)):
        raise UsageError(
            f"{directory} is guard-canary's own folder: its canaries_defs/ holds the bundled templates, "
            "which would all become guards. Run `canary init` in your agent's project folder "
            "(install the tool first: `uv tool install <path or git URL of guard-canary>`), and "
            "copy a template with `canary init --template NAME`.",
            option="--dir",
        )


@click.command(name="templates", epilog=epilog(
    ["canary templates", "canary init --template citation --template quote_fused"], {0: None}))
@click.option("--json", "as_json", is_flag=True, help="Print the templates as JSON.")
def templates_command(as_json: bool) -> None:
    """List the bundled canary templates: the guard each probes, and its canaries."""
    found = templates()
    if as_json:
        click.echo(json.dumps({"templates": [
            {"name": t.name, "guard": t.guard, "description": t.description, "canaries": list(t.canaries),
             "path": str(t.path)} for t in found]}, indent=2))
        sys.exit(EXIT_OK)
    width = max((len(t.name) for t in found), default=8)
    for template in found:
        click.echo(safe(f"{template.name:<{width}}  {template.description}"))
        click.echo(safe(f"{'':<{width}}  canaries: {', '.join(template.canaries)}"))
    click.echo(f"\nCopy one into ./canaries_defs/ with `canary init --template NAME`; they live in "
               f"{bundled_defs_dir()}.")
    sys.exit(EXIT_OK)
