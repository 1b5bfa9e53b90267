"""Copytruncate racing a tailer that has just started: a copy is never read twice.

logrotate's copytruncate copies the live file to ``.1`` and truncates it only once the
copy is done. A tailer started meanwhile finds a copy that is half written, or whole but
with its original not truncated yet; either way the copy holds lines the tailer is about
to read (or has just read) from the live file, so it must not be read from 0.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from datetime import UTC
from pathlib import Path

import pytest

from canary.store.engine import Store
from collectors.rules import Rule
from collectors.scan import Matcher
from collectors.tailer import Tailer
from collectors.timestamps import TimestampParser
from tests.collectors.fakes import Clock


def tailer(store: Store, pattern: Path, clock: Clock) -> Tailer:
    matcher = Matcher([Rule.regex("g", "HIT")], timestamps=TimestampParser(default_tz=UTC))
    return Tailer([str(pattern)], matcher, store, clock=clock, rotate_wait=5.0)


def lines(first: int, n: int) -> bytes:
    return b"".join(b"a HIT seq=%d\nnoise %d\n" % (i, i) for i in range(first, first + n))


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def shift(logs: Path) -> None:
    for n in range(8, 0, -1):
        src = logs / f"app.log.{n}"
        if src.exists():
            os.rename(src, logs / f"app.log.{n + 1}")


def copytruncate(log: Path) -> None:
    shift(log.parent)
    shutil.copyfile(log, log.parent / "app.log.1")
    os.truncate(log, 0)


def counted(store: Store) -> Counter[str]:
    from sqlalchemy import text

    with store.engine.connect() as conn:
        return Counter(r[0] for r in conn.execute(text("SELECT line FROM firings")))


@pytest.mark.parametrize("glob", ["app.log", "app.log*"])
@pytest.mark.parametrize("part", [0.5, 1.0])
def test_copy_being_made_when_a_restarted_tailer_first_scans_is_not_read_again(
    tmp_path: Path, store: Store, glob: str, part: float
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "app.log"
    clock = Clock()
    append(log, lines(0, 10))
    t = tailer(store, logs / glob, clock)
    t.poll()
    copytruncate(log)  # seen while running: its copy is finished
    append(log, lines(10, 10))
    t.poll()
    clock.now += 1
    t.poll()
    t.close()
    # Stopped: two rotations, the writer going on.
    append(log, lines(20, 10))
    copytruncate(log)
    append(log, lines(30, 10))
    copytruncate(log)
    append(log, lines(40, 10))
    # Started while logrotate copies again: the copy is ``part`` written, the original whole.
    shift(logs)
    data = log.read_bytes()
    (logs / "app.log.1").write_bytes(data[: int(len(data) * part)])
    t = tailer(store, logs / glob, clock)
    t.poll()
    (logs / "app.log.1").write_bytes(data)  # the copy finished...
    os.truncate(log, 0)  # ...and the original truncated
    append(log, lines(50, 10))
    for _ in range(4):
        clock.now += 2
        t.poll()
    t.close()
    seen = counted(store)
    assert {line: n for line, n in seen.items() if n > 1} == {}
    assert sorted(seen) == sorted(f"a HIT seq={i}" for i in range(60))


@pytest.mark.parametrize("glob", ["app.log", "app.log*"])
@pytest.mark.parametrize("restart", [False, True])
def test_two_copytruncates_before_the_first_copy_is_found_read_each_copy_once(
    tmp_path: Path, store: Store, glob: str, restart: bool
) -> None:
    """Polls without a rescan see both truncations; the copies are found only afterwards."""
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "app.log"
    clock = Clock()
    append(log, lines(0, 10))
    t = tailer(store, logs / glob, clock)
    t.poll()
    append(log, lines(10, 10))
    copytruncate(log)  # the first copy holds lines 0-19, read up to 9
    append(log, lines(20, 10))
    t.poll(rescan=False)
    append(log, lines(30, 10))
    t.poll(rescan=False)
    copytruncate(log)  # the second copy holds lines 20-39, all read; the first is now .2
    append(log, lines(40, 10))
    t.poll(rescan=False)
    if restart:
        t.close()
        t = tailer(store, logs / glob, clock)
    for _ in range(4):
        clock.now += 2
        t.poll()
    t.close()
    seen = counted(store)
    assert {line: n for line, n in seen.items() if n > 1} == {}
    assert sorted(seen) == sorted(f"a HIT seq={i}" for i in range(50))
