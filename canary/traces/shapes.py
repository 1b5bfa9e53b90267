"""The guard-shaped spans and events the receiver saw, and the guards ``canary init --traces`` proposes.

Only what the conventions say is a guard is kept, never a whole span: its kind and name, how
often it came, and a few short values of the attributes that carry its verdict. The book is
bounded, so a flood of distinct names costs a fixed amount of memory.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from canary.config.definitions import GuardDef
from canary.config.signals import SignalMatch
from canary.traces.otlp import Signal

__all__ = ["Proposal", "ShapeBook", "fires_on", "propose"]

#: Shapes kept at most; values kept per attribute; characters kept of a value.
MAX_SHAPES, MAX_VALUES, VALUE_KEEP = 200, 8, 80
#: A verdict that says the guard rejected something.
REJECTING = re.compile(r"(?i)\b(block(ed)?|flag(ged)?|fail(ed)?|reject(ed)?|den(y|ied)|violat\w*|unsafe)\b")
FAILING_LABEL = r"(?i)^(fail(ed)?|incorrect|not_relevant|ungrounded)$"


def _convention(signal: Signal) -> tuple[str, tuple[str, ...]] | None:
    """Which convention makes the signal a guard's (its name here), and the attributes that say why."""
    name = signal.name
    if signal.kind == "span":
        if name.startswith("apply_guardrail"):
            return "security", ("gen_ai.security.decision.type",)
        if name == "guardrails.rail":
            return "nemo", ("rail.name", "rail.type", "rail.stop")
        if signal.get("openinference.span.kind") == "GUARDRAIL":
            return "openinference", ("output.value",)
        if signal.get("langfuse.observation.type") == "guardrail":
            return "langfuse", ("langfuse.observation.output",)
        return None
    if name == "gen_ai.evaluation.result":
        return "evaluation", ("gen_ai.evaluation.name", "gen_ai.evaluation.score.label")
    return None


@dataclass
class Shape:
    """One guard-shaped span or event name, as often as it came, with a few of its verdicts."""

    convention: str
    kind: str  # "span" | "event" (a span event or a log record)
    name: str
    count: int
    values: dict[str, list[str]]

    def to_json(self) -> dict[str, Any]:
        """As stored in the store's meta."""
        return {"convention": self.convention, "kind": self.kind, "name": self.name, "count": self.count,
                "values": self.values}


class ShapeBook:
    """The guard-shaped signals seen, bounded in size; thread-safe."""

    def __init__(self) -> None:
        self._shapes: dict[tuple[str, str, str], Shape] = {}
        self._lock = threading.Lock()

    def note(self, signals: Iterable[Signal]) -> None:
        """Keep what is guard-shaped among ``signals``."""
        for signal in signals:
            found = _convention(signal)
            if found is None:
                continue
            convention, keys = found
            kind = "span" if signal.kind == "span" else "event"
            with self._lock:
                shape = self._shapes.get((convention, kind, signal.name))
                if shape is None:
                    if len(self._shapes) >= MAX_SHAPES:
                        continue
                    shape = Shape(convention, kind, signal.name[:VALUE_KEEP], 0, {})
                    self._shapes[(convention, kind, signal.name)] = shape
                shape.count += 1
                for key in keys:
                    value = signal.get(key)
                    seen = shape.values.setdefault(key, [])
                    if value is not None and value[:VALUE_KEEP] not in seen and len(seen) < MAX_VALUES:
                        seen.append(value[:VALUE_KEEP])

    def to_json(self) -> list[dict[str, Any]]:
        """Every shape, most frequent first."""
        with self._lock:
            return [s.to_json() for s in sorted(self._shapes.values(), key=lambda s: -s.count)]


@dataclass(frozen=True)
class Proposal:
    """A guard proposed from a shape: its name, its matcher table, and what it was seen as."""

    name: str
    key: str  # "span" | "event"
    matcher: dict[str, Any]
    count: int
    convention: str
    strong: bool  # a rejecting verdict was seen, not only assumed
    #: The span's (or event's) name, and the attribute values a rejecting one carries: those seen
    #: (its verdict: the rejecting ones seen, else one its convention rejects with) and those its
    #: convention implies. What tells whether a guard of the project fires on it already.
    signal: str = ""
    sample: dict[str, tuple[str, ...]] = field(default_factory=dict)
    covered_by: str | None = None  # the project's guard that fires on it already: not proposed


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "guard"


def _exact(value: str) -> str:
    return "^" + re.escape(value) + "$"


