"""The thread workers' jobs in flight, so that quitting closes the store only once they are done.

A connection a job still holds when its engine is disposed is not closed with it, and stays open
until it is collected: quitting waits for the jobs in flight (for a while) before the store closes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["InFlight"]


class InFlight:
    """Counts the jobs running in thread workers."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running = 0

    @contextmanager
    def running(self) -> Iterator[None]:
        """Count the job run inside this block."""
        with self._cond:
            self._running += 1
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every job to end; True once none runs."""
        with self._cond:
            return self._cond.wait_for(lambda: self._running == 0, timeout)

