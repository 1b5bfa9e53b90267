"""Where a TOML syntax error belongs: the line the broken construct starts on, not where parsing stopped.

For a multi-line string or an array never closed, ``tomllib`` reports the point it gave up at: a
later line, or the end of the file. The text before that point is scanned once, for strings,
comments and brackets, to find the construct still open there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["syntax_error"]

_TOML_POSITION = re.compile(r"\s*\(at (?:line (\d+), column (\d+)|end of document)\)$")
_QUOTES = ('"""', "'''", '"', "'")


def syntax_error(text: str, message: str) -> tuple[int | None, str]:
    """The line a ``tomllib`` error message belongs on, and the message to show there."""
    position = _TOML_POSITION.search(message)
    if position is None:
        return None, message
    message = message[: position.start()]
    lines = text.splitlines(keepends=True)
    if position.group(1):
        given, column = int(position.group(1)), int(position.group(2))
        where = f"line {given}, column {column}"
        before = "".join(lines[: given - 1]) + (lines[given - 1][: column - 1] if given <= len(lines) else "")
    else:
        given, where, before = len(lines), "the end of the file", text
    start = open_construct(before)
    if start is None or start >= given:
        return given, message + (f" (column {position.group(2)})" if position.group(1) else f" (at {where})")
    return start, (f"{message} (at {where}): what opens on this line and is never closed "
                   "(a string, array or inline table)")


@dataclass
class _Scan:
    """Where the scan is: its line, how deep in brackets, and the line the outer bracket opened on."""

    line: int = 1
    depth: int = 0
    opened: int | None = None
    after_equals: bool = False  # a value is being read: a bracket opens an array, not a table header


def open_construct(text: str) -> int | None:
    """The line (from 1) where the string or array still open at the end of ``text`` starts, if one is."""
    scan, i = _Scan(), 0
    while i < len(text):
        i, unclosed = _step(text, i, scan)
        if unclosed:
            return scan.opened if scan.depth > 0 else scan.line
    return scan.opened if scan.depth > 0 else None


def _step(text: str, i: int, scan: _Scan) -> tuple[int, bool]:
    """Read one token at ``i``: the index after it, and whether it is a string never closed."""
    if text[i] == "#":
        end = text.find("\n", i)
        return (len(text) if end < 0 else end), False
    quote = next((q for q in _QUOTES if text.startswith(q, i)), None)
    if quote is not None:
        closed = _string_end(text, i + len(quote), quote)
        if closed is None:
            return i, True
        scan.line += text.count("\n", i, closed)
        return closed, False
    _punctuation(text[i], scan)
    return i + 1, False


def _punctuation(char: str, scan: _Scan) -> None:
    """Follow lines, values and brackets outside strings and comments."""
    if char == "\n":
        scan.line += 1
        scan.after_equals = scan.after_equals and scan.depth > 0
    elif char == "=" and scan.depth == 0:
        scan.after_equals = True
    elif char in "[{" and (scan.depth > 0 or scan.after_equals):
        scan.opened = scan.line if scan.depth == 0 else scan.opened
        scan.depth += 1
    elif char in "]}" and scan.depth > 0:
        scan.depth -= 1


def _string_end(text: str, i: int, quote: str) -> int | None:
    """Just past the quote that closes a string whose body starts at ``i``; None if none does."""
    escapes = quote.startswith('"')
    while i < len(text):
        if escapes and text[i] == "\\":
            i += 2
            continue
        if text.startswith(quote, i):
            return i + len(quote)
        if text[i] == "\n" and len(quote) == 1:
            return i  # a one-line string ends with its line, closed or not: the parser says which
        i += 1
    return None
