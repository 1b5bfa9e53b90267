"""Which rotated siblings hold what a lost file left unread: the compressed ones, by content.

A file rotated and compressed while nothing followed it (``compress``, with or without
``delaycompress``) is replaced by a new ``.gz`` file, so the inode its position was stored
for is gone. Its bytes are found again by content: the compressed sibling whose
decompressed stream holds its stored mark (the same head, and the same bytes before the
offset). That sibling is read from the mark's offset, and every newer sibling after it,
from the longest stored mark it holds, or whole: they were rotated in between and never
read. Only the decision lives here; the tailer reads and commits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from collectors.descriptors import Reporter
from collectors.files import is_compressed, live_name, open_log, read_errors, rotated_siblings
from collectors.followed import Followed
from collectors.identity import HEAD, TAIL, Mark, digest
from collectors.positions import FileState
from collectors.scan import Hit, LineScanner

__all__ = [
    "CannotRead", "Catchup", "Step", "chain", "finish_lost", "read_compressed", "read_lost",
    "stream",
]

#: Bytes decompressed per read.
BLOCK = 1 << 20

#: What a corrupt or cut-short compressed file raises while it is read.


class CannotRead(Exception):
    """A compressed sibling is corrupt, cut short or of a format that cannot be read."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"cannot read {path}: {reason}")
        self.path = path


@dataclass(frozen=True)
class Step:
    """One sibling to read: a compressed ``path`` from ``offset`` (with ``mark`` the stored
    mark it holds there, None when read whole), or a plain one to follow (``plain``)."""

    path: str
    offset: int = 0
    mark: Mark | None = None
    plain: bool = False


def stream(path: str, offset: int = 0) -> Iterator[bytes]:
    """The decompressed bytes of ``path`` from ``offset`` on, in blocks.

    Raises one of ``collectors.files.read_errors()`` for a corrupt, cut-short or unsupported file.
    """
    with open_log(Path(path)) as f:
        skip = offset
        while skip:
            data = f.read(min(BLOCK, skip))
            if not data:
                return
            skip -= len(data)
        while data := f.read(BLOCK):
            yield data


def _held(path: str, marks: Sequence[Mark]) -> list[Mark]:
    """The marks the decompressed stream of ``path`` holds: the same head, and the same
    ``TAIL`` bytes before the offset (only the head for marks stored without a tail)."""
    with open_log(Path(path)) as f:
        head = f.read(HEAD)
        wanted = sorted(
            (m for m in marks if m.offset and len(head) >= m.head_len
             and digest(head[: m.head_len]) == m.head_hash),
            key=lambda m: m.offset,
        )
        if not wanted:
            return []
        held: list[Mark] = []
        pos, last = len(head), head[-TAIL:]
        for mark in wanted:
            if mark.offset <= len(head):
                tail = head[max(0, mark.offset - TAIL) : mark.offset]
            else:
                while pos < mark.offset:
                    data = f.read(min(BLOCK, mark.offset - pos))
                    if not data:
                        return held
                    last = (last + data)[-TAIL:]
                    pos += len(data)
                tail = last[-min(TAIL, mark.offset) :]
            if not mark.tail_len or digest(tail) == mark.tail_hash:
                held.append(mark)
    return held


def chain(live: str, lost: Sequence[Mark], known: Sequence[Mark]) -> list[Step]:
    """The siblings of the live log ``live`` to read so that nothing ``lost`` left is missed.

    ``lost`` are the stored marks whose files are gone or hold other content now; ``known``
    the marks of what was read already. From the oldest compressed sibling holding a lost
    mark on, each compressed sibling is read from the longest mark it holds (whole if none),
    and each newer plain one is handed back to be followed. Nothing is returned when no
    compressed sibling holds a lost mark. Raises ``CannotRead``.
    """
    siblings = [str(p) for p in rotated_siblings(Path(live))]
    steps: list[Step] = []
    for path in siblings:
        if not is_compressed(Path(path)):
            if steps:
                steps.append(Step(path, plain=True))
            continue
        try:
            marks = _held(path, lost) if not steps else []
            if not steps and not marks:
                continue  # older than every lost file
            marks += _held(path, known)
        except read_errors() as exc:
            raise CannotRead(path, str(exc) or type(exc).__name__) from exc
        best = max(marks, key=lambda m: m.offset, default=None)
        steps.append(Step(path, best.offset if best else 0, best))
    return steps


def read_compressed(
    step: Step,
    into: Followed,
    feed: Callable[[Followed, bytes], bool],
) -> None:
    """Read the compressed ``step`` into ``into`` (a followed file without a descriptor): the
    bytes before ``step.offset`` only set its head and tail, the rest goes to ``feed``, which
    says False to stop. Raises one of ``collectors.files.read_errors()``."""
    head = tail = b""
    pos = 0
    for block in stream(step.path):
        rest = block
        if pos < step.offset:
            cut = min(len(block), step.offset - pos)
            if len(head) < HEAD:
                head += block[: HEAD - len(head)]
            tail = (tail + block[:cut])[-TAIL:]
            pos += cut
            rest = block[cut:]
            if pos == step.offset:
                into.restart_at(into.scanner, head[: min(step.offset, HEAD)], tail)
        if rest and not feed(into, rest):
            return


