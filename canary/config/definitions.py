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
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Literal

from canary.config.fabrications import Observation, ToolTemplate, parse_observation
from canary.config.injection import (
    InjectAt,
    Injection,
    MatchAt,
    check_prompt,
    parse_injection,
    parse_turns,
)
from canary.config.placeholders import PLACEHOLDERS, placeholders_in
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
TOP_KEYS = ("guard", "canary")
GUARD_KEYS = ("name", "description", "match", "window", "grace")
CANARY_KEYS = (
    "name",
    "every",
    "cron",
    "expect",
    "prompt",
    "fixture",
    "inject",
    "inject_tool",
    "leak",
    "grounded",
    "inject_at",
    "repair",
    "timeout",
    "turn",
)
_TEXT_KEYS = ("fixture", "leak", "grounded", "repair")


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class GuardDef:
    """One guard: the log line that proves it fired, and its canaries."""

    name: str
    description: str
    path: Path
    match: str | dict[str, object]
    pattern: re.Pattern[str] | None
    window: timedelta
    grace: timedelta
    canaries: tuple[CanaryDef, ...]


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
        problems.extend(sink.problems)
        if guard is not None:
            guards.append(guard)
    return guards, problems


def _name_rule(name: str) -> str:
    """What a name breaks of ``[a-z0-9][a-z0-9_-]*``."""
    if name[:1] in ("-", "_"):
        return "start with a-z or 0-9 (a leading '-' would read as an option on the command line)"
    return "use only a-z, 0-9, '_' and '-'"


def _parse_file(
    data: dict[str, object], sink: Sink, log_format: str
) -> tuple[str | None, GuardDef | None]:
    """Parse one file's tables; returns the guard's name (when valid) and the guard (when clean)."""
    top = Table(sink, (), data, TOP_KEYS)
    raw_guard = data.get("guard")
    raw_canaries = data.get("canary", [])
    canary_tables: list[dict[str, object]] = []
    if isinstance(raw_canaries, list) and all(isinstance(c, dict) for c in raw_canaries):
        canary_tables = list(raw_canaries)
    else:
        sink.error(("canary",), "expected [[canary]] tables (double brackets), got "
                   f"{type_name(raw_canaries)}")

    if raw_guard is None:
        if "guard" in top.misspelled:
            pass  # already reported as an unknown key with "did you mean 'guard'?"
        elif canary_tables:
            sink.error(("canary",), "a canary without a guard: add a [guard] table with "
                       "name and match to this file")
        else:
            sink.error(("guard",), "missing [guard] table: each file defines one guard "
                       "with a name and a match")
        return None, None
    if not isinstance(raw_guard, dict):
        hint = "one guard per file: write [guard], not [[guard]]" if isinstance(
            raw_guard, list) else f"expected a [guard] table, got {type_name(raw_guard)}"
        sink.error(("guard",), hint)
        return None, None

    g = Table(sink, ("guard",), raw_guard, GUARD_KEYS)
    name = g.string("name", required=True, hint="the guard's name, like 'citation'")
    if name is not None and not NAME_RE.fullmatch(name):
        sink.error(("guard", "name"), f"{name!r} is not a valid name: {_name_rule(name)}")
        name = None
    description = g.string("description") or ""
    raw_match = g.get("match")
    match: str | dict[str, object] | None = None
    pattern: re.Pattern[str] | None = None
    if raw_match is None:
        g.missing("match", "the regex (text logs) or fields (jsonl logs) of the guard's log line")
    else:
        match, pattern = check_matcher(sink, ("guard", "match"), raw_match, log_format)
    window = g.duration("window", timedelta(hours=24))
    grace = g.duration("grace", timedelta(hours=1))

    canaries: list[CanaryDef] = []
    seen: dict[str, int] = {}
    for index, table in enumerate(canary_tables):
        canary = _parse_canary(sink, index, table, name or "")
        cname = table.get("name")
        if isinstance(cname, str) and NAME_RE.fullmatch(cname):
            if cname in seen:
                sink.error(("canary", index, "name"), f"canary name {cname!r} is already "
                           f"used by canary[{seen[cname]}] of this guard")
            seen.setdefault(cname, index)
        if canary is not None:
            canaries.append(canary)

    if sink.errors or name is None or match is None or window is None or grace is None:
        return name, None
    return name, GuardDef(name, description, sink.path_or_empty, match, pattern, window, grace,
                          tuple(canaries))


