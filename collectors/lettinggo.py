"""Letting go of files: rotated ones gone quiet, deleted ones, and the copies they leave.

A rotated file is closed once it has been quiet for ``rotate_wait`` seconds; an idle live one
after ``idle_close``. A file's position is forgotten only once no sibling holds its inode (what
a compressed sibling kept of it is read first), and then what was read of it stays known, in
memory, to the copies of it found later; the copies among its rotated siblings are adopted at
once, so their own stored positions say how far they were read, across restarts too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from collectors.descriptors import Descriptors, Reporter
from collectors.followed import Followed, at_end
from collectors.identity import Source
from collectors.positions import FileState, PositionStore
from collectors.siblings import Found, copy_candidates, live_path, locate

__all__ = ["FORGOTTEN_KEPT", "LettingGo"]

#: Marks of deleted files kept in memory, for copies of them found later.
FORGOTTEN_KEPT = 64

#: Reads what a compressed sibling kept of files lost: (keys finished, plain siblings to follow).
FinishLost = Callable[[Sequence[FileState]], tuple[set[str], list[str]]]


@dataclass(eq=False, kw_only=True)
class LettingGo:
    """Closes, drops and forgets the tailer's files, and keeps what is known of those let go.

    It shares the tailer's followed files and descriptors; what it needs done by the tailer
    itself (reading a rotated sibling that is a copy, following a plain sibling on the next
    poll) it asks through the callables it is given.
    """

    store: PositionStore
    files: dict[str, Followed]
    fds: Descriptors
    errors: Reporter
    positions: Callable[[], dict[str, FileState]]
    finish_lost: FinishLost
    read_copy: Callable[[str, float], bool]  # reads a sibling if it is a copy of what was read
    follow: Callable[[list[str]], None]  # plain siblings to open on the next poll
    clock: Callable[[], float]
    rotate_wait: float
    idle_close: float
    #: Files a rescan found gone: forgotten at the end of the poll, unless followed again.
    gone: set[str] = field(default_factory=set, init=False)
    #: The size of each rotated file closed when it went quiet.
    settled: dict[str, int] = field(default_factory=dict, init=False)
    #: Marks of files forgotten once deleted, newest last.
    deleted: list[Source] = field(default_factory=list, init=False)

    def clear(self) -> None:
        """Forget the sizes and marks kept of files let go (the store was replaced)."""
        self.settled.clear()
        self.deleted.clear()

    def probe_copies(self, now: float) -> None:
        """Finish a copytruncate copy outside the globs: a sibling holding what a truncated file held."""
        for f in list(self.files.values()):
            if f.prior is None or f.rotated or now - f.prior_at > 12 * self.rotate_wait:
                continue
            found = False
            for sibling in copy_candidates(f.path, self.files):  # each copy of a mark kept
                if self.read_copy(sibling, now):
                    found = True
            if found:
                f.prior_at = -1e18  # look no further

    def forget_gone(self) -> None:
        """Forget the positions of the files the rescan found gone and nothing follows now."""
        for key in sorted(self.gone):
            if key not in self.files:
                self._forget(key, self.positions()[key].path if key in self.positions() else key)
        self.gone.clear()

    def close_quiet(self, now: float) -> None:
        """Close idle files, and let go of rotated ones quiet for ``rotate_wait`` and read to their end."""
        for key, f in list(self.files.items()):
            quiet = now - f.last_change
            if f.fd is None:
                if f.rotated:
                    del self.files[key]  # its position stays: found again by inode if it grows
                    self.settled[key] = f.size
                    self._drop_if_gone(key)
                continue
            if not f.rotated:
                if quiet >= self.idle_close and at_end(f) and not f.fresh:
                    self.fds.close(f)
                continue
            if quiet < self.rotate_wait or not at_end(f):
                continue
            try:
                deleted = os.fstat(f.fd).st_nlink == 0
            except OSError:
                deleted = False
            self.fds.close(f)
            del self.files[key]
            self.settled[key] = f.size
            if deleted:
                self._forget(key, f.path)

    def _drop_if_gone(self, key: str) -> None:
        """Forget an idle file let go of once no sibling holds its inode (what a compressed
        sibling kept of it is read first), as a rescan would on the next poll."""
        stored = self.positions().get(key)
        if stored is None or not locate([stored]).get(key, Found(None)).gone:
            return
        finished, plain = self.finish_lost([stored])
        self.follow(plain)
        for gone in sorted(finished):
            self._forget(gone, stored.path)

    def _forget(self, key: str, path: str) -> None:
        try:
            self.store.forget(key)
        except Exception as exc:
            self.errors.report(path, f"cannot forget {path}: {exc}")
            return
        state = self.positions().pop(key, None)
        if state is not None:
            # A copy of the deleted file may yet be found (a copytruncate copy made before the
            # delete): what was read of it stays known, as a settled source, while this runs.
            marks = [m for m in (state.mark, state.prior, *state.earlier) if m is not None and m.offset]
            self.deleted = (self.deleted + [Source(key, m, True) for m in marks])[-FORGOTTEN_KEPT:]
            if marks:
                self._adopt_copies(live_path(state.path))

    def _adopt_copies(self, live: str) -> None:
        """Open the copies among ``live``'s rotated siblings of what was read of its files, so
        their own positions (stored) say how far they were read, across restarts too."""
        now = self.clock()
        for sibling in copy_candidates(live, self.files):
            self.read_copy(sibling, now)
