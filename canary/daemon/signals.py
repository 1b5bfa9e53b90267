"""The daemon's signals: written to a pipe by the interpreter's C handler, acted on by a thread.

A Python handler runs between any two bytecodes of the main thread, and another signal may
arrive while it runs: one that took a lock (``threading.Event.set``) could wait on itself
forever, and under a flood of signals even a handler of a few lines is entered again inside
itself until the recursion limit. So no Python code runs for a signal: ``signal.set_wakeup_fd``
has the interpreter's C handler write the signal's number to a pipe, the Python-level handler
is a C callable that runs no bytecode, and a thread of its own reads the pipe and does what the
signal asks, as ordinary code.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger("canary.daemon.signals")

#: The byte that tells the reading thread to end (no signal has number 0).
_CLOSE = 0
#: The Python-level handler: a C callable that takes ``(signum, frame)`` and runs no bytecode, so
#: no other handler can be entered inside it. The wakeup fd has the signal's number already.
_NO_BYTECODE: Any = slice


class SignalPipe:
    """Signal handlers that write to a pipe, and the thread that calls each signal's action."""

    def __init__(self, actions: Mapping[int, Callable[[], None]]) -> None:
        self.actions = dict(actions)
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._previous_fd = -1
        self._thread = threading.Thread(target=self._serve, name="canary-signals", daemon=True)

    def install(self) -> SignalPipe:
        """Start the reading thread, then install the handlers (main thread only)."""
        self._thread.start()
        # A full pipe already holds a byte for the reading thread to act on: no warning then.
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        for signum in self.actions:
            signal.signal(signum, _NO_BYTECODE)
        return self

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
        """Stop writing signals to the pipe and end the reading thread; the handlers stay no-ops.

        The process is stopping. A handler put back while more of a burst is pending would raise
        in whatever the main thread runs next: the default or ignore disposition as "signal
        ignored due to race condition", SIGINT's own as KeyboardInterrupt, cutting the stop short.
        """
        signal.set_wakeup_fd(self._previous_fd)
        with contextlib.suppress(OSError):
            os.write(self._write, bytes([_CLOSE]))
        self._thread.join(5.0)
        os.close(self._write)
        if not self._thread.is_alive():
            os.close(self._read)
