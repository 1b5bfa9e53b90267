"""Running a ``Tailer`` live: file-system events as hints, plus a periodic rescan.

The only module that imports watchdog. Events are coalesced, can overflow and
never arrive for late writes to a rotated file, so they only wake the loop
early; every ``rescan`` seconds the tailer stats and reads every file anyway.
Errors from the observer go to the error callback; the loop keeps running.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

from collectors.files import glob_roots
from collectors.tailer import ErrorCallback, Tailer


class _Wake(FileSystemEventHandler):
    def __init__(self, wake: threading.Event, rescan: threading.Event) -> None:
        self._wake = wake
        self._rescan = rescan

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type not in ("modified", "closed", "opened", "closed_no_write"):
            self._rescan.set()
        if event.event_type != "opened":
            self._wake.set()


class Follower:
    """Polls a tailer whenever a watched directory changes, and at least every ``rescan`` s."""

    def __init__(
        self,
        tailer: Tailer,
        *,
        rescan: float = 2.0,
        settle: float = 0.02,
        on_error: ErrorCallback | None = None,
        on_poll: Callable[[int], None] | None = None,
        observer: BaseObserver | None = None,
    ) -> None:
        self.tailer = tailer
        self.rescan = rescan
        self.settle = settle
        self._on_error = on_error
        self._on_poll = on_poll
        self._observer = observer if observer is not None else Observer()
        self._wake = threading.Event()
        self._needs_rescan = threading.Event()
        self._stop = threading.Event()
        self._watched: set[str] = set()
        self._thread: threading.Thread | None = None
        self._polled = threading.Condition()
        self._started_polls = 0
        self.polls = 0

    @property
    def patterns(self) -> Sequence[str]:
        """The globs followed."""
        return self.tailer.patterns

    def start(self) -> None:
        """Start the observer and the polling thread."""
        self._update_watches()
        self._observer.start()
        self._wake.set()  # the first poll reads what is there now, without waiting for an event
        self._thread = threading.Thread(target=self._run, name="canary-follower", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop polling, after one last poll that reads every file to its end."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        try:
            self._observer.stop()
            self._observer.join(timeout)
        except Exception as exc:
            self._error("<observer>", f"stopping the file observer failed: {exc}")
        self.tailer.close()

    def wake(self) -> None:
        """Poll now (used by tests and by callers that know a file changed)."""
        self._needs_rescan.set()
        self._wake.set()

    def sync(self, timeout: float = 10.0) -> bool:
        """Wait until a poll that began after this call has committed; False on timeout.

        Everything written to the files before the call is then in the store.
        """
        with self._polled:
            wanted = self._started_polls + 1
        self.wake()
        deadline = time.monotonic() + timeout
        with self._polled:
            while self.polls < wanted:
                left = deadline - time.monotonic()
                if left <= 0 or self._thread is None or not self._thread.is_alive():
                    return False
                self._polled.wait(left)
        return True

    def _run(self) -> None:
        last_rescan = 0.0
        while True:
            self._wake.wait(self.rescan)
            stopping = self._stop.is_set()
            if self.settle and not stopping and not self._needs_rescan.is_set():
                # Let a burst of writes land so one poll commits them together.
                time.sleep(self.settle)
            self._wake.clear()
            now = time.monotonic()
            rescan = (
                stopping or self._needs_rescan.is_set() or now - last_rescan >= self.rescan
            )
            if rescan:
                self._needs_rescan.clear()
                last_rescan = now
                self._update_watches()
            with self._polled:
                self._started_polls += 1
            try:
                consumed = self.tailer.poll(rescan=rescan)
            except Exception as exc:
                self._error("<tailer>", f"a poll failed and will be retried: {exc!r}")
                consumed = 0
            with self._polled:
                self.polls += 1
                self._polled.notify_all()
            if self._on_poll is not None:
                self._on_poll(consumed)
            if stopping:
                return

    def _update_watches(self) -> None:
        for root in glob_roots(self.tailer.patterns):
            key = str(root)
            if key in self._watched or not root.is_dir():
                continue
            try:
                self._observer.schedule(
                    _Wake(self._wake, self._needs_rescan),
                    key,
                    recursive=_recursive(self.tailer.patterns, root),
                )
            except Exception as exc:
                self._error(key, f"cannot watch {key} (rescans still run): {exc}")
                continue
            self._watched.add(key)

    def _error(self, path: str, message: str) -> None:
        if self._on_error is not None:
            self._on_error(path, message)


def _recursive(patterns: Sequence[str], root: Path) -> bool:
    """Watch a root recursively when a pattern under it has a wildcard in a directory part."""
    real = os.path.realpath(root)
    for pattern in patterns:
        directory = os.path.dirname(os.path.expanduser(pattern))
        if not any(ch in directory for ch in "*?["):
            continue
        cut = min(i for i in (directory.find(ch) for ch in "*?[") if i >= 0)
        base = os.path.realpath(os.path.dirname(directory[:cut] + "x") or ".")
        if real.startswith(base) or base.startswith(real):
            return True
    return False
