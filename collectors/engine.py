"""The native multi-pattern engine: one Hyperscan pass over a buffer finds the lines to confirm.

Every prefilter (``collectors.patterns``) is compiled into one block-mode database
in multiline mode; each report's end offset is mapped to its line in bulk after
the pass. Hyperscan runs in linear time whatever the pattern. The import is guarded: without the ``hyperscan``
package ``available()`` is False and the scanner uses its pure-Python path.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

_hs: Any
try:
    import hyperscan

    _hs = hyperscan
except ImportError:  # pragma: no cover - exercised where the wheel is missing
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

    def __init__(self, expressions: Sequence[tuple[int, bytes]]) -> None:
        assert _hs is not None, "check available() first"
        self._local = threading.local()
        self._db: Any = None
        if not expressions:
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

    def lines(self, buf: bytes, lo: int, hi: int) -> dict[int, set[int]]:
        """Line start (an index into ``buf``) -> prefilter ids, for the complete lines in [lo, hi)."""
        if self._db is None:
            return {}
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
            found.setdefault(start, set()).add(index)
        return found
