"""Reading one log file for the audit: a large plain file in parts, one process per core.

A file is cut at line starts: each part begins at the file's start or just after a
newline, and ends where the next part begins, so every part is whole lines. A
``LineScanner`` keeps nothing across a newline (no partial line, no cut line, no NUL
hole), so a scanner started at a part's start reads its lines as one reading the whole
file would, and the parts' counts add up to the whole file's.

The calling process reads the first part; each other part is read by a child forked
for it, which sends back its counts (its tally, pickled, never the lines). Threads
would not do: the Hyperscan pass calls back into Python once per matching line, and
two threads wait on each other's interpreter lock at every call. A part is read again by
the caller when no child could be forked for it, when its child sends nothing back
(killed, or failed), or when its child is still reading long after the caller read its
own part (the child is then killed): a part is never lost, and the audit never waits
for ever. A compressed file, a small one, a machine with one core, a system without
``fork``, or a process running other threads (a lock one of them holds at the fork
would stay held in the child) is read whole, by the caller.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol, TypeVar

from collectors.files import COMPRESSED_SUFFIXES, open_log, read_errors
from collectors.scan import MAX_WARNINGS, Hit, LineScanner, Matcher

READ = 1 << 20  # 1 MiB: the passes over a read stay in cache (faster than 8 MiB in bench_audit)
#: The smallest part worth a process of its own.
PART_MIN = 16 << 20
#: The most parts one file is read in.
PARTS_MAX = 8
_PROBE = 1 << 16  # bytes read at once while looking for the newline that ends a part
#: A child still reading this long after the caller read its own part (at least ``CHILD_GRACE``
#: seconds, else ``CHILD_PACE`` times the caller's time) is killed, and its part read again.
CHILD_GRACE = 30.0
CHILD_PACE = 4.0


class Tally(Protocol):
    """What a part's hits are counted into; picklable, to come back from a child."""

    def add(self, hits: list[Hit]) -> None: ...


T = TypeVar("T", bound=Tally)


@dataclass
class FileRead:
    """What reading one file found: its bytes and lines, the lines only activity counted (with
    ``count_activity``), the scanners' warnings (the first ``MAX_WARNINGS``; ``dropped`` counts the
    rest), and the error that ended a read, if one did."""

    bytes: int = 0
    lines: int = 0
    activity: int = 0
    warnings: list[str] = field(default_factory=list)
    dropped: int = 0
    error: str | None = None


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity call (macOS)
        return os.cpu_count() or 1


def forks() -> bool:
    """Whether parts may be read by forked children here: a system with ``fork``, and no other
    thread that could hold a lock at the fork the child would then wait on for ever."""
    return hasattr(os, "fork") and threading.active_count() == 1


def read_file(
    path: Path, matcher: Matcher, tally: Callable[[], T], *, count_activity: bool,
    parts: int | None = None, part_min: int | None = None,
) -> tuple[FileRead, list[T]]:
    """Read ``path`` from its start to its end: what was read, and a tally per part holding
    its hits (``tally()`` makes each, in the process that reads the part).

    ``parts`` (default: one per core where children can be forked, else one) is the most parts
    the file is read in; a part is at least ``part_min`` bytes (default ``PART_MIN``).
    """
    if parts is None:
        parts = min(cores(), PARTS_MAX) if forks() else 1
    starts = _starts(path, parts, PART_MIN if part_min is None else part_min)
    if len(starts) < 2:
        read, counted = _read_part(path, matcher, tally(), count_activity, start=0, end=None)
        return read, [counted]
    ends: list[int | None] = [*starts[1:], None]  # the last part reads on to the end, as the file is then
    children: list[_Child | None] = []
    try:
        children += (_fork(path, matcher, tally, count_activity, start=s, end=e)
                     for s, e in zip(starts[1:], ends[1:], strict=True))
        began = time.monotonic()
        results = [_read_part(path, matcher, tally(), count_activity, start=0, end=starts[1])]
        deadline = time.monotonic() + max(CHILD_GRACE, CHILD_PACE * (time.monotonic() - began))
        for child, start, end in zip(children, starts[1:], ends[1:], strict=True):
            sent = child.result(deadline) if child is not None else None
            results.append(sent if sent is not None
                           else _read_part(path, matcher, tally(), count_activity, start=start, end=end))
    finally:
        for child in children:
            if child is not None:
                child.close()
    return _joined([read for read, _ in results]), [counted for _, counted in results]


