"""Processes a test started, stopped and waited for: a daemon's detached proxy, any pid."""

from __future__ import annotations

import os
import re
import signal
import time

#: What a daemon's log says of the proxy process it started.
PROXY_LINE = re.compile(r"model proxy serves on \S+ \(pid (\d+)\)")


def terminate(pid: int | None, timeout: float = 60.0) -> None:
    """SIGTERM ``pid`` and wait (up to ``timeout`` seconds) until it is gone."""
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def stop_proxy_of(daemon_log: str) -> None:
    """Stop the proxy process a daemon's log says it started, if it says so."""
    found = PROXY_LINE.search(daemon_log)
    if found:
        terminate(int(found.group(1)))
