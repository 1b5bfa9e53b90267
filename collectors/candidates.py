"""The pure-Python candidate search, for where the native engine cannot be installed.

Literals every match must contain are searched with ``bytes.find`` (memchr
speed), several at once where they share a substring; rules without one are
searched in the whole buffer at once when it is plain ASCII (a line's text is
then its bytes), else marked on every line. Like ``engine.NativeSet``, it only
proposes lines: the matcher confirms each one.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

from collectors.rules import Rule, bounded_compile

#: Shortest substring shared by several literals that is searched once for all of them.
MIN_ANCHOR = 8
#: An anchor met more than once per this many bytes of a buffer gives way to per-literal search.
ANCHOR_DENSITY = 4096


class PythonCandidates:
    """Candidate lines of every rule, found with literal searches and whole-buffer regexes."""

    def __init__(self, rules: Sequence[Rule], budget: float) -> None:
        self.budget = budget
        indexed = list(enumerate(rules))
        fast = [(i, r) for i, r in indexed if r.literal is not None]
        self._groups, self._fast = _anchor_groups(fast)
        self._slow = [(i, r) for i, r in indexed if r.literal is None]
        self._slow_multiline: dict[int, Any] = {
            i: _multiline(r.pattern) for i, r in self._slow if r.pattern is not None
        }

    def lines(self, buf: bytes, lo: int, hi: int) -> dict[int, set[int]]:
        """Line start -> rule indexes, for the complete lines in [lo, hi) that may match."""
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
        # ``regex`` and ``re`` read plain ASCII alike, but for U+001C..U+001F (whitespace to ``re``).
        chunk_ok = buf.isascii() and b"\r" not in buf and _SEPARATORS.search(buf) is None
        text = buf.decode("ascii") if chunk_ok else None
        every_line: list[int] = []
        for index, _rule in self._slow:
            multiline = self._slow_multiline.get(index)
            if text is None or multiline is None:
                every_line.append(index)
                continue
            if not _search_lines(multiline, text, index, candidates, self.budget * 20):
                every_line.append(index)  # slow on this buffer: leave it to the per-line budget
        if every_line:
            mark_every_line(buf, 0, len(buf), every_line, candidates)



_SEPARATORS = re.compile(rb"[\x1c-\x1f]")


def mark_every_line(
    buf: bytes, lo: int, hi: int, indexes: list[int], candidates: dict[int, set[int]]
) -> None:
    """Mark rules ``indexes`` on every line of ``buf[lo:hi]``."""
    start = lo
    while start < hi:
        end = buf.find(b"\n", start, hi)
        if end < 0:
            end = hi
        candidates.setdefault(start, set()).update(indexes)
        start = end + 1


def _search_lines(
    multiline: Any, text: str, index: int, candidates: dict[int, set[int]], budget: float
) -> bool:
    """Mark each line where a whole-text search finds a match start; False if over budget.

    A match may run on past its line (``[^x]+`` crosses newlines), so each search starts
    again at the line after the one the last match started in.
    """
    deadline = time.monotonic() + budget
    pos = 0
    size = len(text)
    while pos < size:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            m = multiline.search(text, pos, timeout=left)
        except TimeoutError:
            return False
        if m is None or m.start() >= size:
            return True
        start = text.rfind("\n", 0, m.start()) + 1
        candidates.setdefault(start, set()).add(index)
        newline = text.find("\n", m.start())
        pos = newline + 1 if newline >= 0 else size
    return True


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
    source = pattern.pattern if pattern is not None else ""
    # Anchors to the whole text, and lookaround, see past a line's ends in a whole-text search.
    if pattern is None or any(x in source for x in ("\\A", "\\Z", "(?=", "(?!", "(?<=", "(?<!")):
        return None
    return bounded_compile(pattern.pattern, pattern.flags | re.MULTILINE)
