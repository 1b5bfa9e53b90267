"""A log file read in parts, each by a process of its own, counts what one reader counts: every line once."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from datetime import UTC
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from canary.config.settings import load_config
from canary.logs import parts
from canary.logs.audit import audit
from canary.logs.parts import FileRead, read_file
from collectors.scan import Hit, Matcher
from collectors.timestamps import TimestampParser
from tests.collectors.test_scan import ACTIVITY, PIECES, RULES
from tests.profiles import examples


class Seen:
    """Every hit of a part, as plain values (it comes back from a child pickled)."""

    def __init__(self) -> None:
        self.hits: list[tuple[int, tuple[str, ...], bool, str]] = []

    def add(self, hits: list[Hit]) -> None:
        self.hits.extend((h.offset, h.guards, h.activity, h.text) for h in hits)


def _read_tallies(path: Path, **kw: int) -> tuple[FileRead, list[Seen]]:
    matcher = Matcher(RULES, ACTIVITY, timestamps=TimestampParser(default_tz=UTC))
    return read_file(path, matcher, Seen, count_activity=True, **kw)


def _read(path: Path, count_activity: bool, **kw: int) -> tuple[FileRead, list[tuple[int, tuple[str, ...], bool, str]]]:
    matcher = Matcher(RULES, ACTIVITY, timestamps=TimestampParser(default_tz=UTC))
    read, tallies = read_file(path, matcher, Seen, count_activity=count_activity, **kw)
    return read, sorted(hit for tally in tallies for hit in tally.hits)


@settings(max_examples=examples(100), deadline=None)
@given(
    lines=st.lists(st.lists(st.sampled_from([*PIECES, b"\0" * 5, b"x" * 300]), max_size=6).map(b"".join),
                   max_size=60),
    tail=st.sampled_from([b"", b"a partial last line CitationGuard: rejected url"]),
    count=st.integers(min_value=2, max_value=6),
    count_activity=st.booleans(),
)
def test_a_file_read_in_parts_counts_what_one_reader_counts(
    tmp_path_factory: pytest.TempPathFactory, lines: list[bytes], tail: bytes, count: int,
    count_activity: bool,
) -> None:
    path = tmp_path_factory.mktemp("parts") / "agent.log"
    path.write_bytes(b"".join(line + b"\n" for line in lines) + tail)
    whole, whole_hits = _read(path, count_activity, parts=1)
    split, split_hits = _read(path, count_activity, parts=count, part_min=1)
    assert split_hits == whole_hits
    assert split == whole
    data = path.read_bytes()
    assert whole.bytes == len(data)
    assert whole.lines == data.count(b"\n")


def test_the_cuts_are_line_starts_and_a_line_longer_than_a_part_stays_whole(tmp_path: Path) -> None:
    path = tmp_path / "agent.log"
    long = b"CitationGuard: rejected url=" + b"y" * 5000
    path.write_bytes(b"a\n" + long + b"\nb\nQuoteGuard: rejected quote\n")
    starts = parts._starts(path, 6, 1)
    data = path.read_bytes()
    assert starts[0] == 0 and all(data[s - 1 : s] == b"\n" for s in starts[1:])
    assert len(starts) == len(set(starts)) and starts == sorted(starts)
    read, hits = _read(path, False, parts=6, part_min=1)
    assert [(h[0], h[1]) for h in hits] == [(2, ("citation",)), (2 + len(long) + 3, ("quote",))]
    assert read.lines == 4


def test_a_compressed_or_small_file_is_read_whole(tmp_path: Path) -> None:
    (tmp_path / "a.log.gz").write_bytes(b"x")
    (tmp_path / "b.log").write_bytes(b"x\n" * 100)
    assert parts._starts(tmp_path / "a.log.gz", 4, 1) == []
    assert parts._starts(tmp_path / "b.log", 4, 1 << 20) == [0]
    assert parts._starts(tmp_path / "missing.log", 4, 1) == []
    line = b"x" * 1023 + b"\n"
    (tmp_path / "c.log").write_bytes(line * (32 * 1024 - 1))  # 1 KiB short of two parts of PART_MIN
    assert parts._starts(tmp_path / "c.log", 8, parts.PART_MIN) == [0]
    with (tmp_path / "c.log").open("ab") as out:
        out.write(line)
    assert parts._starts(tmp_path / "c.log", 8, parts.PART_MIN) == [0, 16 << 20]


def test_the_audit_of_a_large_log_read_in_parts_counts_every_firing_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 16 MiB log on four cores is read in two parts (8 MiB at least each): every line once."""
    monkeypatch.setattr(parts, "cores", lambda: 4)
    monkeypatch.setattr(parts, "PART_MIN", 8 << 20)
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "c.toml").write_text("[guard]\nname = 'citation'\nmatch = 'CitationGuard: rejected'\n")
    (tmp_path / "canary.toml").write_text(
        "defs = ['defs/*.toml']\n[logs]\npaths = ['agent.log']\nactivity = 'task finished'\n")
    line = b"2026-11-29T10:00:00Z INFO planner turn=1 " + b"." * 200 + b"\n"
    firing = b"2026-11-29T10:00:01Z WARN CitationGuard: rejected url=https://x.example.org\n"
    task = b"2026-11-29T10:00:02Z INFO task finished status=ok\n"
    block = firing + (line * 9 + task) * 100
    count = (16 << 20) // len(block) + 1
    with (tmp_path / "agent.log").open("wb") as out:
        for _ in range(count):
            out.write(block)
        out.write(firing)
    size = os.path.getsize(tmp_path / "agent.log")
    assert len(parts._starts(tmp_path / "agent.log", 4, parts.PART_MIN)) == 2  # 16 MiB: two parts of 8 MiB
    report = audit(load_config(path=tmp_path / "canary.toml"))
    assert [(g.guard, g.firings) for g in report.guards] == [("citation", count + 1)]
    assert report.activity == count * 100
    assert [(f.bytes, f.lines, f.error, f.warnings) for f in report.files] == [
        (size, count * 1001 + 1, None, [])]


