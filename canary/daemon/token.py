"""The control API's bearer token: a file of the project's state folder only its owner can read.

The file is opened without following links and must be a regular file owned by this user;
a missing or empty one gets a fresh token, and one others could read is replaced.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
from pathlib import Path

from canary import locations
from canary.errors import UnavailableError

__all__ = ["TOKEN_FILE", "ensure_token", "read_token", "token_path"]

log = logging.getLogger(__name__)

TOKEN_FILE = "control.token"


def token_path(config_path: Path | None = None, project: str | None = None) -> Path:
    """Where the control token is kept: the project's state folder, beside its default store.

    That is ``<state dir>/projects/<project>-<hash>/control.token`` for the project whose config
    is ``config_path``, so each project's daemon has a token of its own;
    ``<state dir>/control.token`` without one.
    """
    if config_path is None:
        return locations.state_dir() / TOKEN_FILE
    return locations.project_dir(config_path, project) / TOKEN_FILE


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _refuse(path: Path, why: str) -> UnavailableError:
    return UnavailableError(
        f"the control token {path} {why}; remove it and start the daemon again to make a new one",
        paths=[path],
    )


def _open_token(path: Path) -> tuple[int, os.stat_result] | None:
    """The token file opened for reading without following a link, or None when it is missing.

    Anything but a regular file owned by this user (a symbolic link, dangling or not, a
    directory, a FIFO, another user's file) is refused with an UnavailableError.
    """
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        if path.is_symlink():
            what = "a symbolic link" if path.exists() else "a symbolic link to nothing"
            raise _refuse(path, f"is {what}; it is never followed") from exc
        raise _refuse(path, f"cannot be opened: {exc.strerror or exc}") from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise _refuse(path, "is not a regular file")
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        os.close(fd)
        raise _refuse(path, f"belongs to another user (uid {info.st_uid})")
    return fd, info


def _write_token(path: Path) -> str:
    """A fresh token, written owner-only beside ``path`` and moved over it in one step."""
    token = secrets.token_urlsafe(32)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.new")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, locations.PRIVATE_FILE_MODE)
    try:
        if os.name == "posix":
            os.fchmod(fd, locations.PRIVATE_FILE_MODE)
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(token + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return token


def ensure_token(path: Path | None = None) -> str:
    """The control token: made owner-only (0600) if absent or empty, rotated if others could read it.

    The file is opened without following links and must be a regular file owned by this user;
    anything else is refused with an UnavailableError that says what to do.
    """
    path = path or token_path()
    locations.private_dir(path.parent, tighten=locations.is_owned(path.parent))
    opened = _open_token(path)
    if opened is None:
        return _write_token(path)
    fd, info = opened
    with os.fdopen(fd, "rb") as handle:
        raw = handle.read(4096)
    if os.name == "posix" and stat.S_IMODE(info.st_mode) & 0o077:
        log.warning("the control token %s was readable by others (mode %o); it was replaced by a new one",
                    path, stat.S_IMODE(info.st_mode))
        return _write_token(path)
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        token = ""
    return token or _write_token(path)


def read_token(path: Path | None = None) -> str | None:
    """The control token, or None when the file is missing, refused, unreadable or empty."""
    path = path or token_path()
    try:
        opened = _open_token(path)
    except UnavailableError:
        return None
    if opened is None:
        return None
    fd, _info = opened
    try:
        with os.fdopen(fd, "rb") as handle:
            token = handle.read(4096).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return token or None
