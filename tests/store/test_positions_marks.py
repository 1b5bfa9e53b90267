"""The prior marks of a position as bytes: one mark as before, several packed together."""

from __future__ import annotations

from canary.store.positions import pack_mark, pack_marks, unpack_marks
from collectors.identity import Mark


def mark(n: int) -> Mark:
    return Mark.of(100 * n, b"head %d\n" % n, b"tail %d\n" % n)


def test_one_mark_is_packed_as_a_single_mark_was() -> None:
    assert pack_marks(mark(1)) == pack_mark(mark(1))
    assert unpack_marks(pack_mark(mark(1))) == [mark(1)]  # positions stored before still read
    assert pack_marks(None) is None and unpack_marks(None) == []


def test_several_marks_come_back_in_order() -> None:
    packed = pack_marks(mark(1), (mark(2), mark(3)))
    assert unpack_marks(packed) == [mark(1), mark(2), mark(3)]
    assert unpack_marks(packed[:-3]) == [mark(1), mark(2)]  # cut short: the whole marks only
