"""Where a fabrication goes in: ``inject`` / ``inject_tool`` / ``inject_at``, and ``[[canary.turn]]``.

A single-turn canary carries these keys itself. A multi-turn canary has
``[[canary.turn]]`` tables instead, each with its own ``prompt``; exactly one
turn carries ``inject`` and/or ``inject_tool`` (and optionally ``inject_at``),
and the leak is checked in the answer of that turn and of every later one.
"""

from __future__ import annotations

import re
from typing import Literal

from canary.config.bodymatch import BodyPatternError, body_pattern
from canary.config.fabrications import ToolTemplate, parse_inject_tool
from canary.config.placeholders import PLACEHOLDERS, placeholders_in
from canary.config.sections import TURN
from canary.config.tomlcheck import KeyPath, Sink, Table, check_placeholders, compile_regex, type_name
from canary.records import frozen
from collectors.shapes import catastrophic, polynomial

__all__ = [
    "INJECTION_KEYS",
    "InjectAt",
    "Injection",
    "MatchAt",
    "Turns",
    "check_prompt",
    "parse_inject_at",
    "parse_injection",
    "parse_turns",
]

INJECT_AT_WORDS = ("first", "after-fetch")
#: The keys that say where the fabrication goes in; on a turn when the canary has turns.
INJECTION_KEYS = tuple(name for name in TURN.names if name != "prompt")


@frozen
class MatchAt:
    """``inject_at = { match = '...' }``: the first model call of the run whose body matches."""

    pattern: re.Pattern[str]

    def found(self, body: bytes) -> bool:
        """Whether the request body holds a match, searched in time linear in the body."""
        return body_pattern(self.pattern.pattern, self.pattern.flags).search(body)


InjectAt = Literal["first", "after-fetch"] | int | MatchAt


@frozen
class Injection:
    """The fabrication's variants and the model call it answers; None where invalid (reported)."""

    inject: tuple[str, ...] | None
    inject_tool: tuple[ToolTemplate, ...] | None
    inject_at: InjectAt | None


@frozen
class Turns:
    """``[[canary.turn]]`` as read: every turn's prompt (None where invalid) and the injection turn."""

    prompts: tuple[str | None, ...]
    inject_turn: int | None
    injection: Injection | None


def check_prompt(sink: Sink, keys: KeyPath, prompt: str, *, first: bool = True) -> None:
    """Placeholders, and the nonce (or the fixture URL that carries it) that ties model calls to the run.

    A later turn of a conversation needs neither: an agent that keeps its history sends the first
    turn, nonce included, to its model with every later one (and a turn whose model calls carry
    nothing of the run is ``not_injected``, with that reason).
    """
    check_placeholders(sink, keys, prompt, PLACEHOLDERS)
    if first and not placeholders_in(prompt) & {"nonce", "fixture_url"}:
        sink.error(keys, "the prompt carries neither {nonce} nor {fixture_url}: "
                   "nothing would tie the model call to the run (the nonce must reach the model)")


def parse_injection(t: Table) -> Injection:
    """``inject`` (one string or variants), ``inject_tool`` and ``inject_at`` of one table."""
    sink, keys = t.sink, t.keys
    inject_tool = parse_inject_tool(t)
    inject = t.strings("inject", required=not t.has("inject_tool"), single_ok=True,
                       hint=TURN.key("inject").hint)
    if inject is not None and not inject:
        sink.error((*keys, "inject"), "no variants: give one string or a list of strings")
    for i, variant in enumerate(inject or ()):
        if not variant.strip():
            sink.error((*keys, "inject", i), "an empty variant: nothing would be injected")
        check_placeholders(sink, (*keys, "inject", i), variant, PLACEHOLDERS)
    return Injection(inject=inject, inject_tool=inject_tool, inject_at=parse_inject_at(t))


