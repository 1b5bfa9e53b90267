"""``inject_at = { match = ... }`` on a model request body: searched in linear time, checked for cost.

The proxy asks every model call of a run whether its body matches, on the connection's own
path, and a body may be megabytes. Python's ``re`` backtracks: ``(.*a){6}$`` takes time of the
body's length to the sixth power. The body is searched by Hyperscan instead, the native engine
the collectors scan logs with, whose time is linear in the body whatever the pattern, as
UTF-8 with Unicode classes (``\\w``, ``\\d``, ``\\s``, case folding), as ``re`` reads the text.
A pattern Hyperscan cannot search (lookaround, back-references) is refused by ``canary check``,
and so is a shape whose cost would grow as a power of the body's length in a backtracking
engine (``polynomial``): the same regex in a guard's ``match`` runs in ``re``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import re
import unicodedata
from collections.abc import Callable
from typing import Any

_sre: Any = importlib.import_module("re._parser")
_c: Any = importlib.import_module("re._constants")

#: Unbounded repeats in a row that may match the same text, from which a shape is refused.
POLYNOMIAL_DEGREE = 3
#: A bounded repeat is unrolled at most this many times when its cost is counted.
_UNROLL = 8



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


# -- polynomial shapes ------------------------------------------------------------------------


def polynomial(pattern: str, flags: int = 0) -> str | None:
    """Why ``pattern`` would take time of a power (3 or more) of the text's length in a
    backtracking engine, or None.

    The shape: unbounded repeats in a row that can all match the same text, each able to eat
    what stands between it and the next (``(.*a){6}``, ``.*x.*y.*z``); ``\\s*"a"\\s*:\\s*"b"`` is
    fine, since no ``\\s*`` can eat a quote.
    """
    try:
        parsed = _sre.parse(pattern, flags)
    except re.error:
        return None
    degree, shown = _chain(_tokens(list(parsed.data)), flags)
    if degree < POLYNOMIAL_DEGREE:
        return None
    return (f"{degree} unbounded repeats in a row ({shown}) can match the same text: a backtracking "
            f"search takes time of the text's length to the power {degree}; drop a leading '.*' "
            "(a match is searched anywhere) or make the repeats stop at a character they cannot eat")


_Token = tuple[str, Any]  # ("rep", node) | ("char", node) | ("wall", None)
_CHARS = (_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN)
_ZERO_WIDTH = (_c.AT, _c.ASSERT, _c.ASSERT_NOT)


def _tokens(items: list[tuple[Any, Any]]) -> list[_Token]:
    """The pattern as a row: single characters, unbounded repeats of one character, and walls."""
    out: list[_Token] = []
    for op, av in items:
        if op in _CHARS:
            out.append(("char", (op, av)))
        elif op is _c.SUBPATTERN:
            out += _tokens(list(av[-1].data))
        elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
            out += _repeat(av)
        elif op not in _ZERO_WIDTH:
            out.append(("wall", None))
    return out


def _repeat(av: Any) -> list[_Token]:
    low, high, sub = av
    items = list(sub.data)
    if high is _c.MAXREPEAT:
        if len(items) == 1 and items[0][0] in _CHARS:
            return [("rep", items[0])]
        return [("wall", None)]  # a repeated group: nested repeats are refused as catastrophic
    inner = _tokens(items)
    copies: int = min(high, _UNROLL) if any(kind == "rep" for kind, _ in inner) else min(low, _UNROLL)
    return inner * copies


def _chain(tokens: list[_Token], flags: int) -> tuple[int, str]:
    """The longest row of repeats that can match the same text, and one of them shown."""
    best, count, last = 0, 0, None
    shown = ""
    for kind, node in tokens:
        if kind == "wall":
            count, last = 0, None
        elif kind == "char":
            if last is not None and not _within(node, last, flags):
                count, last = 0, None
        elif last is not None and _overlap(node, last, flags):
            count, last = count + 1, node
        else:
            count, last = 1, node
        if count > best:
            best, shown = count, _render(last)
    return best, shown


#: The characters sampled to tell whether two character nodes overlap or one holds another.
_SAMPLE = [chr(i) for i in range(0x250)] + ["\u00a0", "\u2003", "\u0663", "\u4e00"]


def _within(inner: Any, outer: Any, flags: int) -> bool:
    """Whether every sampled character ``inner`` matches, ``outer`` matches too."""
    return all(_member(outer, ch, flags) for ch in _SAMPLE if _member(inner, ch, flags))


def _overlap(a: Any, b: Any, flags: int) -> bool:
    return any(_member(a, ch, flags) and _member(b, ch, flags) for ch in _SAMPLE)


_CATEGORY: dict[Any, Callable[[str], bool]] = {
    _c.CATEGORY_DIGIT: lambda ch: unicodedata.category(ch) == "Nd",
    _c.CATEGORY_SPACE: str.isspace,
    _c.CATEGORY_WORD: lambda ch: ch.isalnum() or ch == "_",
}
_NEGATED = {_c.CATEGORY_NOT_DIGIT: _c.CATEGORY_DIGIT, _c.CATEGORY_NOT_SPACE: _c.CATEGORY_SPACE,
            _c.CATEGORY_NOT_WORD: _c.CATEGORY_WORD}


def _member(node: Any, ch: str, flags: int) -> bool:
    """Whether one character node matches ``ch`` (close enough to count a cost)."""
    op, av = node
    if op is _c.ANY:
        return ch != "\n" or bool(flags & re.DOTALL)
    if op is _c.LITERAL:
        return ch == chr(av)
    if op is _c.NOT_LITERAL:
        return ch != chr(av)
    hit, negate = False, False
    for kind, value in av:
        if kind is _c.NEGATE:
            negate = True
        elif kind is _c.LITERAL:
            hit = hit or ch == chr(value)
        elif kind is _c.RANGE:
            hit = hit or value[0] <= ord(ch) <= value[1]
        elif kind is _c.CATEGORY:
            test = _CATEGORY.get(_NEGATED.get(value, value))
            hit = hit or (test is not None and test(ch) != (value in _NEGATED))
    return hit != negate


def _render(node: Any) -> str:
    op, av = node
    if op is _c.ANY:
        return "'.*'"
    if op is _c.LITERAL:
        return f"'{re.escape(chr(av))}*'"
    return "'[...]*'" if op is _c.IN else "'[^...]*'"
