"""Rules that recognise guard firings in log lines, with literal prefilters.

A rule is a regex (text logs) or a table of JSON fields that must all be equal
(jsonl logs). Lines that match nothing are the vast majority, so each rule
carries the longest literal its regex requires: a buffer is searched for that
literal with ``bytes.find`` (memchr speed) and only the lines that contain it
are decoded and matched for real.

Matching for real runs on ``re``, except for patterns of a shape that can backtrack
for ages (``collectors.patterns.catastrophic``), or for a power of the line's length
(``collectors.shapes.polynomial``), or that the native engine can only
prefilter (lookaround, backreferences): those run on ``regex`` (in its
``re``-compatible VERSION0 mode) with a time budget per line, so such a pattern
costs at most the budget per line instead of stopping the scan.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from collectors.patterns import prefilter
from collectors.shapes import catastrophic, polynomial

_sre: Any = importlib.import_module("re._parser")
_LITERAL = _sre.LITERAL
_SUBPATTERN = _sre.SUBPATTERN
_MAX_REPEAT = _sre.MAX_REPEAT
_MIN_REPEAT = _sre.MIN_REPEAT

#: Seconds one pattern may spend on one line before the line is skipped for it.
LINE_BUDGET = 0.05

#: Bytes a JSON encoder may escape; a value containing any of them cannot prefilter.
_JSON_SAFE = re.compile(r'[ -!#-\[\]-~]+')


@dataclass(frozen=True)
class Literal:
    """A byte string every matching line contains; ``icase`` means compare lowercased."""

    text: bytes
    icase: bool = False


def required_literal(pattern: str, flags: int = 0) -> Literal | None:
    """The longest literal run a match of ``pattern`` must contain, or None.

    Only runs at the top level of the pattern (or inside plain groups) count, so
    the literal is a necessary condition for a match. Under IGNORECASE only ASCII
    runs are kept, compared against the lowercased line.
    """
    try:
        parsed = _sre.parse(pattern, flags)
    except re.error:
        return None
    icase = bool(parsed.state.flags & re.IGNORECASE)
    runs: list[str] = []
    _collect_runs(list(parsed.data), runs, icase)
    best = max(runs, key=len, default="")
    if not best:
        return None
    if icase:
        if not best.isascii():
            return None
        return Literal(best.lower().encode("ascii"), icase=True)
    return Literal(best.encode("utf-8"))


def _collect_runs(items: list[tuple[Any, Any]], runs: list[str], icase: bool) -> None:
    current: list[str] = []

    def flush() -> None:
        if current:
            runs.append("".join(current))
            current.clear()

    for op, av in items:
        if op is _LITERAL:
            current.append(chr(av))
            continue
        flush()
        if op is _SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            scoped_icase = (icase or bool(add_flags & re.IGNORECASE)) and not (
                del_flags & re.IGNORECASE
            )
            if scoped_icase == icase:
                _collect_runs(list(sub.data), runs, icase)
        elif op in (_MAX_REPEAT, _MIN_REPEAT):
            low, _high, sub = av
            if low >= 1:
                _collect_runs(list(sub.data), runs, icase)
    flush()


@dataclass(frozen=True)
class Rule:
    """One named matcher: a regex for text lines, or JSON fields that must all be equal."""

    name: str
    pattern: re.Pattern[str] | None = None
    fields: Mapping[str, object] | None = None
    literal: Literal | None = field(default=None, compare=False)
    bounded: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def regex(cls, name: str, pattern: str | re.Pattern[str]) -> Rule:
        """A text rule: ``pattern`` is searched in each decoded line."""
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
        bounded = bounded_compile(compiled.pattern, compiled.flags) if needs_budget(compiled) else None
        literal = required_literal(compiled.pattern, compiled.flags)
        return cls(name, compiled, None, literal, bounded)

    def search(self, text: str, obj: Mapping[str, object] | None, budget: float) -> bool | None:
        """Like ``matches``, but None when the pattern spent more than ``budget`` s on the line."""
        if self.bounded is None or not text:  # re on an empty line takes no time
            return self.matches(text, obj)
        try:
            found = self.bounded.search(text, timeout=budget) is not None
        except TimeoutError:
            return None
        if text.isascii() and _SEPARATORS.search(text) is None:
            return found
        # Outside plain ASCII, ``regex`` and ``re`` can disagree (``\s`` and U+001C..U+001F, ``\w``
        # and combining marks): ``re``, whose meaning the definitions promise, gives the answer.
        # Its backtracking shapes were refused by ``canary check``.
        return self.matches(text, obj)

    @classmethod
    def json_fields(cls, name: str, fields: Mapping[str, object]) -> Rule:
        """A jsonl rule: every field (dotted keys reach into objects) must equal its value."""
        literal = None
        for value in fields.values():
            if (
                isinstance(value, str)
                and _JSON_SAFE.fullmatch(value)
                and (literal is None or len(value) > len(literal.text))
            ):
                literal = Literal(value.encode("ascii"))
        return cls(name, None, dict(fields), literal)

    def matches(self, text: str, obj: Mapping[str, object] | None) -> bool:
        """Whether a decoded line (and its parsed JSON object, for jsonl rules) matches."""
        if self.pattern is not None:
            return self.pattern.search(text) is not None
        if obj is None or self.fields is None:
            return False
        return all(_lookup(obj, key) == value for key, value in self.fields.items())


#: Characters ``re`` counts as whitespace and ``regex`` does not.
_SEPARATORS = re.compile(r"[\x1c-\x1f]")


def bounded_compile(source: str, flags: int) -> Any:
    """``source`` compiled by ``regex`` (VERSION0: ``re``'s syntax and meaning), whose searches
    take a timeout; None if it will not compile there. Imported here, on first need."""
    import regex  # 0.1 s of import that most configurations never need

    try:
        return regex.compile(source, flags | regex.VERSION0)
    except (regex.error, ValueError):  # pragma: no cover - re accepted it
        return None


def needs_budget(pattern: re.Pattern[str]) -> bool:
    """Whether ``pattern`` is matched under the per-line time budget (see the module docstring)."""
    if catastrophic(pattern.pattern, pattern.flags) is not None:
        return True
    if polynomial(pattern.pattern, pattern.flags) is not None:
        return True
    try:
        return not prefilter(pattern).exact
    except ValueError:
        return True


_MISSING = object()


def _lookup(obj: Mapping[str, object], key: str) -> object:
    if key in obj:
        return obj[key]
    node: object = obj
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def parse_json_line(text: str) -> dict[str, Any] | None:
    """The JSON object on a jsonl line, or None for anything else (garbled lines included).

    A line Python's reader cannot take whole keeps its fields: an integer too long to be turned into
    an int is read as a float, and an array or object nested deeper than ``NEST_MAX`` as null (the
    reader recurses once per level, and would fail on the whole line)."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    try:
        obj = json.loads(stripped, parse_int=_int)
    except RecursionError:
        try:
            obj = json.loads(_shallow(stripped), parse_int=_int)
        except (ValueError, RecursionError):
            return None
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


#: How deep a jsonl line's arrays and objects are read; deeper ones are read as null.
NEST_MAX = 64
#: A JSON string (skipped whole: brackets and escapes in it are its text), or a bracket.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def _int(digits: str) -> int | float:
    """A JSON integer: an int, or a float for one longer than Python turns into an int from text."""
    return int(digits) if len(digits) <= 4300 else float(digits)


def _shallow(text: str) -> str:
    """``text`` with every array and object nested deeper than ``NEST_MAX`` written ``null``."""
    parts: list[str] = []
    depth = kept = 0
    cut: int | None = None
    for token in _TOKENS.finditer(text):
        bracket = token.group()
        if bracket in ("[", "{"):
            depth += 1
            if depth == NEST_MAX + 1:
                cut = token.start()
        elif bracket in ("]", "}"):
            depth -= 1
            if depth == NEST_MAX and cut is not None:
                parts += [text[kept:cut], "null"]
                kept, cut = token.end(), None
    return "".join([*parts, text[kept:]])
