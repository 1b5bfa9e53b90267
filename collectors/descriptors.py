"""File descriptors within a budget: files read to their end give theirs back first."""

from __future__ import annotations

import errno
import os
import resource
from collections.abc import Callable, Mapping

from collectors.followed import OPEN_FLAGS, Followed, at_end, close_fd
from collectors.positions import file_key

__all__ = ["Descriptors", "Reporter", "open_limit"]


def open_limit() -> int:
    """The soft limit on open files of this process."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class Reporter:
    """Errors to a callback: each path's once until it works again; warnings every time.

    ``on_resolved(path, message)`` is told when a path whose error was told works again.
    """

    def __init__(self, on_error: Callable[[str, str], None] | None,
                 on_resolved: Callable[[str, str], None] | None = None) -> None:
        self.on_error = on_error
        self.on_resolved = on_resolved
        self.reported: dict[str, str] = {}  # path -> the error told, until it works again

    def report(self, path: str, message: str) -> None:
        """Tell the callback once per path until ``resolved(path)``."""
        if path not in self.reported:
            self.reported[path] = message
            self.warn(path, message)

    def warn(self, path: str, message: str) -> None:
        """Tell the callback."""
        if self.on_error is not None:
            self.on_error(path, message)

    def resolved(self, path: str) -> None:
        """The path works again: its error no longer holds, and its next one is told."""
        message = self.reported.pop(path, None)
        if message is not None and self.on_resolved is not None:
            self.on_resolved(path, message)


class Descriptors:
    """Opens and closes the tailer's files, counting what is open against ``budget``.

    Running out of descriptors is reported with the limit and the number of files, and
    never costs a position: the file is retried on the next poll.
    """

    def __init__(
        self, files: Mapping[str, Followed], report: Callable[[str, str], None], budget: int | None
    ) -> None:
        self.files = files
        self.report = report
        self.budget = budget if budget is not None else max(8, min(open_limit() // 2, 4096))
        self.open = 0

    def open_fd(self, name: str) -> int | None:
        """An fd on ``name``, or None (reported) when it cannot be opened now."""
        for attempt in (0, 1):
            try:
                fd = os.open(name, OPEN_FLAGS)
            except OSError as exc:
                exhausted = exc.errno in (errno.EMFILE, errno.ENFILE)
                if exhausted and attempt == 0:
                    self.free(len(self.files) // 4 + 1)
                    continue
                if exhausted:
                    self.report(
                        name,
                        f"cannot open {name}: too many open files (the limit is {open_limit()}, "
                        f"{len(self.files)} files are followed and {self.open} open); "
                        "its position is kept and it is retried",
                    )
                else:
                    self.report(name, f"cannot open {name}: {exc.strerror or exc}; will retry")
                return None
            self.open += 1
            return fd
        return None

    def reopen(self, f: Followed) -> bool:
        """Open an idle file again if its path still leads to it and it changed."""
        try:
            st = os.stat(f.path)
        except OSError:
            return False
        if file_key(st.st_dev, st.st_ino) != f.key:
            f.rotated = True
            return False
        if st.st_size == f.scanner.read_pos and st.st_mtime_ns == f.mtime_ns and not f.unsaved:
            return False
        fd = self.open_fd(f.path)
        if fd is None:
            return False
        fst = os.fstat(fd)
        if file_key(fst.st_dev, fst.st_ino) != f.key:
            self.drop(fd)
            return False
        f.fd = fd
        return True

    def drop(self, fd: int) -> None:
        """Close an fd from ``open_fd`` that no file kept."""
        close_fd(fd)
        self.open -= 1

    def close(self, f: Followed) -> None:
        """Close a file's fd, if open; it is reopened by position when it changes."""
        if f.fd is not None:
            f.close()
            self.open -= 1

    def trim(self, f: Followed) -> None:
        """Over the budget, a live file read to its end gives its descriptor back."""
        if self.open > self.budget and f.fd is not None and not f.rotated and at_end(f):
            self.close(f)

    def free(self, n: int) -> None:
        """Close the ``n`` longest-quiet live files read to their end."""
        idle = sorted(
            (f for f in self.files.values() if f.fd is not None and not f.rotated and at_end(f)),
            key=lambda f: f.last_change,
        )
        for f in idle[:n]:
            self.close(f)
