"""The native multi-pattern engine: one Hyperscan pass over a buffer finds the lines to confirm.

Every prefilter (``collectors.patterns``) is compiled into one block-mode database
in multiline mode, followed by the rest of its line (``[^\\n]*$``): a prefilter is
then reported once per line it matches, at the line's end, however often it
matches there, so a line needs no mapping from a match to its start unless it is
to be confirmed. The buffer's lines are counted apart (``newlines``), faster than an
expression in the database counts them. Hyperscan runs in linear time whatever the
pattern. The import
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
from typing import Any, NamedTuple

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


#: The id under which the first byte that is not plain text (not ASCII, or a carriage return)
#: is reported, once per scan: a buffer without one needs no pass of its own to tell.
IMPURE_ID = 0xFFFF_FFFE
_IMPURE = b"[\\x80-\\xff\\r]"


class NativeScan(NamedTuple):
    """What one pass over a buffer found: prefilter id -> the ends of the lines it matches,
    the newlines, and whether every byte was plain text (ASCII, no carriage return); always
    False from a set built without that check."""

    ends: dict[int, list[int]]
    lines: int
    plain: bool


class NativeSet:
    """A compiled set of line prefilters; ``scan`` tells which lines each prefilter matches from one
    pass, and how many lines there are."""

    def __init__(
        self, expressions: Sequence[tuple[int, bytes]], *, cache_dir: Path | None = None,
        plain_check: bool = True,
    ) -> None:
        """Compile ``(id, expression)`` pairs; with ``cache_dir``, reuse a database compiled before.

        Without ``plain_check`` the scan does not tell plain text (a check that costs the pass
        a few percent), and its ``plain`` is always False.
        """
        assert _hs is not None, "check available() first"
        self._local = threading.local()
        self._bare = frozenset(index for index, expression in expressions if _bare(expression))
        self.plain_check = plain_check
        compiled = [(index, _line(expr), _flags()) for index, expr in expressions]
        if plain_check:
            compiled.append((IMPURE_ID, _IMPURE, int(_hs.HS_FLAG_SINGLEMATCH)))
        self._db: Any = None
        if not compiled:  # nothing to prefilter: every line is checked apart (``scan`` finds none)
            return
        cached = _cache_path(cache_dir, compiled)
        loaded = _load(cached) if cached is not None else None
        if loaded is not None:
            self._db = loaded
            return
        db = _hs.Database(mode=_hs.HS_MODE_BLOCK)
        try:
            db.compile(
                expressions=[expr for _, expr, _ in compiled],
                ids=[index for index, _, _ in compiled],
                elements=len(compiled),
                flags=[flags for _, _, flags in compiled],
            )
        except _hs.error as exc:
            raise NativeError(str(exc)) from exc
        self._db = db
        if cached is not None:
            _store(cached, db)

    def line_ends(self, buf: bytes, lo: int, hi: int) -> dict[int, list[int]]:
        """Prefilter id -> the lines of ``buf[lo:hi]`` it matches (see ``scan``)."""
        return self.scan(buf, lo, hi).ends

    def scan(self, buf: bytes, lo: int, hi: int) -> NativeScan:
        """Prefilter id -> the lines of ``buf[lo:hi]`` it matches, each as the offset from ``lo``
        of the line's end: its newline, or ``hi - lo`` for a last line without one; the
        newlines in ``buf[lo:hi]``, like ``buf.count(b"\\n", lo, hi)``; and whether
        ``buf[lo:hi]`` is ASCII without a ``\\r``.

        A line may be listed twice; a prefilter that can match empty text also reports
        ``hi - lo`` after a last newline, where no line starts. One Python call per line a
        prefilter matches (per match for an end-anchored one, which is mapped here).
        """
        if self._db is None:
            return NativeScan({}, newlines(buf, lo, hi), False)
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            assert _hs is not None
            scratch = self._local.scratch = _hs.Scratch(self._db)
        ends: defaultdict[int, list[int]] = defaultdict(list)

        def on_match(index: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
            ends[index].append(end)

        self._db.scan(memoryview(buf)[lo:hi], match_event_handler=on_match, scratch=scratch)
        plain = self.plain_check and ends.pop(IMPURE_ID, None) is None
        lines = newlines(buf, lo, hi)
        for index in self._bare.intersection(ends):
            found = set()
            for end in ends[index]:  # a match's end -> its line's end
                newline = buf.find(b"\n", lo + end, hi)
                found.add((hi if newline < 0 else newline) - lo)
            ends[index] = sorted(found)
        return NativeScan(ends, lines, plain)


def newlines(buf: bytes, lo: int, hi: int) -> int:
    """``buf.count(b"\\n", lo, hi)``, faster: ``bytes.replace`` finds a single byte with ``memchr``,
    where ``count`` compares byte by byte. Most of a buffer is counted whole, the rest apart."""
    if 2 * (hi - lo) < len(buf):
        region = bytes(memoryview(buf)[lo:hi])
        return len(region) - len(region.replace(b"\n", b""))
    whole = len(buf) - len(buf.replace(b"\n", b""))
    return whole - buf.count(b"\n", 0, lo) - buf.count(b"\n", hi)


def _cache_path(cache_dir: Path | None, compiled: Sequence[tuple[int, bytes, int]]) -> Path | None:
    if cache_dir is None:
        return None
    digest = hashlib.sha256(repr((_hs.__version__, compiled)).encode())
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
