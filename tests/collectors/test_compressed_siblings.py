"""Rotated and compressed while nothing followed it: a file's unread tail is read from its .gz.

logrotate's ``compress`` replaces the rotated file by a new ``.gz`` file, so the inode a
position was stored for is gone. The tail left unread, and any file rotated in between
(compressed or not), are read from the siblings, each line once, across restarts.
"""

from __future__ import annotations

import gzip
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


def lines(first: int, n: int) -> bytes:
    return b"".join(b"a HIT seq=%d\nnoise %d\n" % (i, i) for i in range(first, first + n))


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def shift(logs: Path) -> None:
    for n in range(8, 0, -1):
        for suffix in ("", ".gz"):
            src = logs / f"app.log.{n}{suffix}"
            if src.exists():
                os.rename(src, logs / f"app.log.{n + 1}{suffix}")


def gzip_file(path: Path) -> None:
    with open(path, "rb") as src, gzip.open(f"{path}.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    path.unlink()


def rotate(log: Path, *, delay: bool, copy: bool = False) -> None:
    """logrotate with ``compress`` (and ``delaycompress``), by ``create`` or ``copytruncate``."""
    logs = log.parent
    shift(logs)
    if copy:
        shutil.copyfile(log, logs / "app.log.1")
        os.truncate(log, 0)
    else:
        os.rename(log, logs / "app.log.1")
        log.write_bytes(b"")
    if delay:
        if (logs / "app.log.2").exists():
            gzip_file(logs / "app.log.2")
    else:
        gzip_file(logs / "app.log.1")


def counted(store: Store) -> Counter[str]:
    with store.engine.connect() as conn:
        return Counter(r[0] for r in conn.execute(text("SELECT line FROM firings")))


def expect(store: Store, n: int) -> None:
    seen = counted(store)
    assert {line: k for line, k in seen.items() if k > 1} == {}
    assert sorted(seen) == sorted(f"a HIT seq={i}" for i in range(n))


def run(store: Store, glob: Path, errors: list[str] | None = None) -> None:
    clock = Clock()
    t = Tailer([str(glob)], Matcher([Rule.regex("g", "HIT")]), store, clock=clock,
               on_error=lambda _p, m: (errors if errors is not None else []).append(m))
    try:
        for _ in range(3):
            t.poll()
            clock.now += 6
    finally:
        t.close()


@pytest.mark.parametrize("glob", ["app.log", "app.log*"])
@pytest.mark.parametrize(
    ("rotations", "delay", "copy"),
    [(1, False, False), (2, False, False), (2, True, False), (3, True, False), (2, False, True)],
    ids=["compress", "compress twice", "delaycompress twice", "delaycompress thrice",
         "copytruncate+compress twice"],
)
def test_rotated_and_compressed_while_stopped_is_finished_once(
    tmp_path: Path, store: Store, glob: str, rotations: int, delay: bool, copy: bool
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "app.log"
    append(log, lines(0, 10))
    run(store, logs / glob)
    seq = 10
    append(log, lines(seq, 10))  # left unread when the daemon stops
    seq += 10
    for _ in range(rotations):
        rotate(log, delay=delay, copy=copy)
        append(log, lines(seq, 10))
        seq += 10
    errors: list[str] = []
    run(store, logs / glob, errors)
    expect(store, seq)
    run(store, logs / glob, errors)  # a restart with nothing new reads nothing again
    expect(store, seq)
    append(log, lines(seq, 5))
    rotate(log, delay=delay, copy=copy)  # once more while stopped, after the first catch-up
    run(store, logs / glob, errors)
    expect(store, seq + 5)
    assert errors == []


def flipped(data: bytes, at: int) -> bytes:
    """``data`` with two bytes flipped at ``at``: a compressed stream made corrupt."""
    out = bytearray(data)
    out[at] ^= 0xFF
    out[at + 1] ^= 0x5A
    return bytes(out)


@pytest.mark.parametrize("suffix", [".gz", ".xz"])
@pytest.mark.parametrize("damage", ["cut short", "corrupt"])
def test_a_compressed_file_that_cannot_be_read_is_told_and_its_position_kept(
    tmp_path: Path, store: Store, suffix: str, damage: str
) -> None:
    import lzma

    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "app.log"
    append(log, lines(0, 10))
    run(store, log)
    append(log, lines(10, 200))
    rotate(log, delay=False)
    packed = logs / f"app.log.1{suffix}"
    if suffix == ".xz":
        gz = logs / "app.log.1.gz"
        packed.write_bytes(lzma.compress(gzip.decompress(gz.read_bytes())))
        gz.unlink()
    good = packed.read_bytes()
    packed.write_bytes(good[: len(good) // 2] if damage == "cut short" else flipped(good, len(good) // 3))
    errors: list[str] = []
    run(store, log, errors)
    assert any(packed.name in e for e in errors), errors
    assert len(store.positions()) == 2  # the rotated file's position is not forgotten
    packed.write_bytes(good)
    run(store, log)
    expect(store, 210)


def test_two_lost_files_whose_chains_overlap_read_each_sibling_once(tmp_path: Path, store: Store) -> None:
    """One lost file is gone, the other's inode now holds the live log (as after inode reuse):
    the second chain goes over siblings the first one read already."""
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "app.log"
    append(log, lines(0, 10))  # inode A
    clock = Clock()
    t = Tailer([str(log)], Matcher([Rule.regex("g", "HIT")]), store, clock=clock)
    t.poll()
    os.rename(log, logs / "app.log.1")
    append(log, lines(10, 10))  # inode B
    t.poll()
    t.close()
    append(log, lines(20, 10))  # left unread
    # Stopped: A's bytes go to .3.gz, B's to .2.gz, a file never seen to .1.gz...
    with open(logs / "app.log.1", "rb") as src, gzip.open(logs / "app.log.3.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    gzip_file(log)
    os.rename(logs / "app.log.gz", logs / "app.log.2.gz")
    (logs / "app.log.1.x").write_bytes(lines(30, 10))
    gzip_file(logs / "app.log.1.x")
    os.rename(logs / "app.log.1.x.gz", logs / "app.log.1.gz")
    # ...and A's inode is the live log again, holding new lines.
    os.rename(logs / "app.log.1", log)
    os.truncate(log, 0)
    append(log, lines(40, 10))
    run(store, log)
    expect(store, 50)


def test_a_nul_inside_a_line_of_a_compressed_sibling_is_part_of_its_line(tmp_path: Path, store: Store) -> None:
    """The unread tail read from a .gz in reads of 1 MiB of its stream: a line whose NUL falls on
    a read's first byte keeps its start (a hole starts at a line's start only)."""
    from collectors.backlog import BLOCK

    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "app.log"
    append(log, lines(0, 10))
    run(store, logs / "app.log*")
    read = log.stat().st_size
    line = b"a HIT seq=10 \0 written with its line\n"
    head = line.index(b"\0")
    filler = BLOCK - read - head
    pad = b"".join(b"noise %08d\n" % i for i in range(filler // 15)) + b"x" * (filler % 15 - 1) + b"\n"
    assert len(pad) == filler
    append(log, pad + line)  # left unread when the daemon stops; its NUL at ``BLOCK`` in the stream
    rotate(log, delay=False)
    errors: list[str] = []
    run(store, logs / "app.log*", errors)
    assert errors == []
    seen = counted(store)
    assert seen["a HIT seq=10 \ufffd written with its line"] == 1, sorted(seen)[-3:]
    assert sum(seen.values()) == 11
    assert read + len(pad) + head == BLOCK
