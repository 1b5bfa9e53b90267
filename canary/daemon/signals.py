"""The daemon's signal handlers: each one only writes the signal's number to a pipe.

A handler runs between any two bytecodes of the main thread, and another signal may
arrive while it runs: one that took a lock (``threading.Event.set``) could wait on itself
forever. So a handler writes one byte and returns, and a thread of its own reads the pipe
and does what the signal asks, as ordinary code.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

log = logging.getLogger("canary.daemon.signals")

#: The byte that tells the reading thread to end (no signal has number 0).
_CLOSE = 0


class SignalPipe:
    """Signal handlers that write to a pipe, and the thread that calls each signal's action."""

    def __init__(self, actions: Mapping[int, Callable[[], None]]) -> None:
        self.actions = dict(actions)
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._previous: dict[int, Any] = {}
        self._thread = threading.Thread(target=self._serve, name="canary-signals", daemon=True)

    def install(self) -> SignalPipe:
        """Start the reading thread, then install the handlers (main thread only)."""
        self._thread.start()
        for signum in self.actions:
            self._previous[signum] = signal.signal(signum, self._handler)
        return self

    def _handler(self, signum: int, _frame: FrameType | None) -> None:
        # A full pipe already holds a byte for the reading thread to act on.
        with contextlib.suppress(OSError):
            os.write(self._write, bytes([signum]))

    def _serve(self) -> None:
        while True:
            try:
                data = os.read(self._read, 256)
            except OSError:
                return
            if not data:
                return
            for signum in dict.fromkeys(data):  # a burst of one signal is acted on once per read
                if signum == _CLOSE:
                    return
                action = self.actions.get(signum)
                if action is None:
                    continue
                try:
                    action()
                except Exception:
                    log.exception("acting on signal %d failed", signum)

    def close(self) -> None:
        """Put the earlier handlers back and end the reading thread."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()
        with contextlib.suppress(OSError):
            os.write(self._write, bytes([_CLOSE]))
        self._thread.join(5.0)
        os.close(self._write)
        if not self._thread.is_alive():
            os.close(self._read)
