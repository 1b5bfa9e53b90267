"""Where guard-canary keeps its files: the one place paths are decided.

Tests point every location at a temporary directory through the environment
variables below, so a developer's real config and state never leak in.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP = "guard-canary"

#: Overrides, read on every call so a test can set them with monkeypatch.
ENV_CONFIG = "CANARY_CONFIG"
ENV_CONFIG_DIR = "CANARY_CONFIG_DIR"
ENV_STATE_DIR = "CANARY_STATE_DIR"


def config_dir() -> Path:
    """The platform config directory (``~/Library/Application Support/guard-canary`` on macOS)."""
    override = os.environ.get(ENV_CONFIG_DIR)
    return Path(override) if override else Path(platformdirs.user_config_dir(APP))


def state_dir() -> Path:
    """The platform state directory, home of the store, the daemon's log and its token."""
    override = os.environ.get(ENV_STATE_DIR)
    return Path(override) if override else Path(platformdirs.user_state_dir(APP))


def default_store_url() -> str:
    """The SQLite store in the state directory."""
    return f"sqlite:///{state_dir() / 'canary.db'}"


def config_candidates(explicit: str | os.PathLike[str] | None) -> list[tuple[Path, str]]:
    """The config lookup order as (path, where it came from): --config, $CANARY_CONFIG, ./, platform."""
    if explicit:
        return [(Path(explicit), "--config")]
    env = os.environ.get(ENV_CONFIG)
    if env:
        return [(Path(env), f"${ENV_CONFIG}")]
    return [
        (Path.cwd() / "canary.toml", "the current directory"),
        (config_dir() / "canary.toml", "the platform config directory"),
    ]


def package_dir() -> Path:
    """The directory of the installed ``canary`` package."""
    return Path(__file__).resolve().parent


def bundled_defs_dir() -> Path:
    """The canary definitions shipped with the project (``canaries_defs/``)."""
    inside = package_dir() / "_bundled_defs"
    if inside.is_dir():
        return inside
    return package_dir().parent / "canaries_defs"
