"""Where a file the tailer opens starts to be read (``collectors.tailer``): where
``collectors.identity`` decides from the stored marks (resumed, or from the start of what was not
read), from its last line's end (``start_at_end``, or an older copy), at the first line of the
backfill window on a first sight, or not yet (``Kind.WAIT``). What a stored position says the file
held, when it holds something else now, is looked for in a copy yet to be found or in a compressed
sibling, and the rewrite is warned of.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from collectors.backfill import window_start
from collectors.followed import Followed, last_line_end, observe, sources_for
from collectors.identity import Decision, Kind, classify, copied_lead, lead_offsets, tail_offsets
from collectors.positions import FileState
from collectors.siblings import live_path

if TYPE_CHECKING:
    from collectors.backlog import Catchup
    from collectors.descriptors import Reporter
    from collectors.lettinggo import LettingGo
    from collectors.scan import Hit, Matcher


class Deciding:
    """The tailer's choice of where a fresh file starts; ``Tailer`` holds the state it reads."""

    if TYPE_CHECKING:
        matcher: Matcher
        rotate_wait: float
        start_at_end: bool
        backfill: float | None
        _files: dict[str, Followed]
        _also: list[str]
        _known_lives: set[str]
        _catchup: Catchup
        _errors: Reporter
        _letting: LettingGo
        _wall: Callable[[], float]
        _commit: Callable[[Followed, list[Hit], int, int], bool]

        def _positions(self) -> dict[str, FileState]: ...
        def _start_at(self, f: Followed, offset: int) -> None: ...
        def _finish_lost(self, lost: Sequence[FileState]) -> tuple[set[str], list[str]]: ...

    def _decide(self, f: Followed, now: float, *, only_copies: bool = False) -> bool:
        """Choose where a fresh file starts; False while that cannot be decided yet."""
        assert f.fd is not None
        stored = self._positions().get(f.key)
        sources = sources_for(f.key, self._files, self._positions()) + self._letting.deleted
        mark = stored.mark if stored is not None else None
        observed = observe(
            f.fd, f.key, f.size, tail_offsets(mark, sources), lead_offsets(sources), at_start=f.at_start,
            waited=now - f.first_seen, grew=f.size != f.seen_size,
            rotated_name=live_path(f.path) != f.path,
        )
        f.seen_size = f.size
        decision = classify(mark, observed, sources, rotate_wait=self.rotate_wait)
        if only_copies and decision.kind not in (Kind.COPY, Kind.OLDER_COPY):
            return False
        if decision.kind is Kind.WAIT:
            return False
        if observed.size == 0:
            if stored is None or stored.offset:
                if stored is not None:
                    f.prior, f.earlier = stored.prior, stored.earlier
                    self._held_elsewhere(f, stored, now)
                self._commit(f, [], 0, 0)  # known from now on, even before a line is read
            return False  # nothing to read, so nothing to decide yet: a copy starts empty
        offset = self._start_offset(f, decision, observed.size, stored)
        if stored is not None:
            f.prior, f.earlier, f.prior_at = stored.prior, stored.earlier, now  # copies are looked for again
            if decision.kind is not Kind.RESUME and stored.offset:
                self._held_elsewhere(f, stored, now)
        self._start_at(f, offset)
        f.fresh, f.hole = False, copied_lead(decision, sources) if decision.kind is Kind.COPY else 0
        if stored is None or stored.offset != offset or decision.kind is not Kind.RESUME:
            self._commit(f, [], 0, 0)
        return True

    def _start_offset(self, f: Followed, decision: Decision, size: int, stored: FileState | None) -> int:
        """Where a file of ``size`` bytes decided as ``decision`` is read from."""
        assert f.fd is not None
        from_end = decision.kind is Kind.NEW and self.start_at_end and f.at_start and stored is None
        if decision.kind is Kind.OLDER_COPY or from_end:
            return last_line_end(f.fd, size)
        if self._first_sight(f, decision.kind, stored):
            assert self.backfill is not None
            parse = self.matcher.timestamps.parse
            return window_start(f.fd, last_line_end(f.fd, size), self._wall() - self.backfill,
                                lambda line: parse(line.rstrip(b"\r\n")))
        return decision.offset

    def _held_elsewhere(self, f: Followed, stored: FileState, now: float) -> None:
        """What ``stored`` says the file held (truncated since, or taken as a copy of another
        file's start) may live on in a copy yet to be found, or in a compressed sibling."""
        f.push_prior(stored.mark, now)
        self._also += self._finish_lost([stored])[1]
        self._tell_rewritten(f, stored.offset)

    def _tell_rewritten(self, f: Followed, offset: int) -> None:
        """Warn that a file no longer holds what was read of it while it was not watched,
        unless that went on in a rotated sibling (its inode number went to a new file)."""
        if f.key in self._catchup.found:
            self._catchup.found.discard(f.key)
            return
        self._errors.warn(
            f.path,
            f"{f.path}: the {offset} bytes read of it are no longer there (truncated while not "
            "followed, or a new file under its inode number); it is read from its start, and lines "
            f"written past offset {offset} before a truncation are lost unless a rotated copy holds them",
        )

    def _first_sight(self, f: Followed, kind: Kind, stored: FileState | None) -> bool:
        """Whether ``f`` is read back only over the window: found by the first scan, never seen,
        and no file of its log was seen either (a file rotated in between is read whole)."""
        return (self.backfill is not None and kind is Kind.NEW and f.at_start and stored is None
                and live_path(f.path) not in self._known_lives)
