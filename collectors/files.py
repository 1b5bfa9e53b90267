"""Which log files to read and how: globs, watch roots, rotated copies, opening, head hashes."""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, cast

__all__ = [
    "COMPRESSED_SUFFIXES",
    "expand",
    "glob_roots",
    "head_fingerprint",
    "is_compressed",
    "live_name",
    "open_log",
    "read_errors",
    "rotated_siblings",
    "same_head",
]

COMPRESSED_SUFFIXES = frozenset({".gz", ".bz2", ".xz", ".lzma", ".zst", ".lz4"})
HEAD_LIMIT = 1024

_MAGIC = re.compile(r"[*?\[]")


@functools.cache
def _rotated() -> re.Pattern[str]:
    """What follows the live file's name in a rotated copy's name, compiled on first use
    (``canary status`` expands globs and names no rotated copy)::

        .1  .2.gz                   logrotate, RotatingFileHandler
        -20261129  -2026112910      logrotate dateext (dateformat -%Y%m%d, hourly -%Y%m%d%H)
        .2026-11-29  .2026-11-29_10-00-00   TimedRotatingFileHandler (when D/midnight/W, H, M, S)
    """
    return re.compile(
        r"""
        (?:
            \.(?P<num>\d{1,6})
        |
            [.\-_](?P<date>\d{4}-?\d{2}-?\d{2}(?:[_T\-]?\d{2}(?:[-:]?\d{2}(?:[-:]?\d{2})?)?)?)
        )
        (?:\.(?:gz|bz2|xz|lzma|zst|lz4))?
        \Z
        """,
        re.VERBOSE,
    )


def expand(patterns: Sequence[str]) -> list[Path]:
    """Regular files (or symlinks to them) matching any pattern, absolute, sorted, each once.

    ``~`` is expanded and ``**`` matches any depth of directories; like shell globs, wildcards
    skip names that start with a dot. Symlinked directories are followed, each only once per
    ``**``, so a symlink loop cannot recurse forever.
    """
    found: set[Path] = set()
    for pattern in patterns:
        for match in _glob(pattern):
            if os.path.isfile(match):
                found.add(Path(match))
    return sorted(found)


def glob_roots(patterns: Sequence[str]) -> list[Path]:
    """The realpath-resolved directories to watch so that every pattern's files are seen.

    For each pattern, the deepest existing directory before its first wildcard part; and, for a
    match reached through a symlink, the directory of its realpath, because macOS FSEvents
    reports realpaths.
    """
    roots: set[str] = set()
    for pattern in patterns:
        parts = _split(pattern)
        literal = next((i for i, part in enumerate(parts) if _MAGIC.search(part)), len(parts) - 1)
        base = parts[0]
        for part in parts[1:literal]:
            candidate = os.path.join(base, part)
            if not os.path.isdir(candidate):
                break
            base = candidate
        roots.add(os.path.realpath(base))
    pattern_roots = tuple(roots)
    for match in expand(patterns):
        real = os.path.realpath(match)
        real_dir = os.path.dirname(real)
        if os.path.islink(match) or not any(_inside(real, root) for root in pattern_roots):
            roots.add(real_dir)
    return sorted(Path(root) for root in roots)


def is_compressed(path: Path) -> bool:
    """True for names ending .gz, .bz2, .xz, .lzma, .zst or .lz4 (open_log reads the first four)."""
    return path.suffix.lower() in COMPRESSED_SUFFIXES


def rotated_siblings(path: Path) -> list[Path]:
    """Existing rotated copies of the live log ``path`` in its directory, oldest first.

    Dated names sort by date; numbered ones by number, descending (``.2`` is older than
    ``.1``); dated names come before numbered ones when a directory mixes both.
    """
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return []
    prefix = path.name
    keyed: list[tuple[tuple[int, str, int, str], Path]] = []
    for entry in entries:
        name = entry.name
        if name == prefix or not name.startswith(prefix):
            continue
        match = _rotated().match(name, len(prefix))
        if match is None:
            continue
        try:
            if not entry.is_file():
                continue
        except OSError:
            continue
        number = match.group("num")
        if number is not None:
            key = (1, "", -int(number), name)
        else:
            digits = re.sub(r"\D", "", match.group("date"))
            key = (0, digits.ljust(14, "0"), 0, name)
        keyed.append((key, path.parent / name))
    keyed.sort(key=lambda item: item[0])
    return [sibling for _, sibling in keyed]


def live_name(name: str) -> str:
    """The live log's name a rotated name derives from (``app.log.1`` -> ``app.log``); else ``name``."""
    for start in range(len(name) - 1, 0, -1):
        if name[start] in ".-_" and _rotated().match(name, start):
            candidate = name[:start]
            # the longest rotated suffix: keep stripping while what is left still ends in one
            return live_name(candidate) if _rotated().search(candidate) and candidate != name else candidate
    return name


