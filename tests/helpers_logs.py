"""Helpers for the live rotation and crash tests: a log writer process, configs, store readers.

Every line written carries a sequence number (``seq=N``); guard lines are every
``every``-th one. Losses and duplicates are then named by sequence number,
read back from the ``firings`` table of the SQLite store.

Run as a script, this module is the writer:

    python tests/helpers_logs.py PATH --count 1000 --rate 400 --every 2 --reopen hup

It appends lines with one ``write(2)`` each (O_APPEND; with ``--no-append`` it opens PATH
truncated and writes at its own offset, as ``./agent > agent.log`` does), reopens PATH by name on
SIGHUP (``--reopen hup``, like a daemon after logrotate's postrotate) or whenever
PATH no longer names the file it holds (``--reopen watched``, like
``logging.handlers.WatchedFileHandler``), stops early on SIGTERM, and prints a
JSON summary on exit: first and last seq written, the seqs at which it reopened.
Only the standard library is imported, so it starts fast.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import itertools
import json
import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

WRITER = Path(__file__).resolve()
GUARD_MATCH = "CitationGuard: rejected"
# Now, so that a log written before a collector starts lies in the window it reads back.
STAMP = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
_SEQ = re.compile(r"\bseq=(\d+)\b")


# -- lines ------------------------------------------------------------------


def is_guard(seq: int, every: int) -> bool:
    """Whether line ``seq`` is a guard line when every ``every``-th line is one."""
    return seq % every == 0


def line(seq: int, every: int, pad: int = 0) -> bytes:
    """The log line numbered ``seq``: a guard firing every ``every`` lines, noise otherwise."""
    if is_guard(seq, every):
        text = f"{STAMP} WARN {GUARD_MATCH} seq={seq} url=https://x{seq}.example.org/p\n"
    else:
        text = f"{STAMP} INFO agent step seq={seq} tokens={seq % 997} {'.' * pad}\n"
    return text.encode("ascii")


def guard_seqs(first: int, last: int, every: int) -> set[int]:
    """The seqs of the guard lines among ``first..last``."""
    return {s for s in range(first, last + 1) if is_guard(s, every)}


def write_lines(path: Path, first: int, count: int, every: int, pad: int = 0) -> int:
    """Append lines ``first..first+count-1`` in large writes; return the last seq."""
    with open(path, "ab") as f:
        buf: list[bytes] = []
        for seq in range(first, first + count):
            buf.append(line(seq, every, pad))
            if len(buf) >= 4096:
                f.write(b"".join(buf))
                buf.clear()
        f.write(b"".join(buf))
    return first + count - 1


def write_big_log(path: Path, target_bytes: int, every: int, first: int = 1, pad: int = 150) -> int:
    """Append numbered lines until the file holds at least ``target_bytes``; return the last seq."""
    seq = first - 1
    size = path.stat().st_size if path.exists() else 0
    with open(path, "ab") as f:
        while size < target_bytes:
            block = b"".join(line(s, every, pad) for s in range(seq + 1, seq + 10_001))
            f.write(block)
            size += len(block)
            seq += 10_000
    return seq


def seqs_in_file(path: Path) -> list[int]:
    """The seqs of the guard lines in a plain or gzipped log, in file order."""
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as f:
            data = f.read()
    else:
        data = path.read_bytes()
    return [
        int(m.group(1))
        for raw in data.splitlines()
        if GUARD_MATCH.encode() in raw and (m := _SEQ.search(raw.decode("ascii", "replace")))
    ]


# -- the store ----------------------------------------------------------------


def _query(db: Path, sql: str, args: Sequence[object] = ()) -> list[tuple[object, ...]]:
    if not db.exists():
        return []
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        try:
            return list(conn.execute(sql, tuple(args)))
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise


def firing_count(db: Path) -> int:
    """Rows in ``firings``."""
    rows = _query(db, "SELECT COUNT(*) FROM firings")
    return int(rows[0][0]) if rows else 0  # type: ignore[call-overload]


def firing_seqs(db: Path) -> Counter[int]:
    """How many times each seq was counted, from the ``line`` column of ``firings``."""
    seen: Counter[int] = Counter()
    for (text,) in _query(db, "SELECT line FROM firings"):
        m = _SEQ.search(str(text))
        assert m is not None, f"a firing without a seq: {text!r}"
        seen[int(m.group(1))] += 1
    return seen


def firing_paths(db: Path) -> set[str]:
    """Every path a firing was read from."""
    return {str(p) for (p,) in _query(db, "SELECT DISTINCT path FROM firings")}


@dataclass(frozen=True)
class Position:
    """One row of ``file_positions``."""

    key: str
    path: str
    offset: int
    size: int


def positions(db: Path) -> list[Position]:
    """Every committed read position."""
    rows = _query(db, 'SELECT key, path, "offset", size FROM file_positions ORDER BY path')
    return [Position(str(k), str(p), int(o), int(s)) for k, p, o, s in rows]  # type: ignore[call-overload]


def position_of(db: Path, path: Path) -> Position | None:
    """The committed position of the file ``path`` names now (by its dev:ino key)."""
    st = path.stat()
    key = f"{st.st_dev}:{st.st_ino}"
    return next((p for p in positions(db) if p.key == key), None)


def read_to_the_end(db: Path, path: Path) -> None:
    """Assert that the committed read position of ``path`` is its size."""
    pos = position_of(db, path)
    assert pos is not None, f"no read position for {path}"
    size = path.stat().st_size
    assert pos.offset == size, f"{path}: read position {pos.offset}, file size {size}"


# -- comparing ----------------------------------------------------------------


def ranges(seqs: Iterable[int], limit: int = 40) -> str:
    """Seqs as runs: ``1-3, 7`` for {1, 2, 3, 7}; ``2-10/2`` for every 2nd seq from 2 to 10.

    The step is the greatest common divisor of the gaps, so guard seqs (every Nth
    line) collapse into runs too. At most ``limit`` runs are listed.
    """
    ordered = sorted(set(seqs))
    step = 0
    for a, b in itertools.pairwise(ordered):
        step = math.gcd(step, b - a)
    step = step or 1
    out: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + step:
            j += 1
        if i == j:
            out.append(str(ordered[i]))
        else:
            out.append(f"{ordered[i]}-{ordered[j]}" + (f"/{step}" if step > 1 else ""))
        i = j + 1
    if len(out) > limit:
        out = [*out[:limit], f"... ({len(out) - limit} more runs)"]
    return ", ".join(out) or "none"


@dataclass(frozen=True)
class Tally:
    """Expected guard seqs against what the store counted."""

    expected: set[int]
    seen: Counter[int]

    @property
    def missing(self) -> set[int]:
        return self.expected - set(self.seen)

    @property
    def doubled(self) -> dict[int, int]:
        return {s: n for s, n in self.seen.items() if n > 1}

    @property
    def unexpected(self) -> set[int]:
        return set(self.seen) - self.expected

    @property
    def exact(self) -> bool:
        return not self.missing and not self.doubled and not self.unexpected

    def describe(self) -> str:
        times = sorted(set(self.doubled.values()))
        doubled = "; ".join(
            f"{ranges(s for s, k in self.doubled.items() if k == n)} ({n} times)" for n in times
        ) or "none"
        return (
            f"expected {len(self.expected)} guard lines, counted {sum(self.seen.values())}; "
            f"missing ({len(self.missing)}): {ranges(self.missing)}; "
            f"doubled ({len(self.doubled)}): {doubled}; "
            f"unexpected ({len(self.unexpected)}): {ranges(self.unexpected)}"
        )


def tally(db: Path, expected: set[int]) -> Tally:
    """Compare the store's firings with the expected guard seqs."""
    return Tally(expected, firing_seqs(db))