def _starts(path: Path, parts: int, part_min: int) -> list[int]:
    """The line starts the file is cut at, the first 0; [] when it is to be read whole."""
    if parts < 2 or path.suffix.lower() in COMPRESSED_SUFFIXES:
        return []
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return []  # reported as unreadable when read whole
    try:
        size = os.fstat(fd).st_size
        parts = min(parts, size // max(part_min, 1))
        starts = [0]
        for index in range(1, parts):
            start = _line_start(fd, size * index // parts, size)
            if starts[-1] < start < size:
                starts.append(start)
        return starts
    except OSError:
        return []
    finally:
        os.close(fd)


def _line_start(fd: int, at: int, size: int) -> int:
    """The first line start at or after ``at`` (> 0): just after the first newline at or after
    ``at - 1``; ``size`` if there is none."""
    pos = at - 1
    while pos < size:
        chunk = os.pread(fd, _PROBE, pos)
        if not chunk:
            break
        newline = chunk.find(b"\n")
        if newline >= 0:
            return pos + newline + 1
        pos += len(chunk)
    return size


def _read_part(path: Path, matcher: Matcher, tally: T, count_activity: bool, *,
               start: int, end: int | None) -> tuple[FileRead, T]:
    """Read ``path`` from ``start`` (a line start) to ``end`` (the next part's start), or on to its
    end; a read that fails ends the part with its error."""
    read = FileRead()
    scanner = LineScanner(matcher, offset=start, source=str(path))
    try:
        with open_log(path) as stream:
            if start:
                stream.seek(start)
            _scan(stream, scanner, read, tally, count_activity=count_activity, end=end)
    except read_errors() as exc:
        read.error = f"{type(exc).__name__}: {exc}"
    read.warnings = [w.message for w in scanner.warnings]
    read.dropped = scanner.warnings_dropped
    return read, tally


def _scan(stream: BinaryIO, scanner: LineScanner, read: FileRead, tally: Tally, *,
          count_activity: bool, end: int | None) -> None:
    while True:
        size = READ if end is None else min(READ, end - scanner.read_pos)
        data = stream.read(size) if size > 0 else b""
        if not data:
            return
        read.bytes += len(data)
        # each read goes on from the last one: NULs it starts with inside a line are the line's
        result = scanner.feed(data, count_activity=count_activity, joined=True)
        read.lines += result.lines
        read.activity += result.activity
        if result.hits:
            tally.add(result.hits)


@dataclass
class _Child:
    """A forked child reading one part, and the pipe its result comes back on."""

    pid: int
    pipe: int
    status: int = 0
    done: bool = False

    def result(self, deadline: float) -> tuple[FileRead, Any] | None:
        """The child's read and tally; None if it sent nothing whole (it died, or failed), or had
        not sent it all by ``deadline`` (``time.monotonic``), when it is killed."""
        chunks = []
        while True:
            ready, _, _ = select.select([self.pipe], [], [], max(deadline - time.monotonic(), 0.0))
            chunk = os.read(self.pipe, READ) if ready else None
            if not chunk:
                break
            chunks.append(chunk)
        self.done = True
        if chunk is None:
            os.kill(self.pid, signal.SIGKILL)
        self.reap()
        status = self.status
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
            return None
        try:
            sent: tuple[FileRead, Any] = pickle.loads(b"".join(chunks))
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError):
            return None
        return sent

    def close(self) -> None:
        """Stop a child whose result was never asked for (the caller failed, or was interrupted),
        close the pipe and reap the child."""
        if not self.done:
            self.done = True
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.reap()

    def reap(self) -> None:
        """Close the pipe and wait for the child to end."""
        os.close(self.pipe)
        _, self.status = os.waitpid(self.pid, 0)


def _fork(path: Path, matcher: Matcher, tally: Callable[[], Tally], count_activity: bool, *,
          start: int, end: int | None) -> _Child | None:
    """A child reading the part; None when none could be made (no pipe or process to spare): the
    caller then reads the part itself."""
    try:
        reader, writer = os.pipe()
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        os.close(reader)
        os.close(writer)
        return None
    if pid:
        os.close(writer)
        return _Child(pid, reader)
    code = 1
    try:  # the child: read the part, send back what it counted, and leave at once
        os.close(reader)
        sent = pickle.dumps(_read_part(path, matcher, tally(), count_activity, start=start, end=end))
        with os.fdopen(writer, "wb") as stream:
            stream.write(sent)
        code = 0
    finally:
        os._exit(code)


def _joined(reads: list[FileRead]) -> FileRead:
    """The parts' reads as one: counts added, warnings in file order, the first error."""
    whole = FileRead()
    for part in reads:
        whole.bytes += part.bytes
        whole.lines += part.lines
        whole.activity += part.activity
        room = MAX_WARNINGS - len(whole.warnings)
        whole.warnings += part.warnings[:room]
        whole.dropped += part.dropped + max(len(part.warnings) - room, 0)
        if whole.error is None:
            whole.error = part.error
    return whole
