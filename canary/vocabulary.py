"""The product's words, written once: verdicts, run stages, attribution rules, statuses, exit codes, times.

Every other module takes these names from here; nothing else spells a verdict
set, a stage list, an exit code or the ISO-with-Z form of a time.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Literal, overload


class Verdict(enum.StrEnum):
    """How one canary run ended (the contract's "Verdicts")."""

    CAUGHT = "caught"
    FIRED_BUT_LEAKED = "fired_but_leaked"
    LEAKED = "leaked"
    UNLOGGED = "unlogged"
    NOT_INJECTED = "not_injected"
    ERROR = "error"
    AMBIGUOUS = "ambiguous"
    PASSED = "passed"
    FALSE_REJECTION = "false_rejection"

    @property
    def conclusive(self) -> bool:
        """Whether the run proves something (any verdict but error, not_injected, ambiguous)."""
        return self not in _INCONCLUSIVE

    @property
    def healthy(self) -> bool:
        """Whether the run proves the guard did its job (caught, passed)."""
        return self in _HEALTHY

    @property
    def failing(self) -> bool:
        """Whether the run proves the guard failed (leaked, fired_but_leaked, unlogged, false_rejection)."""
        return self.conclusive and not self.healthy


_INCONCLUSIVE = frozenset({Verdict.NOT_INJECTED, Verdict.ERROR, Verdict.AMBIGUOUS})
_HEALTHY = frozenset({Verdict.CAUGHT, Verdict.PASSED})

#: Verdict values that prove something about the guard, as stored strings.
CONCLUSIVE: frozenset[str] = frozenset(v.value for v in Verdict if v.conclusive)
#: Verdict values that prove the guard did its job, as stored strings.
HEALTHY_VERDICTS: frozenset[str] = frozenset(v.value for v in Verdict if v.healthy)
#: Verdicts of a canary that expects a rejection and proves the guard failed.
REJECT_FAILURES: frozenset[str] = frozenset(
    {Verdict.LEAKED.value, Verdict.FIRED_BUT_LEAKED.value, Verdict.UNLOGGED.value}
)


class Stage(enum.StrEnum):
    """The stages of a run, in the order they happen; each is a key of the run's trace."""

    SENT = "sent"
    FIXTURE_FETCHED = "fixture_fetched"
    INJECTED = "injected"
    FIRED = "fired"
    REPAIR_REQUESTED = "repair_requested"
    ANSWERED = "answered"


#: Stage names in order, as they appear in a trace.
STAGES: tuple[str, ...] = tuple(s.value for s in Stage)


def reached(times: Mapping[Stage, float | None] | Mapping[str, float | None]) -> tuple[Stage, ...]:
    """The stages with a time in ``times``, earliest first; stages at one moment in the usual order.

    The usual order is not always the order of events: with ``inject_at = "first"`` the
    fabrication goes in before the agent fetches its page.
    """
    rank = {stage: i for i, stage in enumerate(Stage)}
    happened = [(at, rank[stage], stage) for stage in Stage if (at := times.get(stage)) is not None]
    return tuple(stage for _at, _rank, stage in sorted(happened))

#: The contract's attribution rules by name: which evidence tied a firing to its run.
AttributionRule = Literal["trace", "nonce", "task", "value", "time"]
#: The rules strongest first (rule 0 to rule 4).
ATTRIBUTION_RULES: tuple[AttributionRule, ...] = ("trace", "nonce", "task", "value", "time")


class Status(enum.StrEnum):
    """Every status a guard can have, healthiest last."""

    PAUSED = "paused"
    ASLEEP = "asleep"
    DEGRADED = "degraded"
    INCONCLUSIVE = "inconclusive"
    ALIVE = "alive"
    QUIET = "quiet"
    NEW = "new"

    @property
    def healthy(self) -> bool:
        """Whether the guard is proven awake (alive, quiet)."""
        return self in HEALTHY

    @property
    def alerting(self) -> bool:
        """Whether entering this status sends an alert (asleep, degraded, inconclusive)."""
        return self in ALERTING


#: Statuses that send an alert when a guard enters them.
ALERTING = frozenset({Status.ASLEEP, Status.DEGRADED, Status.INCONCLUSIVE})
HEALTHY = frozenset({Status.ALIVE, Status.QUIET})

#: Exit codes of every command (the contract's "Exit codes").
EXIT_OK = 0
EXIT_UNHEALTHY = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3


def as_utc(moment: datetime) -> datetime:
    """A datetime as stored: aware, in UTC (a naive one is taken to be UTC already)."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


@overload
def iso(moment: datetime) -> str: ...
@overload
def iso(moment: None) -> None: ...
@overload
def iso(moment: datetime | None) -> str | None: ...
def iso(moment: datetime | None) -> str | None:
    """ISO 8601 in UTC with a ``Z``, as every JSON document writes times; None stays None."""
    if moment is None:
        return None
    return as_utc(moment).isoformat().replace("+00:00", "Z")


def hour_floor(moment: datetime) -> datetime:
    """The start of the UTC hour a datetime lies in."""
    return as_utc(moment).replace(minute=0, second=0, microsecond=0)


#: The collectors' rule name for lines that carry a task id (``[logs] correlate``): never a firing.
CORRELATE_RULE = "~correlate"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 line``, ``0 lines``, ``2 lines``: a count and its noun, in the number it takes."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
