"""Splitting a stream of log bytes into lines and matching the complete ones.

Pure state machines, no I/O: the tailer and the audit feed them bytes as they
read them, in whatever sizes they read. A line is matched on its first
``max_line`` bytes however it arrived, so live counting and the audit agree; a
longer line is cut there and reported as a warning naming the file and offset.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from collectors.matcher import BOM, KEEP_CHARS, Hit, Matcher
from collectors.rules import Rule

__all__ = [
    "BOM", "KEEP_CHARS", "MAX_LINE", "FeedResult", "Hit", "LineScanner", "Matcher", "Rule",
    "ScanWarning",
]

#: Longest line kept for matching; the rest of a longer line is consumed and dropped.
MAX_LINE = 1 << 20
#: Warnings one scanner keeps; later ones are only counted.
MAX_WARNINGS = 100
#: A run of NULs: at a line's start, the hole a writer without O_APPEND left in a truncated file.
_NULS = re.compile(rb"\0+")


@dataclass(frozen=True, slots=True)
class FeedResult:
    """What one ``LineScanner.feed`` consumed: hits, complete lines, bytes of complete lines."""

    hits: list[Hit]
    lines: int
    consumed: int
    #: Lines that were only activity, counted instead of returned (``feed(count_activity=True)``).
    activity: int = 0


@dataclass(frozen=True, slots=True)
class ScanWarning:
    """A line that could not be matched whole: cut at ``max_line``, or a pattern over budget."""

    source: str
    offset: int
    message: str

    def __str__(self) -> str:
        return self.message


class LineScanner:
    """Splits a stream of bytes into lines and matches the complete ones.

    ``offset`` is always the end of the last complete line consumed: the only
    position it is safe to commit, since a partial last line is never counted.
    A line longer than ``max_line`` keeps its first ``max_line`` bytes for
    matching; the rest is consumed and dropped up to its newline. Warnings are
    kept in ``warnings`` (the first ``MAX_WARNINGS``; ``warnings_dropped`` counts
    the rest) and handed to ``on_warning`` as they happen.
    """

    def __init__(
        self,
        matcher: Matcher,
        offset: int = 0,
        *,
        max_line: int = MAX_LINE,
        source: str = "",
        on_warning: Callable[[ScanWarning], None] | None = None,
    ) -> None:
        self.matcher = matcher
        self.offset = offset
        self.max_line = max_line
        self.source = source
        self.oversize = 0
        self.warnings: list[ScanWarning] = []
        self.warnings_dropped = 0
        self._on_warning = on_warning
        self._pending = b""
        self._skipped = 0
        self._count_activity = False
        self._counted = 0
        self._lines = 0  # of the current ``feed``: each matched piece counts its own newlines

    @property
    def read_pos(self) -> int:
        """Where the next byte of the file is to be read from."""
        return self.offset + len(self._pending) + self._skipped

    def feed(self, data: bytes, *, count_activity: bool = False, joined: bool = False) -> FeedResult:
        """Consume the next bytes of the file; return the hits of the lines they completed.

        With ``count_activity``, lines that are only activity are counted, not returned. A run
        of NUL bytes at a line's start is never read as a line: it is the hole a writer without
        O_APPEND leaves when its file is truncated under it (copytruncate) and it writes on past
        the file's end, at its own offset; the run is consumed. NULs after a line's first byte
        were written with that line, and are its bytes. A run at the start of ``data`` after a
        partial line fed before is a hole too, and the partial line, cut by the truncation, is
        dropped; unless ``joined``: the reader knows ``data`` follows that partial line in the
        file as it was written (it read on from it, or found it still there).
        """
        if b"\0" not in data:
            return self._feed(data, count_activity)
        hits: list[Hit] = []
        lines = activity = 0
        before = self.offset
        pos = 0
        for hole in _NULS.finditer(data):
            start = hole.start()
            if data[start - 1 : start] not in (b"", b"\n") or (
                not start and joined and (self._pending or self._skipped)
            ):
                continue  # inside a line: the line's own bytes
            part = self._feed(data[pos:start], count_activity)
            hits += part.hits
            lines, activity = lines + part.lines, activity + part.activity
            self.offset = self.read_pos + hole.end() - start
            self._pending, self._skipped = b"", 0
            pos = hole.end()
        part = self._feed(data[pos:], count_activity)
        return FeedResult(hits + part.hits, lines + part.lines, self.offset - before,
                          activity + part.activity)

    def _feed(self, data: bytes, count_activity: bool) -> FeedResult:
        self._count_activity = count_activity
        self._counted = self._lines = 0
        hits: list[Hit] = []
        before = self.offset
        start = 0
        if self._pending or self._skipped:
            newline = data.find(b"\n")
            if newline < 0:
                self._keep(data)
                return FeedResult(hits, 0, 0, 0)
            self._keep(data[:newline])
            hits.extend(self._scan_line(self._pending + b"\n", self.offset, cut=self._skipped > 0))
            self.offset += len(self._pending) + self._skipped + 1
            self._pending = b""
            self._skipped = 0
            start = newline + 1
        last = data.rfind(b"\n", start)
        if last >= 0:
            hits.extend(self._scan_region(data, self.offset - start, start, last + 1))
            self.offset += last + 1 - start
            start = last + 1
        if start < len(data):
            self._keep(data[start:] if start else data)
        return FeedResult(hits, self._lines, self.offset - before, self._counted)

    def _keep(self, chunk: bytes) -> None:
        """Add bytes to the partial line, keeping at most ``max_line`` of them."""
        room = self.max_line - len(self._pending)
        if len(chunk) <= room:
            self._pending += chunk
        else:
            self._pending += chunk[: max(room, 0)]
            self._skipped += len(chunk) - max(room, 0)

    def _scan_region(self, data: bytes, base: int, lo: int, hi: int) -> list[Hit]:
        """Hits in the complete lines ``data[lo:hi]``, lines over ``max_line`` cut first."""
        hits: list[Hit] = []
        pos = segment = lo
        limit = self.max_line
        while hi - pos > limit:  # a line longer than the limit may start at pos or later
            newline = data.rfind(b"\n", pos, pos + limit + 1)
            if newline >= 0:
                pos = newline + 1
                continue
            end = data.find(b"\n", pos + limit + 1, hi)
            if segment < pos:
                hits.extend(self._match(data, base, segment, pos))
            hits.extend(self._scan_line(data[pos : pos + limit] + b"\n", base + pos, cut=True))
            pos = segment = end + 1
        if segment < hi:
            hits.extend(self._match(data, base, segment, hi))
        return hits

    def _match(self, data: bytes, base: int, lo: int, hi: int) -> list[Hit]:
        """Hits in ``data[lo:hi]``; its lines and activity lines are added to this feed's counts.

        A cut line is matched as its kept bytes and a newline: one line."""
        scanned = self.matcher.scan_counted(
            data, base, lo, hi, warn=self._warn, count_activity=self._count_activity
        )
        self._counted += scanned.activity
        self._lines += scanned.lines
        return scanned.hits

    def _scan_line(self, line: bytes, offset: int, *, cut: bool) -> list[Hit]:
        if cut:
            self.oversize += 1
            self._warn(offset, f"the line is longer than {self.max_line} bytes; only its first "
                       f"{self.max_line} bytes are matched")
        return self._match(line, offset, 0, len(line))

    def _warn(self, offset: int, message: str) -> None:
        warning = ScanWarning(self.source, offset, f"{self.source or 'log'}: offset {offset}: {message}")
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(warning)
        else:
            self.warnings_dropped += 1
        if self._on_warning is not None:
            self._on_warning(warning)
