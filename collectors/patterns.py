"""What a guard regex means to the scanning engines: a native prefilter.

Python's ``re`` decides every match, line by line. The native engine only has to
find the lines worth asking: ``prefilter`` turns a pattern into a Hyperscan
expression that matches at least every line the pattern matches (a superset),
whatever the bytes. Character nodes get their exact set of ASCII characters
(asked of ``re`` itself, so case folding and ``\\w``/``\\s`` are Python's), plus
a non-ASCII byte and the rest of its run where the node could match a non-ASCII
character: ASCII bytes decode to themselves and no other byte decodes to ASCII,
so each character of a decoded line is a span of its bytes.
What Hyperscan cannot express (lookaround, backreferences, atomic groups,
possessive repeats, conditionals, ``\\b`` next to non-ASCII text) is widened,
and the pattern is marked inexact so ``canary check`` can say so.
"""

from __future__ import annotations

import functools
import importlib
import re
from typing import Any

_sre: Any = importlib.import_module("re._parser")
_c: Any = importlib.import_module("re._constants")

#: Any run of non-ASCII bytes: one or more characters (or replacement characters) of a line.
_NON_ASCII_TAIL = rb"[\x80-\xff]*"
_CATEGORY = {
    _c.CATEGORY_DIGIT: r"\d", _c.CATEGORY_NOT_DIGIT: r"\D",
    _c.CATEGORY_SPACE: r"\s", _c.CATEGORY_NOT_SPACE: r"\S",
    _c.CATEGORY_WORD: r"\w", _c.CATEGORY_NOT_WORD: r"\W",
}
_ASCII = [chr(i) for i in range(128) if i != 10]
#: The non-ASCII characters that case-fold to an ASCII letter in ``re`` (İ ı ſ K); a test
#: checks the list against every code point.
FOLDS_TO_ASCII = "\u0130\u0131\u017f\u212a"


class Prefilter:
    """A Hyperscan expression that matches every line the pattern matches, and what it widened
    (a plain class: ``canary status`` checks the guards' patterns with it, loading no dataclasses)."""

    __slots__ = ("expression", "loose", "widened")

    def __init__(self, expression: bytes, widened: list[str] | None = None, loose: bool = False) -> None:
        self.expression = expression
        self.widened: list[str] = [] if widened is None else widened
        self.loose = loose  # whether Python must check what was left out: a \b or \B, or a last class

    def __repr__(self) -> str:
        return f"Prefilter(expression={self.expression!r}, widened={self.widened!r}, loose={self.loose!r})"

    @property
    def exact(self) -> bool:
        """Whether nothing had to be widened beyond non-ASCII text."""
        return not self.widened

    @property
    def exact_ascii(self) -> bool:
        """Whether, on an ASCII line without a trailing ``\\r``, a match is exactly a match of
        the pattern, so the line needs no confirming."""
        return not self.widened and not self.loose


def prefilter(pattern: re.Pattern[str]) -> Prefilter:
    """The native prefilter of ``pattern`` (see the module docstring).

    Its tail is trimmed to the shortest text a match must start with (``x[a-z]+`` becomes
    ``x[a-z]``): a line holds a match of the trimmed expression if and only if it holds one of
    the full pattern, and Hyperscan then reports each occurrence once rather than at every
    place a longer match could end. An empty expression means every line may match.
    """
    return _prefilter(pattern.pattern, pattern.flags)


@functools.lru_cache(maxsize=1024)
def _prefilter(source: str, flags: int) -> Prefilter:
    parsed = _sre.parse(source, flags)
    out = Prefilter(b"")
    items = list(parsed.data)
    trimmed = _trim(items)
    if len(trimmed) > 1 and trimmed[-1][0] in (_c.IN, _c.ANY, _c.NOT_LITERAL):
        # Hyperscan turns "literal then one class" into one literal per class member, which
        # scans slower than the literal alone; the class is then left to the confirming.
        trimmed.pop()
        out.loose = True
    out.expression = _seq(trimmed, parsed.state.flags, out.widened)
    boundaries = (_c.AT_BOUNDARY, _c.AT_NON_BOUNDARY)
    # Kept only in ASCII mode, and then maybe trimmed: confirm every pattern that has one.
    out.loose = out.loose or _has(items, lambda op, av: op is _c.AT and av in boundaries)
    return out


