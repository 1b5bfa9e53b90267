"""The kill rate of every variant family of a guard, so "alive" never hides a known hole.

A family is one canary (one ``[[canary]]`` table) and its variants (its ``inject`` and
``inject_tool`` entries). Its kill rate is its caught runs over its conclusive runs in the
guard's window, as the guard's own ``kill_rate``; each variant shows its latest conclusive
verdict, the one the status reads. Read from the same facts ``evaluate`` reads: no query
of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from canary.records import frozen
from canary.status.evaluate import CanaryFact, GuardFacts, latest_pairs
from canary.vocabulary import HEALTHY_VERDICTS, Status, Verdict

__all__ = ["Family", "LastVerdict", "VariantRecord", "families", "holes_line", "last_verdict"]


@frozen
class VariantRecord:
    """One variant of a family: its runs in the window and its latest conclusive verdict."""

    variant: int
    #: The verdict the status reads for the variant: its latest conclusive run, among the window's
    #: when the canary has any there (``evaluate.latest_pairs``); None when there is none.
    last_verdict: str | None
    caught: int
    conclusive: int

    @property
    def failing(self) -> bool:
        """Whether the variant's latest conclusive run failed (a hole the guard has now)."""
        return self.last_verdict is not None and self.last_verdict not in HEALTHY_VERDICTS


@frozen
class Family:
    """One canary of a guard with its variants."""

    canary: str
    expect: str
    caught: int  # caught runs in the window (0 for a control)
    conclusive: int  # conclusive runs in the window
    variants: tuple[VariantRecord, ...]

    @property
    def kill_rate(self) -> float | None:
        """Caught over conclusive runs in the window; None for a control or with no conclusive run."""
        if self.expect != "reject" or self.conclusive == 0:
            return None
        return self.caught / self.conclusive

    @property
    def hole(self) -> bool:
        """Whether the family let some fabrication through in the window (its kill rate is below 1)."""
        rate = self.kill_rate
        return rate is not None and rate < 1

    def to_json(self) -> dict[str, Any]:
        """The family as ``canary status --json`` shows it."""
        return {
            "canary": self.canary, "expect": self.expect, "kill_rate": self.kill_rate,
            "caught": self.caught, "conclusive": self.conclusive,
            "variants": [
                {"variant": v.variant, "last_verdict": v.last_verdict, "caught": v.caught,
                 "conclusive": v.conclusive}
                for v in self.variants
            ],
        }


def _family(canary: CanaryFact, expect: str, count: int, facts: GuardFacts, now: datetime) -> Family:
    start = now - facts.window
    in_window = [r for r in canary.runs if r.conclusive and r.at >= start]
    latest = latest_pairs(canary, start)
    seen = {r.variant for r in canary.runs}
    records = []
    for variant in sorted(set(range(count)) | seen):
        mine = [r for r in in_window if r.variant == variant]
        last = latest.get((canary.name, variant))
        records.append(VariantRecord(
            variant, last.verdict if last is not None else None,
            sum(r.verdict == Verdict.CAUGHT for r in mine), len(mine),
        ))
    rejecting = [r for r in in_window if r.expect == "reject"]
    return Family(
        canary.name, expect,
        sum(r.verdict == Verdict.CAUGHT for r in rejecting) if expect == "reject" else 0,
        len(rejecting) if expect == "reject" else len(in_window),
        tuple(records),
    )


def families(
    facts: GuardFacts, defined: Mapping[str, tuple[str, int]], *, now: datetime
) -> list[Family]:
    """Every family of a guard, in definition order; ``defined`` maps a canary to (expect, variants)."""
    return [
        _family(c, *defined.get(c.name, ("reject", 1)), facts=facts, now=now) for c in facts.canaries
    ]


def holes_line(found: Sequence[Mapping[str, Any]]) -> str | None:
    """``holes: gave-404 3/5 caught (variant 2 leaked, variant 4 unlogged)`` from the families'
    JSON (``Family.to_json``); None when no family's kill rate is below 1."""
    parts = []
    for family in found:
        rate = family["kill_rate"]
        if rate is None or rate >= 1:
            continue
        failing = ", ".join(
            f"variant {v['variant']} {v['last_verdict']}" for v in family["variants"]
            if v["last_verdict"] is not None and v["last_verdict"] not in HEALTHY_VERDICTS
        )
        parts.append(f"{family['canary']} {family['caught']}/{family['conclusive']} caught"
                     + (f" ({failing})" if failing else ""))
    return "holes: " + "; ".join(parts) if parts else None


@frozen
class LastVerdict:
    """What a guard's "last verdict" shows: a verdict, and the canary (and variant) it is of when that
    is not simply the guard's latest run."""

    verdict: str | None
    canary: str | None = None  # ``fake-url``, or ``empty-page v1`` when the canary has variants

    @property
    def words(self) -> str:
        """``fake-url leaked``; the latest run's verdict alone; ``-`` when nothing ran."""
        if self.canary is None:
            return self.verdict or "-"
        return f"{self.canary} {self.verdict}"


_NAMES_ITS_FAILURE = (Status.ASLEEP, Status.DEGRADED)


def last_verdict(status: str, latest: str | None, found: Sequence[Mapping[str, Any]]) -> LastVerdict:
    """The "last verdict" of a guard in ``canary status`` and on the dashboard, from its status, its
    latest run's verdict and its families' JSON (``Family.to_json``): a guard asleep or degraded names
    its first failing variant, not a control that passed after it; else the latest run's verdict."""
    if status in _NAMES_ITS_FAILURE:
        for family in found:
            variants = family["variants"]
            for v in variants:
                if v["last_verdict"] is not None and v["last_verdict"] not in HEALTHY_VERDICTS:
                    which = f" v{v['variant']}" if len(variants) > 1 else ""
                    return LastVerdict(v["last_verdict"], f"{family['canary']}{which}")
    return LastVerdict(latest)
