"""The native multi-pattern engine: one Hyperscan pass over a buffer finds the lines to confirm.

Every prefilter (``collectors.patterns``) is compiled into one block-mode database
in multiline mode; each report's end offset is mapped to its line in bulk after
the pass. Hyperscan runs in linear time whatever the pattern. The import is guarded: without the ``hyperscan``
package ``available()`` is False and the scanner uses its pure-Python path.
"""

from __future__ import annotations

import hashlib
import os
import threading
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
    return expression


def _flags() -> int:
    assert _hs is not None
    return int(_hs.HS_FLAG_MULTILINE | _hs.HS_FLAG_ALLOWEMPTY)


class NativeSet:
    """A compiled set of line prefilters; ``lines`` tells which of them each line matches."""

    def __init__(
        self, expressions: Sequence[tuple[int, bytes]], *, cache_dir: Path | None = None
    ) -> None:
        """Compile ``(id, expression)`` pairs; with ``cache_dir``, reuse a database compiled before."""
        assert _hs is not None, "check available() first"
        self._local = threading.local()
        self._db: Any = None
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

    def lines(self, buf: bytes, lo: int, hi: int) -> dict[int, set[int]]:
        """Line start (an index into ``buf``) -> prefilter ids, for the complete lines in [lo, hi)."""
        return self.lines_apart(buf, lo, hi, -1)[0]

    def lines_apart(
        self, buf: bytes, lo: int, hi: int, apart: int
    ) -> tuple[dict[int, set[int]], set[int]]:
        """Like ``lines``, but the lines of prefilter ``apart`` come back as a set of starts."""
        kept: set[int] = set()
        if self._db is None:
            return {}, kept
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            assert _hs is not None
            scratch = self._local.scratch = _hs.Scratch(self._db)
        found: dict[int, set[int]] = {}
        ends: list[tuple[int, int]] = []
        report = ends.append

        def on_match(index: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
            report((end, index))

        self._db.scan(memoryview(buf)[lo:hi], match_event_handler=on_match, scratch=scratch)
        limit = hi - lo
        rfind = buf.rfind
        last_end = -1
        start = lo
        for end, index in ends:
            if end >= limit:
                continue  # the empty "line" after the final newline
            if end != last_end:
                last_end = end
                start = rfind(b"\n", lo, lo + end) + 1 or lo
            if index == apart:
                kept.add(start)
            else:
                found.setdefault(start, set()).add(index)
        return found, kept


def _cache_path(cache_dir: Path | None, expressions: Sequence[tuple[int, bytes]]) -> Path | None:
    if cache_dir is None:
        return None
    digest = hashlib.sha256(repr((_hs.__version__, _flags(), list(expressions))).encode())
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
