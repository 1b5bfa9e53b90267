"""The tailer stepped by poll(), against real files and a real SQLite store."""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import UTC
from pathlib import Path

import pytest

from canary.store.engine import Store
from collectors.rules import Rule
from collectors.scan import Matcher
from collectors.tailer import Batch, Tailer
from collectors.timestamps import TimestampParser
from tests.collectors.fakes import Clock


def make_tailer(store: Store, pattern: str, clock: Clock | None = None, **kw: object) -> Tailer:
    matcher = Matcher(
        [Rule.regex("g", "HIT")], Rule.regex("activity", "task finished"),
        timestamps=TimestampParser(default_tz=UTC),
    )
    errors: list[str] = []
    t = Tailer(
        [pattern], matcher, store, clock=clock or Clock(),
        on_error=lambda p, m: errors.append(m), **kw,  # type: ignore[arg-type]
    )
    t.errors = errors  # type: ignore[attr-defined]
    return t


def hits(n: int, start: int = 0) -> bytes:
    return b"".join(b"line %d HIT\nnoise %d\n" % (i, i) for i in range(start, start + n))


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def test_append_restart_and_exact_offsets(tmp_path: Path, store: Store) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(hits(5))
    t = make_tailer(store, str(tmp_path / "*.log"))
    t.poll()
    assert store.count_firings() == 5
    append(log, hits(3, 5) + b"partial HI")
    t.poll()
    assert store.count_firings() == 8
    (state,) = store.positions()
    assert state.offset == len(hits(8))
    t.close()
    t2 = make_tailer(store, str(tmp_path / "*.log"))
    append(log, b"T\n")
    t2.poll()
    assert store.count_firings() == 9
    t2.poll()
    assert store.count_firings() == 9


def test_file_appearing_after_start_is_read_from_its_start(tmp_path: Path, store: Store) -> None:
    t = make_tailer(store, str(tmp_path / "logs" / "*.log"))
    t.poll()
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "late.log").write_bytes(hits(100))
    t.poll()
    assert store.count_firings() == 100


def test_truncate_then_regrow_past_offset_is_seen_by_head_hash(tmp_path: Path, store: Store) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(hits(10))
    t = make_tailer(store, str(log))
    t.poll()
    log.write_bytes(hits(20, 100))  # truncate + longer rewrite between two polls
    t.poll()
    assert store.count_firings() == 30
    assert t.truncations == 1


def test_truncate_while_stopped_then_restart_twice(tmp_path: Path, store: Store) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(hits(10))
    t = make_tailer(store, str(log))
    t.poll()
    t.close()
    log.write_bytes(hits(2, 50))
    t = make_tailer(store, str(log))
    t.poll()
    t.close()
    t = make_tailer(store, str(log))
    t.poll()
    assert store.count_firings() == 12


def test_delete_and_recreate_within_one_poll(tmp_path: Path, store: Store) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(hits(4))
    clock = Clock()
    t = make_tailer(store, str(log), clock)
    t.poll()
    log.unlink()
    log.write_bytes(hits(3, 10))
    t.poll()
    assert store.count_firings() == 7
    clock.now += 10
    t.poll()
    assert len(t.files()) == 1
    assert len(store.positions()) == 1


def test_rename_rotation_with_late_writes_to_the_old_file(tmp_path: Path, store: Store) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(hits(2))
    clock = Clock()
    t = make_tailer(store, str(log), clock)
    t.poll()
    old = open(log, "ab")  # noqa: SIM115  (the writer holds its fd across the rename)
    os.rename(log, tmp_path / "a.log.1")
    log.write_bytes(hits(1, 100))
    t.poll()
    old.write(hits(2, 50))
    old.flush()
    clock.now += 2
    t.poll()  # drained on the timer though the file left the glob
    assert store.count_firings() == 5
    clock.now += 10
    t.poll()
    assert [f.path for f in t.files()] == [str(log)]
    old.write(hits(1, 60))  # after close: lost by design once quiet for rotate_wait
    old.close()


def test_inode_reuse_is_not_taken_for_the_old_file(tmp_path: Path, store: Store) -> None:
    """B gets A's inode (for real when the filesystem hands it back, else A's row is moved onto it)."""
    log = tmp_path / "a.log"
    log.write_bytes(hits(50))
    t = make_tailer(store, str(log))
    t.poll()
    t.close()
    (old,) = store.positions()
    log.unlink()
    for _ in range(50):
        log.write_bytes(b"fresh file HIT with other head\n" + hits(60, 500))
        if f"{log.stat().st_dev}:{log.stat().st_ino}" == old.key:
            break
        log.unlink()
    else:
        # The kernel did not reuse the inode: give B's identity A's stored state, as reuse would.
        log.write_bytes(b"fresh file HIT with other head\n" + hits(60, 500))
        store.forget(old.key)
        st = log.stat()
        reused = replace(old, key=f"{st.st_dev}:{st.st_ino}", dev=st.st_dev, ino=st.st_ino)
        store.commit(Batch(reused, [], 0, 0))
    assert log.stat().st_size > old.offset  # the stale offset would land inside B
    t = make_tailer(store, str(log))
    t.poll()
    assert store.count_firings() == 50 + 61
    (state,) = store.positions()
    assert state.offset == log.stat().st_size


