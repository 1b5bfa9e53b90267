"""The native multi-pattern engine: one Hyperscan pass over a buffer finds the lines to confirm.

Every prefilter (``collectors.patterns``) is compiled into one block-mode database
in multiline mode, followed by the rest of its line (``[^\\n]*$``): a prefilter is
then reported once per line it matches, at the line's end, however often it
matches there, so a line needs no mapping from a match to its start unless it is
to be confirmed. Hyperscan runs in linear time whatever the pattern. The import
is guarded: without the ``hyperscan`` package ``available()`` is False and the
scanner uses its pure-Python path.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_hs: Any
try:
    import hyperscan

    _hs = hyperscan
except (ImportError, OSError):  # pragma: no cover - where the wheel or its library is missing
    _hs = None

class NativeError(Exception):
    """Hyperscan refused a set of expressions."""


def available() -> bool:
    """Whether the native engine can be used here."""
    return _hs is not None


def compiles(expression: bytes) -> str | None:
    """None if Hyperscan accepts ``expression`` as a line prefilter, else its reason."""
    if _hs is None:
        return "the hyperscan package is not installed"
    db = _hs.Database(mode=_hs.HS_MODE_BLOCK)
    try:
        db.compile(expressions=[_line(expression)], ids=[0], elements=1, flags=[_flags()])
    except _hs.error as exc:
        return str(exc)
    return None


def _line(expression: bytes) -> bytes:
    """The prefilter and the rest of its line: one report per line, at the line's end.

    No prefilter matches a newline (``collectors.patterns``), so a match of the whole
    lies within the line of the prefilter's match. A prefilter with an end anchor (``$``:
    every literal ``$`` is written ``\\x24``) stays bare, since Hyperscan refuses an end
    anchor inside an expression; ``NativeSet.line_ends`` maps its reports to line ends.
    """
    if _bare(expression):
        return expression
    return b"(?:" + expression + b")[^\\n]*$"


def _bare(expression: bytes) -> bool:
    return b"$" in expression


def _flags() -> int:
    assert _hs is not None
    return int(_hs.HS_FLAG_MULTILINE | _hs.HS_FLAG_ALLOWEMPTY)


class NativeSet:
    """A compiled set of line prefilters; ``line_ends`` tells which lines each of them matches."""

    def __init__(
        self, expressions: Sequence[tuple[int, bytes]], *, cache_dir: Path | None = None
    ) -> None:
        """Compile ``(id, expression)`` pairs; with ``cache_dir``, reuse a database compiled before."""
        assert _hs is not None, "check available() first"
        self._local = threading.local()
        self._db: Any = None
        self._bare = frozenset(index for index, expression in expressions if _bare(expression))
        if not expressions:
            return
        cached = _cache_path(cache_dir, expressions)
        self._db = _load(cached) if cached is not None else None
        if self._db is not None:
            return
        db = _hs.Database(mode=_hs.HS_MODE_BLOCK)
        try:
            db.compile(
                expressions=[_line(expr) for _, expr in expressions],
                ids=[index for index, _ in expressions],
                elements=len(expressions),
                flags=[_flags()] * len(expressions),
            )
        except _hs.error as exc:
            raise NativeError(str(exc)) from exc
        self._db = db
        if cached is not None:
            _store(cached, db)

    def line_ends(self, buf: bytes, lo: int, hi: int) -> dict[int, list[int]]:
        """Prefilter id -> the lines of ``buf[lo:hi]`` it matches, each as the offset
        from ``lo`` of the line's end: its newline, or ``hi - lo`` for a last line without one.

        A line may be listed twice; a prefilter that can match empty text also reports
        ``hi - lo`` after a last newline, where no line starts. One Python call per line a
        prefilter matches (per match for an end-anchored one, which is mapped here).
        """
        if self._db is None:
            return {}
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            assert _hs is not None
            scratch = self._local.scratch = _hs.Scratch(self._db)
        ends: defaultdict[int, list[int]] = defaultdict(list)

        def on_match(index: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
            ends[index].append(end)

        self._db.scan(memoryview(buf)[lo:hi], match_event_handler=on_match, scratch=scratch)
        for index in self._bare.intersection(ends):
            lines = set()
            for end in ends[index]:  # a match's end -> its line's end
                newline = buf.find(b"\n", lo + end, hi)
                lines.add((hi if newline < 0 else newline) - lo)
            ends[index] = sorted(lines)
        return ends


#: Lines the line counter reports at once: few reports, and a small database.
LINES_PER_REPORT = 128
#: Buffers shorter than this are counted with ``bytes.count``: a native pass costs more there.
_COUNT_NATIVE_FROM = 64 << 10
_counter: Any = None
_counter_built = False
_counter_lock = threading.Lock()
_counter_local = threading.local()


def count_lines(buf: bytes, lo: int, hi: int) -> int:
    """The newlines in ``buf[lo:hi]``, like ``buf.count(b"\\n", lo, hi)``, in one native pass.

    The counter's one expression matches whole runs of ``LINES_PER_REPORT`` lines from the
    start of the buffer, so it is reported once per run, at the run's end, and Hyperscan
    skips from newline to newline over everything else; the lines after the last run are
    counted with ``bytes.count``.
    """
    db = _line_counter() if hi - lo >= _COUNT_NATIVE_FROM else None
    if db is None:
        return buf.count(b"\n", lo, hi)
    scratch = getattr(_counter_local, "scratch", None)
    if scratch is None:
        scratch = _counter_local.scratch = _hs.Scratch(db)
    ends: list[int] = []
    append = ends.append

    def on_match(_index: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
        append(end)

    db.scan(memoryview(buf)[lo:hi], match_event_handler=on_match, scratch=scratch)
    if not ends:
        return buf.count(b"\n", lo, hi)
    return LINES_PER_REPORT * len(set(ends)) + buf.count(b"\n", lo + max(ends), hi)


def _line_counter() -> Any:
    """The line counter's database, compiled on first use; None where it cannot be."""
    global _counter, _counter_built
    if _hs is None:
        return None
    with _counter_lock:
        if not _counter_built:
            db = _hs.Database(mode=_hs.HS_MODE_BLOCK)
            expression = b"\\A(?:(?:[^\\n]*\\n){%d})+" % LINES_PER_REPORT
            try:
                db.compile(expressions=[expression], ids=[0], elements=1, flags=[0])
            except _hs.error:
                db = None
            _counter, _counter_built = db, True
    return _counter


def _cache_path(cache_dir: Path | None, expressions: Sequence[tuple[int, bytes]]) -> Path | None:
    if cache_dir is None:
        return None
    compiled = [(index, _line(expression)) for index, expression in expressions]
    digest = hashlib.sha256(repr((_hs.__version__, _flags(), compiled)).encode())
    return cache_dir / f"{digest.hexdigest()[:32]}.hsdb"


def _load(path: Path) -> Any:
    """A database serialised earlier, or None if it is missing or does not load here."""
    try:
        return _hs.loadb(path.read_bytes(), mode=_hs.HS_MODE_BLOCK)
    except (OSError, _hs.error, TypeError, ValueError):
        return None


def _store(path: Path, db: Any) -> None:
    """Serialise ``db`` for the next start; a cache that cannot be written is only slower.

    The cache folder is made (private) inside an existing folder, never with its parents:
    a state folder is for its owner to create with its own mode.
    """
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(_hs.dumpb(db))
        os.replace(tmp, path)
    except (OSError, _hs.error):
        pass
