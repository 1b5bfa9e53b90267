"""The prior marks of a position as bytes: one mark as before, several packed together."""

from __future__ import annotations

from collections.abc import Callable

from canary.store.engine import Store
from canary.store.positions import pack_mark, pack_marks, unpack_marks
from collectors.identity import Mark
from collectors.positions import Batch, FileState


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


def test_where_a_head_of_nuls_ends_comes_back_from_the_store(open_store: Callable[..., Store]) -> None:
    """A head of NULs says nothing of which file it is; where its hole ends does, and it must
    outlive a restart, in the position and in its prior marks, on either backend."""
    store = open_store()
    hole = Mark.of(3000, bytes(1024), b"x\n", lead=2031)
    assert hole.lead == 2031 and Mark.of(3000, b"text", b"x\n", lead=2031).lead == 0
    assert unpack_marks(pack_marks(hole, (mark(2),)))[0].lead == 2031
    state = FileState("k", 1, 2, "/x/agent.log", 3000, 1024, hole.head_hash, 3000, hole.head,
                      hole.tail_len, hole.tail_hash, prior=hole, lead=2031)
    store.commit(Batch(state, [], 0, 0))
    (back,) = store.positions()
    assert back.lead == 2031 and back.head == bytes(1024) and back.prior is not None
    assert back.prior.lead == 2031 and back.mark == state.mark
    plain = FileState("j", 1, 3, "/x/b.log", 10, 4, mark(1).head_hash, 10, b"head")
    store.commit(Batch(plain, [], 0, 0))
    assert {s.key: (s.head, s.lead) for s in store.positions()}["j"] == (b"head", 0)
