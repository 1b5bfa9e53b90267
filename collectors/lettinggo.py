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


class LettingGo:
    """Closes, drops and forgets the tailer's files, and keeps what is known of those let go.

    It shares the tailer's followed files and descriptors; what it needs done by the tailer
    itself (reading a rotated sibling that is a copy, following a plain sibling on the next
    poll) it asks through the callables it is given.
    """

    def __init__(
        self,
        store: PositionStore,
        files: dict[str, Followed],
        fds: Descriptors,
        errors: Reporter,
        *,
        positions: Callable[[], dict[str, FileState]],
        finish_lost: FinishLost,
        read_copy: Callable[[str, float], bool],
        follow: Callable[[list[str]], None],
        clock: Callable[[], float],
        rotate_wait: float,
        idle_close: float,
    ) -> None:
        self._store = store
        self._files = files
        self._fds = fds
        self._errors = errors
        self._positions = positions
        self._finish_lost = finish_lost
        self._read_copy = read_copy  # reads a sibling if it is a copy of what was read: whether it was
        self._follow = follow
        self._clock = clock
        self._rotate_wait = rotate_wait
        self._idle_close = idle_close
        self.gone: set[str] = set()  # files a rescan found gone: forgotten at the end of the poll
        self.settled: dict[str, int] = {}  # size of each rotated file closed when it went quiet
        self.deleted: list[Source] = []  # marks of files forgotten once deleted, newest last

    def clear(self) -> None:
        """Forget the sizes and marks kept of files let go (the store was replaced)."""
        self.settled.clear()
        self.deleted.clear()

    def probe_copies(self, now: float) -> None:
        """Finish a copytruncate copy outside the globs: a sibling holding what a truncated file held."""
        for f in list(self._files.values()):
            if f.prior is None or f.rotated or now - f.prior_at > 12 * self._rotate_wait:
                continue
            found = False
            for sibling in copy_candidates(f.path, self._files):  # each copy of a mark kept
                if self._read_copy(sibling, now):
                    found = True
            if found:
                f.prior_at = -1e18  # look no further

    def forget_gone(self) -> None:
        """Forget the positions of the files the rescan found gone and nothing follows now."""
        for key in sorted(self.gone):
            if key not in self._files:
                self._forget(key, self._positions()[key].path if key in self._positions() else key)
        self.gone.clear()

    def close_quiet(self, now: float) -> None:
        """Close idle files, and let go of rotated ones quiet for ``rotate_wait`` and read to their end."""
        for key, f in list(self._files.items()):
            quiet = now - f.last_change
            if f.fd is None:
                if f.rotated:
                    del self._files[key]  # its position stays: found again by inode if it grows
                    self.settled[key] = f.size
                    self._drop_if_gone(key)
                continue
            if not f.rotated:
                if quiet >= self._idle_close and at_end(f) and not f.fresh:
                    self._fds.close(f)
                continue
            if quiet < self._rotate_wait or not at_end(f):
                continue
            try:
                deleted = os.fstat(f.fd).st_nlink == 0
            except OSError:
                deleted = False
            self._fds.close(f)
            del self._files[key]
            self.settled[key] = f.size
            if deleted:
                self._forget(key, f.path)

    def _drop_if_gone(self, key: str) -> None:
        """Forget an idle file let go of once no sibling holds its inode (what a compressed
        sibling kept of it is read first), as a rescan would on the next poll."""
        stored = self._positions().get(key)
        if stored is None or not locate([stored]).get(key, Found(None)).gone:
            return
        finished, plain = self._finish_lost([stored])
        self._follow(plain)
        for gone in sorted(finished):
            self._forget(gone, stored.path)

    def _forget(self, key: str, path: str) -> None:
        try:
            self._store.forget(key)
        except Exception as exc:
            self._errors.report(path, f"cannot forget {path}: {exc}")
            return
        state = self._positions().pop(key, None)
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
        now = self._clock()
        for sibling in copy_candidates(live, self._files):
            self._read_copy(sibling, now)