def wait_until(
    condition: Callable[[], bool], timeout: float, interval: float = 0.05
) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def has_seq(db: Path, seq: int) -> bool:
    """Whether the guard line ``seq`` was counted at least once."""
    rows = _query(db, "SELECT 1 FROM firings WHERE instr(line, ?) > 0 LIMIT 1", [f"seq={seq} "])
    return bool(rows)


def wait_exact(
    db: Path, expected: set[int], timeout: float, *, quiet: float = 2.0, settle: float = 0.0
) -> Tally:
    """Wait until the store counted as many firings as expected; return the tally then.

    Polls the cheap row count; gives up early once the last expected seq is counted
    and the count has not changed for ``quiet`` seconds (a loss will not heal), or
    at ``timeout``. Once the count is reached, waits ``settle`` more seconds so that
    a late duplicate shows too.
    """
    deadline = time.monotonic() + timeout
    last_count = -1
    since = time.monotonic()
    while True:
        count = firing_count(db)
        now = time.monotonic()
        if count >= len(expected):
            time.sleep(settle)
            break
        if now >= deadline:
            break
        if count != last_count:
            last_count, since = count, now
        elif now - since >= quiet and expected and has_seq(db, max(expected)):
            break
        time.sleep(0.1)
    return tally(db, expected)


# -- configuration --------------------------------------------------------------


