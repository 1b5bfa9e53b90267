"""What the tailer remembers of a file, and the store it commits it to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from collectors.identity import Mark
from collectors.scan import Hit

__all__ = ["Batch", "FileState", "FileStatus", "InDoubt", "PositionStore", "file_key"]


@dataclass(frozen=True)
class FileState:
    """What is remembered of one followed file between polls and across restarts."""

    key: str
    dev: int
    ino: int
    path: str
    offset: int
    head_len: int
    head_hash: bytes
    size: int
    head: bytes = b""
    tail_len: int = 0
    tail_hash: bytes = b""
    prior: Mark | None = None  # what the file held before its last truncation
    earlier: tuple[Mark, ...] = ()  # what it held before the truncations before, newest first
    lead: int = 0  # where the hole its head is part of ends (``Mark.lead``)

    @property
    def mark(self) -> Mark:
        """The committed read position with the head and tail that prove it."""
        return Mark(self.offset, self.head_len, self.head_hash, self.tail_len, self.tail_hash, self.head,
                    self.lead)


@dataclass(frozen=True)
class InDoubt:
    """A commit of a read that failed, which the store may have taken all the same (its answer
    was lost with the connection): the position it stored, and what it counted from ``since``."""

    mark: Mark
    lines: int
    bytes: int


@dataclass(frozen=True)
class Batch:
    """What one read of one file produced: commit all of it, or none of it."""

    state: FileState
    hits: list[Hit]
    lines: int
    bytes: int
    #: The committed offset this read began at (None: not known): a batch whose end is already
    #: the committed position, though it began elsewhere, was committed before (its commit's
    #: answer was lost with the connection) and is not counted twice.
    since: int | None = None
    #: The failed commits of this read, from ``since``: where the store holds one of them, only
    #: what lies past it is committed.
    in_doubt: tuple[InDoubt, ...] = ()


class PositionStore(Protocol):
    """Where read positions and hits are committed together."""

    def position(self, key: str) -> FileState | None:
        """The committed state of a file, by ``dev:ino`` key."""

    def commit(self, batch: Batch) -> None:
        """Store the batch's hits and its new position in one transaction."""

    def forget(self, key: str) -> None:
        """Drop the state of a file that is gone for good."""

    def positions(self) -> list[FileState]:
        """Every committed file state."""


def file_key(dev: int, ino: int) -> str:
    """The store key of a file's identity."""
    return f"{dev}:{ino}"


@dataclass
class FileStatus:
    """A followed file as a person would want to see it."""

    path: str
    key: str
    offset: int
    size: int
    rotated: bool
    lines: int

    @property
    def lag(self) -> int:
        """Bytes written but not yet read."""
        return max(0, self.size - self.offset)
