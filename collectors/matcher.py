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

import importlib
import re
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, NamedTuple

from collectors import engine as native
from collectors.candidates import PythonCandidates, mark_every_line
from collectors.patterns import byte_exact, prefilter
from collectors.rules import LINE_BUDGET, Rule, parse_json_line
from collectors.timestamps import TimestampParser

#: Called with the file offset of a line and what went wrong with it.
Warn = Callable[[int, str], None]
_sre_parse: Any = importlib.import_module("re._parser").parse
Engine = Literal["auto", "hyperscan", "python"]

BOM = b"\xef\xbb\xbf"
#: Characters of a matched line kept in a hit.
KEEP_CHARS = 4096


_UNSET: Any = object()


class Hit:
    """A line that fired at least one guard or counts as agent activity.

    ``text`` and ``ts`` are worked out from the line's bytes the first time they are
    read: most hits of an audit are activity lines whose time no window asks for.
    """

    __slots__ = ("_obj", "_parser", "_raw", "_text", "_ts", "activity", "guards", "offset")

    def __init__(
        self, offset: int, text: str, guards: tuple[str, ...], activity: bool,
        ts: datetime | None,
    ) -> None:
        self.offset = offset
        self.guards = guards
        self.activity = activity
        self._text: str | None = text
        self._ts: datetime | None = ts
        self._raw = b""
        self._obj: dict[str, Any] | None = None
        self._parser: TimestampParser | None = None

    @classmethod
    def of_line(  # noqa: PLR0917
        cls, offset: int, raw: bytes, text: str | None, guards: tuple[str, ...], activity: bool,
        parser: TimestampParser, obj: dict[str, Any] | None,
    ) -> Hit:
        """A hit whose text (if not given) and time are read from ``raw`` when first asked for."""
        hit = cls(offset, "", guards, activity, None)
        hit._text = text[:KEEP_CHARS] if text is not None else None
        hit._ts = _UNSET
        hit._raw, hit._parser, hit._obj = raw, parser, obj
        return hit

    @property
    def text(self) -> str:
        """The line (its first KEEP_CHARS characters), decoded with replacement characters."""
        if self._text is None:
            self._text = self._raw.decode("utf-8", "replace")[:KEEP_CHARS]
        return self._text

    @property
    def ts(self) -> datetime | None:
        """The time written on the line, or None."""
        if self._ts is _UNSET:
            assert self._parser is not None
            self._ts = self._parser.parse(self._raw, self._obj)
        return self._ts

    def _key(self) -> tuple[object, ...]:
        return (self.offset, self.text, self.guards, self.activity, self.ts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Hit) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"Hit(offset={self.offset}, text={self.text!r}, guards={self.guards}, "
                f"activity={self.activity}, ts={self.ts!r})")


class Scanned(NamedTuple):
    """What ``Matcher.scan_counted`` found in a buffer: the hits, the lines that were only
    activity (counted, not returned), and the newlines."""

    hits: list[Hit]
    activity: int
    lines: int


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
        #: Whether the activity rule reads every line like its bytes: its native report on any
        #: line, plain or not, is then the answer, and the scan need not tell plain text.
        self._activity_bytes = (
            activity is not None and activity.pattern is not None and byte_exact(activity.pattern)
        )
        if engine != "python" and native.available():
            self._native, self._every_line, full = _native_set(
                self._all, cache_dir, plain_check=not self._activity_bytes
            )
            self._trusted = frozenset(
                i for i in full
                if (pattern := self._all[i].pattern) is not None and _exact_ascii(pattern)
            )
            return
        self._python = PythonCandidates(self._all, budget)

    @property
    def timestamps(self) -> TimestampParser:
        """What reads the time of a line."""
        return self._timestamps

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
        return self.scan_counted(buf, base, lo, hi, warn=warn, count_activity=False).hits

    def scan_counted(
        self, buf: bytes, base: int, lo: int = 0, hi: int | None = None, *,
        warn: Warn | None = None, count_activity: bool = True,
    ) -> Scanned:
        """Like ``scan``, with the newlines of ``buf[lo:hi]`` counted in the same pass; with
        ``count_activity``, lines that are only activity are counted, not returned (an audit
        without a window needs no more of them)."""
        if hi is None:
            hi = len(buf)
        counted = 0
        act = len(self._all) - 1 if self.activity is not None else -1
        if self._native is not None:
            candidates, counted, lines = self._native_candidates(
                buf, base, lo, hi, act if count_activity and act in self._trusted else -1
            )
        else:
            candidates = self._python.lines(buf, lo, hi)
            lines = buf.count(b"\n", lo, hi)
        if not candidates:
            return Scanned([], counted, lines)
        confirmed = (
            self._confirm(buf, base, start, candidates[start], warn) for start in sorted(candidates)
        )
        hits = [hit for hit in confirmed if hit is not None]
        if count_activity:
            kept = [hit for hit in hits if hit.guards]
            counted += len(hits) - len(kept)
            hits = kept
        return Scanned(hits, counted, lines)

    def _native_candidates(
        self, buf: bytes, base: int, lo: int, hi: int, apart: int
    ) -> tuple[dict[int, set[int]], int, int]:
        """Line start -> rule indexes to confirm, from one native pass; where rule ``apart``
        (the activity rule, trusted) is to be counted, how many plain lines only it matches:
        those are counted rather than confirmed; and the newlines of ``buf[lo:hi]``."""
        assert self._native is not None
        first = lo + len(BOM) if base + lo == 0 and buf.startswith(BOM, lo) else lo
        reported, lines, plain = self._native.scan(buf, first, hi)  # a BOM holds no newline
        apart_ends = reported.pop(apart, None) if apart >= 0 else None
        candidates = _line_starts(buf, lo, first, hi, reported)
        if self._every_line:
            mark_every_line(buf, lo, hi, self._every_line, candidates)
        if not apart_ends:
            return candidates, 0, lines
        counted = _count_apart(buf, (lo, first, hi), apart, apart_ends, candidates,
                               plain=plain or self._activity_bytes)
        return candidates, counted, lines

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
        trusted = self._trusted if plain else frozenset()
        text: str | None = None
        if self._needs_json or not trusted.issuperset(indexes):
            text = raw.decode("utf-8", "replace")
        obj: dict[str, Any] | None = None
        if self._needs_json:
            assert text is not None
            obj = parse_json_line(text)
        guards: list[str] = []
        activity = False
        for index in sorted(indexes):
            rule = self._all[index]
            found = True if index in trusted else rule.search(text or "", obj, self.budget)
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
        return Hit.of_line(base + start, raw, text, tuple(guards), activity, self._timestamps, obj)


