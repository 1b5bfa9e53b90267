"""Guard and canary definitions: ``canaries_defs/*.toml``, one guard per file.

Loading is strict and collects every problem: unknown keys, wrong types, bad
durations, regexes, cron expressions and placeholders are all reported with the
file, the dotted key, what is wrong and, where close, what was probably meant.
A canary with ``[[canary.turn]]`` tables is read by :mod:`canary.config.injection`.
"""

from __future__ import annotations

import glob
import re
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Literal

from canary.config.fabrications import Observation, ToolTemplate, parse_observation
from canary.config.injection import (
    InjectAt,
    Injection,
    MatchAt,
    Turns,
    check_prompt,
    parse_injection,
    parse_turns,
)
from canary.config.placeholders import PLACEHOLDERS, placeholders_in
from canary.config.schema import Fields
from canary.config.sections import CANARY, DEFINITION, GUARD
from canary.config.signals import SignalMatch, parse_signal_match
from canary.config.tomlcheck import (
    KeyPath,
    Sink,
    Table,
    check_matcher,
    check_placeholders,
    load_toml,
    type_name,
)
from canary.errors import Problem
from canary.records import frozen, replace

__all__ = [
    "CanaryDef",
    "GuardDef",
    "InjectAt",
    "MatchAt",
    "absolute_glob",
    "expand_glob",
    "load_definitions",
]

NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]*")
_TEXT_KEYS = ("fixture", "leak", "grounded", "repair")


@frozen(kw_only=True)
class CanaryDef:
    """One canary: a fabricated answer (or several variants) aimed at its guard."""

    guard: str
    name: str
    path: Path
    every: timedelta | None
    cron: str | None
    expect: Literal["reject", "accept"]
    prompt: str
    fixture: str
    inject: tuple[str, ...]
    leak: str | None
    inject_at: InjectAt
    repair: str | None
    timeout: timedelta
    inject_tool: tuple[ToolTemplate, ...] = ()
    observe: Observation | None = None  # a leak seen, not read: ``leak = { fetched | file = ... }``
    grounded: str | None = None  # controls: text that must reach the answer
    turn_prompts: tuple[str, ...] = ()  # ``[[canary.turn]]`` prompts in order; () for one turn
    inject_turn: int = 0  # the turn (from 0) whose model call gets the fabrication

    @property
    def turns(self) -> tuple[str, ...]:
        """Every turn's prompt in order; a single-turn canary has one, its ``prompt``."""
        return self.turn_prompts or (self.prompt,)

    @property
    def multi_turn(self) -> bool:
        """Whether the agent is asked more than once, in one conversation."""
        return len(self.turns) > 1

    @property
    def variants(self) -> tuple[str | ToolTemplate, ...]:
        """Every variant in the order runs take them: the ``inject`` texts, then the tool calls."""
        return (*self.inject, *self.inject_tool)

    @property
    def key(self) -> str:
        """``guard/name``, the id used on the command line and in the store."""
        return f"{self.guard}/{self.name}"


@frozen(kw_only=True)
class GuardDef:
    """One guard: the log line (or span, or event) that proves it fired, and its canaries."""

    name: str
    description: str
    path: Path
    match: str | dict[str, object] | None  # None: the guard fires only through spans or events
    pattern: re.Pattern[str] | None
    window: timedelta
    grace: timedelta
    canaries: tuple[CanaryDef, ...]
    span: SignalMatch | None = None  # a span received on [traces]
    event: SignalMatch | None = None  # a span event or an OTLP log record received on [traces]

    @property
    def signals(self) -> bool:
        """Whether the guard fires through what the trace receiver gets."""
        return self.span is not None or self.event is not None


def expand_glob(pattern: str, base: Path) -> list[Path]:
    """The files ``pattern`` matches now, sorted; relative globs start at ``base``."""
    return sorted(Path(p) for p in glob.glob(absolute_glob(pattern, base), recursive=True)
                  if Path(p).is_file())


def absolute_glob(pattern: str, base: Path) -> str:
    """``pattern`` with ``~`` expanded and made absolute against ``base`` (kept a glob)."""
    expanded = Path(pattern).expanduser()
    if expanded.is_absolute():
        return str(expanded)
    return str(Path(glob.escape(str(base.absolute()))) / expanded)