def open_log(path: Path) -> BinaryIO:
    """Open a log for binary reading: unbuffered if plain, decompressing .gz, .bz2, .xz, .lzma.

    Raises ValueError for compressed formats the standard library cannot read (.zst, .lz4).
    """
    suffix = path.suffix.lower()
    # The decompressors load on first use: listing files (``canary status``) needs none of them.
    if suffix == ".gz":
        import gzip

        return cast(BinaryIO, gzip.open(path, "rb"))
    if suffix == ".bz2":
        import bz2

        return cast(BinaryIO, bz2.open(path, "rb"))
    if suffix in {".xz", ".lzma"}:
        import lzma

        return cast(BinaryIO, lzma.open(path, "rb"))
    if suffix in COMPRESSED_SUFFIXES:
        raise ValueError(f"{path}: {suffix} files cannot be read without an extra library")
    return cast(BinaryIO, open(path, "rb", buffering=0))


@functools.cache
def read_errors() -> tuple[type[BaseException], ...]:
    """What reading a log from ``open_log`` raises when the file is gone, cut short, corrupt or of a
    format not read here: the decompressors' own errors besides ``OSError`` (loaded on first use,
    as in ``except read_errors()``, evaluated only once an exception is raised)."""
    import lzma
    import zlib

    return (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError)


def head_fingerprint(
    fd_or_path: int | str | os.PathLike[str], size: int, limit: int = HEAD_LIMIT
) -> tuple[int, bytes]:
    """(length, 16-byte blake2b digest) of the first ``min(size, limit)`` bytes.

    An int is an open fd, read with ``os.pread`` so its offset does not move. If the file is
    now shorter than ``size``, the length is what could be read.
    """
    want = max(0, min(size, limit))
    if isinstance(fd_or_path, int):
        data = _pread_upto(fd_or_path, want)
    else:
        with open(fd_or_path, "rb") as handle:
            data = handle.read(want)
    return len(data), _digest(data)


def same_head(fd: int, length: int, digest: bytes) -> bool:
    """True if the fd's first ``length`` bytes still hash to ``digest``; False if it is shorter."""
    data = _pread_upto(fd, length)
    return len(data) == length and _digest(data) == digest


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def _pread_upto(fd: int, length: int) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while got < length:
        chunk = os.pread(fd, length - got, got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _split(pattern: str) -> list[str]:
    """An absolute pattern as [anchor, part, ...], with ``~`` expanded and no ``.`` parts."""
    full = os.path.join(os.getcwd(), os.path.expanduser(pattern))
    pure = Path(full)
    return [pure.anchor, *pure.parts[1:]]


def _glob(pattern: str) -> Iterator[str]:
    parts = _split(pattern)
    collapsed: list[str] = []
    for part in parts[1:]:
        if part == "**" and collapsed and collapsed[-1] == "**":
            continue
        collapsed.append(part)
    yield from _select(parts[0], collapsed)


def _select(base: str, parts: Sequence[str]) -> Iterator[str]:
    if not parts:
        yield base
        return
    head, rest = parts[0], parts[1:]
    if head == "**":
        for directory in _walk_dirs(base):
            if rest:
                yield from _select(directory, rest)
            else:
                yield from _listdir_paths(directory)
        return
    if _MAGIC.search(head):
        for name in _listdir(base):
            if (head.startswith(".") or not name.startswith(".")) and fnmatch.fnmatch(name, head):
                yield from _select(os.path.join(base, name), rest)
        return
    path = os.path.join(base, head)
    if rest:
        if os.path.isdir(path):
            yield from _select(path, rest)
    elif os.path.lexists(path):
        yield path


def _listdir(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []


def _listdir_paths(directory: str) -> Iterator[str]:
    for name in _listdir(directory):
        if not name.startswith("."):
            yield os.path.join(directory, name)


def _walk_dirs(top: str) -> Iterator[str]:
    """``top`` and every non-hidden directory below it, following symlinks, each inode once."""
    seen: set[tuple[int, int]] = set()
    stack = [top]
    while stack:
        directory = stack.pop()
        try:
            info = os.stat(directory)
        except OSError:
            continue
        if (info.st_dev, info.st_ino) in seen:
            continue
        seen.add((info.st_dev, info.st_ino))
        yield directory
        try:
            with os.scandir(directory) as entries:
                children = [
                    entry.path
                    for entry in entries
                    if not entry.name.startswith(".") and _is_dir(entry)
                ]
        except OSError:
            continue
        stack.extend(sorted(children, reverse=True))


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False