def _line_starts(buf: bytes, lo: int, first: int, hi: int, reported: dict[int, list[int]]
                 ) -> dict[int, set[int]]:
    """Line start -> the rules reported on it, from each rule's match ends (after ``first``)."""
    candidates: dict[int, set[int]] = {}
    rfind = buf.rfind
    for index, ends in reported.items():
        for end in ends:
            # rfind from lo: the first line starts at lo, before any BOM
            start = rfind(b"\n", lo, first + end) + 1 or lo
            if start < hi:
                found = candidates.get(start)
                if found is None:
                    candidates[start] = {index}
                else:
                    found.add(index)
    return candidates


def _count_apart(
    buf: bytes, bounds: tuple[int, int, int], apart: int, apart_ends: list[int],
    candidates: dict[int, set[int]], *, plain: bool,
) -> int:
    """The plain lines only rule ``apart`` matches (at ``apart_ends``), counted; the others it
    matches are added to ``candidates``, to be confirmed. ``bounds`` are ``lo``, ``first`` (after
    a BOM) and ``hi``; ``plain``: the pass saw no byte but ASCII and no ``\\r`` from ``first``."""
    lo, first, hi = bounds
    rfind = buf.rfind
    lines = set(apart_ends)
    if hi > lo and buf[hi - 1] == 10:
        lines.discard(hi - first)  # no line starts after the last newline
    both = lines.intersection({_line_end(buf, start, hi) - first for start in candidates})
    for end in both:
        candidates[rfind(b"\n", lo, first + end) + 1 or lo].add(apart)
    lines.difference_update(both)
    # On a plain line (ASCII, no trailing \r) the native report is the answer; a BOM is not
    # part of its line's text.
    if plain:
        return len(lines)
    counted = 0
    for end in lines:
        start = rfind(b"\n", lo, first + end) + 1 or lo
        raw = buf[max(start, first) : first + end]
        if raw.isascii() and not raw.endswith(b"\r"):
            counted += 1
        else:
            candidates.setdefault(start, set()).add(apart)
    return counted


def _line_end(buf: bytes, start: int, hi: int) -> int:
    """Where the line starting at ``start`` ends: its newline, or ``hi``."""
    end = buf.find(b"\n", start, hi)
    return hi if end < 0 else end


def _native_set(
    rules: list[Rule], cache_dir: Path | None, *, plain_check: bool
) -> tuple[native.NativeSet, list[int], set[int]]:
    """The native set for ``rules``, the rules it cannot prefilter (checked on every line),
    and those it prefilters with their whole pattern (not a literal of it)."""
    expressions: list[tuple[int, bytes]] = []
    full: set[int] = set()
    for index, rule in enumerate(rules):
        expression = _prefilter_expression(rule)
        if expression is not None:
            full.add(index)
        else:
            expression = _literal_expression(rule)
        if expression is not None:
            expressions.append((index, expression))
    try:
        built = native.NativeSet(expressions, cache_dir=cache_dir, plain_check=plain_check)
        return built, _left_out(rules, expressions), full
    except native.NativeError:  # find the expressions Hyperscan refuses; keep the others
        kept: list[tuple[int, bytes]] = []
        for index, expression in expressions:
            if native.compiles(expression) is None:
                kept.append((index, expression))
                continue
            full.discard(index)
            literal = _literal_expression(rules[index])
            if literal is not None and native.compiles(literal) is None:
                kept.append((index, literal))
        kept_set = native.NativeSet(kept, cache_dir=cache_dir, plain_check=plain_check)
        return kept_set, _left_out(rules, kept), full


def _exact_ascii(pattern: re.Pattern[str]) -> bool:
    try:
        return prefilter(pattern).exact_ascii
    except ValueError:
        return False


def _left_out(rules: list[Rule], expressions: list[tuple[int, bytes]]) -> list[int]:
    taken = {i for i, _ in expressions}
    return [i for i in range(len(rules)) if i not in taken]


def _prefilter_expression(rule: Rule) -> bytes | None:
    """The rule's native prefilter; None for a pattern that can match empty text (Hyperscan
    would report it at every byte), which is then checked on every line."""
    if rule.pattern is None or _min_width(rule.pattern) == 0:
        return None
    try:
        return prefilter(rule.pattern).expression or None
    except (ValueError, re.error):
        return None


def _min_width(pattern: re.Pattern[str]) -> int:
    return int(_sre_parse(pattern.pattern, pattern.flags).getwidth()[0])


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


