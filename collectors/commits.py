"""What a tailer commits: each file's hits, line count and new read position, to its store.

A commit the store refuses leaves the file to be read again from its last
committed offset, and the commit in doubt (the store may have taken it after
all) goes along with the retry so the store keeps it once. Before a retry the
store is asked which commit in doubt it holds, and only that one is kept: a
store that stays down or refuses for hours heaps up no list of them. The refusal is
reported once and held until a commit of that file works again. A file found
truncated is read again from its start, from how far the store holds it read.
"""

from __future__ import annotations

from collections.abc import Callable

from collectors.descriptors import Reporter
from collectors.followed import Followed, truncation_told
from collectors.identity import Mark
from collectors.positions import Batch, FileState, InDoubt, PositionStore
from collectors.scan import Hit, LineScanner


class Commits:
    """A tailer's commits to ``store``, and what the store refused."""

    def __init__(
        self,
        store: PositionStore,
        errors: Reporter,
        positions: Callable[[], dict[str, FileState]],
        scanner: Callable[[str, int], LineScanner],
        start_at: Callable[[Followed, int], None],
    ) -> None:
        self.store = store
        self._errors = errors
        self._positions = positions
        self._scanner = scanner
        self._start_at = start_at
        self.held = False  # the store is being replaced: nothing is committed until a reload
        self.refused: dict[str, str] = {}  # path -> why the store refused its last commit, until one works
        self.lines_total = self.truncations = 0

    def commit(self, f: Followed, hits: list[Hit], lines: int, size: int) -> bool:
        """Commit what was read of ``f`` since its last commit; False when nothing may have been."""
        if self.held:
            return False  # the store is being replaced: read again from the new one's positions
        f.size = max(f.size, f.scanner.read_pos)
        state = f.state()
        if f.in_doubt and not self._settle(f):
            return False
        try:
            self.store.commit(Batch(state, hits, lines, size, since=f.base, in_doubt=f.in_doubt))
        except Exception as exc:  # the store's own errors vary by backend
            # Maybe nothing was committed: what was read is read again, and this commit is in doubt.
            if state.offset != f.base and all(d.mark != state.mark for d in f.in_doubt):
                f.in_doubt = (*f.in_doubt, InDoubt(state.mark, lines, size))
            self._refused(f, exc)
            return False
        if f.unsaved:  # the store took what it refused: the refusal no longer holds
            self.refused.pop(f.path, None)
            self._errors.resolved(f.path)
        f.unsaved = False
        f.in_doubt = ()
        f.base = f.scanner.offset
        self._positions()[f.key] = state
        f.lines += lines
        self.lines_total += lines
        return True

    def _refused(self, f: Followed, exc: Exception) -> None:
        """The store took nothing of ``f`` that can be told: read it again from its last commit."""
        f.unsaved = True
        if f.fd is not None:
            self._start_at(f, f.base)
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]  # not the SQL and its lines
        self.refused[f.path] = reason
        self._errors.report(f.path, f"cannot commit what was read from {f.path} (it is read again "
                                    f"once the store takes it): {reason}")

    def _settle(self, f: Followed) -> bool:
        """Before a retry, keep of ``f``'s commits in doubt only the one the store holds (if any), so
        that a long outage heaps none up; False, with nothing sent, while the store cannot say."""
        try:
            stored = self.store.position(f.key)
        except Exception as exc:  # the store's own errors vary by backend
            self._refused(f, exc)
            return False
        f.in_doubt = tuple(d for d in f.in_doubt if stored is not None and stored.mark == d.mark)[:1]
        return True

    def read_to(self, f: Followed) -> Mark | None:
        """The mark of what the store holds read of ``f``: its own, or that of one of its commits
        in doubt the store took after all. None while the store cannot say (an error is told)."""
        if not f.in_doubt:
            return f.mark()
        try:
            stored = self.store.position(f.key)
        except Exception as exc:  # the store's own errors vary by backend
            reason = (str(exc).splitlines() or [type(exc).__name__])[0]
            self._errors.report(f.path, f"cannot read the position of {f.path} from the store (it is read "
                                        f"again once the store answers): {reason}")
            return None
        sent, f.in_doubt = f.in_doubt, ()
        for doubt in sent:
            if stored is not None and stored.mark == doubt.mark:
                self._positions()[f.key] = stored
                return doubt.mark
        return f.mark()

    def truncated_now(self, f: Followed, now: float) -> bool:
        """The file is shorter than what was read, or has another head: read it again from 0;
        False while the store cannot say how far it was read."""
        read_to = self.read_to(f)
        if read_to is None:
            return False
        f.truncations += 1
        self.truncations += 1
        if read_to.offset:
            f.push_prior(read_to, now)
        f.prior_at = now
        assert f.fd is not None
        self._errors.warn(f.path, truncation_told(f.fd, f.path, f.size, read_to.offset))
        f.restart_at(self._scanner(f.path, 0), b"", b"")
        f.base = 0
        self.commit(f, [], 0, 0)
        return True
