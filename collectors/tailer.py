"""Following log files exactly: every complete line counted once, across rotations and restarts.

A ``Tailer`` is stepped by ``poll()``: it expands the globs, stats every file,
reads what is new to its end and hands each file's hits and new read position
to a ``PositionStore`` that commits both in one transaction. Nothing here
waits or sleeps; ``collectors.watch`` decides when to poll.

A file is known by device and inode, checked against its first bytes and the
bytes before its read offset (``collectors.identity``). A file whose path now
leads elsewhere is drained on every poll until it has been quiet for
``rotate_wait`` seconds, then closed; its position is dropped only once it is
deleted. Idle files are closed too and reopened by position, so descriptors
go to files that grow. What a file rotated and compressed while nothing followed
it left unread is read from its compressed sibling (``collectors.backlog``). How
files are let go of and forgotten is ``collectors.lettinggo``, and how what was read
is committed ``collectors.commits``, parts the tailer holds.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

from collectors.backlog import Catchup
from collectors.commits import Commits
from collectors.deciding import Deciding
from collectors.descriptors import Descriptors, Reporter
from collectors.followed import (
    CHUNK,
    Followed,
    joins,
    pread_upto,
    read_time_if_ahead,
    still_read,
    tail_before,
)
from collectors.identity import HEAD
from collectors.lettinggo import LettingGo
from collectors.positions import Batch, FileState, FileStatus, PositionStore, file_key
from collectors.scan import Hit, LineScanner, Matcher, ScanWarning
from collectors.siblings import adoptable, leads_to, live_path, matched, unread_between

__all__ = ["Batch", "ErrorCallback", "FileState", "FileStatus", "PositionStore", "Tailer", "file_key"]

ErrorCallback = Callable[[str, str], None]

def _up_to_a_hole(data: bytes) -> bytes:
    """``data`` up to its first NUL after its first byte: a hole is looked at before it is read."""
    cut = data.find(b"\0", 1)
    return data if cut < 0 or data[0] == 0 else data[:cut]


class Tailer(Deciding):
    """Follows every file the globs match; ``poll()`` does one whole step."""

    def __init__(
        self,
        patterns: Sequence[str],
        matcher: Matcher,
        store: PositionStore,
        *,
        on_error: ErrorCallback | None = None,
        on_resolved: ErrorCallback | None = None,
        rotate_wait: float = 5.0,
        start_at_end: bool = False,
        clock: Callable[[], float] = time.monotonic,
        chunk: int = CHUNK,
        batch_bytes: int = 8 * CHUNK,
        idle_close: float = 30.0,
        max_open: int | None = None,
        skew: float = 300.0,
        wall: Callable[[], float] = time.time,
        backfill: float | None = None,
    ) -> None:
        self.patterns = list(patterns)
        self.matcher = matcher
        self.rotate_wait = rotate_wait
        self.start_at_end = start_at_end
        self.idle_close = idle_close
        self._clock = clock
        self._chunk = chunk
        self._batch_bytes = batch_bytes
        self._files: dict[str, Followed] = {}
        self._stored: dict[str, FileState] | None = None
        self._first_scan = True
        self._also: list[str] = []  # plain siblings to follow, found while deciding another file
        self._reload = False
        self._errors = Reporter(on_error, on_resolved)  # told when an error told no longer holds
        self._commits = Commits(store, self._errors, self._positions, self._scanner, self._start_at)
        self._commit = self._commits.commit
        self._fds = Descriptors(self._files, self._errors.report, max_open)
        self._letting = LettingGo(
            store=store, files=self._files, fds=self._fds, errors=self._errors, positions=self._positions,
            finish_lost=self._finish_lost, read_copy=self._read_copy, follow=self._also.extend,
            clock=clock, rotate_wait=rotate_wait, idle_close=idle_close,
        )
        self._skew, self._wall = skew, wall
        self._catchup = Catchup(self._commit, self._trusted, self._scanner, self._batch_bytes, self._errors)
        self.backfill = backfill
        self._known_lives: set[str] = set()  # live logs with a position stored when the tailer started

    # -- public -------------------------------------------------------------

    def poll(self, *, rescan: bool = True) -> int:
        """Rescan the globs (unless told not to), then read every followed file to its end.

        Returns the number of bytes of complete lines consumed.
        """
        now = self._clock()
        if self._reload:
            self._reload = False
            self.reload_positions()
            self._commits.held = False
            self._commits.refused.clear()  # those were the old store's refusals
            rescan = True
        names = self._rescan(now) if rescan else []
        names += [(path, True) for path in self._also]
        self._also.clear()
        consumed = 0
        for f in list(self._files.values()):
            consumed += self._drain(f, now)
            self._fds.trim(f)
        for name, rotated in names:
            opened = self._open(name, now, rotated=rotated)
            if opened is not None:
                consumed += self._drain(opened, now)
                self._fds.trim(opened)
        if rescan:
            self._letting.probe_copies(now)
            self._letting.forget_gone()
            self._first_scan = False
        self._letting.close_quiet(now)
        return consumed

    @property
    def store(self) -> PositionStore:
        """Where what is read is committed, and positions are read from."""
        return self._commits.store

    @store.setter
    def store(self, store: PositionStore) -> None:
        self._commits.store = store

    @property
    def lines_total(self) -> int:
        """Lines committed since the tailer started."""
        return self._commits.lines_total

    @property
    def truncations(self) -> int:
        """Truncations found since the tailer started."""
        return self._commits.truncations

    @property
    def refused(self) -> dict[str, str]:
        """Path -> why the store refused its last commit, until one works."""
        return self._commits.refused

    def files(self) -> list[FileStatus]:
        """The files followed now, live and rotated, open or idle."""
        return [
            FileStatus(f.path, f.key, f.scanner.offset, f.size, f.rotated, f.lines)
            for f in self._files.values()
        ]

    def refusals(self) -> list[str]:
        """Why the store refused the last commit of each file followed whose last commit it refused."""
        followed = {f.path for f in list(self._files.values())}
        return [reason for path, reason in list(self._commits.refused.items()) if path in followed]

    def close(self) -> None:
        """Close every file descriptor; committed positions stay in the store."""
        for f in self._files.values():
            self._fds.close(f)
        self._files.clear()

    def reload_positions(self) -> None:
        """Forget what is known of the store (it was replaced): read it again, drop open files."""
        self.close()
        self._stored = None
        self._letting.clear()
        self._catchup.walked.clear()
        self._first_scan = True

    def hold(self) -> None:
        """Commit nothing until the next reload (the store is being replaced)."""
        self._commits.held = True

    def request_reload(self) -> None:
        """Reload the positions at the start of the next poll (safe from another thread)."""
        self._reload = True

    # -- scanning -----------------------------------------------------------

    def _positions(self) -> dict[str, FileState]:
        if self._stored is None:
            self._stored = {s.key: s for s in self.store.positions()}
            self._known_lives = {live_path(s.path) for s in self._stored.values()}
        return self._stored

    def _rescan(self, now: float) -> list[tuple[str, bool]]:
        """Mark what the globs match; return the names of files to open, and whether rotated."""
        stored = self._positions()
        seen = matched(self.patterns, self._errors.report)
        todo: list[tuple[str, bool]] = []
        for key, name in seen.items():
            followed = self._files.get(key)
            if followed is None:
                todo.append((name, False))
            else:
                followed.path = name
                followed.rotated = False
        for key, f in self._files.items():
            if key not in seen and not f.rotated and not leads_to(f.path, key):
                f.rotated = True
                f.last_change = now
        missing = [s for k, s in stored.items() if k not in self._files and k not in seen]
        gone, moved = adoptable(missing, self._letting.settled, self.patterns)
        finished, plain = self._finish_lost([stored[key] for key in sorted(gone)])
        self._letting.gone |= finished
        todo += [(path, True) for path in moved + plain]
        lives = {live_path(f.path) for f in self._files.values()} | {live_path(n) for n in seen.values()}
        known = set(self._files) | set(stored) | set(seen)
        todo += [(path, True) for path in unread_between(lives, known) if path not in moved]
        return todo

    # -- opening and deciding -----------------------------------------------

    def _open(
        self, name: str, now: float, *, rotated: bool = False, only_copies: bool = False
    ) -> Followed | None:
        fd = self._fds.open_fd(name)
        if fd is None:
            return None
        self._errors.resolved(name)
        st = os.fstat(fd)
        key = file_key(st.st_dev, st.st_ino)
        if key in self._files:
            self._fds.drop(fd)
            return None
        f = Followed(
            key=key, dev=st.st_dev, ino=st.st_ino, path=name, fd=fd,
            scanner=self._scanner(name, 0), size=st.st_size, mtime_ns=st.st_mtime_ns,
            last_change=now, rotated=rotated, fresh=True, first_seen=now, at_start=self._first_scan,
        )
        self._files[key] = f
        self._letting.gone.discard(key)
        decided = self._decide(f, now, only_copies=only_copies)
        if only_copies and not decided:
            self._fds.close(f)
            del self._files[key]
            return None
        return f

    def _still_holds(self, f: Followed) -> bool:
        """Whether ``f``'s file still holds the head and size it was read with."""
        assert f.fd is not None
        return f.size >= f.scanner.read_pos and still_read(f)

    def _start_at(self, f: Followed, offset: int) -> None:
        assert f.fd is not None
        head = pread_upto(f.fd, min(offset, HEAD))
        f.restart_at(self._scanner(f.path, offset), head, tail_before(f.fd, offset))
        f.base = offset

    def _scanner(self, path: str, offset: int) -> LineScanner:
        """A scanner of ``path`` from ``offset`` whose warnings (a line cut, a pattern over its
        budget) go to the error callback, each naming the file and offset."""

        def warn(warning: ScanWarning) -> None:
            self._errors.warn(path, warning.message)

        return LineScanner(self.matcher, offset, source=path, on_warning=warn)

    # -- reading ------------------------------------------------------------

    def _read_copy(self, path: str, now: float) -> bool:
        """Open ``path`` as a rotated file only if it is a copy of what was read, and read it;
        whether it was one."""
        copy = self._open(path, now, rotated=True, only_copies=True)
        if copy is None:
            return False
        self._drain(copy, now)
        self._fds.trim(copy)
        return True

    def _ready(self, f: Followed, now: float) -> bool:
        """Open (if idle), stat and, if fresh, decide ``f``; whether it can be read now."""
        reopened = f.fd is None
        if reopened and not self._fds.reopen(f):
            return False
        assert f.fd is not None
        try:
            st = os.fstat(f.fd)
        except OSError as exc:
            self._errors.report(f.path, f"cannot stat {f.path}: {exc.strerror or exc}")
            return False
        # read to the end it had when last looked at (a fresh file was not read yet)
        ended = not f.fresh and f.size == f.scanner.read_pos
        f.size, f.mtime_ns = st.st_size, st.st_mtime_ns
        if reopened and not f.fresh and not self._still_holds(f):
            # Closed while idle, its inode number may since have gone to another file (a
            # copytruncate copy): decided again, as a file first seen is.
            if self._commits.read_to(f) is None:
                return False
            f.restart_at(self._scanner(f.path, 0), b"", b"")
            f.base, f.fresh = 0, True
        if f.fresh and not self._decide(f, now):
            return False
        if st.st_size < f.scanner.read_pos or not still_read(f, ended=ended):
            return self._commits.truncated_now(f, now)
        return True

    def _drain(self, f: Followed, now: float) -> int:
        """Read ``f`` to its end, committing as it goes; the bytes of complete lines consumed."""
        if not self._ready(f, now):
            return 0
        assert f.fd is not None
        consumed = 0
        hits: list[Hit] = []
        lines = pending = 0
        while True:
            try:
                data = os.pread(f.fd, self._chunk, f.scanner.read_pos)
            except OSError as exc:
                self._errors.report(f.path, f"cannot read {f.path}: {exc.strerror or exc}")
                break
            if not data:
                break
            if data[:1] == b"\0" and not still_read(f):
                # A hole met mid-read: the file was truncated under a writer without O_APPEND
                # while it was read. What was read before it counts; the file is read again.
                if (pending or hits) and not self._commit(f, hits, lines, pending):
                    return consumed
                consumed += pending
                hits, lines, pending = [], 0, 0
                if not self._commits.truncated_now(f, now):
                    break
                continue
            data = _up_to_a_hole(data)
            result = f.feed(data, joined=joins(f, data))
            hits.extend(self._trusted(f, result.hits))
            lines += result.lines
            pending += result.consumed
            if pending >= self._batch_bytes:
                if not self._commit(f, hits, lines, pending):
                    return consumed
                consumed += pending
                hits, lines, pending = [], 0, 0
        if pending or hits or f.unsaved:
            if not self._commit(f, hits, lines, pending):
                return consumed
            consumed += pending
        if consumed:
            f.last_change = now
        return consumed

    # -- compressed siblings ---------------------------------------------------

    def _finish_lost(self, lost: Sequence[FileState]) -> tuple[set[str], list[str]]:
        """Read what files gone, or holding other content now, left in compressed siblings."""
        return self._catchup.finish(lost, list(self._positions().values()))

    def _trusted(self, f: Followed, hits: list[Hit]) -> list[Hit]:
        """Hits whose stamp lies more than ``skew`` ahead count at their read time (told once)."""
        out, bad = read_time_if_ahead(hits, self._wall() + self._skew)
        if bad is not None and "skew" not in f.errors:
            f.errors.add("skew")
            self._errors.warn(f.path, f"{f.path}: a line at offset {bad.offset} is stamped "
                       f"{bad.ts.isoformat() if bad.ts else '?'}, more than {self._skew:g} s ahead "
                       "of this clock (clock skew?); such lines count at the time they are read")
        return out
