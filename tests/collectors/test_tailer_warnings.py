"""What the line scanner warns of reaches the tailer's error callback, naming file and offset."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from canary.store.engine import Store
from collectors.rules import Rule
from collectors.scan import MAX_LINE, Matcher
from collectors.tailer import Tailer


def test_a_line_cut_at_max_line_is_told_with_its_file_and_offset(tmp_path: Path, store: Store) -> None:
    log = tmp_path / "agent.log"
    first = b"a HIT here\n"
    log.write_bytes(first + b"x" * (MAX_LINE + 10) + b" HIT\n" + b"b HIT again\n")
    told: list[tuple[str, str]] = []
    t = Tailer([str(log)], Matcher([Rule.regex("g", "HIT")]), store,
               on_error=lambda path, message: told.append((path, message)))
    try:
        t.poll()
    finally:
        t.close()
    assert store.count_firings() == 2  # the marker past MAX_LINE is cut off, the rest counted
    assert len(told) == 1, told
    path, message = told[0]
    assert path == str(log)
    assert str(log) in message and f"offset {len(first)}" in message
    assert f"longer than {MAX_LINE} bytes" in message


def hit_tailer(log: Path, store: Store, told: list[str] | None = None) -> Tailer:
    """A tailer of ``log`` counting ``HIT`` lines, its warnings' messages into ``told``."""
    return Tailer([str(log)], Matcher([Rule.regex("g", "HIT")]), store,
                  on_error=lambda _p, message: (told if told is not None else []).append(message))


def poll_once(log: Path, store: Store, told: list[str] | None = None) -> None:
    t = hit_tailer(log, store, told)
    try:
        t.poll()
    finally:
        t.close()


def copytruncate(log: Path) -> None:
    (log.parent / (log.name + ".1")).write_bytes(log.read_bytes())
    os.truncate(log, 0)


def test_copytruncate_under_an_appending_writer_is_told_as_a_possible_loss(
    tmp_path: Path, store: Store
) -> None:
    log = tmp_path / "agent.log"
    told: list[str] = []
    t = hit_tailer(log, store, told)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, b"a HIT 1\n")
        t.poll()
        copytruncate(log)
        os.write(fd, b"a HIT 2\n")
        t.poll()
    finally:
        os.close(fd)
        t.close()
    assert len(told) == 1, told
    assert str(log) in told[0] and "truncated" in told[0]
    assert "between the copy and the truncation" in told[0] and "cannot be counted" in told[0]


def test_copytruncate_under_a_writer_without_append_tells_the_bytes_lost(
    tmp_path: Path, store: Store
) -> None:
    log = tmp_path / "agent.log"
    told: list[str] = []
    t = hit_tailer(log, store, told)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"a HIT 1\n")
        t.poll()
        os.write(fd, b"a HIT lost\n")  # written, never read: the truncation takes it
        os.truncate(log, 0)
        os.write(fd, b"a HIT 2\n")  # at the writer's own offset: a hole of 19 bytes before it
        t.poll()
    finally:
        os.close(fd)
        t.close()
    assert len(told) == 1, told
    assert str(log) in told[0] and "11 bytes after the last line read" in told[0]


@pytest.mark.parametrize("rewrite", [b"", b"a HIT new\n"], ids=["emptied", "rewritten"])
def test_a_file_truncated_while_stopped_is_told_as_a_possible_loss(
    tmp_path: Path, store: Store, rewrite: bytes
) -> None:
    log = tmp_path / "agent.log"
    log.write_bytes(b"a HIT 1\nnoise\n")
    poll_once(log, store)
    with log.open("r+b") as handle:  # truncated in place while nothing followed it
        handle.truncate(0)
        handle.write(rewrite)
    told: list[str] = []
    poll_once(log, store, told)
    assert store.count_firings() == 1 + bool(rewrite)
    assert len(told) == 1, told
    assert str(log) in told[0] and "the 14 bytes read of it are no longer there" in told[0]
    assert "past offset 14" in told[0]


class RefusingStore:
    """The real store, refusing every commit while ``refuse`` is set."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.refuse = False

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    def commit(self, batch: object) -> None:
        if self.refuse:
            raise OSError("database is locked")
        self.store.commit(batch)  # type: ignore[arg-type]


def test_a_refused_commit_is_told_once_no_longer_holds_when_the_store_takes_it_and_is_told_again(
    tmp_path: Path, store: Store
) -> None:
    log = tmp_path / "agent.log"
    log.write_bytes(b"a HIT one\n")
    told: list[str] = []
    gone: list[tuple[str, str]] = []
    refusing = RefusingStore(store)
    t = Tailer([str(log)], Matcher([Rule.regex("g", "HIT")]), store,
               on_error=lambda _p, message: told.append(message),
               on_resolved=lambda path, message: gone.append((path, message)))
    t.store = refusing  # type: ignore[assignment]
    try:
        refusing.refuse = True
        t.poll()
        t.poll()
        assert len(told) == 1 and "cannot commit what was read from" in told[0], told
        assert gone == [] and store.count_firings() == 0
        refusing.refuse = False
        t.poll()
        assert store.count_firings() == 1
        assert gone == [(str(log), told[0])]  # the warning no longer holds
        refusing.refuse = True
        with log.open("ab") as out:
            out.write(b"b HIT two\n")
        t.poll()
        assert len(told) == 2 and told[1] == told[0]  # a second outage is told again
        refusing.refuse = False
        t.poll()
        assert store.count_firings() == 2 and len(gone) == 2
    finally:
        t.close()


def test_a_file_that_cannot_be_opened_is_told_once_and_no_longer_holds_once_it_opens(
    tmp_path: Path, store: Store
) -> None:
    import resource

    log = tmp_path / "agent.log"
    log.write_bytes(b"a HIT one\n")
    store.count_firings()  # the store's connection is open before descriptors run out
    told: list[str] = []
    gone: list[tuple[str, str]] = []
    t = Tailer([str(log)], Matcher([Rule.regex("g", "HIT")]), store,
               on_error=lambda _p, message: told.append(message),
               on_resolved=lambda path, message: gone.append((path, message)))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        lowest_free = os.open(os.devnull, os.O_RDONLY)  # a new descriptor takes the lowest free number
        os.close(lowest_free)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))  # no descriptor to spare
        t.poll()
        t.poll()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert len(told) == 1 and "too many open files" in told[0], told
        assert gone == [] and store.count_firings() == 0
        t.poll()
        assert store.count_firings() == 1
        assert gone == [(str(log), told[0])]
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        t.close()
