"""Following log files exactly: every complete line counted once, across rotations and restarts.

A ``Tailer`` is stepped by ``poll()``: it expands the globs, stats every file,
reads what is new to its end and hands each file's hits and new read position
to a ``PositionStore`` that commits both in one transaction. Nothing here
waits or sleeps; ``collectors.watch`` decides when to poll.

A file is known by device and inode, checked against a hash of its first bytes
(up to 1 KiB), so a reused inode is never taken for the old file. A file whose
path now leads elsewhere (renamed, deleted, a symlink repointed) is drained on
every poll until it has been quiet for ``rotate_wait`` seconds, then closed.
A file smaller than the bytes read, or whose head changed, was truncated or
rewritten in place (copytruncate) and is read again from its start.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from collectors.files import expand, is_compressed, same_head
from collectors.scan import Hit, LineScanner, Matcher

CHUNK = 1 << 20
HEAD = 1024
#: Bytes before the read offset whose hash tells a copy of a followed file from a stranger.
TAIL = 256


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


@dataclass(frozen=True)
class Batch:
    """What one read of one file produced: commit all of it, or none of it."""

    state: FileState
    hits: list[Hit]
    lines: int
    bytes: int


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


ErrorCallback = Callable[[str, str], None]


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


@dataclass(frozen=True)
class _Before:
    """What had been read from a file when it was found truncated: a copy may hold the rest."""

    offset: int
    head_len: int
    head_hash: bytes
    tail_len: int
    tail_hash: bytes
    at: float
    head_bytes: bytes = b""


@dataclass
class _Followed:
    key: str
    dev: int
    ino: int
    path: str
    fd: int
    scanner: LineScanner
    head_len: int
    head_hash: bytes
    head_bytes: bytes = b""
    size: int = 0
    last_change: float = 0.0
    rotated: bool = False
    lines: int = 0
    truncations: int = 0
    tail_len: int = 0
    tail_hash: bytes = b""
    before: _Before | None = None
    fresh: bool = False  # new, nothing read yet: may turn out to be a copy of a followed file
    at_start: bool = False  # found by the first scan, not created under our eyes
    errors: set[str] = field(default_factory=set)

    def snapshot(self, now: float) -> _Before:
        """The read state as it is now."""
        return _Before(
            self.scanner.offset, self.head_len, self.head_hash, self.tail_len, self.tail_hash, now,
            self.head_bytes,
        )


class Tailer:
    """Follows every file the globs match; ``poll()`` does one whole step."""

    def __init__(
        self,
        patterns: Sequence[str],
        matcher: Matcher,
        store: PositionStore,
        *,
        on_error: ErrorCallback | None = None,
        rotate_wait: float = 5.0,
        start_at_end: bool = False,
        clock: Callable[[], float] = time.monotonic,
        chunk: int = CHUNK,
        batch_bytes: int = 8 * CHUNK,
    ) -> None:
        self.patterns = list(patterns)
        self.matcher = matcher
        self.store = store
        self.rotate_wait = rotate_wait
        self.start_at_end = start_at_end
        self._on_error = on_error
        self._clock = clock
        self._chunk = chunk
        self._batch_bytes = batch_bytes
        self._files: dict[str, _Followed] = {}
        self._waiting: dict[str, float] = {}
        self._first_scan = True
        self._reported: set[str] = set()
        self.lines_total = 0
        self.truncations = 0

    # -- public -------------------------------------------------------------

    def poll(self, *, rescan: bool = True) -> int:
        """Rescan the globs (unless told not to), then read every followed file to its end.

        Returns the number of bytes of complete lines consumed.
        """
        now = self._clock()
        if rescan:
            self._rescan(now)
        consumed = 0
        for followed in list(self._files.values()):
            consumed += self._drain(followed, now)
        self._close_quiet(now)
        return consumed

    def files(self) -> list[FileStatus]:
        """The files followed now, live and rotated."""
        return [
            FileStatus(f.path, f.key, f.scanner.offset, f.size, f.rotated, f.lines)
            for f in self._files.values()
        ]

    def close(self) -> None:
        """Close every file descriptor; committed positions stay in the store."""
        for followed in self._files.values():
            _close(followed.fd)
        self._files.clear()

    # -- steps --------------------------------------------------------------

    def _rescan(self, now: float) -> None:
        seen: dict[str, str] = {}
        for path in expand(self.patterns):
            if is_compressed(path):
                continue
            name = str(path)
            try:
                st = os.stat(name)
            except OSError as exc:
                self._report(name, f"cannot stat {name}: {exc.strerror or exc}")
                continue
            key = file_key(st.st_dev, st.st_ino)
            seen.setdefault(key, name)
        for key, name in seen.items():
            followed = self._files.get(key)
            if followed is None:
                self._open(name, now)
            else:
                followed.path = name
                followed.rotated = False
        if self._first_scan:
            self._find_rotated_while_stopped(seen, now)
        for key, followed in self._files.items():
            if key not in seen and not followed.rotated:
                followed.rotated = True
                followed.last_change = now
        self._first_scan = False

    def _find_rotated_while_stopped(self, seen: dict[str, str], now: float) -> None:
        """Finish files that were renamed out of the globs while nothing followed them.

        A file rotated during downtime keeps its inode; it is looked for in the
        directory it was last seen in, and read from its committed offset.
        """
        for state in self.store.positions():
            if state.key in seen or state.key in self._files:
                continue
            directory = os.path.dirname(state.path) or "."
            try:
                entries = list(os.scandir(directory))
            except OSError:
                entries = []
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if (
                    file_key(st.st_dev, st.st_ino) == state.key
                    and not is_compressed(Path(entry.path))
                    and _still_holds(entry.path, state)
                ):
                    self._open(entry.path, now)
                    break
            else:
                self.store.forget(state.key)

    def _open(self, name: str, now: float) -> None:
        try:
            fd = os.open(name, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            self._report(name, f"cannot open {name}: {exc.strerror or exc}; will retry")
            return
        self._resolved(name)
        st = os.fstat(fd)
        key = file_key(st.st_dev, st.st_ino)
        if key in self._files:
            _close(fd)
            return
        stored = self.store.position(key)
        fresh = False
        if stored is not None and stored.offset <= st.st_size and same_head(
            fd, stored.head_len, stored.head_hash
        ):
            offset = stored.offset
            # A position stored while the file was empty says nothing of what it holds now:
            # like a new file, it may turn out to be a copy of a followed one.
            fresh = stored.offset == 0 and stored.head_len == 0
        elif self.start_at_end and self._first_scan and stored is None:
            offset = _last_line_end(fd, st.st_size)
        else:
            offset = 0
            fresh = stored is None  # nothing read yet: it may turn out to be a copy
        head_len, head_hash, head_bytes = _head(fd, st.st_size)
        self._files[key] = _Followed(
            key=key,
            dev=st.st_dev,
            ino=st.st_ino,
            path=name,
            fd=fd,
            scanner=LineScanner(self.matcher, offset),
            head_len=head_len,
            head_hash=head_hash,
            head_bytes=head_bytes,
            size=st.st_size,
            last_change=now,
            fresh=fresh,
            at_start=self._first_scan,
        )
        followed = self._files[key]
        if stored is not None and offset != stored.offset:
            # The stored state belonged to another file on a reused inode, or to this one
            # before it was truncated: start over, and remember what had been read, since
            # a copy of it (copytruncate while nothing followed) may turn up.
            followed.before = _Before(
                stored.offset, stored.head_len, stored.head_hash, 0, b"", now
            )
            self._commit(followed, [], 0, 0)
        elif stored is None:
            self._commit(followed, [], 0, 0)  # known from now on, even before a line is read

    def _copy_of(self, new: _Followed, size: int, now: float) -> int | str | None:
        """Where to start a new file that may be a copy of a followed one (copytruncate).

        Returns the offset to start at when the file is a byte copy of what a
        followed file held before it was truncated (what the original already
        gave is not counted again; the rest is read from the copy); "wait" while
        the file matches a followed file that is not truncated (a copy still
        being written, or a twin: decided within ``rotate_wait``); else None.
        """
        fd, key = new.fd, new.key
        for f in self._files.values():
            if f is new or f.fresh:
                continue
            before = f.before
            if before is None and f.scanner.offset and _truncated(f):
                before = f.snapshot(now)
            if before is not None and before.offset:
                if (
                    size >= before.offset
                    and same_head(fd, before.head_len, before.head_hash)
                    and (
                        not before.tail_len
                        or _tail_hash(fd, before.offset, before.tail_len) == before.tail_hash
                    )
                ):
                    self._waiting.pop(key, None)
                    return before.offset
                if size < before.offset and _is_prefix(fd, size, before.head_bytes):
                    # A copy made before the original gave its last lines (the writer went on
                    # between copy and truncation): everything in it was read already.
                    self._waiting.pop(key, None)
                    return _last_line_end(fd, size)
            if (
                before is None
                and not f.rotated
                and not new.at_start
                and f.scanner.offset
                and _same_prefix(fd, f.fd, min(size, HEAD))
            ):
                first = self._waiting.setdefault(key, now)
                if now - first < self.rotate_wait:
                    return "wait"
        self._waiting.pop(key, None)
        return None

    def _drain(self, f: _Followed, now: float) -> int:
        try:
            st = os.fstat(f.fd)
        except OSError as exc:
            self._report(f.path, f"cannot stat {f.path}: {exc.strerror or exc}")
            return 0
        f.size = st.st_size
        if f.fresh and st.st_size == 0:
            return 0  # nothing to read, so nothing to decide yet: a copy starts empty
        if f.fresh:
            decided = self._copy_of(f, st.st_size, now)
            if decided == "wait":
                return 0
            f.fresh = False
            if isinstance(decided, int):
                f.scanner = LineScanner(self.matcher, decided)
                self._commit(f, [], 0, 0)
        if f.before is not None and now - f.before.at > 12 * self.rotate_wait:
            f.before = None
        if st.st_size < f.scanner.read_pos or not same_head(f.fd, f.head_len, f.head_hash):
            f.truncations += 1
            self.truncations += 1
            f.before = f.snapshot(now)
            f.scanner = LineScanner(self.matcher, 0)
            f.head_len, f.head_hash, f.head_bytes = _head(f.fd, st.st_size)
            self._commit(f, [], 0, 0)
        elif f.head_len < HEAD and st.st_size > f.head_len:
            f.head_len, f.head_hash, f.head_bytes = _head(f.fd, st.st_size)
        consumed = 0
        hits: list[Hit] = []
        lines = 0
        pending_bytes = 0
        while True:
            pos = f.scanner.read_pos
            try:
                data = os.pread(f.fd, self._chunk, pos)
            except OSError as exc:
                self._report(f.path, f"cannot read {f.path}: {exc.strerror or exc}")
                break
            if not data:
                break
            result = f.scanner.feed(data)
            hits.extend(result.hits)
            lines += result.lines
            pending_bytes += result.consumed
            if pending_bytes >= self._batch_bytes:
                if not self._commit(f, hits, lines, pending_bytes):
                    return consumed
                consumed += pending_bytes
                hits, lines, pending_bytes = [], 0, 0
        if f.head_len < HEAD and f.scanner.read_pos > f.head_len:
            # Hash the head from what was read: bytes appended during the read count too.
            f.head_len, f.head_hash, f.head_bytes = _head(f.fd, f.scanner.read_pos)
        if pending_bytes or hits:
            if not self._commit(f, hits, lines, pending_bytes):
                return consumed
            consumed += pending_bytes
        if consumed:
            f.last_change = now
        return consumed

    def _commit(self, f: _Followed, hits: list[Hit], lines: int, size: int) -> bool:
        f.size = max(f.size, f.scanner.read_pos)
        state = FileState(
            f.key, f.dev, f.ino, f.path, f.scanner.offset, f.head_len, f.head_hash, f.size
        )
        try:
            self.store.commit(Batch(state, hits, lines, size))
        except Exception as exc:  # the store's own errors vary by backend
            # Nothing was committed: forget what was read so it is read again.
            f.scanner = LineScanner(self.matcher, self._resume_offset(f))
            self._report(f.path, f"cannot commit what was read from {f.path}: {exc}")
            return False
        f.lines += lines
        self.lines_total += lines
        if size:
            f.tail_len = min(TAIL, f.scanner.offset)
            f.tail_hash = _tail_hash(f.fd, f.scanner.offset, f.tail_len)
        return True

    def _resume_offset(self, f: _Followed) -> int:
        """Where to read again after a failed commit: the stored offset if it is this content's."""
        try:
            stored = self.store.position(f.key)
        except Exception:
            return 0
        if stored is None or not _still_holds_fd(f.fd, stored):
            return 0
        return stored.offset

    def _close_quiet(self, now: float) -> None:
        for key, f in list(self._files.items()):
            if not f.rotated or now - f.last_change < self.rotate_wait:
                continue
            if f.scanner.read_pos < f.size:
                continue
            _close(f.fd)
            del self._files[key]
            try:
                self.store.forget(key)
            except Exception as exc:
                self._report(f.path, f"cannot forget {f.path}: {exc}")

    # -- errors -------------------------------------------------------------

    def _report(self, path: str, message: str) -> None:
        """Tell the callback once per path until the path works again."""
        if path in self._reported:
            return
        self._reported.add(path)
        if self._on_error is not None:
            self._on_error(path, message)

    def _resolved(self, path: str) -> None:
        self._reported.discard(path)


