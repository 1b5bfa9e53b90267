"""``inject_at = { match = ... }`` on a model request body: searched in linear time, checked for cost.

The proxy asks every model call of a run whether its body matches, on the connection's own
path, and a body may be megabytes. Python's ``re`` backtracks: ``(.*a){6}$`` takes time of the
body's length to the sixth power. The body is searched by Hyperscan instead, the native engine
the collectors scan logs with, whose time is linear in the body whatever the pattern, as
UTF-8 with Unicode classes (``\\w``, ``\\d``, ``\\s``, case folding), as ``re`` reads the text.
A pattern Hyperscan cannot search (lookaround, back-references) is refused by ``canary check``,
and so is a shape whose cost would grow as a power of the body's length in a backtracking
engine (``collectors.shapes.polynomial``): the same regex in a guard's ``match`` runs in ``re``.
"""

from __future__ import annotations

import contextlib
import functools
import re
from typing import Any


class BodyPatternError(ValueError):
    """The native engine cannot search this pattern; the message says why."""


class BodyPattern:
    """A compiled ``inject_at`` match: whether a request body holds a match, in linear time."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        # Imported here: a definition without such a match (and `canary status`) never loads it.
        import hyperscan

        self._hs: Any = hyperscan
        source = ("(?x)" if pattern.flags & re.VERBOSE else "") + pattern.pattern
        flags = hyperscan.HS_FLAG_UTF8 | hyperscan.HS_FLAG_SINGLEMATCH | hyperscan.HS_FLAG_ALLOWEMPTY
        for python, native in ((re.IGNORECASE, hyperscan.HS_FLAG_CASELESS),
                               (re.MULTILINE, hyperscan.HS_FLAG_MULTILINE),
                               (re.DOTALL, hyperscan.HS_FLAG_DOTALL)):
            if pattern.flags & python:
                flags |= native
        self._db = _compile(hyperscan, source.encode("utf-8"), flags)

    def search(self, body: bytes) -> bool:
        """Whether the body (UTF-8; invalid bytes read as U+FFFD, as the proxy decodes them) matches."""
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            # Hyperscan's UTF-8 mode is undefined on invalid UTF-8: scan the text the decoder reads.
            body = body.decode("utf-8", "replace").encode("utf-8")
        found: list[int] = []

        def on_match(_id: int, _start: int, _end: int, _flags: int, _ctx: object) -> bool:
            found.append(1)
            return True  # one match decides: stop the scan

        with contextlib.suppress(self._hs.ScanTerminated):
            self._db.scan(body, match_event_handler=on_match)
        return bool(found)


def _compile(hyperscan: Any, source: bytes, flags: int) -> Any:
    """The block-mode database; Unicode classes where Hyperscan takes them (it has no ``\\b``
    with them: such a pattern reads word boundaries in ASCII)."""
    last = ""
    for extra in (hyperscan.HS_FLAG_UCP, 0):
        db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        try:
            db.compile(expressions=[source], ids=[0], elements=1, flags=[flags | extra])
        except hyperscan.error as exc:
            last = str(exc).rstrip(".")
            continue
        return db
    raise BodyPatternError(f"the linear-time engine that searches model request bodies cannot "
                           f"search it ({last}): write it without lookaround or back-references")


@functools.lru_cache(maxsize=256)
def body_pattern(source: str, flags: int) -> BodyPattern:
    """The compiled pattern of ``re.compile(source, flags)``, once per process."""
    return BodyPattern(re.compile(source, flags))
