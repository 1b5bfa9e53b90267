"""The daemon's word on its store, kept beside the store (not in it).

A store that is deleted, replaced, full or corrupt cannot carry news of its
own trouble, so the daemon writes it to ``<store>.problem``, a file it sizes
at start-up and then only overwrites in place: on a full disk that still
works. It is read only while the daemon holds ``<store>.lock``.
"""

from __future__ import annotations

import contextlib
import json
import os
from datetime import datetime
from pathlib import Path

from canary.records import frozen
from canary.vocabulary import as_utc, iso

__all__ = ["StoreProblem", "clear_problem", "daemon_holds_lock", "prepare_problem", "read_problem",
           "write_problem"]

#: The problem file's reserved size: a problem is written in place, padded with spaces.
RESERVED = 4096


@frozen
class StoreProblem:
    """Why the daemon cannot write its store, and since when."""

    since: datetime
    reason: str

    def sentence(self) -> str:
        """One line a person reads: what, and since when."""
        return f"the store cannot be written since {iso(self.since)}: {self.reason}"


def problem_path(store_path: Path) -> Path:
    """The problem file beside a SQLite store."""
    return store_path.with_name(store_path.name + ".problem")


def lock_file(store_path: Path) -> Path:
    """The daemon's lock file beside a SQLite store."""
    return store_path.with_name(store_path.name + ".lock")


def prepare_problem(store_path: Path) -> None:
    """Reserve the problem file's space, empty (spaces only)."""
    path = problem_path(store_path)
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.pwrite(fd, b" " * RESERVED, 0)
            os.ftruncate(fd, RESERVED)
        finally:
            os.close(fd)


def write_problem(store_path: Path, problem: StoreProblem) -> bool:
    """Record a problem in place; False if even that failed."""
    body = json.dumps({"since": iso(problem.since), "reason": problem.reason[:1000]}).encode()
    try:
        fd = os.open(problem_path(store_path), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return False
    try:
        os.pwrite(fd, body.ljust(RESERVED)[:RESERVED], 0)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def clear_problem(store_path: Path) -> None:
    """The store works again: blank the problem."""
    with contextlib.suppress(OSError):
        fd = os.open(problem_path(store_path), os.O_RDWR)
        try:
            os.pwrite(fd, b" " * RESERVED, 0)
        finally:
            os.close(fd)


def read_problem(store_path: Path) -> StoreProblem | None:
    """The problem the running daemon recorded, if any (None when no daemon holds the lock)."""
    try:
        raw = problem_path(store_path).read_bytes().strip()
    except OSError:
        return None
    if not raw or not daemon_holds_lock(store_path):
        return None
    try:
        data = json.loads(raw)
        return StoreProblem(as_utc(datetime.fromisoformat(str(data["since"]))), str(data["reason"]))
    except (ValueError, KeyError, TypeError):
        return None


def daemon_holds_lock(store_path: Path) -> bool:
    """Whether a daemon holds the store's lock now."""
    import fcntl

    try:
        fd = os.open(lock_file(store_path), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False
