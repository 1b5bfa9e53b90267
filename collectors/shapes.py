"""Regex shapes whose backtracking cost grows as a power (3 or more) of the text's length
(``polynomial``), or exponentially (``catastrophic``).

``re`` backtracks: ``.*x.*y.*z`` tries every split of a line between its three repeats
before it gives up. A guard's ``match`` of such a shape is searched under the per-line
budget (``collectors.rules``), and ``canary check`` says so; ``inject_at = { match = ... }``
refuses it.
"""

from __future__ import annotations

import functools
import importlib
import re
import unicodedata
from collections.abc import Callable
from typing import Any

from collectors.patterns import char_source

_sre: Any = importlib.import_module("re._parser")
_c: Any = importlib.import_module("re._constants")

#: Unbounded repeats in a row that may match the same text, from which a shape counts.
POLYNOMIAL_DEGREE = 3
#: A bounded repeat is unrolled at most this many times when its cost is counted.
_UNROLL = 8
#: Repeats nested below another unbounded repeat from this size on count as catastrophic.
_BIG = 16


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


# -- catastrophic shapes --------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def catastrophic(pattern: str, flags: int = 0) -> str | None:
    """Why ``pattern`` can take exponential time in a backtracking engine, or None.

    Two shapes: an unbounded repeat around another repeat (``(a+)+``, ``(\\w+\\s?)*``), and
    an unbounded repeat around alternatives that can match the same text (``(a|a)*``,
    ``(a|ab)+``).
    """
    try:
        parsed = _sre.parse(pattern, flags)
    except re.error:
        return None
    return _walk(list(parsed.data), outer=None)


def _walk(items: list[tuple[Any, Any]], outer: str | None) -> str | None:
    for op, av in items:
        found = _walk_one(op, av, outer)
        if found:
            return found
    return None


def _walk_one(op: Any, av: Any, outer: str | None) -> str | None:
    if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
        low, high, sub = av
        unbounded = high is _c.MAXREPEAT or high >= _BIG
        if outer is not None and low != high and op is not _c.POSSESSIVE_REPEAT:
            return f"a repeat nested inside the unbounded repeat {outer}: backtracking can " \
                   "take exponential time on a line that almost matches; repeat once"
        here = "'" + _repeat_text(op, av) + "'" if unbounded and op is not _c.POSSESSIVE_REPEAT else outer
        return _walk(list(sub.data), here)
    if op is _c.BRANCH:
        alternatives = [list(alt.data) for alt in av[1]]
        if outer is not None and _alternatives_overlap(alternatives):
            return f"alternatives that can match the same text inside the unbounded repeat " \
                   f"{outer}: backtracking can take exponential time; make them exclusive"
        for alt in alternatives:
            found = _walk(alt, outer)
            if found:
                return found
        return None
    if op in (_c.SUBPATTERN, _c.ATOMIC_GROUP):
        sub = av[-1] if op is _c.SUBPATTERN else av
        return _walk(list(sub.data), outer if op is _c.SUBPATTERN else None)
    if op in (_c.ASSERT, _c.ASSERT_NOT):
        return _walk(list(av[1].data), None)
    return None


def _repeat_text(op: Any, av: Any) -> str:
    low, high, _sub = av
    if high is _c.MAXREPEAT:
        return "*" if low == 0 else "+" if low == 1 else f"{{{low},}}"
    return f"{{{low},{high}}}"


def _alternatives_overlap(alternatives: list[list[tuple[Any, Any]]]) -> bool:
    """Whether two alternatives are the same, one starts with the other, or both are one
    character from overlapping sets."""
    for i, first in enumerate(alternatives):
        for second in alternatives[i + 1 :]:
            short, long = sorted((first, second), key=len)
            if long[: len(short)] == short:
                return True
            if len(first) == len(second) == 1 and _chars_alternatives_overlap(first[0], second[0]):
                return True
    return False


def _chars_alternatives_overlap(a: tuple[Any, Any], b: tuple[Any, Any]) -> bool:
    kinds = (_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN)
    if a[0] not in kinds or b[0] not in kinds:
        return False
    try:
        left = re.compile(char_source(a[0], a[1], 0)[0])
        right = re.compile(char_source(b[0], b[1], 0)[0])
    except (re.error, ValueError):
        return False
    return any(left.fullmatch(ch) and right.fullmatch(ch) for ch in map(chr, range(0x250)))
