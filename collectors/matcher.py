"""Which complete lines of a buffer fire which guard: find candidate lines, confirm each.

Candidates come from one Hyperscan pass over the buffer for every rule at once
(``collectors.engine``), or, where the native engine is missing, from literal
prefilters and whole-buffer searches in Python. Either way each candidate line
is decoded and confirmed rule by rule with Python-compatible semantics, under a
time budget per line, so both engines give the same hits. Lines are
``\\n``-terminated; a trailing ``\\r`` is dropped, a UTF-8 BOM at the very start of a
file is ignored, and invalid UTF-8 is decoded with replacement characters.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import regex as _regex

from collectors import engine as native
from collectors.patterns import prefilter
from collectors.rules import LINE_BUDGET, Rule, parse_json_line
from collectors.timestamps import TimestampParser

#: Called with the file offset of a line and what went wrong with it.
Warn = Callable[[int, str], None]
Engine = Literal["auto", "hyperscan", "python"]

BOM = b"\xef\xbb\xbf"
#: Characters of a matched line kept in a hit.
KEEP_CHARS = 4096
#: Shortest substring shared by several literals that is searched once for all of them.
MIN_ANCHOR = 8
#: An anchor met more than once per this many bytes of a buffer gives way to per-literal search.
ANCHOR_DENSITY = 4096


@dataclass(frozen=True, slots=True)
class Hit:
    """A line that fired at least one guard or counts as agent activity."""

    offset: int
    text: str
    guards: tuple[str, ...]
    activity: bool
    ts: datetime | None


class Matcher:
    """Matches buffers of complete lines against every guard rule and the activity rule."""

    def __init__(
        self,
        rules: Sequence[Rule],
        activity: Rule | None = None,
        *,
        timestamps: TimestampParser | None = None,
        engine: Engine = "auto",
        budget: float = LINE_BUDGET,
        cache_dir: Path | None = None,
    ) -> None:
        """``engine``: "hyperscan" (an error where it is missing), "python", or "auto" (either).

        ``cache_dir`` keeps compiled native databases between runs.
        """
        self.rules = list(rules)
        self.activity = activity
        self.budget = budget
        self._all: list[Rule] = [*self.rules, *([activity] if activity else [])]
        self._timestamps = timestamps or TimestampParser()
        self._needs_json = any(r.fields is not None for r in self._all)
        self._native: native.NativeSet | None = None
        self._every_line: list[int] = []
        #: Rules whose native report on an ASCII line without a trailing \r is the answer.
        self._trusted: frozenset[int] = frozenset()
        if engine == "hyperscan" and not native.available():
            raise RuntimeError("the hyperscan package is not installed")
        if engine != "python" and native.available():
            self._native, self._every_line = _native_set(self._all, cache_dir)
            self._trusted = frozenset(
                i for i, r in enumerate(self._all)
                if r.pattern is not None and i not in self._every_line and _exact_ascii(r.pattern)
            )
            return
        fast = [(i, r) for i, r in enumerate(self._all) if r.literal is not None]
        self._groups, self._fast = _anchor_groups(fast)
        self._slow = [(i, r) for i, r in enumerate(self._all) if r.literal is None]
        self._slow_multiline: dict[int, Any] = {
            i: _multiline(r.pattern) for i, r in self._slow if r.pattern is not None
        }

    @property
    def engine(self) -> str:
        """The engine that finds candidate lines: "hyperscan" or "python"."""
        return "python" if self._native is None else "hyperscan"

    def scan(
        self, buf: bytes, base: int, lo: int = 0, hi: int | None = None, *, warn: Warn | None = None
    ) -> list[Hit]:
        """Hits in the complete lines ``buf[lo:hi]``, at offsets ``base`` + index, in file order.

        A line on which a pattern spends more than the budget is not counted for that
        pattern, and ``warn`` hears of it.
        """
        if hi is None:
            hi = len(buf)
        if self._native is not None:
            first = lo + len(BOM) if base + lo == 0 and buf.startswith(BOM, lo) else lo
            candidates = self._native.lines(buf, first, hi)
            if first != lo and first in candidates:
                candidates[lo] = candidates.pop(first)
            if self._every_line:
                _mark_every_line(buf, lo, hi, self._every_line, candidates)
        else:
            candidates = self._python_candidates(buf, lo, hi)
        if not candidates:
            return []
        confirmed = (
            self._confirm(buf, base, start, candidates[start], warn) for start in sorted(candidates)
        )
        return [hit for hit in confirmed if hit is not None]

    def _python_candidates(self, buf: bytes, lo: int, hi: int) -> dict[int, set[int]]:
        candidates: dict[int, set[int]] = {}
        lowered: bytes | None = None
        for anchor, members in self._groups:
            budget = (hi - lo) // ANCHOR_DENSITY
            pos = buf.find(anchor, lo, hi)
            while pos >= 0:
                start = max(buf.rfind(b"\n", lo, pos) + 1, lo)
                if budget == 0:  # too common here: each literal from this line on
                    for index, needle in members:
                        _find_lines(buf, buf, needle, index, lo=start, hi=hi, candidates=candidates)
                    break
                budget -= 1
                end = buf.find(b"\n", pos, hi)
                if end < 0:
                    end = hi
                for index, needle in members:
                    if buf.find(needle, start, end) >= 0:
                        candidates.setdefault(start, set()).add(index)
                pos = buf.find(anchor, end + 1, hi)
        for index, rule in self._fast:
            lit = rule.literal
            assert lit is not None
            if lit.icase:
                if lowered is None:
                    lowered = buf.lower()
                hay = lowered
            else:
                hay = buf
            _find_lines(buf, hay, lit.text, index, lo=lo, hi=hi, candidates=candidates)
        if self._slow:
            if lo or hi != len(buf):
                within: dict[int, set[int]] = {}
                self._slow_candidates(buf[lo:hi], within)
                for start, indexes in within.items():
                    candidates.setdefault(lo + start, set()).update(indexes)
            else:
                self._slow_candidates(buf, candidates)
        return candidates

    def _slow_candidates(self, buf: bytes, candidates: dict[int, set[int]]) -> None:
        """Lines of rules without a literal: one multiline search of the buffer where the
        buffer is plain ASCII (so a line's text is its bytes), else every line."""
        chunk_ok = buf.isascii() and b"\r" not in buf
        text = buf.decode("ascii") if chunk_ok else None
        every_line: list[int] = []
        for index, _rule in self._slow:
            multiline = self._slow_multiline.get(index)
            if text is None or multiline is None:
                every_line.append(index)
                continue
            try:
                for m in multiline.finditer(text, timeout=self.budget * 20):
                    if m.start() >= len(text):
                        break  # the empty "line" after the final newline
                    start = text.rfind("\n", 0, m.start()) + 1
                    candidates.setdefault(start, set()).add(index)
            except TimeoutError:  # slow on this buffer: leave it to the per-line budget
                every_line.append(index)
        if every_line:
            _mark_every_line(buf, 0, len(buf), every_line, candidates)

    def _confirm(
        self, buf: bytes, base: int, start: int, indexes: set[int], warn: Warn | None
    ) -> Hit | None:
        end = buf.find(b"\n", start)
        raw = buf[start : end if end >= 0 else len(buf)]
        plain = raw.isascii()
        if raw.endswith(b"\r"):
            raw = raw[:-1]
            plain = False
        if base + start == 0 and raw.startswith(BOM):
            raw = raw[len(BOM) :]
        text = raw.decode("utf-8", "replace")
        trusted = self._trusted if plain else frozenset()
        obj: dict[str, Any] | None = parse_json_line(text) if self._needs_json else None
        guards: list[str] = []
        activity = False
        for index in sorted(indexes):
            rule = self._all[index]
            found = True if index in trusted else rule.search(text, obj, self.budget)
            if found is None:
                if warn is not None:
                    warn(base + start, f"the pattern of {rule.name!r} took over {self.budget:g} s "
                         "on this line; the line is not counted for it")
                continue
            if not found:
                continue
            if rule is self.activity:
                activity = True
            else:
                guards.append(rule.name)
        if not guards and not activity:
            return None
        ts = self._timestamps.parse(raw, obj)
        return Hit(base + start, text[:KEEP_CHARS], tuple(guards), activity, ts)


def _native_set(
    rules: list[Rule], cache_dir: Path | None
) -> tuple[native.NativeSet, list[int]]:
    """The native set for ``rules``, and the rules it cannot prefilter (checked on every line)."""
    expressions: list[tuple[int, bytes]] = []
    for index, rule in enumerate(rules):
        expression = _native_expression(rule)
        if expression is not None:
            expressions.append((index, expression))
    try:
        return native.NativeSet(expressions, cache_dir=cache_dir), _left_out(rules, expressions)
    except native.NativeError:  # find the expressions Hyperscan refuses; keep the others
        kept: list[tuple[int, bytes]] = []
        for index, expression in expressions:
            for candidate in (expression, _literal_expression(rules[index])):
                if candidate is not None and native.compiles(candidate) is None:
                    kept.append((index, candidate))
                    break
        return native.NativeSet(kept, cache_dir=cache_dir), _left_out(rules, kept)


def _exact_ascii(pattern: re.Pattern[str]) -> bool:
    try:
        return prefilter(pattern).exact_ascii
    except ValueError:
        return False


def _left_out(rules: list[Rule], expressions: list[tuple[int, bytes]]) -> list[int]:
    taken = {i for i, _ in expressions}
    return [i for i in range(len(rules)) if i not in taken]


def _native_expression(rule: Rule) -> bytes | None:
    if rule.pattern is not None:
        try:
            return prefilter(rule.pattern).expression
        except (ValueError, re.error):
            return _literal_expression(rule)
    return _literal_expression(rule)


def _literal_expression(rule: Rule) -> bytes | None:
    """A prefilter from the rule's required literal alone (Hyperscan refused the full one)."""
    lit = rule.literal
    if lit is None:
        return None
    if lit.icase:
        return b"".join(
            b"[\\x%02x\\x%02x]" % (c, ord(chr(c).upper())) if chr(c).isalpha() else b"\\x%02x" % c
            for c in lit.text
        ) + b"|[\\x80-\\xff]"  # a non-ASCII character may case-fold into the literal
    return b"".join(b"\\x%02x" % c for c in lit.text)


def _mark_every_line(
    buf: bytes, lo: int, hi: int, indexes: list[int], candidates: dict[int, set[int]]
) -> None:
    start = lo
    while start < hi:
        end = buf.find(b"\n", start, hi)
        if end < 0:
            end = hi
        candidates.setdefault(start, set()).update(indexes)
        start = end + 1


def _find_lines(
    buf: bytes, hay: bytes, needle: bytes, index: int, *, lo: int, hi: int,
    candidates: dict[int, set[int]],
) -> None:
    """Mark rule ``index`` on every line of ``buf[lo:hi]`` whose ``hay`` holds ``needle``."""
    pos = hay.find(needle, lo, hi)
    while pos >= 0:
        start = max(buf.rfind(b"\n", lo, pos) + 1, lo)
        end = buf.find(b"\n", pos, hi)
        if end < 0:
            end = hi
        candidates.setdefault(start, set()).add(index)
        pos = hay.find(needle, end + 1, hi)


def _anchor_groups(
    fast: list[tuple[int, Rule]],
) -> tuple[list[tuple[bytes, list[tuple[int, bytes]]]], list[tuple[int, Rule]]]:
    """Group case-sensitive literals by a substring several share (``: rejected `` in ``X: rejected``).

    Greedy: the substring of at least MIN_ANCHOR bytes contained in the most
    remaining literals (then the longest) anchors a group, until no substring
    is shared. Returns the groups and the rules still searched one by one.
    """
    left = [(i, r.literal.text) for i, r in fast if r.literal is not None and not r.literal.icase]
    groups: list[tuple[bytes, list[tuple[int, bytes]]]] = []
    while len(left) >= 2:
        best: tuple[int, int, bytes] = (1, 0, b"")
        for _, text in left:
            for a in range(len(text) - MIN_ANCHOR + 1):
                for b in range(a + MIN_ANCHOR, len(text) + 1):
                    sub = text[a:b]
                    shared = sum(1 for _, other in left if sub in other)
                    if (shared, len(sub)) > best[:2]:
                        best = (shared, len(sub), sub)
        if best[0] < 2:
            break
        anchor = best[2]
        groups.append((anchor, [(i, t) for i, t in left if anchor in t]))
        left = [(i, t) for i, t in left if anchor not in t]
    grouped = {i for _, members in groups for i, _ in members}
    return groups, [(i, r) for i, r in fast if i not in grouped]


def _multiline(pattern: re.Pattern[str] | None) -> Any:
    """The pattern with MULTILINE, for whole-buffer search; None where that changes its meaning."""
    if pattern is None or "\\A" in pattern.pattern or "\\Z" in pattern.pattern:
        return None
    try:
        return _regex.compile(pattern.pattern, pattern.flags | re.MULTILINE | _regex.VERSION0)
    except (_regex.error, ValueError):  # pragma: no cover - re accepted it
        return None
