"""A NUL byte a writer put inside a line is that line's, not a hole a truncation left.

A hole starts where the file ended when a writer without O_APPEND wrote past it, after a
truncation: at a line's start. NULs after a line's first byte were written with that line.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import text

from canary.store.engine import Store
from collectors.followed import CHUNK
from collectors.rules import Rule
from collectors.scan import LineScanner, Matcher
from collectors.tailer import Tailer
from tests.collectors.fakes import Clock
from tests.store.conftest import fresh_store

LINE = b"2026-12-07T10:00:00Z CitationGuard: rejected url=https://x.example/a \x00 trailing\n"
AT_NUL = LINE.index(b"\0")
#: The line as a firing keeps it: the NUL shown as the replacement character, as bytes that are
#: not UTF-8 are (PostgreSQL's text holds no NUL).
KEPT = LINE.decode().removesuffix("\n").replace("\0", "\ufffd")


def _matcher() -> Matcher:
    return Matcher([Rule.regex("citation", "CitationGuard: rejected")])


def _lines(store: Store) -> list[str]:
    with store.engine.connect() as conn:
        return [str(r[0]) for r in conn.execute(text("SELECT line FROM firings"))]


@pytest.mark.parametrize("chunk", [CHUNK, AT_NUL], ids=["one-read", "a-read-ends-at-the-nul"])
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_line_written_at_once_with_a_nul_inside_counts_its_firing_once(
    tmp_path: Path, backend: str, chunk: int
) -> None:
    log = tmp_path / "agent.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, LINE)  # one write, as the agent's logger makes it
    finally:
        os.close(fd)
    with fresh_store(backend) as store:
        clock = Clock()
        errors: list[str] = []
        t = Tailer([str(log)], _matcher(), store, clock=clock, chunk=chunk, batch_bytes=chunk,
                   on_error=lambda _path, message: errors.append(message))
        try:
            for _ in range(3):
                clock.now += 1.0
                t.poll()
        finally:
            t.close()
        assert errors == []
        assert _lines(store) == [KEPT]
        assert t.lines_total == LINE.count(b"\n") == 1
        (state,) = store.positions()
        assert state.offset == len(LINE)


@pytest.mark.parametrize(
    ("chunks", "joined", "texts", "lines"),
    [
        # one read holds the line: the NUL is the line's
        ([LINE], False, [LINE.decode().removesuffix("\n")], 1),
        # a read that ends at the NUL, the next one read on from where it ended
        ([LINE[:AT_NUL], LINE[AT_NUL:]], True, [LINE.decode().removesuffix("\n")], 1),
        # a run of NULs at a line's start is a hole, whatever follows it in that read
        ([b"a HIT \0\0 1\n\0\0\0b HIT \0 2\n"], False, ["a HIT \0\0 1", "b HIT \0 2"], 2),
    ],
    ids=["inside-one-read", "read-on-at-the-nul", "hole-then-nul-inside"],
)
def test_nuls_after_a_lines_first_byte_are_the_lines(
    chunks: list[bytes], joined: bool, texts: list[str], lines: int
) -> None:
    scanner = LineScanner(Matcher([Rule.regex("g", "HIT|CitationGuard")]))
    found: list[str] = []
    counted = 0
    for chunk in chunks:
        result = scanner.feed(chunk, joined=joined)
        found += [h.text for h in result.hits]
        counted += result.lines
    assert (found, counted) == (texts, lines)
    assert scanner.offset == scanner.read_pos == sum(len(c) for c in chunks)


def test_a_partial_line_a_truncation_turned_into_a_hole_is_not_joined_to_the_next_line(
    tmp_path: Path, store: Store
) -> None:
    """A writer without O_APPEND, its file truncated twice under it: the partial line read last,
    just after the first hole, is NULs now, as are the head and the bytes before the read offset.
    The NULs met after it are a hole: the partial line is dropped, not glued to the next line,
    and that line counts once (what was read is told by the file as it is now)."""
    log = tmp_path / "agent.log"
    clock = Clock()
    t = Tailer([str(log)], Matcher([Rule.regex("g", "HIT")]), store, clock=clock)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def poll() -> None:
        clock.now += 1.0
        t.poll()

    try:
        os.write(fd, b"".join(b"2026-12-07T10:00:00Z a HIT seq=%03d\n" % n for n in range(60)))
        poll()
        os.truncate(log, 0)
        os.write(fd, b"2026-12-07T10:00:01Z b HI")  # after a hole longer than the head kept
        poll()
        os.write(fd, b"T seq=60\n")  # never read: the next truncation takes it
        os.truncate(log, 0)
        os.write(fd, b"2026-12-07T10:00:02Z c HIT seq=61\n")
        poll()
        poll()
    finally:
        os.close(fd)
        t.close()
    lines = _lines(store)
    assert lines[:60] == [f"2026-12-07T10:00:00Z a HIT seq={n:03d}" for n in range(60)]
    assert lines[60:] == ["2026-12-07T10:00:02Z c HIT seq=61"]
