"""collectors.files on real files in tmp_path: globs, watch roots, rotated copies, heads."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import logging
import logging.handlers
import lzma
import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

from collectors.files import (
    expand,
    glob_roots,
    head_fingerprint,
    is_compressed,
    open_log,
    rotated_siblings,
    same_head,
)


def touch(path: Path, data: bytes = b"line\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    """logs/a.log, logs/b.log, logs/sub/c.log, logs/sub/deeper/d.log, plus decoys."""
    root = tmp_path / "logs"
    touch(root / "a.log")
    touch(root / "b.log")
    touch(root / "sub" / "c.log")
    touch(root / "sub" / "deeper" / "d.log")
    touch(root / "notes.txt")
    touch(root / ".hidden.log")
    touch(root / ".cache" / "e.log")
    (root / "dir.log").mkdir()
    return root


# expand


def test_expand_star(logs: Path) -> None:
    assert expand([str(logs / "*.log")]) == [logs / "a.log", logs / "b.log"]


def test_expand_relative_pattern_is_made_absolute(logs: Path) -> None:
    # the autouse fixture made tmp_path the working directory
    assert expand(["logs/a.log", "logs/[ab].log"]) == [logs / "a.log", logs / "b.log"]
    assert all(path.is_absolute() for path in expand(["logs/*.log"]))


def test_expand_home(logs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(logs.parent))
    assert expand(["~/logs/a.log"]) == [logs / "a.log"]


def test_expand_recursive(logs: Path) -> None:
    assert expand([str(logs / "**" / "*.log")]) == [
        logs / "a.log",
        logs / "b.log",
        logs / "sub" / "c.log",
        logs / "sub" / "deeper" / "d.log",
    ]


def test_expand_trailing_double_star_lists_every_file(logs: Path) -> None:
    assert expand([str(logs / "sub" / "**")]) == [
        logs / "sub" / "c.log",
        logs / "sub" / "deeper" / "d.log",
    ]


def test_expand_double_star_in_the_middle(logs: Path) -> None:
    assert expand([str(logs / "**" / "deeper" / "*.log"), str(logs / "**" / "**" / "d.log")]) == [
        logs / "sub" / "deeper" / "d.log"
    ]


def test_expand_hidden_names_only_when_asked(logs: Path) -> None:
    assert expand([str(logs / ".*.log")]) == [logs / ".hidden.log"]
    assert expand([str(logs / ".cache" / "*.log")]) == [logs / ".cache" / "e.log"]


def test_expand_deduplicates_overlapping_patterns(logs: Path) -> None:
    patterns = [str(logs / "*.log"), str(logs / "a.log"), str(logs / "**" / "a.log"), "logs/a.*"]
    assert expand(patterns) == [logs / "a.log", logs / "b.log"]


@pytest.mark.parametrize(
    "pattern",
    [
        pytest.param("logs/*.nothing", id="no-match"),
        pytest.param("logs/missing/*.log", id="missing-dir"),
        pytest.param("logs/missing/**/*.log", id="missing-dir-recursive"),
        pytest.param("logs/absent.log", id="missing-literal"),
        pytest.param("logs/dir.log", id="directory-literal"),
        pytest.param("logs/a.log/*", id="file-as-dir"),
    ],
)
def test_expand_matching_nothing(logs: Path, pattern: str) -> None:
    assert expand([pattern]) == []


def test_expand_no_patterns() -> None:
    assert expand([]) == []


def test_expand_symlinked_files(logs: Path, tmp_path: Path) -> None:
    target = touch(tmp_path / "elsewhere" / "real.log")
    (logs / "current.log").symlink_to(target)
    (logs / "broken.log").symlink_to(tmp_path / "gone.log")
    (logs / "to-dir.log").symlink_to(logs / "sub")
    assert expand([str(logs / "*.log")]) == [logs / "a.log", logs / "b.log", logs / "current.log"]


def test_expand_symlinked_directories(logs: Path, tmp_path: Path) -> None:
    touch(tmp_path / "elsewhere" / "x.log")
    (logs / "linked").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "alias").symlink_to(logs, target_is_directory=True)
    assert expand([str(logs / "*" / "x.log")]) == [logs / "linked" / "x.log"]
    assert logs / "linked" / "x.log" in expand([str(logs / "**" / "*.log")])
    assert expand([str(tmp_path / "alias" / "*.log")]) == [
        tmp_path / "alias" / "a.log",
        tmp_path / "alias" / "b.log",
    ]


def test_expand_survives_symlink_loops(logs: Path) -> None:
    (logs / "sub" / "loop").symlink_to(logs, target_is_directory=True)
    (logs / "sub" / "self").symlink_to(logs / "sub", target_is_directory=True)
    found = expand([str(logs / "**" / "*.log")])
    assert {path.name for path in found} == {"a.log", "b.log", "c.log", "d.log"}
    assert len(found) < 20


# glob_roots


def test_glob_roots_is_the_directory_before_the_wildcard(logs: Path) -> None:
    assert glob_roots([str(logs / "*.log")]) == [real(logs)]
    assert glob_roots([str(logs / "**" / "*.log")]) == [real(logs)]
    assert glob_roots([str(logs / "sub" / "*" / "d.log")]) == [real(logs / "sub")]


def test_glob_roots_literal_pattern_watches_its_directory(logs: Path) -> None:
    assert glob_roots([str(logs / "sub" / "c.log")]) == [real(logs / "sub")]
    assert glob_roots([str(logs / "not-yet.log")]) == [real(logs)]


def test_glob_roots_stops_at_the_deepest_existing_directory(logs: Path) -> None:
    assert glob_roots([str(logs / "agent" / "today" / "*.log")]) == [real(logs)]
    assert glob_roots(["logs/agent/*.log"]) == [real(logs)]


def test_glob_roots_deduplicates(logs: Path) -> None:
    assert glob_roots([str(logs / "*.log"), str(logs / "a.*"), "logs/b.log"]) == [real(logs)]


def test_glob_roots_resolve_a_symlinked_root(logs: Path, tmp_path: Path) -> None:
    (tmp_path / "alias").symlink_to(logs, target_is_directory=True)
    assert glob_roots([str(tmp_path / "alias" / "*.log")]) == [real(logs)]


def test_glob_roots_add_the_realpath_directory_of_symlinked_matches(
    logs: Path, tmp_path: Path
) -> None:
    target = touch(tmp_path / "archive" / "agent-2026.log")
    (logs / "current.log").symlink_to(target)
    (logs / "same-dir.log").symlink_to(logs / "a.log")
    assert glob_roots([str(logs / "*.log")]) == sorted([real(logs), real(tmp_path / "archive")])


def test_glob_roots_add_directories_reached_through_symlinked_subdirectories(
    logs: Path, tmp_path: Path
) -> None:
    touch(tmp_path / "elsewhere" / "deep" / "x.log")
    (logs / "linked").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    assert glob_roots([str(logs / "**" / "*.log")]) == sorted(
        [real(logs), real(tmp_path / "elsewhere" / "deep")]
    )


# is_compressed


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("app.log", False),
        ("app.log.1", False),
        ("app.log-20261129", False),
        ("app.log.2.gz", True),
        ("app.log.GZ", True),
        ("app.log.bz2", True),
        ("app.log.xz", True),
        ("app.log.lzma", True),
        ("app.log.zst", True),
        ("app.log.lz4", True),
        ("app.gz.log", False),
    ],
)
def test_is_compressed(name: str, expected: bool) -> None:
    assert is_compressed(Path(name)) is expected


# rotated_siblings


def make_shuffled(directory: Path, names: list[str]) -> None:
    shuffled = names[:]
    random.Random(7).shuffle(shuffled)
    for name in shuffled:
        touch(directory / name)


@pytest.mark.parametrize(
    "oldest_first",
    [
        pytest.param(["app.log.3.gz", "app.log.2.gz", "app.log.1"], id="logrotate-numbered"),
        pytest.param(
            ["app.log.12", "app.log.11", "app.log.10", "app.log.9", "app.log.2", "app.log.1"],
            id="numbers-not-lexicographic",
        ),
        pytest.param(["app.log.1", "app.log.0"], id="zero-based"),
        pytest.param(["app.log.2.bz2", "app.log.1.xz"], id="other-compression"),
        pytest.param(
            ["app.log-20261127.gz", "app.log-20261128.gz", "app.log-20261129"],
            id="logrotate-dateext",
        ),
        pytest.param(
            ["app.log-2026112823.gz", "app.log-2026112900", "app.log-2026112901"],
            id="logrotate-dateext-hourly",
        ),
        pytest.param(
            ["app.log-2026-11-28", "app.log-2026-11-29"],
            id="logrotate-dashed-dateformat",
        ),
        pytest.param(
            ["app.log.2026-11-28", "app.log.2026-11-29.gz", "app.log.2026-11-30"],
            id="timed-daily",
        ),
        pytest.param(
            [
                "app.log.2026-11-29_09-59-59",
                "app.log.2026-11-29_10-00-00",
                "app.log.2026-11-29_10-00-01",
            ],
            id="timed-seconds",
        ),
        pytest.param(
            ["app.log.2026-11-30", "app.log.2", "app.log.1"],
            id="mixed-dated-before-numbered",
        ),
    ],
)
def test_rotated_siblings_order(tmp_path: Path, oldest_first: list[str]) -> None:
    live = touch(tmp_path / "app.log")
    make_shuffled(tmp_path, oldest_first)
    assert rotated_siblings(live) == [tmp_path / name for name in oldest_first]


def test_rotated_siblings_ignore_other_files(tmp_path: Path) -> None:
    live = touch(tmp_path / "app.log")
    for name in [
        "app.log.bak",
        "app.log.swp",
        "app.logger",
        "app.log.1.tmp",
        "app.log.gz",
        "app.log.1234567",
        "other.log.1",
        "xapp.log.1",
    ]:
        touch(tmp_path / name)
    (tmp_path / "app.log.4").mkdir()
    touch(tmp_path / "app.log.1")
    assert rotated_siblings(live) == [tmp_path / "app.log.1"]


def test_rotated_siblings_when_the_live_file_is_gone(tmp_path: Path) -> None:
    touch(tmp_path / "app.log.1")
    assert rotated_siblings(tmp_path / "app.log") == [tmp_path / "app.log.1"]
    assert rotated_siblings(tmp_path / "missing" / "app.log") == []


def test_rotated_siblings_follow_symlinked_copies(tmp_path: Path) -> None:
    live = touch(tmp_path / "app.log")
    (tmp_path / "app.log.1").symlink_to(touch(tmp_path / "old" / "keep.log"))
    (tmp_path / "app.log.2").symlink_to(tmp_path / "gone")
    assert rotated_siblings(live) == [tmp_path / "app.log.1"]


def test_rotated_siblings_of_rotating_file_handler(tmp_path: Path) -> None:
    live = tmp_path / "agent.log"
    handler = logging.handlers.RotatingFileHandler(live, maxBytes=64, backupCount=3)
    try:
        for n in range(20):
            handler.emit(logging.makeLogRecord({"msg": f"guard fired {n:02d} " + "x" * 30}))
    finally:
        handler.close()
    siblings = rotated_siblings(live)
    assert siblings == [
        tmp_path / "agent.log.3",
        tmp_path / "agent.log.2",
        tmp_path / "agent.log.1",
    ]
    firsts = [int(path.read_text().split()[2]) for path in siblings]
    assert firsts == sorted(firsts)


@pytest.mark.parametrize("when", ["S", "M", "H", "D", "midnight", "W0"])
def test_rotated_siblings_of_timed_rotating_file_handler(tmp_path: Path, when: str) -> None:
    live = tmp_path / "agent.log"
    handler = logging.handlers.TimedRotatingFileHandler(live, when=when, delay=True, utc=True)
    try:
        suffix = handler.suffix
    finally:
        handler.close()
    step = {"S": 1, "M": 60, "H": 3600}.get(when, 86400 * (7 if when == "W0" else 1))
    start = 1795946400
    names = [
        f"{live.name}.{time.strftime(suffix, time.gmtime(start + k * step))}" for k in range(4)
    ]
    make_shuffled(tmp_path, names)
    touch(live)
    assert rotated_siblings(live) == [tmp_path / name for name in names]


# open_log


@pytest.mark.parametrize(
    ("suffix", "opener", "options"),
    [
        pytest.param(".gz", gzip.open, {}, id="gzip"),
        pytest.param(".bz2", bz2.open, {}, id="bz2"),
        pytest.param(".xz", lzma.open, {}, id="xz"),
        pytest.param(".lzma", lzma.open, {"format": lzma.FORMAT_ALONE}, id="lzma-alone"),
    ],
)
def test_open_log_reads_compressed(
    tmp_path: Path, suffix: str, opener: Callable[..., IO[bytes]], options: dict[str, int]
) -> None:
    body = b"".join(b"2026-11-29T10:00:%02dZ guard fired\n" % n for n in range(50)) + b"tail"
    path = tmp_path / f"agent.log.1{suffix}"
    with opener(path, "wb", **options) as out:
        out.write(body)
    with open_log(path) as stream:
        assert stream.read() == body
    with open_log(path) as stream:
        lines = list(stream)
    assert len(lines) == 51
    assert lines[-1] == b"tail"


def test_open_log_plain_is_unbuffered_binary(tmp_path: Path) -> None:
    path = touch(tmp_path / "agent.log", b"one\ntwo\n")
    with open_log(path) as stream:
        assert isinstance(stream, io.FileIO)
        assert stream.read(4) == b"one\n"
        assert stream.tell() == 4
        with open(path, "ab") as writer:
            writer.write(b"three\n")
        assert stream.read() == b"two\nthree\n"


@pytest.mark.parametrize("suffix", [".zst", ".lz4"])
def test_open_log_rejects_unreadable_compression(tmp_path: Path, suffix: str) -> None:
    path = touch(tmp_path / f"agent.log.1{suffix}")
    with pytest.raises(ValueError, match=suffix):
        open_log(path)


def test_open_log_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        open_log(tmp_path / "nope.log")


# head_fingerprint and same_head


@pytest.fixture
def fd_of() -> Iterator[Callable[[Path], int]]:
    opened: list[int] = []

    def open_fd(path: Path) -> int:
        fd = os.open(path, os.O_RDONLY)
        opened.append(fd)
        return fd

    yield open_fd
    for fd in opened:
        os.close(fd)


LONG = bytes(range(256)) * 20  # 5,120 bytes


@pytest.mark.parametrize(
    ("data", "size", "limit", "expected_length"),
    [
        pytest.param(b"", 0, 1024, 0, id="empty"),
        pytest.param(b"hello\n", 6, 1024, 6, id="short"),
        pytest.param(b"hello\n", 3, 1024, 3, id="size-below-file"),
        pytest.param(b"hello\n", 100, 1024, 6, id="file-shrank-since-stat"),
        pytest.param(LONG, len(LONG), 1024, 1024, id="long"),
        pytest.param(LONG, len(LONG), 4096, 4096, id="custom-limit"),
        pytest.param(LONG, -1, 1024, 0, id="negative-size"),
    ],
)
def test_head_fingerprint(
    tmp_path: Path,
    fd_of: Callable[[Path], int],
    data: bytes,
    size: int,
    limit: int,
    expected_length: int,
) -> None:
    path = touch(tmp_path / "agent.log", data)
    expected = (expected_length, digest(data[:expected_length]))
    fd = fd_of(path)
    os.lseek(fd, 2, os.SEEK_SET)
    assert head_fingerprint(fd, size, limit) == expected
    assert os.lseek(fd, 0, os.SEEK_CUR) == 2  # pread left the offset alone
    assert head_fingerprint(path, size, limit) == expected
    assert head_fingerprint(str(path), size, limit) == expected


def test_head_fingerprint_default_limit_is_1_kib(tmp_path: Path) -> None:
    path = touch(tmp_path / "agent.log", LONG)
    assert head_fingerprint(path, len(LONG)) == (1024, digest(LONG[:1024]))


def test_same_head_after_append(tmp_path: Path, fd_of: Callable[[Path], int]) -> None:
    path = touch(tmp_path / "agent.log", b"first line\n")
    fd = fd_of(path)
    length, head = head_fingerprint(fd, 11)
    with open(path, "ab") as writer:
        writer.write(b"second line\n" * 200)
    assert same_head(fd, length, head)


def test_same_head_after_truncation(tmp_path: Path, fd_of: Callable[[Path], int]) -> None:
    path = touch(tmp_path / "agent.log", b"first line\nsecond line\n")
    fd = fd_of(path)
    length, head = head_fingerprint(fd, 23)
    os.truncate(path, 0)
    assert not same_head(fd, length, head)
    os.truncate(path, 5)  # regrown with zeros, shorter than the stored head
    assert not same_head(fd, length, head)


def test_same_head_after_rewrite(tmp_path: Path, fd_of: Callable[[Path], int]) -> None:
    path = touch(tmp_path / "agent.log", b"2026-11-29 first\n")
    fd = fd_of(path)
    length, head = head_fingerprint(fd, 17)
    with open(path, "r+b") as writer:
        writer.truncate(0)
        writer.write(b"2026-11-30 other\nand more lines\n")
    assert not same_head(fd, length, head)
    with open(path, "r+b") as writer:
        writer.truncate(0)
        writer.write(b"2026-11-29 first\nnew tail\n")
    assert same_head(fd, length, head)


def test_same_head_of_empty_prefix(tmp_path: Path, fd_of: Callable[[Path], int]) -> None:
    fd = fd_of(touch(tmp_path / "agent.log", b""))
    assert same_head(fd, *head_fingerprint(fd, 0))
    assert not same_head(fd, 1, digest(b"x"))
