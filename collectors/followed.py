"""One followed file: its descriptor (while it is open), scanner, head and tail, and file reads."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from collectors.identity import HEAD, TAIL, Mark, Observed, Source, digest
from collectors.positions import FileState, InDoubt
from collectors.scan import FeedResult, Hit, LineScanner

CHUNK = 1 << 20
#: Marks kept from truncations before the last one, for copies not found yet.
EARLIER = 3
OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)


@dataclass
class Followed:
    """A file the tailer follows; ``fd`` is None while it is idle and closed."""

    key: str
    dev: int
    ino: int
    path: str
    fd: int | None
    scanner: LineScanner
    head: bytes = b""  # the first bytes read (up to HEAD), from the bytes the scanner consumed
    hole: int = 0  # where the hole of NULs it starts with ends, once read past (0: none, or not known)
    nuls: int | None = 0  # NULs read from its start while nothing else was (None: read past, or not known)
    tail: bytes = b""  # the last bytes (up to TAIL) before the scanner's offset
    recent: bytes = b""  # the last bytes (up to TAIL) before the scanner's read position
    size: int = 0
    mtime_ns: int = 0
    last_change: float = 0.0
    rotated: bool = False
    lines: int = 0
    truncations: int = 0
    prior: Mark | None = None  # what it held before its last truncation
    prior_at: float = 0.0
    earlier: tuple[Mark, ...] = ()  # what it held before the truncations before, newest first
    fresh: bool = False  # nothing decided yet: it may turn out to be a copy of a followed file
    first_seen: float = 0.0
    seen_size: int = -1
    at_start: bool = False
    unsaved: bool = False  # its last commit failed: commit its state again even with nothing read
    base: int = 0  # where what is not committed yet was read from: read again from there on a failure
    in_doubt: tuple[InDoubt, ...] = ()  # failed commits of what is read from ``base``: the store may hold one
    errors: set[str] = field(default_factory=set)

    def feed(self, data: bytes, *, joined: bool = False) -> FeedResult:
        """Feed the scanner (``joined``: ``LineScanner.feed``), keeping the head and the tail from
        the very bytes it consumed."""
        pos = self.scanner.read_pos
        if pos < HEAD and len(self.head) == pos:
            self.head += data[: HEAD - pos]
        if self.nuls == pos and data:
            rest = data.lstrip(b"\0")
            if rest:
                self.hole, self.nuls = pos + len(data) - len(rest), None
            else:
                self.nuls = pos + len(data)
        result = self.scanner.feed(data, joined=joined)
        combined = self.recent + data
        end = pos + len(data)
        offset = self.scanner.offset
        if offset > pos:
            self.tail = combined[: len(combined) - (end - offset)][-TAIL:]
        self.recent = combined[-TAIL:]
        return result

    def restart_at(self, scanner: LineScanner, head: bytes, tail: bytes) -> None:
        """Read from ``scanner``'s offset on, whose head and preceding bytes are given."""
        self.scanner = scanner
        self.head = head
        self.hole, self.nuls = 0, (0 if scanner.offset == 0 else None)
        self.tail = self.recent = tail

    def push_prior(self, mark: Mark, now: float) -> None:
        """What the file held before a truncation just seen; the marks of the truncations
        before stay (``EARLIER`` of them), since their copies may not be found yet."""
        if self.prior is not None and self.prior.offset and self.prior != mark:
            self.earlier = (self.prior, *self.earlier)[:EARLIER]
        self.prior, self.prior_at = mark, now

    def mark(self) -> Mark:
        """What has been read and committed-to-be, proved by head and tail."""
        return Mark.of(self.scanner.offset, self.head, self.tail, self.hole)

    def state(self) -> FileState:
        """The state to commit."""
        m = self.mark()
        return FileState(
            self.key, self.dev, self.ino, self.path, m.offset, m.head_len, m.head_hash,
            max(self.size, self.scanner.read_pos), m.head, m.tail_len, m.tail_hash, self.prior,
            self.earlier, m.lead,
        )

    def close(self) -> None:
        """Close the descriptor, if open."""
        if self.fd is not None:
            close_fd(self.fd)
            self.fd = None


