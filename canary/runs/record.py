"""One finished run: the record the runner returns, the control API sends and the CLI prints."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from canary.vocabulary import ATTRIBUTION_RULES, AttributionRule, Stage, Verdict, as_utc, iso


@dataclass(frozen=True)
class RunRecord:
    """A run's verdict and everything that proves it, on both sides of the control API."""

    guard: str
    canary: str
    variant: int
    expect: Literal["reject", "accept"]
    verdict: Verdict
    nonce: str
    started: datetime
    duration_s: float
    trace: dict[Stage, float | None]  # seconds after ``sent``; None for a stage that never happened
    leaked: bool
    firings: int
    attribution: AttributionRule | None
    foreign_calls: int
    evidence: str | None
    answer: str | None
    error: str | None
    leak_text: str | None = None  # not in the document: the control API carries it (``to_wire``)
    model_calls: int = 0  # model calls carrying the run's nonce that came through the proxy
    unmatched_line: str | None = None  # a log line with the run's nonce that no guard's match fits
    nearest_guard: str | None = None  # the guard whose match comes closest to ``unmatched_line``
    turns: int = 1  # how many turns the canary asks in one conversation
    leaked_turn: int | None = None  # multi-turn: the first turn (from 1) whose answer held the leak
    toolless_calls: int = 0  # a tool canary's calls not injected: their request offered the model no tools
    thinking_calls: int = 0  # a tool canary's calls not injected: they asked for thinking, and no repair

    def to_json(self) -> dict[str, Any]:
        """The contract's ``canary run --json`` entry; a multi-turn run adds ``turns`` and ``leaked_turn``,
        and a tool canary's calls not injected add ``toolless_calls`` or ``thinking_calls``."""
        doc: dict[str, Any] = {
            "guard": self.guard,
            "canary": self.canary,
            "variant": self.variant,
            "expect": self.expect,
            "verdict": str(self.verdict),
            "nonce": self.nonce,
            "started": iso(self.started),
            "duration_s": round(self.duration_s, 3),
            "trace": {stage.value: self.trace.get(stage) for stage in Stage},
            "leaked": self.leaked,
            "firings": self.firings,
            "attribution": self.attribution,
            "foreign_calls": self.foreign_calls,
            "evidence": self.evidence,
            "answer": self.answer,
            "error": self.error,
            "model_calls": self.model_calls,
            "unmatched_line": self.unmatched_line,
            "nearest_guard": self.nearest_guard,
        }
        if self.turns > 1:
            doc["turns"] = self.turns
            doc["leaked_turn"] = self.leaked_turn
        if self.toolless_calls:
            doc["toolless_calls"] = self.toolless_calls
        if self.thinking_calls:
            doc["thinking_calls"] = self.thinking_calls
        return doc

    def to_wire(self) -> dict[str, Any]:
        """What the daemon's control API sends of a run: the document, and the value whose leak it
        checked (``leak_text``), which ``canary run`` names in a leaked run's reason."""
        return {**self.to_json(), "leak_text": self.leak_text}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RunRecord:
        """A record from its ``to_json`` document, or the control API's ``to_wire``."""
        expect: Literal["reject", "accept"] = "accept" if doc.get("expect") == "accept" else "reject"
        attribution = doc.get("attribution")
        trace = doc.get("trace") or {}
        return cls(
            guard=str(doc["guard"]), canary=str(doc["canary"]), variant=int(doc.get("variant", 0)),
            expect=expect, verdict=Verdict(doc["verdict"]), nonce=str(doc.get("nonce", "")),
            started=as_utc(datetime.fromisoformat(str(doc["started"]).replace("Z", "+00:00"))),
            duration_s=float(doc.get("duration_s") or 0.0),
            trace={stage: _seconds(trace.get(stage.value)) for stage in Stage},
            leaked=bool(doc.get("leaked")), firings=int(doc.get("firings") or 0),
            attribution=_rule(attribution),
            foreign_calls=int(doc.get("foreign_calls") or 0),
            evidence=_text(doc.get("evidence")), answer=_text(doc.get("answer")),
            error=_text(doc.get("error")), leak_text=_text(doc.get("leak_text")),
            model_calls=int(doc.get("model_calls") or 0),
            unmatched_line=_text(doc.get("unmatched_line")), nearest_guard=_text(doc.get("nearest_guard")),
            turns=_count(doc.get("turns")) or 1, leaked_turn=_count(doc.get("leaked_turn")),
            toolless_calls=_count(doc.get("toolless_calls")) or 0,
            thinking_calls=_count(doc.get("thinking_calls")) or 0,
        )


def _rule(value: object) -> AttributionRule | None:
    return next((rule for rule in ATTRIBUTION_RULES if rule == value), None)


def _seconds(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def _text(value: object) -> str | None:
    return None if value is None else str(value)
