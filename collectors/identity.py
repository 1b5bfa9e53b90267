"""Which file is this, and where to start reading it: one pure decision, no I/O.

A followed file leaves a ``Mark`` each time its read position is committed: the
offset, the first bytes read (up to ``HEAD``) and a hash of the ``TAIL`` bytes
just before the offset, all taken from the very bytes the scanner consumed, so
a truncation racing the read can never blank them. ``classify`` compares what
a file holds now (``Observed``) with its own stored state and with the marks of
other files (``Source``) and says whether to resume, to start a copy where its
original was read to, to wait, or to read from the start.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

__all__ = [
    "HEAD", "TAIL", "Decision", "Kind", "Mark", "Observed", "Source", "classify", "copied_lead", "digest",
    "lead_offsets", "same_hole",
]

#: Bytes of a file's start kept to know it again.
HEAD = 1024
#: Bytes before a read offset whose hash tells a copy of a followed file from a stranger.
TAIL = 256


def digest(data: bytes) -> bytes:
    """The 16-byte blake2b digest used for heads and tails."""
    return hashlib.blake2b(data, digest_size=16).digest()


@dataclass(frozen=True)
class Mark:
    """What had been read of a file at one committed position."""

    offset: int
    head_len: int
    head_hash: bytes
    tail_len: int = 0
    tail_hash: bytes = b""
    head: bytes = b""  # the head's bytes when known (positions stored before they were kept lack them)
    # Where the hole of NULs the file starts with ends, when it was read from its start and the
    # hole outruns the head (0: not known).
    lead: int = field(default=0, compare=False)

    @classmethod
    def of(cls, offset: int, head: bytes, tail: bytes, lead: int = 0) -> Mark:
        """The mark of a file read to ``offset``, whose first bytes are ``head`` and whose
        bytes just before ``offset`` are ``tail``; ``lead``: where its leading hole ends."""
        lead = lead if lead >= len(head) > 0 and not head.strip(b"\0") else 0
        return cls(offset, len(head), digest(head), len(tail), digest(tail) if tail else b"", head, lead)


@dataclass(frozen=True)
class Observed:
    """What a file holds now, as far as the decision needs it."""

    key: str
    size: int
    head: bytes  # its first min(size, HEAD) bytes
    tails: Mapping[int, bytes]  # offset -> digest of the TAIL bytes before it (absent: unreadable)
    at_start: bool = False  # found by the first scan after a start, not created under our eyes
    waited: float = 0.0  # seconds this file has been waited on already
    grew: bool = True  # its size changed since it was last looked at (a copy may still be written)
    rotated_name: bool = False  # its name is a rotated one (``app.log.1``): where copies are made
    holes: frozenset[int] = frozenset()  # offsets (of ``tails``) where a NUL byte follows
    hole_ends: frozenset[int] = frozenset()  # offsets (of marks' ``lead``) its leading hole ends at


@dataclass(frozen=True)
class Source:
    """A mark of another file (or of this one before a truncation) a copy may continue."""

    key: str
    mark: Mark
    settled: bool  # its file is gone, truncated or rewritten: a copy of it is taken as one


class Kind(Enum):
    """What to do with a file."""

    RESUME = "resume"  # its stored position still holds: go on from there
    COPY = "copy"  # a byte copy of a file read to ``offset``: go on from there
    OLDER_COPY = "older copy"  # a copy of less than what was read: only its unterminated tail is new
    WAIT = "wait"  # it may be a copy still being made, or a twin: decide later
    REWRITTEN = "rewritten"  # its stored position belonged to other content: read it from 0
    NEW = "new"  # never seen: read it from 0 (or from its end when told so)


@dataclass(frozen=True)
class Decision:
    """Where to start a file, and why."""

    kind: Kind
    offset: int = 0
    source: str | None = None


def holds(observed: Observed, mark: Mark) -> bool:
    """Whether the file still holds what ``mark`` says was read from it.

    A mark read just past a hole of NULs (a writer without O_APPEND went on past a
    copytruncate) is held only where the hole ends at its offset: a later copy of that file,
    whose hole reaches further, holds the same NULs there but not what came after them.
    """
    if observed.size < mark.offset or len(observed.head) < mark.head_len:
        return False
    if digest(observed.head[: mark.head_len]) != mark.head_hash:
        return False
    if mark.tail_len and hole_before(mark) and mark.offset in observed.holes:
        return False
    return not mark.tail_len or observed.tails.get(mark.offset) == mark.tail_hash


def hole_before(mark: Mark) -> bool:
    """Whether the bytes just before the mark's offset are all NULs: a hole's end."""
    return mark.tail_hash == _nuls(mark.tail_len)


def _nuls(n: int) -> bytes:
    return digest(bytes(n))


def tail_offsets(stored: Mark | None, sources: Sequence[Source]) -> list[int]:
    """The offsets whose tails ``classify`` will look at."""
    marks = [s.mark for s in sources] + ([stored] if stored is not None else [])
    return sorted({m.offset for m in marks if m.offset and m.tail_len})


def lead_offsets(sources: Sequence[Source]) -> list[int]:
    """The offsets where ``classify`` asks whether a file's leading hole ends: where the holes of
    other files end, and where settled files were read to (a writer without O_APPEND writes on
    from there after a truncation)."""
    return sorted({s.mark.lead for s in sources if s.mark.lead}
                  | {s.mark.offset for s in sources if s.settled and s.mark.offset})


def copied_lead(decision: Decision, sources: Sequence[Source]) -> int:
    """Where the leading hole of a byte copy of ``decision``'s source mark ends: the source's own."""
    return next((s.mark.lead for s in sources
                 if s.key == decision.source and s.mark.offset == decision.offset and s.mark.lead), 0)


def same_hole(mark: Mark, observed: Observed) -> bool:
    """Whether a head agreement of ``observed`` with ``mark`` may mean anything: not when the
    mark's head is a hole known to end where ``observed``'s does not (every copy made after a
    copytruncate under a writer without O_APPEND starts with NULs, each hole its own length)."""
    return not mark.lead or mark.lead in observed.hole_ends


def classify(
    stored: Mark | None,
    observed: Observed,
    sources: Sequence[Source] = (),
    *,
    rotate_wait: float = 5.0,
) -> Decision:
    """Decide where to start ``observed``, given its stored mark and other files' marks.

    Its own stored position wins when the file still holds it (a position stored
    while the file was empty vouches for nothing). Else the longest settled mark
    the file is a byte copy of says where the copy goes on; a mark of a file
    still followed and intact makes it wait up to ``rotate_wait``; a rotated file
    whose leading hole ends where a settled file was read to is a copy of what was
    written after (read whole); else it is read from its start.
    """
    own = _own(stored, observed)
    if own is not None:
        return own
    copies = [s for s in sources if s.key != observed.key or s.settled]
    full = [s for s in copies if s.mark.offset and holds(observed, s.mark)]
    copy = _copy(observed, copies, full)
    if copy is not None:
        return copy
    later = _wait_or_after(observed, copies, full, rotate_wait)
    if later is not None:
        return later
    return Decision(Kind.REWRITTEN if stored is not None and stored.offset else Kind.NEW)


def _wait_or_after(
    observed: Observed, copies: Sequence[Source], full: Sequence[Source], rotate_wait: float
) -> Decision | None:
    """A file no settled mark proves a copy of: to wait for, or a copy of what followed a mark."""
    twins = full or [
        s for s in copies
        if not s.settled and _agree(s.mark.head, observed.head) and same_hole(s.mark, observed)
    ]
    may_copy = observed.rotated_name or not observed.at_start
    if twins and may_copy and observed.waited < rotate_wait:
        # A copy half made, or made with its original not truncated yet, even when found by the
        # first scan after a start (logrotate may be copying just then): decide once the
        # original is truncated, or once it has not been for ``rotate_wait``.
        return Decision(Kind.WAIT)
    after = [s for s in copies if s.settled and s.mark.offset in observed.hole_ends]
    if after and observed.rotated_name:
        # A copy of what a writer without O_APPEND wrote on from where a file was read to, once
        # it was truncated: nothing of it was read. Its hole is skipped as it is read.
        return Decision(Kind.COPY, 0, max(after, key=lambda s: s.mark.offset).key)
    return None


def _own(stored: Mark | None, observed: Observed) -> Decision | None:
    """The decision the file's own stored mark makes alone: resume it, or an empty file's."""
    if stored is not None and stored.offset and holds(observed, stored):
        return Decision(Kind.RESUME, stored.offset, observed.key)
    if observed.size == 0:
        if stored is not None and stored.offset == 0:
            return Decision(Kind.RESUME, 0, observed.key)
        return Decision(Kind.REWRITTEN if stored is not None else Kind.NEW)
    return None


def _copy(observed: Observed, copies: Sequence[Source], full: Sequence[Source]) -> Decision | None:
    """The file as a copy of a settled mark: of all it held (``full``), or of less of it."""
    settled = [s for s in full if s.settled]
    if settled:
        best = max(settled, key=lambda s: s.mark.offset)
        return Decision(Kind.COPY, best.mark.offset, best.key)
    older = [
        s for s in copies
        if s.settled and s.mark.head and observed.size < s.mark.offset
        and s.mark.head.startswith(observed.head) and same_hole(s.mark, observed)
    ]
    if older:
        if observed.grew:
            return Decision(Kind.WAIT)  # a copy still being written may yet reach the mark
        best = max(older, key=lambda s: s.mark.offset)
        return Decision(Kind.OLDER_COPY, observed.size, best.key)
    return None


def _agree(a: bytes, b: bytes) -> bool:
    """Whether two heads agree as far as both go (never for an empty one)."""
    n = min(len(a), len(b))
    return n > 0 and a[:n] == b[:n]
