"""The receiver's firings stored from one thread of their own, so an exporter never waits for the store.

The receiver hands each request's firings here and answers at once; this thread commits them in
order. A store that cannot be written (locked, gone) is tried again with backoff, the firings
kept meanwhile: none is lost to it. What waits is bounded (``MAX_PENDING`` firings): past it the
receiver answers 503, and the exporters send those batches again later. Firings waiting here when
the process is killed are lost; a clean stop stores them first, and says how many it could not.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from canary.errors import StoreError
from canary.store.signals import SignalHit

__all__ = ["MAX_PENDING", "Committer"]

log = logging.getLogger("canary.traces.committer")

#: Firings that may wait for the store; more make the receiver answer 503.
MAX_PENDING = 50_000
#: Seconds between tries of a store that failed, doubling up to the last.
BACKOFF = (0.2, 5.0)


class Committer:
    """One thread that stores the receiver's firings, in order, through ``commit``."""

    def __init__(self, commit: Callable[[Sequence[SignalHit]], int], *,
                 stored: Callable[[int], None] = lambda n: None,
                 failed: Callable[[str], None] = lambda message: None, limit: int = MAX_PENDING) -> None:
        self._commit = commit
        self._stored = stored  # told how many new firings each commit stored
        self._failed = failed  # told why the store could not be written
        self.limit = limit
        self._queue: deque[list[SignalHit]] = deque()
        self._pending = 0
        self._busy = False
        self._stopping = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="canary-trace-commits", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        """Firings not stored yet."""
        with self._cond:
            return self._pending

    def offer(self, hits: Sequence[SignalHit]) -> bool:
        """Queue a request's firings; False (nothing queued) when too many wait already."""
        if not hits:
            return True
        with self._cond:
            if self._pending + len(hits) > self.limit:
                return False
            self._queue.append(list(hits))
            self._pending += len(hits)
            self._cond.notify_all()
        return True

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every firing offered so far is stored; False if the time ran out first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout: float = 10.0) -> None:
        """Store what waits (for up to ``timeout`` seconds), then stop the thread; what could not be
        stored by then is lost, and said so with how many."""
        self.flush(timeout)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout)
        with self._cond:
            left = self._pending
        if left:
            log.error("%d firings seen in spans are lost: the store could not be written before the stop",
                      left)

    def _run(self) -> None:
        pause = BACKOFF[0]
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                batch = self._queue[0]
                self._busy = True
            try:
                stored = self._commit(batch)
            except StoreError as exc:
                log.warning("firings seen in spans wait for the store (tried again in %.1f s): %s",
                            pause, exc)
                self._failed(f"the store cannot be written: {exc}")
                with self._cond:
                    self._busy = False
                    if self._stopping:
                        return
                    self._cond.wait(pause)
                pause = min(pause * 2, BACKOFF[1])
                continue
            except Exception as exc:
                # A fault of its own must not stop the thread: this batch is dropped and said so.
                log.exception("firings seen in spans could not be stored; %d dropped", len(batch))
                self._failed(f"{len(batch)} firings could not be stored, dropped: {type(exc).__name__}")
                stored = 0
            pause = BACKOFF[0]
            self._stored(stored)
            with self._cond:
                self._queue.popleft()
                self._pending -= len(batch)
                self._busy = False
                self._cond.notify_all()
