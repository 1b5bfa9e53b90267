"""Read positions as rows: a ``FileState`` from a ``file_positions`` row, a ``Mark`` as bytes."""

from __future__ import annotations

import struct
from typing import Any

from canary.store.tables import FilePosition
from collectors.identity import Mark
from collectors.positions import FileState

__all__ = ["pack_mark", "state_of", "unpack_mark"]


def state_of(row: Any) -> FileState:
    pos = row[0] if not isinstance(row, FilePosition) and len(row) == 1 else row
    return FileState(
        key=pos.key, dev=pos.dev, ino=pos.ino, path=pos.path, offset=pos.offset,
        head_len=pos.head_len, head_hash=bytes(pos.head_hash), size=pos.size,
        head=bytes(pos.head or b""), tail_len=int(pos.tail_len or 0),
        tail_hash=bytes(pos.tail_hash or b""), prior=unpack_mark(pos.prior),
    )


def pack_mark(mark: Mark | None) -> bytes | None:
    """A mark as bytes: offset, head length, tail length, then head hash, tail hash, head."""
    if mark is None:
        return None
    sizes = struct.pack(">QII", mark.offset, mark.head_len, mark.tail_len)
    return sizes + mark.head_hash.ljust(16, b"\0") + mark.tail_hash.ljust(16, b"\0") + mark.head


def unpack_mark(data: bytes | None) -> Mark | None:
    """A mark from ``pack_mark``'s bytes (None for none, or too few bytes)."""
    if not data or len(data) < 48:
        return None
    data = bytes(data)
    offset, head_len, tail_len = struct.unpack(">QII", data[:16])
    tail_hash = data[32:48] if tail_len else b""
    return Mark(offset, head_len, data[16:32], tail_len, tail_hash, data[48:])