def load_definitions(
    globs: Sequence[str], base: Path, *, log_format: str = "text"
) -> tuple[list[GuardDef], list[Problem]]:
    """Load every definition file the globs match; return the valid guards and every problem.

    A guard whose file has any error is left out of the list; warnings do not
    exclude it. A glob that matches no file is a problem with no path (key ``defs``).
    """
    problems: list[Problem] = []
    files: list[Path] = []
    for pattern in globs:
        matched = expand_glob(pattern, base)
        if not matched:
            problems.append(
                Problem(None, "defs", f"{pattern!r} matches no file (relative to {base})")
            )
        files.extend(f for f in matched if f not in files)

    guards: list[GuardDef] = []
    owners: dict[str, Path] = {}
    for path in files:
        data, sink = load_toml(path)
        name, guard = (None, None) if data is None else _parse_file(data, sink, log_format)
        if name is not None:
            if name in owners:
                sink.error(
                    ("guard", "name"),
                    f"guard name {name!r} is already used in {owners[name]}; names must be unique",
                )
                guard = None
            else:
                owners[name] = path
        problems.extend(_by_canary_name(sink.problems, data))
        if guard is not None:
            guards.append(guard)
    return guards, problems


_CANARY_INDEX = re.compile(r"canary\[(\d+)\]")


def _by_canary_name(problems: Sequence[Problem], data: dict[str, object] | None) -> list[Problem]:
    """The problems, each in a ``[[canary]]`` with a name labelled by it: ``canary[fake-url].every``."""
    tables = data.get("canary") if data is not None else None
    if not isinstance(tables, list):
        return list(problems)
    names = [t.get("name") if isinstance(t, dict) else None for t in tables]

    def label(problem: Problem) -> Problem:
        found = _CANARY_INDEX.match(problem.key)
        name = names[int(found.group(1))] if found and int(found.group(1)) < len(names) else None
        if found is None or not isinstance(name, str) or not NAME_RE.fullmatch(name):
            return problem
        return replace(problem, label=f"canary[{name}]{problem.key[found.end():]}")

    return [label(p) for p in problems]


def _name_rule(name: str) -> str:
    """What a name breaks of ``[a-z0-9][a-z0-9_-]*``."""
    if name[:1] in ("-", "_"):
        return "start with a-z or 0-9 (a leading '-' would read as an option on the command line)"
    return "use only a-z, 0-9, '_' and '-'"


def _check_name(sink: Sink, keys: KeyPath, name: str) -> bool:
    """Whether ``name`` is a valid name; reported when it is not."""
    if NAME_RE.fullmatch(name):
        return True
    sink.error(keys, f"{name!r} is not a valid name: {_name_rule(name)}")
    return False


def _canary_tables(sink: Sink, data: dict[str, object]) -> list[dict[str, object]]:
    """The file's ``[[canary]]`` tables; none (reported) when ``canary`` is not an array of tables."""
    raw_canaries = data.get("canary", [])
    if isinstance(raw_canaries, list) and all(isinstance(c, dict) for c in raw_canaries):
        return list(raw_canaries)
    sink.error(("canary",), "expected [[canary]] tables (double brackets), got "
               f"{type_name(raw_canaries)}")
    return []


def _guard_table(top: Table, data: dict[str, object], has_canaries: bool) -> dict[str, object] | None:
    """The file's ``[guard]`` table; None (reported) when it is missing or not one table."""
    sink, raw_guard = top.sink, data.get("guard")
    if raw_guard is None:
        if "guard" in top.misspelled:
            pass  # already reported as an unknown key with "did you mean 'guard'?"
        elif has_canaries:
            sink.error(("canary",), "a canary without a guard: add a [guard] table with "
                       "name and match to this file")
        else:
            sink.error(("guard",), "missing [guard] table: each file defines one guard "
                       "with a name and a match")
        return None
    if not isinstance(raw_guard, dict):
        hint = "one guard per file: write [guard], not [[guard]]" if isinstance(
            raw_guard, list) else f"expected a [guard] table, got {type_name(raw_guard)}"
        sink.error(("guard",), hint)
        return None
    return raw_guard


