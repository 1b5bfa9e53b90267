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


class LettingGo:
    """The tailer's part that closes, drops and forgets files (mixed into ``Tailer``)."""

    store: PositionStore
    rotate_wait: float
    idle_close: float
    _clock: Callable[[], float]
    _files: dict[str, Followed]
    _gone: set[str]
    _settled: dict[str, int]
    _deleted: list[Source]
    _also: list[str]
    _errors: Reporter
    _fds: Descriptors

    def _positions(self) -> dict[str, FileState]:
        raise NotImplementedError

    def _open(
        self, name: str, now: float, *, rotated: bool = False, only_copies: bool = False
    ) -> Followed | None:
        raise NotImplementedError

    def _drain(self, f: Followed, now: float) -> int:
        raise NotImplementedError

    def _finish_lost(self, lost: Sequence[FileState]) -> tuple[set[str], list[str]]:
        raise NotImplementedError

    def _probe_copies(self, now: float) -> None:
        """Finish a copytruncate copy outside the globs: a sibling holding what a truncated file held."""
        for f in list(self._files.values()):
            if f.prior is None or f.rotated or now - f.prior_at > 12 * self.rotate_wait:
                continue
            found = False
            for sibling in copy_candidates(f.path, self._files):  # each copy of a mark kept
                copy = self._open(sibling, now, rotated=True, only_copies=True)
                if copy is not None:
                    found = True
                    self._drain(copy, now)
                    self._fds.trim(copy)
            if found:
                f.prior_at = -1e18  # look no further

    def _forget_gone(self) -> None:
        for key in sorted(self._gone):
            if key not in self._files:
                self._forget(key, self._positions()[key].path if key in self._positions() else key)
        self._gone.clear()

    def _close_quiet(self, now: float) -> None:
        for key, f in list(self._files.items()):
            quiet = now - f.last_change
            if f.fd is None:
                if f.rotated:
                    del self._files[key]  # its position stays: found again by inode if it grows
                    self._settled[key] = f.size
                    self._drop_if_gone(key)
                continue
            if not f.rotated:
                if quiet >= self.idle_close and at_end(f) and not f.fresh:
                    self._fds.close(f)
                continue
            if quiet < self.rotate_wait or not at_end(f):
                continue
            try:
                deleted = os.fstat(f.fd).st_nlink == 0
            except OSError:
                deleted = False
            self._fds.close(f)
            del self._files[key]
            self._settled[key] = f.size
            if deleted:
                self._forget(key, f.path)

    def _drop_if_gone(self, key: str) -> None:
        """Forget an idle file let go of once no sibling holds its inode (what a compressed
        sibling kept of it is read first), as a rescan would on the next poll."""
        stored = self._positions().get(key)
        if stored is None or not locate([stored]).get(key, Found(None)).gone:
            return
        finished, plain = self._finish_lost([stored])
        self._also += plain
        for gone in sorted(finished):
            self._forget(gone, stored.path)

    def _forget(self, key: str, path: str) -> None:
        try:
            self.store.forget(key)
        except Exception as exc:
            self._errors.report(path, f"cannot forget {path}: {exc}")
            return
        state = self._positions().pop(key, None)
        if state is not None:
            # A copy of the deleted file may yet be found (a copytruncate copy made before the
            # delete): what was read of it stays known, as a settled source, while this runs.
            marks = [m for m in (state.mark, state.prior, *state.earlier) if m is not None and m.offset]
            self._deleted = (self._deleted + [Source(key, m, True) for m in marks])[-FORGOTTEN_KEPT:]
            if marks:
                self._adopt_copies(live_path(state.path))

    def _adopt_copies(self, live: str) -> None:
        """Open the copies among ``live``'s rotated siblings of what was read of its files, so
        their own positions (stored) say how far they were read, across restarts too."""
        now = self._clock()
        for sibling in copy_candidates(live, self._files):
            copy = self._open(sibling, now, rotated=True, only_copies=True)
            if copy is not None:
                self._drain(copy, now)
                self._fds.trim(copy)