def test_ten_megabyte_line_and_invalid_utf8(tmp_path: Path, store: Store) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"a HIT\n" + b"HIT" + b"z" * (10 << 20) + b"\n\xff\xfe HIT \xc3\n" + b"d HIT\n")
    t = make_tailer(store, str(log))
    t.poll()
    assert store.count_firings() == 4
    (state,) = store.positions()
    assert state.offset == log.stat().st_size


def test_symlink_repointed(tmp_path: Path, store: Store) -> None:
    (tmp_path / "real").mkdir()
    one, two = tmp_path / "real" / "one", tmp_path / "real" / "two"
    one.write_bytes(hits(2))
    link = tmp_path / "agent.log"
    link.symlink_to(one)
    clock = Clock()
    t = make_tailer(store, str(link), clock)
    t.poll()
    two.write_bytes(hits(3, 10))
    link.unlink()
    link.symlink_to(two)
    t.poll()
    append(two, hits(1, 20))
    clock.now += 10
    t.poll()
    t.poll()
    assert store.count_firings() == 6


def test_unreadable_file_warns_once_and_catches_up(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(hits(3))
    log.chmod(0)
    if os.geteuid() == 0:  # root reads any mode: refuse the open the way the kernel would
        real_open = os.open

        def refusing_open(path: str, flags: int, *a: object) -> int:
            if str(path) == str(log) and not os.stat(log).st_mode & 0o444:
                raise PermissionError(13, "Permission denied", str(path))
            return real_open(path, flags, *a)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "open", refusing_open)
    t = make_tailer(store, str(log))
    t.poll()
    t.poll()
    assert len(t.errors) == 1  # type: ignore[attr-defined]
    log.chmod(0o644)
    t.poll()
    assert store.count_firings() == 3


@pytest.mark.slow
def test_two_hundred_files_in_several_directories(tmp_path: Path, store: Store) -> None:
    for d in range(8):
        (tmp_path / f"d{d}").mkdir()
        for f in range(25):
            (tmp_path / f"d{d}" / f"f{f}.log").write_bytes(hits(2))
    t = make_tailer(store, str(tmp_path / "d*" / "*.log"))
    t.poll()
    for d in range(8):
        for f in range(25):
            append(tmp_path / f"d{d}" / f"f{f}.log", hits(1, 9))
    t.poll()
    assert store.count_firings() == 600
    assert len(t.files()) == 200


def test_rotated_while_stopped_is_finished_from_its_offset(tmp_path: Path, store: Store) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(hits(3))
    t = make_tailer(store, str(log))
    t.poll()
    t.close()
    append(log, hits(2, 10))  # written before the rotation, while nothing followed
    os.rename(log, tmp_path / "a.log.1")
    log.write_bytes(hits(1, 20))
    t = make_tailer(store, str(log))
    t.poll()
    assert store.count_firings() == 6


def test_twins_with_the_same_content_are_both_counted(tmp_path: Path, store: Store) -> None:
    """Two files with the same first lines, and two empty files that then grow (never merged)."""
    clock = Clock()
    t = make_tailer(store, str(tmp_path / "*.log"), clock, rotate_wait=5.0)
    (tmp_path / "empty1.log").write_bytes(b"")
    (tmp_path / "empty2.log").write_bytes(b"")
    t.poll()
    (tmp_path / "a.log").write_bytes(hits(3))
    t.poll()
    (tmp_path / "b.log").write_bytes(hits(3))  # the same bytes as a.log, a different file
    append(tmp_path / "empty1.log", hits(1))
    append(tmp_path / "empty2.log", hits(1))
    t.poll()
    clock.now += 6  # a twin waits at most rotate_wait to be told from a copy
    t.poll()
    assert store.count_firings() == 3 + 3 + 1 + 1


def test_copytruncate_copy_in_the_glob_is_not_counted_twice(tmp_path: Path, store: Store) -> None:
    """The copy holds what was read already plus the unread tail: only the tail counts."""
    clock = Clock()
    log = tmp_path / "app.log"
    log.write_bytes(hits(40))
    t = make_tailer(store, str(tmp_path / "app.log*"), clock)
    t.poll()
    append(log, hits(5, 100))  # written but not yet read when the rotation happens
    (tmp_path / "app.log.1").write_bytes(log.read_bytes())
    with open(log, "r+b") as f:
        f.truncate(0)
    append(log, hits(2, 200))
    t.poll()
    clock.now += 10
    t.poll()
    assert store.count_firings() == 40 + 5 + 2


def test_copy_older_than_what_was_read_is_not_counted_again(tmp_path: Path, store: Store) -> None:
    """copytruncate where the writer went on between the copy and the truncation."""
    clock = Clock()
    log = tmp_path / "app.log"
    log.write_bytes(hits(40))
    t = make_tailer(store, str(tmp_path / "app.log*"), clock)
    t.poll()
    (tmp_path / "app.log.1").write_bytes(log.read_bytes())  # the copy
    append(log, hits(5, 100))  # written after the copy, before the truncation
    t.poll()  # the original gives those 5; the copy waits to be told from a twin
    with open(log, "r+b") as f:
        f.truncate(0)
    append(log, hits(2, 200))
    t.poll()
    clock.now += 10
    t.poll()
    assert store.count_firings() == 40 + 5 + 2
