"""An in-process attributor for store tests that need canary firings without runs in flight."""

from __future__ import annotations

from collections.abc import Callable

from canary.store.attributing import Sighting, StoredRun


class TiedBy:
    """Ties a firing to run ``run_id`` when ``test`` accepts its line; the rest are organic."""

    def __init__(self, run_id: int, test: Callable[[str], bool]) -> None:
        self.run_id = run_id
        self.test = test

    def observe(self, text: str, ts: float | None, *, activity: bool) -> None:
        """Nothing to learn."""

    def attribute(self, sighting: Sighting, stored: StoredRun | None) -> int | None:
        """``run_id`` for a line ``test`` accepts."""
        return self.run_id if self.test(sighting.text) else None