def byte_exact(pattern: re.Pattern[str]) -> bool:
    """Whether the pattern reads every line like its bytes: it matches ASCII characters only,
    never a line break, case-sensitively, with no anchor, boundary or lookaround.

    UTF-8 puts no ASCII byte inside another character and a replacement character is not
    ASCII, so a line's text then holds a match exactly where its bytes do, whatever else
    the line holds (non-ASCII text, a trailing ``\\r``): an exact prefilter of such a
    pattern needs no check that the line is plain ASCII.
    """
    try:
        parsed = _sre.parse(pattern.pattern, pattern.flags)
    except re.error:
        return False
    if parsed.state.flags & re.IGNORECASE:
        return False
    return not _has(list(parsed.data), _reads_beyond_bytes)


#: Nodes that hold only other nodes.
_CONTAINERS = (_c.SUBPATTERN, _c.BRANCH, _c.MAX_REPEAT, _c.MIN_REPEAT)


def _reads_beyond_bytes(op: Any, av: Any) -> bool:
    """Whether a node could match differently in a line's text than in its bytes."""
    if op is _c.LITERAL:
        return not _plain_byte(av)
    if op is _c.IN:
        return not all(
            (kind is _c.LITERAL and _plain_byte(value))
            or (kind is _c.RANGE and all(_plain_byte(c) for c in range(value[0], value[1] + 1)))
            for kind, value in av
        )
    if op is _c.SUBPATTERN:
        return bool(av[1] & re.IGNORECASE)
    return op not in _CONTAINERS


def _plain_byte(code: int) -> bool:
    return code < 0x80 and code not in (0x0A, 0x0D)


def _has(items: list[tuple[Any, Any]], test: Any) -> bool:
    """Whether any node of the tree under ``items`` passes ``test(op, av)``."""
    for op, av in items:
        if test(op, av):
            return True
        for child in _children(op, av):
            if _has(list(child.data), test):
                return True
    return False


def _children(op: Any, av: Any) -> list[Any]:
    if op is _c.BRANCH:
        return list(av[1])
    if op is _c.SUBPATTERN:
        return [av[3]]
    if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
        return [av[2]]
    if op is _c.ATOMIC_GROUP:
        return [av]
    if op in (_c.ASSERT, _c.ASSERT_NOT):
        return [av[1]]
    if op is _c.GROUPREF_EXISTS:
        return [x for x in av[1:] if x is not None]
    return []


