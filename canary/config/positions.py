"""Where a key is written in a TOML text: the line of ``canary[1].every``, found by table headers."""

from __future__ import annotations

import re

from canary.records import frozen

__all__ = ["KeyPath", "locate"]

KeyPath = tuple[str | int, ...]

# A table header (as text: ``re`` compiles it when a problem is placed, a config that has none never does)
_HEADER = r"^\s*\[(\[?)\s*([^\[\]]+?)\s*\]\]?\s*(?:#.*)?$"


@frozen
class _Block:
    """One table header of a TOML text and the lines under it, up to the next header."""

    name: tuple[str, ...]  # ("canary", "turn") for [[canary.turn]]
    occurrence: int  # its count among headers of that name within the same parent item
    parent: int  # the occurrence of the parent array item it sits in (nested arrays of tables)
    line: int  # the header's line; 0 for the lines before any header
    body: list[tuple[int, str]]


def _blocks(text: str) -> list[_Block]:
    """The text cut at its table headers: the top-level lines first, then each header's lines."""
    blocks = [_Block((), 0, 0, 0, [])]
    counts: dict[tuple[tuple[str, ...], int], int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        header = re.match(_HEADER, line)
        if header is None:
            blocks[-1].body.append((number, line))
            continue
        name = tuple(part.strip().strip("\"'") for part in header.group(2).split("."))
        parent = counts.get((name[:1], 0), 1) - 1 if len(name) > 1 else 0
        occurrence = counts.get((name, parent), 0)
        counts[(name, parent)] = occurrence + 1
        blocks.append(_Block(name, occurrence, parent, number, []))
    return blocks


def _selector(prefix: KeyPath) -> tuple[tuple[str | int, ...], int, int]:
    """The header name, item index and parent item that the key path ``prefix`` selects."""
    index = prefix[-1] if prefix and isinstance(prefix[-1], int) else None
    names = prefix[:-1] if index is not None else prefix
    parent = 0
    if len(names) == 3 and isinstance(names[1], int):  # canary[0].turn[1]: the parent's item
        parent, names = names[1], (names[0], names[2])
    return names, index or 0, parent


def _assigned(block: _Block, rest: KeyPath) -> int | None:
    """The line in ``block`` that assigns the first name of ``rest``; else the header's line."""
    first = next((k for k in rest if isinstance(k, str)), None)
    if first is not None:
        assignment = re.compile(rf"^\s*[\"']?{re.escape(first)}[\"']?\s*[=.]")
        for number, line in block.body:
            if assignment.match(line):
                return number
    return block.line or None


def locate(text: str, keys: KeyPath) -> int | None:
    """The line (1-based) where ``keys`` is written in a TOML text, found by its table headers.

    Best effort: keys inside inline tables resolve to the line of the outer key. A nested
    array of tables (``canary[0].turn[1]``) is counted within its parent item.
    """
    blocks = _blocks(text)
    for cut in range(len(keys), -1, -1):
        names, index, parent = _selector(keys[:cut])
        if not all(isinstance(k, str) for k in names):
            continue  # a header can only select an array item by its last part
        for block in blocks:
            if (block.name, block.occurrence, block.parent) != (names, index, parent):
                continue
            found = _assigned(block, keys[cut:])
            if found is not None:
                return found
    return None
