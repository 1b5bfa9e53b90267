"""Turning buffers of log bytes into hits: which lines fired which guard.

Pure functions and small state machines, no I/O: the tailer and the audit
feed them bytes as they read them. Lines are ``\\n``-terminated; a trailing
``\\r`` is dropped, a UTF-8 BOM at the very start of a file is ignored, and
invalid UTF-8 is decoded with replacement characters.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from collectors.rules import Rule, parse_json_line
from collectors.timestamps import TimestampParser

BOM = b"\xef\xbb\xbf"
#: Longest line kept for matching; the rest of a longer line is consumed and dropped.
MAX_LINE = 1 << 20
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


@dataclass(frozen=True, slots=True)
class FeedResult:
    """What one ``LineScanner.feed`` consumed: hits, complete lines, bytes of complete lines."""

    hits: list[Hit]
    lines: int
    consumed: int


class Matcher:
    """Matches buffers of complete lines against every guard rule and the activity rule."""

    def __init__(
        self,
        rules: Sequence[Rule],
        activity: Rule | None = None,
        *,
        timestamps: TimestampParser | None = None,
    ) -> None:
        self.rules = list(rules)
        self.activity = activity
        self._all: list[Rule] = [*self.rules, *([activity] if activity else [])]
        self._timestamps = timestamps or TimestampParser()
        self._needs_json = any(r.fields is not None for r in self._all)
        fast = [(i, r) for i, r in enumerate(self._all) if r.literal is not None]
        self._groups, self._fast = _anchor_groups(fast)
        self._slow = [(i, r) for i, r in enumerate(self._all) if r.literal is None]
        self._slow_multiline: dict[int, re.Pattern[str] | None] = {
            i: _multiline(r.pattern) for i, r in self._slow if r.pattern is not None
        }

    def scan(self, buf: bytes, base: int, lo: int = 0, hi: int | None = None) -> list[Hit]:
        """Hits in the complete lines ``buf[lo:hi]``, at offsets ``base`` + index, in file order."""
        if hi is None:
            hi = len(buf)
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
        if not candidates:
            return []
        confirmed = (self._confirm(buf, base, start, candidates[start]) for start in sorted(candidates))
        return [hit for hit in confirmed if hit is not None]

    def _slow_candidates(self, buf: bytes, candidates: dict[int, set[int]]) -> None:
        chunk_ok = buf.isascii() and b"\r" not in buf
        text = buf.decode("ascii") if chunk_ok else None
        every_line: list[int] = []
        for index, rule in self._slow:
            multiline = self._slow_multiline.get(index)
            if text is None or multiline is None or rule.pattern is None:
                every_line.append(index)
                continue
            pos = 0
            while (m := multiline.search(text, pos)) is not None:
                start = text.rfind("\n", 0, m.start()) + 1
                end = text.find("\n", m.start())
                if end < 0:
                    end = len(text)
                if rule.pattern.search(text, start, end) is not None:
                    candidates.setdefault(start, set()).add(index)
                    pos = end + 1
                else:
                    pos = m.start() + 1
                if pos > len(text):
                    break
        if every_line:
            start = 0
            size = len(buf)
            while start < size:
                end = buf.find(b"\n", start)
                if end < 0:
                    end = size
                candidates.setdefault(start, set()).update(every_line)
                start = end + 1

    def _confirm(self, buf: bytes, base: int, start: int, indexes: set[int]) -> Hit | None:
        end = buf.find(b"\n", start)
        raw = buf[start : end if end >= 0 else len(buf)]
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if base + start == 0 and raw.startswith(BOM):
            raw = raw[len(BOM) :]
        text = raw.decode("utf-8", "replace")
        obj: dict[str, Any] | None = parse_json_line(text) if self._needs_json else None
        guards: list[str] = []
        activity = False
        for index in sorted(indexes):
            rule = self._all[index]
            if not rule.matches(text, obj):
                continue
            if rule is self.activity:
                activity = True
            else:
                guards.append(rule.name)
        if not guards and not activity:
            return None
        ts = self._timestamps.parse(raw, obj)
        return Hit(base + start, text[:KEEP_CHARS], tuple(guards), activity, ts)


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


def _multiline(pattern: re.Pattern[str] | None) -> re.Pattern[str] | None:
    """The pattern with MULTILINE, for whole-buffer search; None where that changes its meaning."""
    if pattern is None or "\\A" in pattern.pattern or "\\Z" in pattern.pattern:
        return None
    return re.compile(pattern.pattern, pattern.flags | re.MULTILINE)


class LineScanner:
    """Splits a stream of bytes into lines and matches the complete ones.

    ``offset`` is always the end of the last complete line consumed: the only
    position it is safe to commit, since a partial last line is never counted.
    A line longer than ``max_line`` keeps its first ``max_line`` bytes for
    matching; the rest is consumed and dropped up to its newline.
    """

    def __init__(self, matcher: Matcher, offset: int = 0, *, max_line: int = MAX_LINE) -> None:
        self.matcher = matcher
        self.offset = offset
        self.max_line = max_line
        self.oversize = 0
        self._pending = b""
        self._head: bytes | None = None
        self._skipped = 0

    @property
    def read_pos(self) -> int:
        """Where the next byte of the file is to be read from."""
        if self._head is not None:
            return self.offset + len(self._head) + self._skipped
        return self.offset + len(self._pending)

    def feed(self, data: bytes) -> FeedResult:
        """Consume the next bytes of the file; return the hits of the lines they completed."""
        hits: list[Hit] = []
        lines = 0
        before = self.offset
        if self._head is not None:
            newline = data.find(b"\n")
            if newline < 0:
                self._skipped += len(data)
                return FeedResult(hits, 0, 0)
            hits.extend(self.matcher.scan(self._head + b"\n", self.offset))
            self.offset += len(self._head) + self._skipped + newline + 1
            self.oversize += 1
            lines += 1
            self._head = None
            self._skipped = 0
            data = data[newline + 1 :]
        start = 0
        if self._pending:
            # Finish the pending line on its own, so the new bytes are never copied.
            newline = data.find(b"\n")
            if newline < 0:
                rest = self._pending + data
            else:
                first = self._pending + data[: newline + 1]
                hits.extend(self.matcher.scan(first, self.offset))
                lines += 1
                self.offset += len(first)
                self._pending = b""
                start = newline + 1
        if not self._pending:
            last = data.rfind(b"\n", start)
            if last >= 0:
                hits.extend(self.matcher.scan(data, self.offset - start, start, last + 1))
                lines += data.count(b"\n", start, last + 1)
                self.offset += last + 1 - start
                rest = data[last + 1 :]
            else:
                rest = data[start:]
        if len(rest) > self.max_line:
            self._head = rest[: self.max_line]
            self._skipped = len(rest) - self.max_line
            self._pending = b""
        else:
            self._pending = rest
        return FeedResult(hits, lines, self.offset - before)
