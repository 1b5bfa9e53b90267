"""A run prepared: fresh values drawn, and every text it puts into the agent's path filled with them."""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from canary.config.definitions import CanaryDef, GuardDef
from canary.config.fabrications import fill_arguments
from canary.config.placeholders import fill
from canary.proxy.toolcalls import ToolCall
from canary.runs.marks import RunMarks, run_marks
from canary.runs.observations import describe
from canary.runs.values import draw

__all__ = ["Plan", "prepare"]


@dataclass(frozen=True)
class Plan:
    """One run of one canary before it starts: its variant, its values and its texts."""

    guard: GuardDef
    canary: CanaryDef
    variant: int
    nonce: str
    values: Mapping[str, str]
    page: str  # the fixture page the run's nonce serves
    inject_text: str  # the fabrication, as text (a tool call's text form for a tool canary)
    tool: ToolCall | None  # the fabrication is this tool call
    leak: str | None  # what shows the leak: text in the answer, or an observed effect
    grounded: str | None  # a control's grounded text
    repair: str | None
    prompts: tuple[str, ...]  # one per turn
    marks: RunMarks  # the run's own values, for attribution rule 3

    @property
    def expected(self) -> str | None:
        """The text whose presence the verdict reads: the leak, or a control's grounded text."""
        return self.leak if self.canary.expect == "reject" else self.grounded


def prepare(guard: GuardDef, canary: CanaryDef, variant: int, fixture_base: str) -> Plan:
    """Draw a run's values and fill its variant's fabrication, leak, repair, turns and marks."""
    drawn = draw(canary.fixture, fixture_base)
    values = drawn.values
    template = canary.variants[variant]
    tool: ToolCall | None = None
    if isinstance(template, str):
        inject_text = fill(template, values)
    else:
        tool = ToolCall(template.name, fill_arguments(dict(template.arguments), values),
                        call_id=f"call_{secrets.token_hex(12)}")
        inject_text = tool.as_text
    if canary.observe is not None:
        leak: str | None = describe(canary.observe, values)
    else:
        leak = fill(canary.leak, values) if canary.leak else None
    if canary.expect == "accept":
        marks = run_marks(values, [canary.grounded or ""], [canary.grounded], prefixes=("fake", "true"))
    else:
        used = template if isinstance(template, str) else json.dumps(dict(template.arguments))
        marks = run_marks(values, [used, canary.leak or ""], [canary.leak])
    return Plan(
        guard=guard, canary=canary, variant=variant, nonce=drawn.nonce, values=values, page=drawn.page,
        inject_text=inject_text, tool=tool, leak=leak,
        grounded=fill(canary.grounded, values) if canary.grounded else None,
        repair=fill(canary.repair, values) if canary.repair else None,
        prompts=tuple(fill(turn, values) for turn in canary.turns), marks=marks,
    )
