"""Where guard-canary keeps its files: the one place paths are decided.

Tests point every location at a temporary directory through the environment
variables below, so a developer's real config and state never leak in.
"""

from __future__ import annotations

import logging.handlers
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import io

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


def private_state_dir() -> Path:
    """The state directory, created (or tightened to) owner-only."""
    return private_dir(state_dir(), tighten=True)


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


# -- private files ---------------------------------------------------------------
#
# The state directory holds stored agent log lines, injected texts and the control token:
# it is 0700 and its files 0600 from the moment they exist, whatever the umask.

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def private_dir(path: Path, *, tighten: bool = False) -> Path:
    """Create ``path`` (and its parents) with the leaf owner-only; ``tighten`` also fixes an existing one.

    Only directories guard-canary owns are tightened (the state directory), never a folder of
    the user's that happens to hold a store.
    """
    if not path.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            pass
        else:
            os.chmod(path, PRIVATE_DIR_MODE)  # mkdir's mode is masked by the umask
            return path
    if tighten and os.name == "posix" and (path.stat().st_mode & 0o077):
        os.chmod(path, PRIVATE_DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """Create ``path`` owner-only (0600) if it is missing; tighten it if others may read it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                     PRIVATE_FILE_MODE)
    except FileExistsError:
        tighten_file(path)
        return path
    try:
        if os.name == "posix":
            os.fchmod(fd, PRIVATE_FILE_MODE)
    finally:
        os.close(fd)
    return path


def tighten_file(path: Path) -> None:
    """Make an existing regular file owner-only when group or others have any access to it."""
    if os.name != "posix":
        return
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISREG(st.st_mode) and st.st_mode & 0o077:
        os.chmod(path, PRIVATE_FILE_MODE)


class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating log whose every file, the rotated ones included, is created owner-only."""

    def _open(self) -> io.TextIOWrapper:
        private_file(Path(self.baseFilename))
        return super()._open()
