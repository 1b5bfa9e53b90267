"""The ``canary`` commands printed for a user to run next, spelled for the config in use.

A command told to a user who gave ``--config other.toml`` must carry it: without it, the command
reads whatever config the default lookup finds (or none). The path is shell-quoted, so a copied
command runs as printed.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from canary import locations
from canary.config.settings import find_config
from canary.errors import ConfigError

__all__ = ["command_line", "no_guards"]


def _found_without_flag() -> Path | None:
    """The config a command given no ``--config`` would read now (with none yet, the first place it
    looks, where ``canary init`` writes); None when it would read none."""
    try:
        found = find_config(None)
    except ConfigError:  # $CANARY_CONFIG names no file: only an explicit --config reads one
        return None
    return found if found is not None else locations.config_candidates(None)[0][0]


def _spelled(path: Path) -> str:
    """The path relative to the current directory when it lies below it, else absolute; quoted."""
    absolute = path.expanduser().absolute()
    here = Path.cwd()
    return shlex.quote(str(absolute.relative_to(here) if absolute.is_relative_to(here) else absolute))


def command_line(words: str, config: Path | None) -> str:
    """``canary run --config other.toml``: ``words`` with ``--config`` when ``config`` is not the one
    the command would find without it; ``words`` alone otherwise."""
    if config is None:
        return words
    found = _found_without_flag()
    if found is not None and found.resolve() == config.expanduser().resolve():
        return words
    return f"{words} --config {_spelled(config)}"


def no_guards(config: Path | None) -> str:
    """What ``canary status``, ``canary audit`` and ``canary check`` say of a project with no guard."""
    return ("no guard is defined (defs in canary.toml names no definition file), so nothing is watched: "
            f"`{command_line('canary init', config)}` proposes guards from the agent's logs; "
            "`canary templates` lists the bundled canaries")
