"""copytruncate under a writer without O_APPEND (``./agent > agent.log``, Node's write stream).

After the truncation the writer goes on at its own offset, so the live file is a hole of NUL
bytes, then new lines: it never looks smaller, and once its head is that hole, every copy made
of it starts with the same NULs. Each line is still counted once, with either glob, and no
NUL run is ever read as (part of) a line.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import text

from canary.store.engine import Store
from collectors.rules import Rule
from collectors.scan import Matcher
from collectors.tailer import Tailer
from tests.collectors.fakes import Clock


def counted(store: Store) -> Counter[str]:
    with store.engine.connect() as conn:
        return Counter(str(r[0]) for r in conn.execute(text("SELECT line FROM firings")))


def copytruncate(log: Path) -> None:
    """logrotate's copytruncate with ``rotate 5``: shift the copies, copy, truncate in place."""
    for n in range(4, 0, -1):
        old = log.with_name(f"{log.name}.{n}")
        if old.exists():
            old.rename(log.with_name(f"{log.name}.{n + 1}"))
    shutil.copyfile(log, log.with_name(f"{log.name}.1"))
    os.truncate(log, 0)


@pytest.mark.parametrize("glob", ["agent.log", "agent.log*"])
@pytest.mark.parametrize("poll_between", [True, False], ids=["polled", "unpolled"])
@pytest.mark.parametrize("chunk", [64, 1 << 20], ids=["holes-longer-than-a-read", "one-read"])
def test_each_line_counts_once_through_copytruncates_of_a_writer_without_append(
    tmp_path: Path, store: Store, glob: str, poll_between: bool, chunk: int
) -> None:
    log = tmp_path / "agent.log"
    clock = Clock()
    t = Tailer([str(tmp_path / glob)], Matcher([Rule.regex("g", "HIT")]), store, clock=clock,
               rotate_wait=5.0, chunk=chunk, batch_bytes=chunk)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    seq = 0

    def write(n: int) -> None:
        nonlocal seq
        for _ in range(n):
            seq += 1
            os.write(fd, b"2026-12-03T10:00:00Z a HIT seq=%d\n" % seq)

    def poll() -> None:
        clock.now += 0.5
        t.poll()

    try:
        write(5)
        poll()
        for _ in range(4):
            write(3)  # read or not before the copy: the copy must give them, once
            if poll_between:
                poll()
            write(2)
            copytruncate(log)
            write(4)  # after a hole as long as the file was
            poll()
        for _ in range(4):
            clock.now += 6.0
            t.poll()
    finally:
        os.close(fd)
        t.close()
    assert log.read_bytes().startswith(b"\0" * 100)  # the hole is there
    seen = counted(store)
    lines = [line for line in seen if "\ufffd" in line or not line.startswith("2026-")]  # a NUL is kept as U+FFFD
    assert not lines, f"{len(lines)} NUL runs read as (part of) a line, as {lines[0][-40:]!r}"
    doubled = sorted(line for line, n in seen.items() if n > 1)
    assert not doubled, f"{len(doubled)} counted twice: {doubled[:5]}"
    assert len(seen) == seq, f"{seq - len(seen)} of {seq} lines lost"


@pytest.mark.parametrize("glob", ["agent.log", "agent.log*"])
def test_a_copytruncate_in_the_middle_of_a_read_counts_each_line_once(
    tmp_path: Path, store: Store, glob: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file is copied and truncated between two reads of one poll: what was read before the
    hole counts, the copy gives the rest of the old lines, the line after the hole counts once."""
    log = tmp_path / "agent.log"
    clock = Clock()
    t = Tailer([str(tmp_path / glob)], Matcher([Rule.regex("g", "HIT")]), store, clock=clock,
               rotate_wait=5.0, chunk=256, batch_bytes=256)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    seq = 0

    def write(n: int) -> None:
        nonlocal seq
        for _ in range(n):
            seq += 1
            os.write(fd, b"2026-12-03T10:00:00Z a HIT seq=%d\n" % seq)

    real_pread = os.pread
    calls = [0]

    def pread(f: int, n: int, offset: int) -> bytes:
        calls[0] += 1
        if calls[0] == 4:
            copytruncate(log)
            write(5)
        return real_pread(f, n, offset)

    try:
        write(40)
        monkeypatch.setattr(os, "pread", pread)
        clock.now += 0.5
        t.poll()
        monkeypatch.setattr(os, "pread", real_pread)
        for _ in range(4):
            clock.now += 6.0
            t.poll()
    finally:
        os.close(fd)
        t.close()
    seen = counted(store)
    doubled = sorted(line[-8:] for line, n in seen.items() if n > 1)
    assert not doubled, f"counted twice: {doubled}"
    assert not [line for line in seen if "\ufffd" in line]  # a NUL is kept as U+FFFD
    assert len(seen) == seq, f"{seq - len(seen)} of {seq} lines lost"


@pytest.mark.parametrize("glob", ["agent.log", "agent.log*"])
@pytest.mark.parametrize(("script", "n"), [
    ("wpwcwcwpc", 20), ("wpwcwcwpcwp", 20), ("wpwcwcwpkcs", 20), ("wpcwcwpkcs", 200),
    ("wpcwpcwccpks", 60),  # two copies in one poll: the newer one's hole ends where the log was read to
])
def test_a_file_whose_hole_ends_elsewhere_is_no_copy_of_another_hole(
    tmp_path: Path, store: Store, glob: str, script: str, n: int
) -> None:
    """Every copy made after the first starts with a hole longer than the head kept of a file,
    so their heads are all NULs and agree: only where the hole ends tells an older copy of the
    live file from the copy before it, before and after a restart. w: write ``n`` lines; p: poll;
    c: copytruncate; k: stop; s: start again."""
    log = tmp_path / "agent.log"
    clock = Clock()

    def tailer() -> Tailer:
        return Tailer([str(tmp_path / glob)], Matcher([Rule.regex("g", "HIT")]), store, clock=clock,
                      rotate_wait=5.0)

    t: Tailer | None = tailer()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    seq = 0
    try:
        for step in script:
            if step == "w":
                for _ in range(n):
                    seq += 1
                    os.write(fd, b"2026-12-03T10:00:00Z a HIT seq=%d\n" % seq)
            elif step == "c":
                copytruncate(log)
            elif step == "k":
                assert t is not None
                t.close()
                t = None
            elif step == "s":
                t = tailer()
            else:
                assert t is not None
                clock.now += 0.5
                t.poll()
        assert t is not None
        for _ in range(4):
            clock.now += 6.0
            t.poll()
    finally:
        os.close(fd)
        if t is not None:
            t.close()
    seen = counted(store)
    doubled = sorted(line[-8:] for line, n in seen.items() if n > 1)
    assert not doubled, f"counted twice: {doubled}"
    lost = sorted(set(range(1, seq + 1)) - {int(line.split("seq=")[1]) for line in seen})
    assert not lost, f"{len(lost)} of {seq} lines lost: seq {lost[:3]}…{lost[-1:]}"
