"""Signals into guard firings: each guard's ``span`` and ``event`` matchers over what one request carried.

A guard fires once per span: the span, an event of it and a log record in it (same trace and
span id) that all match are one firing, and so is the same span sent again by an exporter that
retried. A firing keeps its evidence (the span's name, the attributes that matched, the trace
id), never the whole span; the text of its other attributes is kept only in memory, for the
run's marks to be searched in (a nonce in ``input.value``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from canary.config.definitions import GuardDef
from canary.config.signals import SignalMatch
from canary.traces.otlp import Signal

__all__ = ["CONTEXT_KEEP", "SignalFiring", "SignalRules"]

#: Characters of a value shown in a firing's evidence.
EVIDENCE_VALUE = 240
#: Characters of a signal's attributes searched for a run's marks.
CONTEXT_KEEP = 65536


@dataclass(frozen=True)
class SignalFiring:
    """One firing of a guard seen in a span, a span event or a log record."""

    guard: str
    key: str  # the same span (or record) gives the same key: "trace:span", else a digest
    trace_id: str | None
    ts: float | None
    evidence: str  # what is stored: name, matching attributes, trace id
    context: str  # the signal's attribute text, for the run's marks; never stored


def _key(signal: Signal) -> str:
    if signal.trace_id is not None and signal.span_id is not None:
        return f"{signal.trace_id}:{signal.span_id}"
    digest = hashlib.blake2b(digest_size=12)
    for part in (signal.kind, signal.name, repr(signal.ts), signal.ident, *sorted(signal.attributes.items())):
        digest.update(repr(part).encode("utf-8", "replace"))
    return "record:" + digest.hexdigest()


def _shown(value: str) -> str:
    return value if len(value) <= EVIDENCE_VALUE else value[:EVIDENCE_VALUE] + "..."


def evidence(signal: Signal, matched: Iterable[tuple[str, str]]) -> str:
    """``span 'guardrail' openinference.span.kind=GUARDRAIL ... trace 4bf9...``: what a firing shows."""
    where = f"span {signal.name!r}" if signal.kind == "span" else (
        f"event {signal.name!r} in span {signal.span_name!r}" if signal.kind == "event"
        else f"log record {signal.name!r}")
    pairs = " ".join(f"{key}={_shown(value)!r}" for key, value in matched)
    trace = f" trace {signal.trace_id}" if signal.trace_id else ""
    return f"{where}{' ' + pairs if pairs else ''}{trace}"


def _context(signal: Signal) -> str:
    text = "\n".join((signal.name, signal.span_name, *signal.attributes.values()))
    return text[:CONTEXT_KEEP]


class SignalRules:
    """The ``span`` and ``event`` matchers of every guard that has one."""

    def __init__(self, guards: Iterable[GuardDef]) -> None:
        self.rules: list[tuple[str, SignalMatch | None, SignalMatch | None]] = [
            (g.name, g.span, g.event) for g in guards if g.signals]

    def __bool__(self) -> bool:
        return bool(self.rules)

    def firings(self, signals: Iterable[Signal]) -> list[SignalFiring]:
        """The firings among ``signals``, one per guard and span, in the order first seen."""
        found: dict[tuple[str, str], SignalFiring] = {}
        for signal in signals:
            for guard, span, event in self.rules:
                rule = span if signal.kind == "span" else event
                if rule is None:
                    continue
                matched = rule.matched(signal.name, signal)
                if matched is None:
                    continue
                key = _key(signal)
                if (guard, key) not in found:
                    found[(guard, key)] = SignalFiring(guard, key, signal.trace_id, signal.ts,
                                                       evidence(signal, matched), _context(signal))
        return list(found.values())
