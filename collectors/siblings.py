"""Where a file with a stored position went: its inode among its rotated siblings.

A file rotated while nothing followed it (or while it was idle and closed) is
looked for by inode in the directory it was last seen in, under its live name
or a rotated name of it (``.1``, ``-YYYYMMDD``, ``.2026-11-29``); a directory
that cannot be listed proves nothing, so its files are kept.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from collectors.files import expand, is_compressed, live_name, rotated_siblings
from collectors.positions import FileState, file_key

__all__ = [
    "Found", "adoptable", "copy_candidates", "leads_to", "live_path", "locate", "matched", "matches_any",
    "unread_between",
]


@dataclass(frozen=True)
class Found:
    """Where a stored file is now: ``path`` and ``size``, or ``gone`` (listed, not there)."""

    path: str | None
    size: int = 0
    gone: bool = False


def locate(states: Iterable[FileState]) -> dict[str, Found]:
    """For each state, its file among its live name and rotated siblings, by inode.

    A state whose directory cannot be listed is left out: it is neither found nor gone.
    """
    by_dir: dict[str, list[FileState]] = {}
    for state in states:
        by_dir.setdefault(os.path.dirname(state.path) or ".", []).append(state)
    found: dict[str, Found] = {}
    for directory, group in by_dir.items():
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except OSError:
            continue
        inodes: dict[str, tuple[str, str, int]] = {}
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            inodes[file_key(st.st_dev, st.st_ino)] = (entry.name, entry.path, st.st_size)
        for state in group:
            hit = inodes.get(state.key)
            base = live_name(os.path.basename(state.path))
            if (
                hit is None
                or live_name(hit[0]) != base
                or is_compressed(Path(hit[1]))
            ):
                found[state.key] = Found(None, gone=True)
            else:
                found[state.key] = Found(hit[1], hit[2])
    return found


def matches_any(path: str, patterns: Sequence[str]) -> bool:
    """Whether ``path`` (absolute) matches one of the globs, ``**`` matching any depth."""
    for pattern in patterns:
        full = os.path.join(os.getcwd(), os.path.expanduser(pattern))
        if fnmatch.fnmatch(path, full):
            return True
    return False


def matched(patterns: Sequence[str], report: Callable[[str, str], None]) -> dict[str, str]:
    """The plain (not compressed) files the globs match now, by ``dev:ino`` key."""
    seen: dict[str, str] = {}
    for path in expand(patterns):
        if is_compressed(path):
            continue
        name = str(path)
        try:
            st = os.stat(name)
        except OSError as exc:
            report(name, f"cannot stat {name}: {exc.strerror or exc}")
            continue
        seen.setdefault(file_key(st.st_dev, st.st_ino), name)
    return seen


def adoptable(
    missing: Sequence[FileState], settled: Mapping[str, int], patterns: Sequence[str]
) -> tuple[set[str], list[str]]:
    """Of stored files no glob matches now: the keys gone for good, and the paths to read again.

    A file is read again when it sits under its live name or a rotated name of it, its live
    name is still in the globs, and its size is not the one it was left at.
    """
    gone: set[str] = set()
    moved: list[str] = []
    by_key = {s.key: s for s in missing}
    for key, where in locate(missing).items():
        if where.gone:
            gone.add(key)
        elif where.path is not None:
            known = settled.get(key, by_key[key].offset)
            live = os.path.join(os.path.dirname(where.path), live_name(os.path.basename(where.path)))
            if where.size != known and matches_any(live, patterns):
                moved.append(where.path)
    return gone, moved


def _plain_siblings(path: str) -> list[tuple[str, os.stat_result]]:
    """The rotated siblings of ``path`` that are not compressed and can be stat-ed, with their stat."""
    out: list[tuple[str, os.stat_result]] = []
    for sibling in rotated_siblings(Path(path)):
        if is_compressed(sibling):
            continue
        try:
            out.append((str(sibling), os.stat(sibling)))
        except OSError:
            continue
    return out


def copy_candidates(path: str, followed: Container[str]) -> list[str]:
    """Rotated siblings of ``path`` not followed, not compressed and not empty."""
    return [sibling for sibling, st in _plain_siblings(path)
            if file_key(st.st_dev, st.st_ino) not in followed and st.st_size > 0]


def unread_between(lives: Iterable[str], known: Container[str]) -> list[str]:
    """Rotated siblings newer than the newest one already known, and unknown themselves.

    A file created and rotated while nothing followed it (two rotations during a stop, or
    faster than a rescan) sits between a known rotated file and the live one; it was never
    read, so it is read now. Nothing is read when no sibling is known.
    """
    out: list[str] = []
    for live in sorted(set(lives)):
        keyed = [(sibling, file_key(st.st_dev, st.st_ino)) for sibling, st in _plain_siblings(live)]
        newest = max((i for i, (_p, k) in enumerate(keyed) if k in known), default=None)
        if newest is not None:
            out.extend(p for p, k in keyed[newest + 1 :] if k not in known)
    return out


def leads_to(path: str, key: str) -> bool:
    """Whether ``path`` still names the file ``key`` (a failed listing proves nothing)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return file_key(st.st_dev, st.st_ino) == key


def live_path(path: str) -> str:
    """The live log's path a rotated file's path derives from."""
    return os.path.join(os.path.dirname(path), live_name(os.path.basename(path)))