def parse_turns(t: Table) -> Turns | None:
    """The canary's ``[[canary.turn]]`` tables; None when it has none."""
    if not t.has("turn"):
        return None
    sink, keys = t.sink, (*t.keys, "turn")
    raw = t.get("turn")
    if not isinstance(raw, list) or not all(isinstance(item, dict) for item in raw):
        sink.error(keys, "expected [[canary.turn]] tables (double brackets), one per turn, got "
                   f"{type_name(raw)}")
        return Turns(prompts=(None,), inject_turn=None, injection=None)
    if not raw:
        sink.error(keys, "no turns: give one [[canary.turn]] table per turn, each with a prompt")
        return Turns(prompts=(None,), inject_turn=None, injection=None)
    for key in ("prompt", *INJECTION_KEYS):
        if t.has(key):
            sink.error((*t.keys, key), f"with [[canary.turn]] tables, {key} belongs on "
                       + ("each turn" if key == "prompt" else "the turn where the fabrication goes in"))
    prompts: list[str | None] = []
    inject_turn: int | None = None
    injection: Injection | None = None
    for index, data in enumerate(raw):
        turn = TURN.open(sink, (*keys, index), data)
        prompt: str | None = turn.read("prompt")
        if prompt is not None:
            check_prompt(sink, (*keys, index, "prompt"), prompt, first=index == 0)
        prompts.append(prompt)
        carries = [key for key in ("inject", "inject_tool") if turn.has(key)]
        if not carries:
            if turn.has("inject_at"):
                sink.error((*keys, index, "inject_at"), "inject_at belongs on the turn that carries "
                           "inject or inject_tool")
            continue
        if inject_turn is not None:
            sink.error((*keys, index, carries[0]), f"turn[{inject_turn}] already carries the "
                       "fabrication; a canary injects on one turn only")
            continue
        inject_turn, injection = index, parse_injection(turn)
    if inject_turn is None and not any("inject" in str(k) for k in _misspelled(raw)):
        sink.error(keys, "no turn carries the fabrication: put inject (or inject_tool) on the "
                   "turn where it goes in")
    return Turns(prompts=tuple(prompts), inject_turn=inject_turn, injection=injection)


def _misspelled(raw: list[dict[str, object]]) -> list[str]:
    """Unknown keys of the turns (already reported), so a misspelled inject is not reported twice."""
    return [key for data in raw for key in data if key not in TURN.names]


def parse_inject_at(t: Table) -> InjectAt | None:
    """``inject_at``: 'first', 'after-fetch', N >= 1 or { match = regex }; None when invalid."""
    keys = (*t.keys, "inject_at")
    value = t.get("inject_at")
    expected = "expected 'first', 'after-fetch', a call number N >= 1 or { match = 'regex' }"
    if value is None:
        default: InjectAt = TURN.default("inject_at")
        return default
    if isinstance(value, str):
        if value == "first":
            return "first"
        if value == "after-fetch":
            return "after-fetch"
        if value.strip().isdigit():
            t.sink.error(keys, f"write the call number without quotes: inject_at = {value.strip()}")
            return None
        t.sink.error(keys, f"{expected}, got {value!r}",
                     suggestion=t.closest(value, INJECT_AT_WORDS))
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            t.sink.error(keys, f"model calls are counted from 1, got {value}")
            return None
        return value
    if isinstance(value, dict):
        sub = Table(t.sink, keys, value, ("match",))
        regex = sub.string("match", required=True,
                           hint="a regex searched in the model request body")
        if regex is None:
            return None
        compiled = compile_regex(t.sink, (*keys, "match"), regex)
        if compiled is None:
            return None
        return _match_at(t.sink, (*keys, "match"), compiled)
    t.sink.error(keys, f"{expected}, got {type_name(value)}")
    return None


def _match_at(sink: Sink, keys: KeyPath, compiled: re.Pattern[str]) -> MatchAt | None:
    """The proxy searches every model call of the run with it: a pattern the linear-time engine
    cannot search, and a shape that backtracks for a power of the body's length, are refused."""
    shape = catastrophic(compiled.pattern, compiled.flags) or polynomial(compiled.pattern, compiled.flags)
    if shape is not None:
        sink.error(keys, shape)
        return None
    try:
        body_pattern(compiled.pattern, compiled.flags)
    except BodyPatternError as exc:
        sink.error(keys, str(exc))
        return None
    return MatchAt(pattern=compiled)
