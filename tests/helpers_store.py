"""Store test helpers: an in-process attributor, and finished runs' records."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from canary.runs.record import RunRecord
from canary.store.attributing import Sighting, StoredRun
from canary.vocabulary import Stage, Verdict


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


def record(verdict: str, *, evidence: str | None = None, trace: Mapping[str, float | None] | None = None,
           duration_s: float = 0.0, leaked_turn: int | None = None) -> RunRecord:
    """A finished run's record for ``RunLog.finish``, with what a test sets (finish stores no names)."""
    return RunRecord(
        guard="", canary="", variant=0, expect="reject", verdict=Verdict(verdict), nonce="",
        started=datetime(2026, 1, 1, tzinfo=UTC), duration_s=duration_s,
        trace={Stage(k): v for k, v in (trace or {}).items()}, leaked=False, firings=0, attribution=None,
        foreign_calls=0, evidence=evidence, answer=None, error=None, leaked_turn=leaked_turn,
    )