def _rejecting(values: list[str], rejects: str, example: str) -> tuple[str, ...]:
    """The verdicts seen that reject, or, when none was seen, one its convention rejects with."""
    return tuple(v for v in values if re.search(rejects, v)) or (example,)


def _proposal(shape: dict[str, Any]) -> Proposal | None:
    convention, name, values = shape.get("convention"), str(shape.get("name", "")), shape.get("values") or {}
    count = int(shape.get("count", 0))
    seen = {key: tuple(str(v) for v in found) for key, found in values.items() if found}
    if convention == "openinference":
        verdicts = [v for v in values.get("output.value", []) if REJECTING.search(v)]
        matcher = {"name": _exact(name), "attributes": {"openinference.span.kind": "^GUARDRAIL$",
                                                        "output.value": REJECTING.pattern}}
        sample = {"openinference.span.kind": ("GUARDRAIL",),
                  "output.value": _rejecting(values.get("output.value", []), REJECTING.pattern, "BLOCKED")}
        return Proposal(_slug(name), "span", matcher, count, convention, bool(verdicts), name, sample)
    if convention == "security":
        matcher = {"name": _exact(name), "attributes": {"gen_ai.security.decision.type": "^deny$"}}
        return Proposal(_slug(name), "span", matcher, count, convention,
                        "deny" in values.get("gen_ai.security.decision.type", []), name,
                        {"gen_ai.security.decision.type": ("deny",)})
    if convention == "langfuse":
        matcher = {"name": _exact(name), "attributes": {"langfuse.observation.type": "^guardrail$",
                                                        "langfuse.observation.output": REJECTING.pattern}}
        verdicts = [v for v in values.get("langfuse.observation.output", []) if REJECTING.search(v)]
        sample = {"langfuse.observation.type": ("guardrail",), "langfuse.observation.output": _rejecting(
            values.get("langfuse.observation.output", []), REJECTING.pattern, "BLOCKED")}
        return Proposal(_slug(name), "span", matcher, count, convention, bool(verdicts), name, sample)
    if convention == "nemo":
        rails = values.get("rail.name", [])
        attributes = {"rail.stop": "^true$", **({"rail.name": _exact(rails[0])} if len(rails) == 1 else {})}
        return Proposal(_slug(rails[0] if len(rails) == 1 else "nemo-rail"), "span",
                        {"name": _exact(name), "attributes": attributes}, count, convention,
                        "true" in values.get("rail.stop", []), name, {**seen, "rail.stop": ("true",)})
    if convention == "evaluation":
        names = values.get("gen_ai.evaluation.name", [])
        attributes = {"gen_ai.evaluation.score.label": FAILING_LABEL,
                      **({"gen_ai.evaluation.name": _exact(names[0])} if len(names) == 1 else {})}
        labels = values.get("gen_ai.evaluation.score.label", [])
        sample = {**seen, "gen_ai.evaluation.score.label": _rejecting(labels, FAILING_LABEL, "fail")}
        return Proposal(_slug(names[0] if len(names) == 1 else "evaluation"), "event",
                        {"name": _exact(name), "attributes": attributes}, count, convention,
                        any(re.match(FAILING_LABEL, v) for v in labels), name, sample)
    return None


def fires_on(rule: SignalMatch, proposal: Proposal) -> bool:
    """Whether a guard's ``span`` (or ``event``) matcher fires on every rejecting span (or event) the
    proposal was made from: its name regex matches the span's name, and each of its attribute regexes
    matches every value that attribute was seen with (an attribute never seen: it cannot tell, so no)."""
    if rule.name is not None and rule.name.search(proposal.signal) is None:
        return False
    for key, pattern in rule.attributes:
        values = proposal.sample.get(key)
        if not values or any(pattern.search(value) is None for value in values):
            return False
    return True


def propose(shapes: Iterable[dict[str, Any]], guards: Sequence[GuardDef] = ()) -> list[Proposal]:
    """A guard per guard-shaped span or event name, most frequent first. One that a guard of
    ``guards`` fires on already is ``covered_by`` it; the others get names distinct from each other
    and from ``guards``."""
    out: list[Proposal] = []
    names = {g.name for g in guards}
    for shape in shapes:
        proposal = _proposal(shape)
        if proposal is None:
            continue
        owner = next((g for g in guards if (rule := g.span if proposal.key == "span" else g.event) is not None
                      and fires_on(rule, proposal)), None)
        if owner is not None:
            out.append(replace(proposal, covered_by=owner.name))
            continue
        name, n = proposal.name, 2
        while name in names:
            name, n = f"{proposal.name}-{n}", n + 1
        names.add(name)
        out.append(replace(proposal, name=name))
    return out
