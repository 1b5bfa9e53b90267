"""Read positions as rows: a ``FileState`` from a ``file_positions`` row, a ``Mark`` as bytes."""

from __future__ import annotations

import struct
from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, select

from canary.errors import StoreError
from canary.store.tables import FilePosition
from collectors.identity import Mark
from collectors.positions import Batch, FileState, InDoubt

__all__ = [
    "committed_before", "held_part", "pack_head", "pack_mark", "pack_marks", "past", "state_of",
    "unpack_head", "unpack_mark", "unpack_marks",
]

#: The first byte of several packed marks (a single mark starts with its offset's high byte).
_SEVERAL = b"\xff"


def state_of(row: Any) -> FileState:
    pos = row[0] if not isinstance(row, FilePosition) and len(row) == 1 else row
    marks = unpack_marks(pos.prior)
    prior, earlier = (marks[0], tuple(marks[1:])) if marks else (None, ())
    head, lead = unpack_head(bytes(pos.head or b""), pos.head_len)
    return FileState(
        key=pos.key, dev=pos.dev, ino=pos.ino, path=pos.path, offset=pos.offset,
        head_len=pos.head_len, head_hash=bytes(pos.head_hash), size=pos.size,
        head=head, tail_len=int(pos.tail_len or 0),
        tail_hash=bytes(pos.tail_hash or b""), prior=prior, earlier=earlier, lead=lead,
    )


def pack_head(head: bytes, lead: int) -> bytes:
    """A head's bytes as stored: a head of NULs whose hole is known to end at ``lead`` is
    followed by that offset (8 bytes, big-endian); no other head is longer than its length."""
    return head + struct.pack(">Q", lead) if lead else head


def unpack_head(stored: bytes, head_len: int) -> tuple[bytes, int]:
    """``pack_head``'s head and lead (0 where none was stored)."""
    if len(stored) == head_len + 8 and not stored[:head_len].strip(b"\0"):
        return stored[:head_len], struct.unpack(">Q", stored[head_len:])[0]
    return stored, 0


def pack_mark(mark: Mark | None) -> bytes | None:
    """A mark as bytes: offset, head length, tail length, then head hash, tail hash, head
    (``pack_head``'s)."""
    if mark is None:
        return None
    sizes = struct.pack(">QII", mark.offset, mark.head_len, mark.tail_len)
    return (sizes + mark.head_hash.ljust(16, b"\0") + mark.tail_hash.ljust(16, b"\0")
            + pack_head(mark.head, mark.lead))


def unpack_mark(data: bytes | None) -> Mark | None:
    """A mark from ``pack_mark``'s bytes (None for none, or too few bytes)."""
    if not data or len(data) < 48:
        return None
    data = bytes(data)
    offset, head_len, tail_len = struct.unpack(">QII", data[:16])
    tail_hash = data[32:48] if tail_len else b""
    head, lead = unpack_head(data[48:], head_len)
    return Mark(offset, head_len, data[16:32], tail_len, tail_hash, head, lead)


def pack_marks(prior: Mark | None, earlier: tuple[Mark, ...] = ()) -> bytes | None:
    """A prior mark and the earlier ones as bytes (one mark alone as ``pack_mark`` does)."""
    if prior is None:
        return None
    if not earlier:
        return pack_mark(prior)
    out = [_SEVERAL]
    for mark in (prior, *earlier):
        packed = pack_mark(mark) or b""
        out.append(struct.pack(">I", len(packed)) + packed)
    return b"".join(out)


def unpack_marks(data: bytes | None) -> list[Mark]:
    """The marks of ``pack_marks``'s (or ``pack_mark``'s) bytes, the prior first."""
    if not data:
        return []
    data = bytes(data)
    if not data.startswith(_SEVERAL):
        one = unpack_mark(data)
        return [one] if one is not None else []
    marks: list[Mark] = []
    pos = 1
    while pos + 4 <= len(data):
        (size,) = struct.unpack(">I", data[pos : pos + 4])
        mark = unpack_mark(data[pos + 4 : pos + 4 + size]) if pos + 4 + size <= len(data) else None
        if mark is None:
            break  # cut short: only the whole marks
        marks.append(mark)
        pos += 4 + size
    return marks


def held_part(conn: Connection, batch: Batch, *, lock: bool = False) -> InDoubt | None:
    """The commit of ``batch``'s read that the store holds already: one of its commits in doubt,
    or the batch itself (a commit whose answer was lost, read and committed again), proved by
    the stored offset, head and tail; None when it holds none of them. With ``lock``, a
    concurrent commit of the same file (PostgreSQL) waits for this transaction."""
    state, since = batch.state, batch.since
    if since is None or since == state.offset:
        return None
    table = FilePosition.__table__  # type: ignore[attr-defined]
    stmt = (select(table.c.offset, table.c.head_len, table.c.head_hash, table.c.tail_hash)
            .where(table.c.key == state.key))
    if lock and conn.dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    row = conn.execute(stmt).first()
    if row is None:
        return None
    stored = (int(row[0]), int(row[1]), bytes(row[2]), bytes(row[3] or b""))
    for sent in (*batch.in_doubt, InDoubt(state.mark, batch.lines, batch.bytes)):
        mark = sent.mark
        if since < mark.offset <= state.offset and stored == (mark.offset, mark.head_len, mark.head_hash,
                                                              mark.tail_hash):
            return sent
    return None


def past(batch: Batch, held: InDoubt | None) -> Batch:
    """``batch`` without what ``held`` (``held_part``'s) committed: the hits from its offset on,
    and the lines and bytes it did not count."""
    if held is None:
        return batch
    cut = held.mark.offset
    return replace(batch, hits=[hit for hit in batch.hits if hit.offset >= cut],
                   lines=batch.lines - held.lines, bytes=batch.bytes - held.bytes, since=cut, in_doubt=())


def committed_before(conn: Connection, batch: Batch, held: InDoubt | None = None) -> bool:
    """Whether all of ``batch`` is already committed (``held_part``, locked), given that ``held``
    was found held before the transaction (its firings were made of what lies past it). A commit
    whose answer was lost (the database server went away as it committed) is read and committed
    again, maybe with more lines: what it stored is counted once. Raises ``StoreError`` when a
    commit of the batch's read came in between."""
    now = held_part(conn, batch, lock=True)
    if batch.in_doubt and now != held:
        raise StoreError(f"{batch.state.path}: its read position was committed meanwhile; it is read again")
    return now is not None and now.mark.offset == batch.state.offset
