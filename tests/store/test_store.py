"""The store: WAL mode, schema versions, one transaction per batch."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from canary.errors import StoreError
from canary.store.attributing import Sighting, StoredRun
from canary.store.engine import Store
from canary.store.migrations import SCHEMA_VERSION
from collectors.identity import HEAD, TAIL, Mark
from collectors.positions import InDoubt
from collectors.scan import Hit
from collectors.tailer import Batch, FileState
from tests.helpers_store import TiedBy

NOW = datetime(2026, 11, 29, 10, 30, tzinfo=UTC)


def state(offset: int) -> FileState:
    return FileState("1:2", 1, 2, "/logs/a.log", offset, 10, b"h" * 16, offset)


def read_to(log: bytes, offset: int) -> FileState:
    """The state of ``log`` read to ``offset``, with the head and tail that prove it."""
    mark = Mark.of(offset, log[: min(offset, HEAD)], log[max(0, offset - TAIL) : offset])
    return FileState("1:2", 1, 2, "/logs/a.log", offset, mark.head_len, mark.head_hash, len(log),
                     mark.head, mark.tail_len, mark.tail_hash)


def test_sqlite_store_is_wal_and_versioned(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'deep' / 'c.db'}")
    with store.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        version = conn.execute(text("SELECT value FROM meta WHERE key='schema_version'")).scalar()
    assert int(version) == SCHEMA_VERSION
    store.close()
    Store(f"sqlite:///{tmp_path / 'deep' / 'c.db'}").close()  # reopening migrates nothing


def test_a_newer_store_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    Store(f"sqlite:///{path}").close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match="newer"):
        Store(f"sqlite:///{path}")


def test_unopenable_store_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError):
        Store(f"sqlite:///{blocker / 'c.db'}")


def test_commit_writes_firings_counts_activity_and_position_together(open_store: Callable[..., Store]) -> None:
    store = open_store(clock=lambda: NOW)
    hits = [
        Hit(0, "g1 and g2", ("g1", "g2"), False, NOW),
        Hit(20, "x" * 5000, ("g1",), True, None),
        Hit(40, "activity", (), True, datetime(2026, 11, 29, 9, 5, tzinfo=UTC)),
    ]
    store.commit(Batch(state(60), hits, 3, 60))
    assert store.position("1:2") == state(60)
    with store.engine.connect() as conn:
        rows = conn.execute(text("SELECT guard, length(line), ts_from_line FROM firings ORDER BY id")).all()
        rows = [(g, n, int(f)) for g, n, f in rows]
        counts = conn.execute(text("SELECT guard, source, count FROM hourly_counts ORDER BY guard")).all()
        activity = conn.execute(text("SELECT activity, lines FROM hourly_activity ORDER BY hour")).all()
    assert rows == [("g1", 9, 1), ("g2", 9, 1), ("g1", 2048, 0)]
    assert counts == [("g1", "organic", 2), ("g2", "organic", 1)]
    assert activity == [(1, 0), (1, 3)]


def test_a_failed_commit_leaves_nothing_behind(open_store: Callable[..., Store]) -> None:
    class Boom(TiedBy):
        def attribute(self, sighting: Sighting, stored: StoredRun | None) -> int | None:
            if sighting.offset == 20:
                raise RuntimeError("attribution failed")
            return None

    store = open_store(clock=lambda: NOW, attribution=Boom(0, bool))
    hits = [Hit(0, "a", ("g1",), False, NOW), Hit(20, "b", ("g1",), False, NOW)]
    with pytest.raises(RuntimeError):
        store.commit(Batch(state(40), hits, 2, 40))
    assert store.count_firings() == 0
    assert store.position("1:2") is None


def test_canary_attribution_keeps_counts_apart(open_store: Callable[..., Store]) -> None:
    store = open_store(clock=lambda: NOW, attribution=TiedBy(7, lambda t: "nonce123" in t))
    hits = [Hit(0, "rejected nonce123", ("g",), False, NOW), Hit(30, "rejected", ("g",), False, NOW)]
    store.commit(Batch(state(50), hits, 2, 50))
    from canary.store.queries import window_counts

    counts = window_counts(store.engine, NOW)
    assert (counts["g"].organic, counts["g"].canary) == (1, 1)


def test_a_batch_committed_again_after_a_lost_answer_is_counted_once(open_store: Callable[..., Store]) -> None:
    """The server committed, the connection went before its answer: the tailer reads the batch
    again from its committed position and commits it again. Nothing is doubled."""
    store = open_store(clock=lambda: NOW)
    store.commit(Batch(state(20), [Hit(0, "first", ("g",), False, NOW)], 1, 20, since=0))
    again = Batch(state(60), [Hit(20, "second", ("g",), False, NOW)], 1, 60, since=20)
    store.commit(again)
    store.commit(again)  # the retry of a commit whose answer was lost
    assert store.count_firings() == 2
    from canary.store.queries import window_counts

    assert window_counts(store.engine, NOW)["g"].organic == 2
    assert store.position("1:2") == state(60)
    # a batch that starts at the committed position still commits
    store.commit(Batch(state(90), [Hit(60, "third", ("g",), False, NOW)], 1, 90, since=60))
    assert store.count_firings() == 3


def test_a_longer_retry_of_a_commit_whose_answer_was_lost_counts_only_what_lies_past_it(
    open_store: Callable[..., Store],
) -> None:
    """The server committed, the connection went before its answer, and the log grew: the tailer
    reads again from its committed position to the new end, naming the commit in doubt. What the
    store took is counted once: firings, hourly counts, activity, lines and bytes read."""
    store = open_store(clock=lambda: NOW)
    log = b"g one\nbusy\ng two\nbusy\ng three\n"
    hits = [
        Hit(0, "g one", ("g",), False, NOW), Hit(6, "busy", (), True, NOW),
        Hit(11, "g two", ("g",), False, NOW), Hit(17, "busy", (), True, NOW),
        Hit(22, "g three", ("g",), False, NOW),
    ]
    first = Batch(read_to(log, 11), hits[:2], 2, 11, since=0)
    store.commit(first)  # taken; its answer lost
    again = Batch(read_to(log, len(log)), hits, 5, len(log), since=0, in_doubt=(InDoubt(first.state.mark, 2, 11),))
    store.commit(again)
    store.commit(again)  # its answer lost too
    with store.engine.connect() as conn:
        lines = sorted(r[0] for r in conn.execute(text("SELECT line FROM firings")))
        counts = conn.execute(text("SELECT guard, source, count FROM hourly_counts")).all()
        activity = conn.execute(text("SELECT activity, lines, bytes FROM hourly_activity")).all()
        read = conn.execute(text("SELECT lines FROM file_positions")).scalar()
    assert lines == ["g one", "g three", "g two"]
    assert counts == [("g", "organic", 3)]
    assert activity == [(2, 5, len(log))]
    assert read == 5
    assert store.position("1:2") == read_to(log, len(log))


def test_a_retry_of_other_content_at_the_same_offsets_is_not_taken_as_committed(
    open_store: Callable[..., Store],
) -> None:
    """A commit in doubt that the store did not take, while the stored position is another read's
    at the same offset: all of the retry is counted."""
    store = open_store(clock=lambda: NOW)
    log, other = b"g one\ng two\n", b"g uno\ng two\n"
    store.commit(Batch(read_to(other, 6), [Hit(0, "g uno", ("g",), False, NOW)], 1, 6, since=0))
    doubt = InDoubt(read_to(log, 6).mark, 1, 6)
    hits = [Hit(0, "g one", ("g",), False, NOW), Hit(6, "g two", ("g",), False, NOW)]
    store.commit(Batch(read_to(log, len(log)), hits, 2, len(log), since=0, in_doubt=(doubt,)))
    assert store.count_firings() == 3
