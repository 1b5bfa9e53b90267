"""Whether the daemon that wrote the heartbeat still collects: by its own tick, and, on its own
machine, by its process.

The daemon keeps its tick and its host's name in ``meta`` under ``daemon.pace`` with each heartbeat
(``pace_row``). A heartbeat is stale once ``MISSED_TICKS`` of those ticks and ``SLACK`` have passed
(90 s for a heartbeat that names no tick: the default tick's). ``canary status`` on the daemon's
own host also says it is gone as soon as its pid is (``os.kill(pid, 0)``); ``--all-projects`` reads
other machines, and goes by the heartbeat's age alone.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

from canary.records import frozen
from canary.store.reads import Reader

__all__ = ["DEFAULT_TICK", "PACE_KEY", "Pace", "gone", "load", "pace_row", "parse", "stale_after"]

#: The ``meta`` key of the daemon's tick and host.
PACE_KEY = "daemon.pace"
#: Seconds between a daemon's ticks when it names none (``canary daemon --tick``'s default).
DEFAULT_TICK = 10.0
#: Ticks a daemon may miss before its heartbeat is stale.
MISSED_TICKS = 3
#: Time a tick may take beyond its wait: a step can wait out the store's busy timeout.
SLACK = timedelta(seconds=60)


@frozen
class Pace:
    """The daemon's tick, and the host it runs on (None: a daemon that did not say)."""

    tick: float = DEFAULT_TICK
    host: str | None = None

    @property
    def stale(self) -> timedelta:
        """How old its heartbeat may be while it runs."""
        return stale_after(self.tick)


def stale_after(tick: float) -> timedelta:
    """How old the heartbeat of a daemon of ``tick`` seconds may be while it runs."""
    return MISSED_TICKS * timedelta(seconds=tick) + SLACK


def pace_row(tick: float) -> dict[str, str]:
    """The ``meta`` row the daemon writes with its heartbeat."""
    return {"key": PACE_KEY, "value": json.dumps({"tick": tick, "host": _host()})}


def load(reader: Reader) -> Pace:
    """The daemon's stored pace; the default tick and no host when it stored none."""
    rows = reader.rows("SELECT value FROM meta WHERE key = :key", key=PACE_KEY)
    return parse(rows[0][0] if rows else None)


def parse(value: str | None) -> Pace:
    """A pace from its stored text; the default tick and no host from anything else."""
    try:
        doc: Any = json.loads(value) if value else {}
    except ValueError:
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    tick, host = doc.get("tick"), doc.get("host")
    ok = isinstance(tick, int | float) and not isinstance(tick, bool) and tick > 0
    return Pace(float(tick) if ok else DEFAULT_TICK, host if isinstance(host, str) else None)


def gone(pace: Pace, pid: int) -> str | None:
    """Why the daemon of a heartbeat of this host no longer runs: its process is gone; None when it
    may run, or it beat on another host."""
    if pace.host is None or pace.host != _host():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return f"its process, pid {pid}, is gone"
    except OSError:
        pass  # another user's process: it exists
    return None


def _host() -> str:
    """This host's name, as ``socket.gethostname`` gives it."""
    uname = getattr(os, "uname", None)
    if uname is not None:
        return str(uname().nodename)
    import socket

    return socket.gethostname()
