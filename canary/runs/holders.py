"""Who holds a port canary could not listen on: the config key to change, and a canary daemon if one."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from canary import locations
from canary.errors import UnavailableError


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stores(own: Path | None) -> list[Path]:
    """The SQLite stores a daemon of this user may be writing: this one, each project's, the old default."""
    state = locations.state_dir()
    found = [own] if own is not None else []
    found += [*sorted((state / "projects").glob("*/canary.db")), state / "canary.db"]
    return [p for i, p in enumerate(found) if p.is_file() and p not in found[:i]]


def _port_of(address: str | None) -> int | None:
    if not address:
        return None
    tail = address.rstrip("/").rpartition(":")[2]
    return int(tail) if tail.isdigit() else None


def daemon_holding(port: int, own_store: Path | None = None) -> tuple[int, Path] | None:
    """The (pid, store) of a live canary daemon whose heartbeat says it listens on ``port``."""
    for db in _stores(own_store):
        try:
            with contextlib.closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=1)) as conn:
                rows = conn.execute("SELECT pid, proxy, fixtures, control, stopped FROM heartbeat").fetchall()
        except sqlite3.Error:
            continue
        for pid, *addresses, stopped in rows:
            if stopped is None and port in {_port_of(a) for a in addresses} and _alive(int(pid)):
                return int(pid), db
    return None


@contextlib.contextmanager
def naming_the_key(key: str, port: int, own_store: Path | None = None) -> Iterator[None]:
    """Turn a taken-port UnavailableError into one naming ``key`` and the canary daemon holding it."""
    try:
        yield
    except UnavailableError as exc:
        cause = exc.__cause__
        if not (isinstance(cause, OSError) and cause.errno == errno.EADDRINUSE):
            raise
        holder = daemon_holding(port, own_store)
        who = (f"; the canary daemon pid {holder[0]} (store {holder[1]}) holds it: stop it, or"
               if holder is not None else "; stop what holds it, or")
        raise UnavailableError(f"{exc} ({key}){who} set another port in {key}") from cause