class DiesInAChild(Seen):
    """A tally whose process is killed (SIGKILL) at its first hit, unless it is the test's own."""

    parent = os.getpid()

    def add(self, hits: list[Hit]) -> None:
        if os.getpid() != self.parent:
            os.kill(os.getpid(), signal.SIGKILL)
        super().add(hits)


def test_a_part_whose_child_is_killed_is_read_again_by_the_caller(tmp_path: Path) -> None:
    path = tmp_path / "agent.log"
    path.write_bytes(b"".join(b"%d CitationGuard: rejected url=x\nnoise\n" % n for n in range(3000)))
    matcher = Matcher(RULES, ACTIVITY, timestamps=TimestampParser(default_tz=UTC))
    read, tallies = read_file(path, matcher, DiesInAChild, count_activity=True, parts=4, part_min=1)
    assert len(tallies) == 4
    hits = sorted(hit for tally in tallies for hit in tally.hits)
    assert [h[1] for h in hits] == [("citation",)] * 3000
    assert len({h[0] for h in hits}) == 3000
    assert (read.bytes, read.lines, read.error) == (path.stat().st_size, 6000, None)


class HangsInAChild(Seen):
    """A tally whose process stops for 90 s at its first hit, unless it is the test's own."""

    parent = os.getpid()

    def add(self, hits: list[Hit]) -> None:
        if os.getpid() != self.parent:
            time.sleep(90)  # longer than the bound the tests check, far longer than a part takes
        super().add(hits)


def test_a_child_still_reading_long_after_the_caller_is_killed_and_its_part_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parts, "CHILD_GRACE", 0.5)
    path = tmp_path / "agent.log"
    path.write_bytes(b"".join(b"%d CitationGuard: rejected url=x\n" % n for n in range(2000)))
    matcher = Matcher(RULES, ACTIVITY, timestamps=TimestampParser(default_tz=UTC))
    began = time.monotonic()
    read, tallies = read_file(path, matcher, HangsInAChild, count_activity=True, parts=3, part_min=1)
    assert time.monotonic() - began < 60
    assert sorted(h[0] for tally in tallies for h in tally.hits) == [
        m.start() for m in re.finditer(rb"^", path.read_bytes(), re.M)][:-1]
    assert (read.lines, read.error) == (2000, None)


class FailsHereHangsThere(HangsInAChild):
    """A tally that fails in the test's own process, and stops for 90 s in a child."""

    def add(self, hits: list[Hit]) -> None:
        if os.getpid() == self.parent:
            raise RuntimeError("the caller's own part failed")
        super().add(hits)


def test_when_the_callers_part_fails_its_children_are_stopped_not_waited_for(tmp_path: Path) -> None:
    path = tmp_path / "agent.log"
    path.write_bytes(b"".join(b"%d CitationGuard: rejected url=x\n" % n for n in range(2000)))
    matcher = Matcher(RULES, ACTIVITY, timestamps=TimestampParser(default_tz=UTC))
    began = time.monotonic()
    with pytest.raises(RuntimeError, match="own part failed"):
        read_file(path, matcher, FailsHereHangsThere, count_activity=True, parts=3, part_min=1)
    assert time.monotonic() - began < 60


def test_a_process_running_another_thread_reads_each_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parts, "cores", lambda: 4)
    path = tmp_path / "agent.log"
    path.write_bytes(b"".join(b"%d CitationGuard: rejected url=x\n" % n for n in range(400)))
    matcher = Matcher(RULES, ACTIVITY, timestamps=TimestampParser(default_tz=UTC))
    with monkeypatch.context() as alone_here:  # threads other tests left in this worker are not counted
        alone_here.setattr(threading, "active_count", lambda: 1)
        _, alone = read_file(path, matcher, Seen, count_activity=True, part_min=1)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        read, beside = read_file(path, matcher, Seen, count_activity=True, part_min=1)
    finally:
        stop.set()
        other.join()
    assert (len(alone), len(beside)) == (4, 1)
    assert len(beside[0].hits) == 400 and read.lines == 400


def test_a_part_no_process_can_be_forked_for_is_read_by_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", refused)
    path = tmp_path / "agent.log"
    path.write_bytes(b"".join(b"%d CitationGuard: rejected url=x\ntask finished\n" % n for n in range(500)))
    whole, whole_hits = _read(path, True, parts=1)
    split, split_hits = _read(path, True, parts=4, part_min=1)
    assert split_hits == whole_hits and len(split_hits) == 500
    assert split == whole and split.lines == 1000


def test_a_file_is_read_in_eight_parts_at_most(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parts, "cores", lambda: 16)
    monkeypatch.setattr(threading, "active_count", lambda: 1)  # threads other tests left here
    path = tmp_path / "agent.log"
    path.write_bytes(b"".join(b"%d CitationGuard: rejected url=x\n" % n for n in range(400)))
    read, tallies = _read_tallies(path, part_min=1)
    assert len(tallies) == 8 and read.lines == 400