def pread_upto(fd: int, length: int, offset: int = 0) -> bytes:
    """Up to ``length`` bytes at ``offset`` (fewer at the end of the file; b"" on an error)."""
    chunks: list[bytes] = []
    got = 0
    try:
        while got < length:
            chunk = os.pread(fd, length - got, offset + got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError:
        return b""
    return b"".join(chunks)


def observe(
    fd: int, key: str, size: int, offsets: list[int], leads: Sequence[int] = (), **kw: object
) -> Observed:
    """What ``classify`` needs to know of an open file: its head, the tails at ``offsets`` and
    which of ``leads`` its leading hole ends at."""
    head = pread_upto(fd, min(size, HEAD))
    nul_head = bool(head) and not head.strip(b"\0")
    hole_ends = frozenset(
        lead for lead in leads if nul_head and lead < size and _hole_ends_at(fd, lead)
    )
    tails: dict[int, bytes] = {}
    holes: set[int] = set()
    for offset in offsets:
        if offset <= size:
            data = pread_upto(fd, min(TAIL, offset), offset - min(TAIL, offset))
            if len(data) == min(TAIL, offset):
                tails[offset] = digest(data)
            if not data.strip(b"\0") and pread_upto(fd, 1, offset) == b"\0":
                holes.add(offset)
    return Observed(key, size, head, tails, holes=frozenset(holes), hole_ends=hole_ends, **kw)  # type: ignore[arg-type]


def _hole_ends_at(fd: int, offset: int) -> bool:
    """Whether the byte before ``offset`` is a NUL and the one at it is not."""
    pair = pread_upto(fd, 2, offset - 1)
    return len(pair) == 2 and pair[0] == 0 and pair[1] != 0


def tail_before(fd: int, offset: int) -> bytes:
    """The bytes (up to TAIL) before ``offset``."""
    return pread_upto(fd, min(TAIL, offset), offset - min(TAIL, offset))


def last_line_end(fd: int, size: int) -> int:
    """The offset just after the last newline before ``size`` (0 if none in the last MiB)."""
    start = max(0, size - CHUNK)
    tail = pread_upto(fd, size - start, start)
    newline = tail.rfind(b"\n")
    return start + newline + 1 if newline >= 0 else start if start else 0


def close_fd(fd: int) -> None:
    """Close, ignoring errors."""
    with contextlib.suppress(OSError):
        os.close(fd)


def at_end(f: Followed) -> bool:
    """Whether everything the file held when last looked at was read and committed."""
    return f.scanner.read_pos >= f.size and not f.unsaved


def truncated(f: Followed) -> bool:
    """Whether an open file is now shorter than what was read, or holds other bytes than were read."""
    if f.fd is None:
        return False
    try:
        size = os.fstat(f.fd).st_size
    except OSError:
        return True
    return size < f.scanner.read_pos or not still_read(f, ended=f.size == f.scanner.read_pos)


def still_read(f: Followed, *, ended: bool = False) -> bool:
    """Whether an open file still holds the head and the tail it was read with. A writer without
    O_APPEND writes on past a truncation at its own offset: the file never looks smaller, and
    once its head is a hole of NULs, only the bytes before the read offset, a hole now too,
    tell the truncation (a sparse rewrite). When those were a hole already and the file
    ``ended`` there when last read, a NUL where the next line was to start tells it: a writer
    writes no NUL, a truncation leaves them (a read stopped inside a hole proves nothing)."""
    assert f.fd is not None
    offset = f.scanner.offset
    if pread_upto(f.fd, len(f.head)) != f.head:
        return False
    if f.tail and pread_upto(f.fd, len(f.tail), offset - len(f.tail)) != f.tail:
        return False
    if ended and f.tail and not f.tail.strip(b"\0") and f.scanner.read_pos == offset:
        return pread_upto(f.fd, 1, offset) != b"\0"
    return True


def joins(f: Followed, data: bytes) -> bool:
    """Whether ``data``, read at ``f``'s read position, goes on with the partial line read last:
    it starts with NULs, and that line is still in the file, so they were written after it. Once
    a truncation has made it a hole it is not, and the bytes before the read position, kept to
    tell the tail, are taken again from the file as it is now."""
    assert f.fd is not None
    held = min(len(f.recent), f.scanner.read_pos - f.scanner.offset)
    if data[:1] != b"\0" or not held:
        return False
    if pread_upto(f.fd, held, f.scanner.read_pos - held) == f.recent[-held:]:
        return True
    f.recent = tail_before(f.fd, f.scanner.read_pos)
    return False


def sources_for(key: str, files: Mapping[str, Followed], stored: Mapping[str, FileState]) -> list[Source]:
    """The marks a new file ``key`` may be a copy of: followed files', and stored ones'."""
    out: list[Source] = []
    for f in files.values():
        if f.key == key:
            continue
        out.extend(Source(f.key, m, True) for m in (f.prior, *f.earlier) if m is not None and m.offset)
        if f.scanner.offset and not f.fresh:
            out.append(Source(f.key, f.mark(), truncated(f)))
    for s in stored.values():
        held = files.get(s.key)
        if held is not None and s.key != key and not held.fresh:
            continue  # its live state is above; a fresh one does not hold its stored mark
        out.extend(Source(s.key, m, True) for m in (s.prior, *s.earlier) if m is not None and m.offset)
        if s.key != key and s.offset:
            out.append(Source(s.key, s.mark, True))
    return out


def hole_loss(fd: int, size: int, offset: int) -> int:
    """Bytes lost to a truncation a writer without O_APPEND went on past: its leading hole
    beyond what had been read (0 if the file starts with data)."""
    data = pread_upto(fd, min(size, CHUNK))
    hole = len(data) - len(data.lstrip(b"\0"))
    return max(0, hole - offset) if hole else 0


def truncation_told(fd: int, path: str, size: int, offset: int) -> str:
    """What a truncation of ``path`` after ``offset`` bytes were read may have cost: a writer
    without O_APPEND goes on past it, and its hole is what was lost; any other's lines written
    between a copy and the truncation are in no file, and cannot be measured."""
    lost = hole_loss(fd, size, offset)
    if lost:
        told = (f"{lost} bytes after the last line read, a hole of NULs now; they are lost unless a "
                "rotated copy holds them (a copy found is read from where this file was read to)")
    else:
        told = (f"after {offset} bytes were read; lines written between the copy and the "
                "truncation, if any, are in no file and cannot be counted")
    return f"{path} was truncated (copytruncate?) {told}"


def read_time_if_ahead(hits: list[Hit], limit: float) -> tuple[list[Hit], Hit | None]:
    """The hits with every stamp past ``limit`` (epoch seconds) dropped, so they count at
    their read time; and the first such hit."""
    out, first = hits, None
    for i, hit in enumerate(hits):
        if hit.ts is not None and hit.ts.timestamp() > limit:
            if first is None:
                out, first = list(hits), hit
            out[i] = Hit(hit.offset, hit.text, hit.guards, hit.activity, None)
    return out, first
