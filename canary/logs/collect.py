"""Live collection: the collectors' tailer and follower wired to the store.

A log seen for the first time is read back over the largest guard window (by its lines'
own stamps), not from its start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from canary.config.settings import Config
from canary.logs.matching import build_matcher
from canary.store.engine import Store
from collectors.tailer import FileStatus, Tailer
from collectors.watch import Follower

log = logging.getLogger("canary.logs.collect")

#: How far back a log seen for the first time is read when no guard has a window.
DEFAULT_WINDOW = timedelta(hours=24)

ErrorSink = Callable[[str, str], None]


def _log_error(path: str, message: str) -> None:
    log.warning("%s", message)


class Collection:
    """Follows the configured logs and commits firings to the store, live."""

    def __init__(
        self,
        config: Config,
        store: Store,
        *,
        on_error: ErrorSink | None = None,
        on_resolved: ErrorSink | None = None,
        rescan: float = 2.0,
        rotate_wait: float = 5.0,
        start_at_end: bool = False,
    ) -> None:
        self.config = config
        self.store = store
        self.errors: list[tuple[str, str]] = []
        self._on_error = on_error or _log_error
        self.tailer = Tailer(
            config.logs.paths,
            build_matcher(config, correlate=True),
            store,
            on_error=self._error,
            on_resolved=on_resolved,  # a file's error no longer holds (it opens, the store takes it)
            rotate_wait=rotate_wait,
            start_at_end=start_at_end,
            skew=config.logs.clock_skew.total_seconds(),
            backfill=max((g.window for g in config.guards), default=DEFAULT_WINDOW).total_seconds(),
        )
        self.follower = Follower(self.tailer, rescan=rescan, on_error=self._error)

    def _error(self, path: str, message: str) -> None:
        self.errors.append((path, message))
        del self.errors[:-100]
        self._on_error(path, message)

    def start(self) -> None:
        """Start following in a background thread."""
        self.follower.start()

    def stop(self) -> None:
        """Read every file to its end once more, commit, and stop."""
        self.follower.stop()

    def poll(self) -> int:
        """One step in the caller's thread (for ``--once`` and tests)."""
        return self.tailer.poll()

    def files(self) -> list[FileStatus]:
        """The files followed now."""
        return self.tailer.files()
