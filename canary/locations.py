"""Where guard-canary keeps its files: the one place paths are decided.

Tests point every location at a temporary directory through the environment
variables below, so a developer's real config and state never leak in.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import io
    import logging.handlers

APP = "guard-canary"

#: Overrides, read on every call so a test can set them with monkeypatch.
ENV_CONFIG = "CANARY_CONFIG"
ENV_CONFIG_DIR = "CANARY_CONFIG_DIR"
ENV_STATE_DIR = "CANARY_STATE_DIR"


def config_dir() -> Path:
    """The platform config directory (``~/Library/Application Support/guard-canary`` on macOS)."""
    override = os.environ.get(ENV_CONFIG_DIR)
    if override:
        return Path(override)
    import platformdirs  # not at import: a command that never asks pays nothing for it

    return Path(platformdirs.user_config_dir(APP))


def state_dir() -> Path:
    """The platform state directory, home of the store, the daemon's log and its token."""
    override = os.environ.get(ENV_STATE_DIR)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_state_dir(APP))


def private_state_dir() -> Path:
    """The state directory, created (or tightened to) owner-only."""
    return private_dir(state_dir(), tighten=True)


def default_store_url() -> str:
    """The SQLite store in the state directory."""
    return f"sqlite:///{state_dir() / 'canary.db'}"


#: Per-project control ports are drawn from this range, away from the fixed defaults (11435-11437).
PROJECT_PORTS = range(20000, 30000)


def _project_key(config_path: Path) -> str:
    """A stable hex digest of a config file's absolute path."""
    import hashlib

    return hashlib.sha256(str(config_path.absolute()).encode("utf-8", "surrogateescape")).hexdigest()


#: A project's name: it is written into unit names, launchd labels, paths and metric labels.
PROJECT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
#: The project of a config built without a file.
DEFAULT_PROJECT = "default"


def as_project_name(text: str) -> str:
    """``text`` made into a project name (lowercased, other characters as ``-``); "" if nothing is left."""
    name = re.sub(r"[^a-z0-9_-]+", "-", text.lower()).strip("-_")
    return name[:40].strip("-_")


def default_project(config_path: Path | None) -> str:
    """The project named after the config file's folder: lowercased, other characters as ``-``."""
    if config_path is None:
        return DEFAULT_PROJECT
    return as_project_name(config_path.absolute().parent.name) or DEFAULT_PROJECT


def project_dir(config_path: Path, project: str | None = None) -> Path:
    """The state subfolder of a project: ``projects/<project>-<hash of the config path>``.

    While the project keeps its default name, a folder an older version made for the same
    config (named after the config's folder as it is written, ``projects/<Folder>-<hash>``) is
    kept while it exists, so its store and token are never left behind.
    """
    key = _project_key(config_path)[:10]
    name = project or default_project(config_path)
    current = state_dir() / "projects" / f"{name}-{key}"
    legacy_name = re.sub(r"[^A-Za-z0-9._-]+", "_", config_path.absolute().parent.name).strip("._") or "root"
    legacy = state_dir() / "projects" / f"{legacy_name[:40]}-{key}"
    renamed = project is not None and project != default_project(config_path)
    if not renamed and legacy != current and legacy.is_dir() and not current.is_dir():
        return legacy
    return current


def project_store_url(config_path: Path, project: str | None = None) -> str:
    """The default SQLite store of the project whose config is ``config_path``."""
    return f"sqlite:///{project_dir(config_path, project) / 'canary.db'}"


def project_control(config_path: Path) -> str:
    """The default control address of the project whose config is ``config_path`` (a port of its own)."""
    port = PROJECT_PORTS.start + int(_project_key(config_path), 16) % len(PROJECT_PORTS)
    return f"127.0.0.1:{port}"


def project_log(config_path: Path | None, project: str | None = None) -> Path:
    """The daemon's log of a project: ``<project folder>/logs/<project>.log``."""
    if config_path is None:
        return state_dir() / "logs" / f"{project or DEFAULT_PROJECT}.log"
    name = project or default_project(config_path)
    return project_dir(config_path, project) / "logs" / f"{name}.log"


def is_owned(path: Path) -> bool:
    """Whether ``path`` is the state directory or a folder inside it (folders guard-canary owns)."""
    state = state_dir().absolute()
    target = path.absolute()
    return target == state or state in target.parents


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
    inside = is_owned(path.parent) and path.absolute() != state_dir().absolute()
    if inside:  # the folders from the state directory down to a project's are owner-only too
        private_dir(path.parent, tighten=tighten or not path.is_dir())
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


def _private_rotating_handler() -> type[logging.handlers.RotatingFileHandler]:
    import logging.handlers

    class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
        """A rotating log whose every file, the rotated ones included, is created owner-only."""

        def _open(self) -> io.TextIOWrapper:
            private_file(Path(self.baseFilename))
            return super()._open()

    return PrivateRotatingFileHandler


if TYPE_CHECKING:
    PrivateRotatingFileHandler = _private_rotating_handler()
else:

    def __getattr__(name: str) -> Any:
        """``PrivateRotatingFileHandler``, built on first use: only the daemon logs to a file."""
        if name == "PrivateRotatingFileHandler":
            globals()[name] = handler = _private_rotating_handler()
            return handler
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
