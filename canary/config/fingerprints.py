"""A canary's fingerprint: what its runs prove depends on, so a run made under another definition
is known as history.

A run is evidence of the definition it ran under: the guard's ``match``, ``span`` and ``event``
(what counts as its firing) and the canary's texts (``prompt`` and its turns, ``fixture``,
``inject``, ``inject_tool``, ``inject_at``, ``leak``, ``grounded``, ``repair``, ``expect``).
Change one and the earlier runs prove nothing of the guard as it is now defined. The schedule,
the timeout, the description, the window and the grace are left out: they change no verdict.
"""

from __future__ import annotations

import hashlib
import json

from canary.config.definitions import CanaryDef, GuardDef, MatchAt

__all__ = ["fingerprint"]


def fingerprint(guard: GuardDef, canary: CanaryDef) -> str:
    """16 hex digits that change when a text the canary's verdicts depend on changes."""
    where = canary.inject_at
    facts = {
        "guard": {
            "match": guard.match,
            "span": guard.span.spec if guard.span is not None else None,
            "event": guard.event.spec if guard.event is not None else None,
        },
        "canary": {
            "expect": canary.expect, "turns": list(canary.turns), "inject_turn": canary.inject_turn,
            "fixture": canary.fixture, "inject": list(canary.inject),
            "inject_tool": [[t.name, t.arguments] for t in canary.inject_tool],
            "inject_at": {"match": where.pattern.pattern} if isinstance(where, MatchAt) else where,
            "leak": canary.leak,
            "observe": [canary.observe.kind, canary.observe.target] if canary.observe else None,
            "grounded": canary.grounded, "repair": canary.repair,
        },
    }
    text = json.dumps(facts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