def _trim(items: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """``items`` less what a match may leave out at its end (see ``prefilter``)."""
    items = list(items)
    while items:
        op, av = items[-1]
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
            low, _high, sub = av
            if low == 0:
                items.pop()
                continue
            if low == 1:  # one repetition, itself trimmed, in place of the repeat
                items[-1:] = _trim(list(sub.data))
                continue
            items[-1] = (_c.MAX_REPEAT, (low, low, sub))
        elif op is _c.SUBPATTERN:
            group, add, delete, sub = av
            items[-1] = (op, (group, add, delete, _Seq(_trim(list(sub.data)))))
        elif op is _c.BRANCH:
            items[-1] = (op, (av[0], [_Seq(_trim(list(alt.data))) for alt in av[1]]))
        elif op is _c.AT and av in (_c.AT_BOUNDARY, _c.AT_NON_BOUNDARY):
            items.pop()
            continue
        break
    return items


class _Seq:
    """A stand-in for a parsed subpattern: only its ``data`` is read."""

    __slots__ = ("data",)

    def __init__(self, data: list[tuple[Any, Any]]) -> None:
        self.data = data


def _seq(items: list[tuple[Any, Any]], flags: int, widened: list[str]) -> bytes:
    return b"".join(_node(op, av, flags, widened) for op, av in items)


def _node(op: Any, av: Any, flags: int, widened: list[str]) -> bytes:
    if op in (_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN):
        return _char(op, av, flags)
    if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
        return _repeat(op, av, flags, widened)
    if op is _c.AT:
        return _at(av, flags)
    return _group(op, av, flags, widened)


def _repeat(op: Any, av: Any, flags: int, widened: list[str]) -> bytes:
    low, high, sub = av
    if op is _c.POSSESSIVE_REPEAT:
        widened.append("a possessive repeat")
    if high is _c.MAXREPEAT and (wide := _wide_repeat(sub, flags, low)) is not None:
        return wide
    body = b"(?:" + _seq(list(sub.data), flags, widened) + b")"
    if high is _c.MAXREPEAT:
        return body + {0: b"*", 1: b"+"}.get(low, b"{%d,}" % low)
    if (low, high) == (0, 1):
        return body + b"?"
    return body + (b"{%d}" % low if low == high else b"{%d,%d}" % (low, high))


def _at(av: Any, flags: int) -> bytes:
    if av in (_c.AT_BEGINNING, _c.AT_BEGINNING_LINE, _c.AT_BEGINNING_STRING):
        return b"^"
    if av in (_c.AT_END, _c.AT_END_LINE, _c.AT_END_STRING):
        return b"\\r?$"  # a line's trailing \r is not part of it
    if flags & re.ASCII:
        return b"\\b" if av is _c.AT_BOUNDARY else b"\\B"
    return b""  # Python's \b knows non-ASCII word characters; Hyperscan's does not


def _group(op: Any, av: Any, flags: int, widened: list[str]) -> bytes:
    """Alternations, groups, assertions and backreferences (those Hyperscan lacks, widened)."""
    if op is _c.BRANCH:
        return b"(?:" + b"|".join(_seq(list(alt.data), flags, widened) for alt in av[1]) + b")"
    if op is _c.SUBPATTERN:
        _number, add, delete, sub = av
        return b"(?:" + _seq(list(sub.data), (flags | add) & ~delete, widened) + b")"
    if op is _c.ATOMIC_GROUP:
        widened.append("an atomic group")
        return b"(?:" + _seq(list(av.data), flags, widened) + b")"
    if op in (_c.ASSERT, _c.ASSERT_NOT):
        widened.append("a lookahead or lookbehind")
        return b""
    if op is _c.GROUPREF:
        widened.append("a backreference")
        return b"[^\\n]*"
    if op is _c.GROUPREF_EXISTS:
        widened.append("a conditional group")
        _number, yes, no = av
        branches = [_seq(list(yes.data), flags, widened)]
        branches.append(_seq(list(no.data), flags, widened) if no is not None else b"")
        return b"(?:" + b"|".join(branches) + b")"
    raise ValueError(f"unsupported regex construct {op}")


_CHARS: dict[tuple[Any, str, int], bytes] = {}


def _char(op: Any, av: Any, flags: int) -> bytes:
    """One character of the line: its exact ASCII set, and what it may match beyond ASCII."""
    key = (op, repr(av), flags)
    found = _CHARS.get(key)
    if found is None:
        found = _CHARS[key] = _char_uncached(op, av, flags)
    return found


def _char_uncached(op: Any, av: Any, flags: int) -> bytes:
    if op is _c.LITERAL and av <= 127 and av != 10 and not flags & re.IGNORECASE:
        return b"\\x%02x" % av  # an ASCII character matches itself alone: nothing to compile
    return _char_compiled(op, av, flags)


def _char_compiled(op: Any, av: Any, flags: int) -> bytes:
    source, beyond = char_source(op, av, flags)
    if op is _c.LITERAL and av > 127 and not flags & re.IGNORECASE:
        return b"".join(b"\\x%02x" % byte for byte in chr(av).encode("utf-8"))
    compiled = re.compile(source, flags & re.IGNORECASE | (flags & re.ASCII))
    members = [ch for ch in _ASCII if compiled.fullmatch(ch)]
    alternatives = []
    if len(members) == 1:
        alternatives.append(b"\\x%02x" % ord(members[0]))
    elif members:
        alternatives.append(b"[" + _ranges([ord(ch) for ch in members]) + b"]")
    if beyond:
        # One byte of the class starts the character; the rest of a non-ASCII one follows.
        return _wide_class(members) + _NON_ASCII_TAIL
    if flags & re.IGNORECASE and not flags & re.ASCII:
        alternatives.extend(
            b"".join(b"\\x%02x" % byte for byte in ch.encode("utf-8"))
            for ch in FOLDS_TO_ASCII
            if compiled.fullmatch(ch)
        )
    if not alternatives:
        return b"[^\\x00-\\xff]"  # matches nothing, as the node does on a line
    return alternatives[0] if len(alternatives) == 1 else b"(?:" + b"|".join(alternatives) + b")"


def _wide_class(members: list[str]) -> bytes:
    """A class of ``members`` and every non-ASCII byte."""
    codes = [ord(ch) for ch in members]
    return b"[" + (_ranges(codes) if codes else b"") + b"\\x80-\\xff]"


def _wide_repeat(sub: Any, flags: int, low: int) -> bytes | None:
    """``C{low,}`` for one character node ``C`` that may match non-ASCII text, as one class:
    any run of at least ``low`` bytes of its class tiles into at least ``low`` characters."""
    items = list(sub.data)
    if len(items) != 1 or items[0][0] not in (_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN):
        return None
    op, av = items[0]
    emitted = _char(op, av, flags)
    if not emitted.endswith(_NON_ASCII_TAIL):
        return None
    return emitted[: -len(_NON_ASCII_TAIL)] + {0: b"*", 1: b"+"}.get(low, b"{%d,}" % low)


def _ranges(codes: list[int]) -> bytes:
    """Sorted byte values as class ranges: ``[48..57]`` -> ``\\x30-\\x39``."""
    out: list[bytes] = []
    first = last = codes[0]
    for code in [*codes[1:], -1]:
        if code == last + 1:
            last = code
            continue
        out.append(b"\\x%02x" % first if first == last else b"\\x%02x-\\x%02x" % (first, last))
        first = last = code
    return b"".join(out)


def char_source(op: Any, av: Any, flags: int) -> tuple[str, bool]:
    """Python source for one character node, and whether it may match non-ASCII text that is
    not an ASCII letter's case fold (any non-ASCII byte run stands for it then)."""
    if op is _c.ANY:
        return "(?s:.)", True
    if op is _c.LITERAL:
        return re.escape(chr(av)), av > 127
    if op is _c.NOT_LITERAL:
        return "[^" + re.escape(chr(av)) + "]", True
    parts: list[str] = []
    negate = False
    non_ascii = False
    for kind, value in av:
        if kind is _c.NEGATE:
            negate = True
        elif kind is _c.LITERAL:
            parts.append(re.escape(chr(value)))
            non_ascii = non_ascii or value > 127
        elif kind is _c.RANGE:
            low, high = value
            parts.append(re.escape(chr(low)) + "-" + re.escape(chr(high)))
            non_ascii = non_ascii or high > 127
        elif kind is _c.CATEGORY:
            parts.append(_CATEGORY[value])
            non_ascii = non_ascii or not flags & re.ASCII
        else:
            raise ValueError(f"unsupported character class item {kind}")
    source = "[" + ("^" if negate else "") + "".join(parts) + "]"
    return source, non_ascii or negate