def write_config(root: Path, paths: Sequence[str | Path], db: Path) -> Path:
    """A canary.toml with one guard (``citation``) following ``paths`` into the store ``db``."""
    defs = root / "defs"
    defs.mkdir(exist_ok=True)
    (defs / "citation.toml").write_text(
        "[guard]\n"
        'name = "citation"\n'
        f"match = '{GUARD_MATCH}'\n"
    )
    listed = ", ".join(json.dumps(str(p)) for p in paths)
    config = root / "canary.toml"
    config.write_text(
        'defs = ["defs/*.toml"]\n'
        "\n[logs]\n"
        f"paths = [{listed}]\n"
        "\n[store]\n"
        f'url = "sqlite:///{db}"\n'
    )
    return config


# -- the writer process ------------------------------------------------------------


@dataclass
class Writer:
    """A running writer subprocess."""

    proc: subprocess.Popen[str]
    path: Path
    every: int

    @classmethod
    def start(
        cls,
        path: Path,
        *,
        count: int,
        rate: float,
        every: int,
        first: int = 1,
        reopen: str = "hup",
        append: bool = True,
    ) -> Writer:
        proc = subprocess.Popen(
            [sys.executable, str(WRITER), str(path), "--count", str(count), "--rate", str(rate),
             "--every", str(every), "--first", str(first), "--reopen", reopen,
             *([] if append else ["--no-append"])],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        return cls(proc, path, every)

    def wait_for_lines(self, n: int, timeout: float = 10.0) -> None:
        """Wait until the file holds at least ``n`` lines (it exists from the first write)."""

        def enough() -> bool:
            try:
                return self.path.read_bytes().count(b"\n") >= n
            except FileNotFoundError:
                return False

        if not wait_until(enough, timeout, 0.02):
            raise AssertionError(f"the writer did not write {n} lines to {self.path} in time")

    def hup(self) -> None:
        """Tell the writer to reopen its file by name."""
        self.proc.send_signal(signal.SIGHUP)

    def finish(self, timeout: float = 30.0) -> dict[str, object]:
        """Wait for the writer to write everything; return its summary."""
        out, err = self.proc.communicate(timeout=timeout)
        if self.proc.returncode != 0:
            raise AssertionError(f"writer failed ({self.proc.returncode}): {err}")
        summary: dict[str, object] = json.loads(out)
        return summary

    def stop(self, timeout: float = 30.0) -> dict[str, object]:
        """Tell the writer to stop after its current line; return its summary."""
        self.proc.send_signal(signal.SIGTERM)
        return self.finish(timeout)

    def kill(self) -> None:
        """Stop the writer for good (cleanup path)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()

    def expected(self, summary: dict[str, object]) -> set[int]:
        """The guard seqs the writer wrote, by its summary."""
        return guard_seqs(int(summary["first"]), int(summary["last"]), self.every)  # type: ignore[call-overload]


def _writer_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description="Append numbered log lines at a steady rate.")
    parser.add_argument("path")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--rate", type=float, required=True, help="lines per second")
    parser.add_argument("--every", type=int, default=2, help="every Nth line is a guard line")
    parser.add_argument("--first", type=int, default=1)
    parser.add_argument("--reopen", choices=("hup", "watched", "never"), default="hup")
    parser.add_argument("--no-append", action="store_true",
                        help="open without O_APPEND, truncating (a shell's `> agent.log`, Node's write stream)")
    args = parser.parse_args(argv)

    path = args.path
    reopen_now = False
    stop = False

    def on_hup(_sig: int, _frame: object) -> None:
        nonlocal reopen_now
        reopen_now = args.reopen == "hup"

    def on_term(_sig: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGHUP, on_hup)
    signal.signal(signal.SIGTERM, on_term)

    def open_log() -> int:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        flags = os.O_TRUNC if args.no_append else os.O_APPEND
        return os.open(path, os.O_WRONLY | flags | os.O_CREAT, 0o644)

    fd = open_log()
    reopens: list[int] = []
    start = time.monotonic()
    last = args.first - 1
    for i in range(args.count):
        if stop:
            break
        seq = args.first + i
        if args.reopen == "watched":
            held = os.fstat(fd)
            try:
                now = os.stat(path)
                moved = (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino)
            except FileNotFoundError:
                moved = True
            reopen_now = reopen_now or moved
        if reopen_now:
            reopen_now = False
            os.close(fd)
            fd = open_log()
            reopens.append(seq)
        data = line(seq, args.every)
        written = os.write(fd, data)
        assert written == len(data)
        last = seq
        delay = start + (i + 1) / args.rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    os.close(fd)
    print(json.dumps({"first": args.first, "last": last, "reopens": reopens}))
    return 0


if __name__ == "__main__":
    sys.exit(_writer_main(sys.argv[1:]))