def _parse_canary(sink: Sink, index: int, data: dict[str, object], guard: str) -> CanaryDef | None:
    """Parse one ``[[canary]]`` table; None when it has any error (all of them reported)."""
    keys: KeyPath = ("canary", index)
    errors_before = sink.errors
    t = Table(sink, keys, data, CANARY_KEYS)

    name = t.string("name", required=True, hint="the canary's name, like 'fake-url'")
    if name is not None and not NAME_RE.fullmatch(name):
        sink.error((*keys, "name"), f"{name!r} is not a valid name: {_name_rule(name)}")
    every = t.duration("every", None)
    cron = t.string("cron")
    if t.has("every") and t.has("cron"):
        sink.error((*keys, "cron"), "both every and cron are set; keep one of them")
    elif not (t.has("every") or t.has("cron") or t.misspelled & {"every", "cron"}):
        t.missing("every", "a schedule: every = '6h' or cron = '17 */6 * * *'")
    if cron is not None:
        _check_cron(sink, (*keys, "cron"), cron)

    expect = t.string("expect") or "reject"
    if expect not in ("reject", "accept"):
        sink.error((*keys, "expect"), f"expected 'reject' or 'accept' (a control), got {expect!r}",
                   suggestion=t.closest(expect, ("reject", "accept")))
    turns = parse_turns(t)
    if turns is None:
        prompt = t.string("prompt", required=True,
                          hint="the prompt that leads the agent to the guarded step")
        if prompt is not None:
            check_prompt(sink, (*keys, "prompt"), prompt)
        injection = parse_injection(t)
    else:
        prompt = turns.prompts[0]
        injection = turns.injection or Injection(None, None, None)
    fixture = t.string("fixture") or ""
    inject, inject_tool, inject_at = injection.inject, injection.inject_tool, injection.inject_at
    raw_leak = t.get("leak")
    observe = parse_observation(t, raw_leak) if isinstance(raw_leak, dict) else None
    leak = None if isinstance(raw_leak, dict) else t.string(
        "leak", required=expect == "reject",
        hint="the text that must not reach the answer, like '{nonce}.example.org'")
    grounded = _grounded(t, expect, name or f"canary[{index}]", observed=observe is not None)
    repair = t.string("repair")
    timeout = t.duration("timeout", timedelta(seconds=120))

    texts = {"fixture": fixture, "leak": leak, "grounded": grounded, "repair": repair}
    for key in _TEXT_KEYS:
        text = texts[key]
        if text is not None:
            check_placeholders(sink, (*keys, key), text, PLACEHOLDERS)
    if leak is not None and not leak.strip():
        sink.error((*keys, "leak"), "an empty leak text is found in every answer")
    if grounded is not None and not grounded.strip():
        sink.error((*keys, "grounded"), "an empty grounded text is found in every answer")
    if expect == "reject" and leak and not placeholders_in(leak):
        sink.warning((*keys, "leak"), "the leak text has no placeholder, so it is the same in "
                     "every run and an unrelated answer could contain it; use {nonce} or a "
                     "{fake_...} value")

    if sink.errors > errors_before or name is None or prompt is None:
        return None
    prompts = () if turns is None else tuple(p for p in turns.prompts if p is not None)
    if inject is None and inject_tool is None:
        return None
    if inject_at is None or timeout is None:
        return None
    return CanaryDef(guard, name, sink.path_or_empty, every, cron,
                     "accept" if expect == "accept" else "reject", prompt, fixture, inject or (),
                     leak, inject_at, repair, timeout, inject_tool or (), observe,
                     grounded, prompts, 0 if turns is None else turns.inject_turn or 0)


def _grounded(t: Table, expect: str, name: str, *, observed: bool) -> str | None:
    """``grounded``: required of a control whose effect is not observed, refused elsewhere.

    A control of a tool call may instead name the effect that must happen as
    ``leak = { fetched | file = ... }``; a leak text on a control is an error.
    """
    sink, keys = t.sink, t.keys
    grounded = t.string("grounded")
    if expect != "accept" or observed:
        if grounded is not None:
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
