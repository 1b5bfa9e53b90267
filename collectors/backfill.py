"""Where to start a log seen for the first time: the start of the last ``window`` of it.

A file found by the first scan with nothing stored for it, or for its rotated siblings, is
read back only as far as its lines' own stamps reach into the window, not from its start:
it is scanned backwards from its end in blocks until a line stamped before the window's
start. Lines without a stamp belong to the stamped line before them, so the read begins at
the first stamped line of the window after the last one before it. A file with no stamped
line before the window is read whole, and so is one whose first stamped line is in it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from collectors.followed import pread_upto

__all__ = ["window_start"]

#: Bytes read per step backwards.
BLOCK = 1 << 16


def window_start(
    fd: int,
    end: int,
    since: float,
    stamp: Callable[[bytes], datetime | None],
    *,
    block: int = BLOCK,
) -> int:
    """The offset to read ``fd`` from so that every line stamped at or after ``since`` (epoch
    seconds) among its complete lines up to ``end`` (a line end) is read.

    ``stamp`` gives a line's time, or None. Reads the first block, then only from ``end`` back
    to the newest line stamped before ``since``.
    """
    if _starts_in_window(pread_upto(fd, min(end, block)), since, stamp):
        return 0  # the whole file is young: no need to look for the window's start
    pos = end
    carry = b""  # the start of a line cut by the block boundary: completed by the next block back
    first_new = end
    while pos > 0:
        start = max(0, pos - block)
        data = pread_upto(fd, pos - start, start) + carry
        if start:
            newline = data.find(b"\n")
            if newline < 0 or newline + 1 == len(data):
                carry, pos = data, start  # one line longer than the block: read further back
                continue
            carry, body, base = data[: newline + 1], data[newline + 1 :], start + newline + 1
        else:
            carry, body, base = b"", data, 0
        ends = [base + i + 1 for i in _newlines(body)]
        starts = [base, *ends[:-1]]
        for line_start, line_end in zip(reversed(starts), reversed(ends), strict=True):
            ts = stamp(body[line_start - base : line_end - base])
            if ts is None:
                continue
            if ts.timestamp() < since:
                return first_new
            first_new = line_start
        pos = start
    return 0


def _starts_in_window(first: bytes, since: float, stamp: Callable[[bytes], datetime | None]) -> bool:
    """Whether the first stamped line among the complete lines of ``first`` lies in the window."""
    start = 0
    for newline in _newlines(first):
        ts = stamp(first[start : newline + 1])
        if ts is not None:
            return ts.timestamp() >= since
        start = newline + 1
    return False


def _newlines(data: bytes) -> list[int]:
    out: list[int] = []
    i = data.find(b"\n")
    while i >= 0:
        out.append(i)
        i = data.find(b"\n", i + 1)
    return out