Commit = Callable[[Followed, list[Hit], int, int], bool]


def read_lost(
    step: Step,
    state: FileState,
    into: Followed,
    *,
    commit: Commit,
    trusted: Callable[[Followed, list[Hit]], list[Hit]],
    batch_bytes: int,
    errors: Reporter,
) -> bool:
    """Read a compressed sibling into ``into``, committing every ``batch_bytes`` and at its end;
    False when it could not be read (told) or a commit failed."""
    batch: list[Hit] = []
    lines = size = 0
    ok = True

    def feed(f: Followed, data: bytes) -> bool:
        nonlocal ok, lines, size
        result = f.feed(data, joined=True)  # a stream read in turn: each read follows the last
        batch.extend(trusted(f, result.hits))
        lines += result.lines
        size += result.consumed
        if size >= batch_bytes:
            ok = commit(f, batch[:], lines, size)
            batch.clear()
            lines = size = 0
        return ok

    try:
        read_compressed(step, into, feed)
    except read_errors() as exc:
        errors.report(step.path, f"cannot read {step.path}: {exc or type(exc).__name__}")
        return False
    if ok and (batch or size or step.offset != state.offset):
        ok = commit(into, batch, lines, size)
    if ok:
        errors.resolved(step.path)
    return ok


def finish_lost(
    lost: Sequence[FileState],
    known: Sequence[Mark],
    read: Callable[[Step, FileState], bool],
    errors: Reporter,
    found: set[str] | None = None,
) -> tuple[set[str], list[str]]:
    """Read what the ``lost`` files (gone, or holding other content now) left in compressed
    siblings, each with ``read``, which commits under the state it is given. ``known`` are
    the marks of what was read already: every stored mark, and where siblings were read to.

    Returns the keys done with (nothing of theirs is left to find) and the plain siblings
    rotated after them, to follow; the keys whose files went on in a sibling are added to
    ``found``. A sibling that cannot be read keeps its file's position,
    and is tried again on the next call.
    """
    done: set[str] = set()
    plain: list[str] = []
    groups: dict[str, list[FileState]] = {}
    for state in lost:
        path = Path(state.path)
        groups.setdefault(str(path.parent / live_name(path.name)), []).append(state)
    for live, group in groups.items():
        by_mark = {s.mark: s for s in group if s.offset}
        try:
            steps = chain(live, list(by_mark), known) if by_mark else []
        except CannotRead as exc:
            errors.report(exc.path, f"{exc}; what {live} left there is read once it can be")
            continue
        state = group[0]
        if steps and found is not None:
            found |= {s.key for s in group}  # they were rotated: their rest is in a sibling
        for step in steps:
            if step.plain:
                plain.append(step.path)
                continue
            state = by_mark.get(step.mark, state) if step.mark is not None else state
            if not read(step, state):
                break
        else:
            done |= {s.key for s in group}
    return done, plain


class Catchup:
    """Reads the compressed siblings of a tailer's lost files, remembering where each was read
    to (the same key walks on from sibling to sibling, so its stored mark moves on)."""

    def __init__(
        self,
        commit: Commit,
        trusted: Callable[[Followed, list[Hit]], list[Hit]],
        scanner: Callable[[str, int], LineScanner],
        batch_bytes: int,
        errors: Reporter,
    ) -> None:
        self._commit, self._trusted, self._scanner = commit, trusted, scanner
        self._batch_bytes, self._errors = batch_bytes, errors
        self.walked: list[Mark] = []
        self.found: set[str] = set()  # keys of lost files whose rest a sibling held

    def finish(self, lost: Sequence[FileState], stored: Sequence[FileState]) -> tuple[set[str], list[str]]:
        """``finish_lost`` over the marks of ``stored`` and those walked to."""
        known = [m for s in stored for m in (s.mark, s.prior, *s.earlier) if m is not None]
        return finish_lost(lost, known + self.walked, self._read, self._errors, self.found)

    def _read(self, step: Step, state: FileState) -> bool:
        f = Followed(
            key=state.key, dev=state.dev, ino=state.ino, path=step.path, fd=None,
            scanner=self._scanner(step.path, step.offset), prior=state.prior, earlier=state.earlier,
            base=step.offset,
        )
        done = read_lost(step, state, f, commit=self._commit, trusted=self._trusted,
                         batch_bytes=self._batch_bytes, errors=self._errors)
        if done:
            self.walked.append(f.mark())
        return done
