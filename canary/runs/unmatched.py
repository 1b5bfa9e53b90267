"""A log line that carries a run's nonce but that no guard's ``match`` fits, and the guard it is nearest.

A guard whose ``match`` is a little off (``'CitationGuard: rejected'`` while the agent writes
``CitationGuard rejected <url>``) leaves its run ``unlogged`` though the agent did log. The run
never turns ``caught`` on such a line; its reason shows the line and the guard it nearly fits.
Only lines that carry the run's nonce are read, so they are the run's own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from pathlib import Path

from collectors.files import expand

__all__ = ["NearMiss", "closeness", "literal_of", "near_miss", "nonce_lines"]

#: Bytes read back from the end of each log file: the run's lines were written moments ago.
TAIL = 1 << 20
#: How much of a guard's literal text a line must hold, in order, to be called a near miss.
NEAR = 0.6
#: Longest line kept for the reason.
LINE_KEEP = 400

_GROUP_PREFIX = re.compile(r"\(\?(?:P<\w+>|P=\w+\)|<[=!]|[:=!>]|[aiLmsux-]+(?::|\)))")
_REPETITION = re.compile(r"\{\d*,?\d*\}")


@dataclass(frozen=True)
class NearMiss:
    """The line, and the guard whose match is closest to it."""

    line: str
    guard: str
    score: float


def literal_of(match: str | Mapping[str, object]) -> str:
    """The plain text a guard's match asks for: regex syntax dropped, escaped characters kept.

    A JSON-lines match contributes its field values, joined by spaces.
    """
    if not isinstance(match, str):
        return " ".join(literal_of(v) if isinstance(v, str | dict) else str(v) for v in match.values())
    pattern = _GROUP_PREFIX.sub("(", match)
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            following = pattern[i + 1]
            out.append(" " if following.isalnum() else following)  # \d, \s... stand for no one text
            i += 2
        elif c == "[":
            end = pattern.find("]", i + 2)
            out.append(" ")
            i = len(pattern) if end < 0 else end + 1
        elif c == "{" and (rep := _REPETITION.match(pattern, i)) is not None:
            i = rep.end()
        else:
            out.append("" if c in "()" else " " if c in ".?*+^$|{}" else c)
            i += 1
    return " ".join("".join(out).split())


def closeness(literal: str, line: str) -> float:
    """The share of ``literal`` found in ``line``, in order, counting runs of 3 characters or more."""
    if not literal:
        return 0.0
    matcher = SequenceMatcher(None, literal.lower(), line.lower(), autojunk=False)
    found = sum(block.size for block in matcher.get_matching_blocks() if block.size >= 3)
    return found / len(literal)


def nonce_lines(patterns: Sequence[str], nonce: str, *, tail: int = TAIL) -> list[str]:
    """The lines of the logs' current files (their last ``tail`` bytes) that carry ``nonce``."""
    needle = nonce.encode("utf-8")
    found: list[str] = []
    for path in expand(patterns):
        data = _tail(path, tail)
        for raw in data.split(b"\n"):  # lines as the collectors read them: a \r inside one is its own
            if needle in raw:
                found.append(raw.removesuffix(b"\r").decode("utf-8", "replace")[:LINE_KEEP])
    return found


def _tail(path: Path, size: int) -> bytes:
    try:
        with path.open("rb") as f:
            end = f.seek(0, 2)
            start = max(0, end - size)
            f.seek(start)
            data = f.read(size)
    except OSError:
        return b""
    return data.partition(b"\n")[2] if start else data  # a cut first line is not a line


def near_miss(lines: Iterable[str], guards: Mapping[str, str | Mapping[str, object]], *,
              own: str, fitted: Sequence[re.Pattern[str]] = ()) -> NearMiss | None:
    """The line closest to a guard's match, among those no ``fitted`` pattern finds; None below ``NEAR``.

    On a tie the run's own guard (``own``) wins.
    """
    literals = {name: literal_of(match) for name, match in guards.items()}
    best: NearMiss | None = None
    for line in lines:
        if any(p.search(line) for p in fitted):
            continue
        for name, text in literals.items():
            score = closeness(text, line)
            better = best is None or score > best.score or (score == best.score and name == own)
            if score >= NEAR and better:
                best = NearMiss(line, name, score)
    return best
