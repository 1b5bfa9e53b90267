"""A log seen for the first time is read back over the window, found from its end by the
lines' own stamps; stored positions are never backfilled again."""

from __future__ import annotations

import os
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from canary.store.engine import Store
from collectors.backfill import window_start
from collectors.rules import Rule
from collectors.scan import Matcher
from collectors.tailer import Tailer
from collectors.timestamps import TimestampParser

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
PARSER = TimestampParser(default_tz=UTC)


def stamp(hours_ago: float) -> bytes:
    return (NOW - timedelta(hours=hours_ago)).strftime("%Y-%m-%dT%H:%M:%SZ").encode()


def parse(line: bytes) -> datetime | None:
    return PARSER.parse(line.rstrip(b"\n"))


def start_of(path: Path, hours: float, block: int) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        return window_start(fd, path.stat().st_size, (NOW - timedelta(hours=hours)).timestamp(), parse,
                            block=block)
    finally:
        os.close(fd)


@pytest.mark.parametrize("block", [7, 64, 1 << 16])
def test_the_window_starts_after_the_newest_line_stamped_before_it(tmp_path: Path, block: int) -> None:
    log = tmp_path / "a.log"
    old = stamp(30) + b" old HIT\n" + b"  a traceback line of the old entry\n"
    new = stamp(20) + b" new HIT\n" + b"no stamp here\n" + stamp(1) + b" HIT\n"
    log.write_bytes(old * 3 + new)
    assert start_of(log, 24, block) == len(old) * 3
    assert start_of(log, 40, block) == 0  # nothing before the window: read whole
    assert start_of(log, 0.5, block) == log.stat().st_size  # all older: from the end


def test_unstamped_and_out_of_order_lines(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"no stamps\nat all\n")
    assert start_of(log, 24, 4) == 0
    lines = [stamp(30), stamp(1), stamp(30), stamp(2)]  # the newest line before the window wins
    log.write_bytes(b"".join(s + b" x\n" for s in lines))
    assert start_of(log, 24, 4) == (len(stamp(1)) + 3) * 3


def test_a_big_file_is_read_only_from_its_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "a.log"
    filler = stamp(30) + b" old noise " + b"." * 100 + b"\n"
    tail = stamp(2) + b" new HIT\n"
    log.write_bytes(filler * 40_000 + tail)  # about 5 MB before the window
    read = [0]
    real = os.pread

    def counting(fd: int, n: int, offset: int) -> bytes:
        data = real(fd, n, offset)
        read[0] += len(data)
        return data

    monkeypatch.setattr(os, "pread", counting)
    assert start_of(log, 24, 1 << 16) == log.stat().st_size - len(tail)
    assert read[0] <= 3 << 16
    read[0] = 0
    assert start_of(log, 40, 1 << 16) == 0  # all of it young: told by its first lines
    assert read[0] <= 1 << 16


def tailer(store: Store, pattern: Path, *, backfill: float | None = 24 * 3600) -> Tailer:
    matcher = Matcher([Rule.regex("g", "HIT")], timestamps=PARSER)
    return Tailer([str(pattern)], matcher, store, backfill=backfill, wall=NOW.timestamp)


def counted(store: Store) -> Counter[str]:
    with store.engine.connect() as conn:
        return Counter(r[0] for r in conn.execute(text("SELECT line FROM firings")))


@pytest.mark.parametrize("glob", ["app.log", "app.log*"])
def test_first_sight_reads_back_the_window_and_a_restart_does_not_again(
    tmp_path: Path, store: Store, glob: str
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "app.log.1").write_bytes(stamp(40) + b" a HIT 40h\n" + stamp(23) + b" a HIT 23h\n")
    log = logs / "app.log"
    log.write_bytes(stamp(30) + b" a HIT 30h\n" + stamp(20) + b" a HIT 20h\n" + stamp(1) + b" a HIT 1h\n")
    t = tailer(store, logs / glob)
    try:
        t.poll()
    finally:
        t.close()
    want = [f"{stamp(20).decode()} a HIT 20h", f"{stamp(1).decode()} a HIT 1h"]
    if glob == "app.log*":
        want.append(f"{stamp(23).decode()} a HIT 23h")
    assert sorted(counted(store)) == sorted(want)
    with open(log, "ab") as f:
        f.write(stamp(0) + b" a HIT now\n")
    t = tailer(store, logs / glob)  # stored positions: nothing is read back again
    try:
        t.poll()
    finally:
        t.close()
    assert sorted(counted(store)) == sorted([*want, f"{stamp(0).decode()} a HIT now"])
    assert max(counted(store).values()) == 1


def test_a_file_rotated_in_while_stopped_is_read_whole(tmp_path: Path, store: Store) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "app.log"
    log.write_bytes(stamp(1) + b" a HIT 1h\n")
    t = tailer(store, log)
    t.poll()
    t.close()
    os.rename(log, logs / "app.log.1")
    log.write_bytes(stamp(30) + b" a HIT 30h, written to a new file\n")  # no position, but not first sight
    t = tailer(store, log)
    try:
        t.poll()
    finally:
        t.close()
    assert len(counted(store)) == 2


def test_without_backfill_a_first_sight_is_read_from_its_start(tmp_path: Path, store: Store) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(stamp(30) + b" a HIT 30h\n" + stamp(1) + b" a HIT 1h\n")
    t = tailer(store, log, backfill=None)
    try:
        t.poll()
    finally:
        t.close()
    assert len(counted(store)) == 2
