"""What the store asks of every firing it commits: which run it belongs to, if any.

The store holds the runs and their nonces; which run a firing belongs to is decided
above it (``canary.runs.attribution`` owns the contract's rules 0-4), by an
``Attributor`` the store is given when it is built. The store tells it every line
it commits (``observe``) and asks it about every firing (``attribute``), passing
what only the store knows: the stored run whose nonce the line carries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Sighting:
    """One firing of one guard, as the store commits it."""

    guard: str
    text: str  # the log line (or the span's text)
    ts: float | None = None  # the line's own time, seconds since the epoch; None when it has none
    offset: int = -1  # where the line starts in its file; -1 when it comes from no file
    trace_id: str | None = None  # the trace id of the span it was read from; None for a log line
    context: str = ""  # a span's other attribute text: searched for a run's marks, never stored

    @property
    def marked(self) -> str:
        """The text a run's marks (nonce, values) are searched in: the line, and a span's other text."""
        return f"{self.text}\n{self.context}" if self.context else self.text


@dataclass(frozen=True)
class StoredRun:
    """A run the store holds, found by the nonce a line carries."""

    run_id: int
    finished: bool  # its verdict is stored


class Attributor(Protocol):
    """Ties firings to runs; the store calls it from the thread that commits."""

    def observe(self, text: str, ts: float | None, *, activity: bool) -> None:
        """A line the collectors matched (a firing, an activity line, a task id line)."""

    def attribute(self, sighting: Sighting, stored: StoredRun | None) -> int | None:
        """The id of the run the firing belongs to, or None: it is organic."""


class NoRunsInFlight:
    """The attributor of a store no run is put in flight through (and of a recount).

    No run is in flight, so only what the store holds ties a firing: the nonce of a
    stored run (rule 1). Anything else is organic.
    """

    def observe(self, text: str, ts: float | None, *, activity: bool) -> None:
        """Nothing to learn: no run is in flight."""

    def attribute(self, sighting: Sighting, stored: StoredRun | None) -> int | None:
        """The stored run whose nonce the line carries, or None."""
        return stored.run_id if stored is not None else None