def _parse_file(
    data: dict[str, object], sink: Sink, log_format: str
) -> tuple[str | None, GuardDef | None]:
    """Parse one file's tables; returns the guard's name (when valid) and the guard (when clean)."""
    top = DEFINITION.open(sink, (), data)
    canary_tables = _canary_tables(sink, data)
    raw_guard = _guard_table(top, data, bool(canary_tables))
    if raw_guard is None:
        return None, None
    g = GUARD.open(sink, ("guard",), raw_guard)
    name: str | None = g.read("name")
    if name is not None and not _check_name(sink, ("guard", "name"), name):
        name = None
    description = g.read("description")
    match: str | dict[str, object] | None = None
    pattern: re.Pattern[str] | None = None
    if g.has("match"):
        match, pattern = check_matcher(sink, ("guard", "match"), g.get("match"), log_format)
    span, event = (parse_signal_match(sink, ("guard", key), g.get(key)) if g.has(key) else None
                   for key in ("span", "event"))
    if not (g.has("match") or g.has("span") or g.has("event")):
        g.missing("match", GUARD.key("match").hint + ", or span / event tables for a guard that "
                  "reports through OpenTelemetry")
    window, grace = g.read("window"), g.read("grace")
    canaries = _parse_canaries(sink, canary_tables, name or "")
    if sink.errors or name is None or (match is None and span is None and event is None):
        return name, None
    return name, GuardDef(name=name, description=description, path=sink.path_or_empty, match=match,
                          pattern=pattern, window=window, grace=grace, canaries=tuple(canaries),
                          span=span, event=event)


def _parse_canaries(sink: Sink, tables: list[dict[str, object]], guard: str) -> list[CanaryDef]:
    """Every ``[[canary]]`` of a guard; names must be unique in the file."""
    canaries: list[CanaryDef] = []
    seen: dict[str, int] = {}
    for index, table in enumerate(tables):
        canary = _parse_canary(sink, index, table, guard)
        cname = table.get("name")
        if isinstance(cname, str) and NAME_RE.fullmatch(cname):
            if cname in seen:
                sink.error(("canary", index, "name"), f"canary name {cname!r} is already "
                           f"used by canary[{seen[cname]}] of this guard")
            seen.setdefault(cname, index)
        if canary is not None:
            canaries.append(canary)
    return canaries


def _parse_canary(sink: Sink, index: int, data: dict[str, object], guard: str) -> CanaryDef | None:
    """Parse one ``[[canary]]`` table; None when it has any error (all of them reported)."""
    keys: KeyPath = ("canary", index)
    errors_before = sink.errors
    t = CANARY.open(sink, keys, data)
    name: str | None = t.read("name")
    if name is not None:
        _check_name(sink, (*keys, "name"), name)
    every, cron = _schedule(t)
    expect: str = t.read("expect")
    if expect not in ("reject", "accept"):
        sink.error((*keys, "expect"), f"expected 'reject' or 'accept' (a control), got {expect!r}",
                   suggestion=t.closest(expect, ("reject", "accept")))
    turns = parse_turns(t)
    prompt, injection = _prompt(t, turns)
    fixture: str = t.read("fixture")
    observe, leak = _leak(t, expect)
    grounded = _grounded(t, expect, name or f"canary[{index}]", observed=observe is not None)
    repair, timeout = t.read("repair"), t.read("timeout")
    _check_texts(t, expect, {"fixture": fixture, "leak": leak, "grounded": grounded, "repair": repair})
    if sink.errors > errors_before or name is None or prompt is None or injection.inject_at is None:
        return None
    if injection.inject is None and injection.inject_tool is None:
        return None
    return CanaryDef(
        guard=guard, name=name, path=sink.path_or_empty, every=every, cron=cron,
        expect="accept" if expect == "accept" else "reject", prompt=prompt, fixture=fixture,
        inject=injection.inject or (), leak=leak, inject_at=injection.inject_at, repair=repair,
        timeout=timeout, inject_tool=injection.inject_tool or (), observe=observe, grounded=grounded,
        turn_prompts=() if turns is None else tuple(p for p in turns.prompts if p is not None),
        inject_turn=0 if turns is None else turns.inject_turn or 0)