def _head(fd: int, size: int) -> tuple[int, bytes, bytes]:
    """(length, hash, bytes) of a file's first ``min(size, HEAD)`` bytes, as ``same_head`` checks them."""
    try:
        data = os.pread(fd, min(size, HEAD), 0)
    except OSError:
        data = b""
    return len(data), hashlib.blake2b(data, digest_size=16).digest(), data


def _tail_hash(fd: int, offset: int, length: int) -> bytes:
    """Hash of the ``length`` bytes before ``offset`` (empty if they cannot be read)."""
    if length <= 0:
        return b""
    try:
        data = os.pread(fd, length, offset - length)
    except OSError:
        return b""
    return hashlib.blake2b(data, digest_size=16).digest() if len(data) == length else b""


def _still_holds_fd(fd: int, state: FileState) -> bool:
    """Whether an open file still holds what ``state`` says was read from it."""
    try:
        return os.fstat(fd).st_size >= state.offset and same_head(fd, state.head_len, state.head_hash)
    except OSError:
        return False


def _still_holds(path: str, state: FileState) -> bool:
    """Whether the file at ``path`` still holds what ``state`` says was read from it."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        return _still_holds_fd(fd, state)
    finally:
        _close(fd)


def _is_prefix(fd: int, size: int, head: bytes) -> bool:
    """Whether a file's first bytes agree with a remembered head (as far as both go)."""
    length = min(size, len(head))
    if length <= 0:
        return False
    try:
        return os.pread(fd, length, 0) == head[:length]
    except OSError:
        return False


def _same_prefix(fd_a: int, fd_b: int, length: int) -> bool:
    """Whether two files start with the same ``length`` bytes (False for length 0)."""
    if length <= 0:
        return False
    try:
        return os.pread(fd_a, length, 0) == os.pread(fd_b, length, 0)
    except OSError:
        return False


def _truncated(f: _Followed) -> bool:
    """Whether a followed file is now shorter than what was read, or has another head."""
    try:
        size = os.fstat(f.fd).st_size
    except OSError:
        return True
    return size < f.scanner.read_pos or not same_head(f.fd, f.head_len, f.head_hash)


def _last_line_end(fd: int, size: int) -> int:
    """The offset just after the last newline before ``size`` (0 if none in the last MiB)."""
    start = max(0, size - CHUNK)
    tail = os.pread(fd, size - start, start)
    newline = tail.rfind(b"\n")
    return start + newline + 1 if newline >= 0 else start if start else 0


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