def _schedule(t: Fields) -> tuple[timedelta | None, str | None]:
    """``every`` or ``cron``: exactly one of them."""
    every: timedelta | None = t.read("every")
    cron: str | None = t.read("cron")
    if t.has("every") and t.has("cron"):
        t.sink.error((*t.keys, "cron"), "both every and cron are set; keep one of them")
    elif not (t.has("every") or t.has("cron") or t.misspelled & {"every", "cron"}):
        t.missing("every", "a schedule: every = '6h' or cron = '17 */6 * * *'")
    if cron is not None:
        _check_cron(t.sink, (*t.keys, "cron"), cron)
    return every, cron


def _prompt(t: Fields, turns: Turns | None) -> tuple[str | None, Injection]:
    """The first prompt and the injection: of the canary itself, or of its ``[[canary.turn]]``s."""
    if turns is not None:
        return turns.prompts[0], turns.injection or Injection(inject=None, inject_tool=None, inject_at=None)
    prompt: str | None = t.read("prompt")
    if prompt is not None:
        check_prompt(t.sink, (*t.keys, "prompt"), prompt)
    return prompt, parse_injection(t)


def _leak(t: Fields, expect: str) -> tuple[Observation | None, str | None]:
    """``leak``: an observation table, or the text that must not reach the answer; a control's
    ``grounded`` table names the effect that must happen, the same table."""
    raw_leak, raw_grounded = t.get("leak"), t.get("grounded")
    if isinstance(raw_grounded, dict) and expect == "accept":
        if raw_leak is not None:
            t.sink.error((*t.keys, "leak"), "a control names the effect that must happen once: "
                         "keep grounded and drop leak")
        return parse_observation(t, raw_grounded, "grounded"), None
    if isinstance(raw_leak, dict):
        return parse_observation(t, raw_leak), None
    return None, t.string("leak", required=expect == "reject", hint=CANARY.key("leak").hint)


def _check_texts(t: Fields, expect: str, texts: dict[str, str | None]) -> None:
    """Placeholders in every text; an empty leak or grounded text; a leak the same in every run."""
    sink, keys = t.sink, t.keys
    for key in _TEXT_KEYS:
        text = texts[key]
        if text is not None:
            check_placeholders(sink, (*keys, key), text, PLACEHOLDERS)
    leak, grounded = texts["leak"], texts["grounded"]
    if leak is not None and not leak.strip():
        sink.error((*keys, "leak"), "an empty leak text is found in every answer")
    if grounded is not None and not grounded.strip():
        sink.error((*keys, "grounded"), "an empty grounded text is found in every answer")
    if expect == "reject" and leak and not placeholders_in(leak):
        sink.warning((*keys, "leak"), "the leak text has no placeholder, so it is the same in "
                     "every run and an unrelated answer could contain it; use {nonce} or a "
                     "{fake_...} value")


def _grounded(t: Table, expect: str, name: str, *, observed: bool) -> str | None:
    """``grounded``: required of a control whose effect is not observed, refused elsewhere.

    A control of a tool call may instead name the effect that must happen as
    ``grounded = { fetched | file = ... }`` (or ``leak = { ... }``, the same table); a leak
    text on a control is an error.
    """
    sink, keys = t.sink, t.keys
    table = isinstance(t.get("grounded"), dict)
    if table and expect == "accept":
        return None  # the effect that must happen: read as an observation (``_leak``)
    grounded: str | None = None if table else t.string("grounded")
    if table or expect != "accept" or observed:
        if grounded is not None or table:
            sink.error((*keys, "grounded"), "grounded is for controls (expect = 'accept') that "
                       "name a text; this canary names its leak instead")
        return None
    if grounded is None and not t.has("leak") and not t.has("grounded"):
        sink.error((*keys, "grounded"), f"the control {name!r} names no grounded text: set "
                   "grounded to the text that must reach the answer, like '{true_number}', or "
                   "every clean run would prove nothing")
    if t.has("leak"):
        sink.error((*keys, "leak"), f"the control {name!r} (expect = 'accept') names the text "
                   "that must reach the answer as grounded, not leak", suggestion="grounded")
    return grounded


def _check_cron(sink: Sink, keys: KeyPath, cron: str) -> None:
    from apscheduler.triggers.cron import CronTrigger

    try:
        CronTrigger.from_crontab(cron, timezone="UTC")
    except ValueError as exc:
        sink.error(keys, f"{cron!r} is not a valid cron expression (five fields: minute hour "
                   f"day month weekday, like '17 */6 * * *'): {exc}")
