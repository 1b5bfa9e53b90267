"""``canary collect`` as a real process: SIGKILL, SIGTERM and truncation while stopped.

The collector runs as ``python -m canary.cli.main --config <tmp>/canary.toml collect``
against real files and a real SQLite store. After every kill the store must hold
a consistent prefix of the file (firings and read position committed together);
at the end every guard line is counted exactly once, named by sequence number.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers_logs import (
    GUARD_MATCH,
    Writer,
    firing_count,
    firing_seqs,
    guard_seqs,
    position_of,
    ranges,
    read_to_the_end,
    tally,
    wait_exact,
    wait_until,
    write_big_log,
    write_config,
    write_lines,
)

EVERY = 3
DEADLINE = 30.0


@pytest.fixture(scope="module")
def pycache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Bytecode for the collector processes, kept out of the source tree and shared by them."""
    return tmp_path_factory.mktemp("pycache")


@dataclass
class Collector:
    """One ``canary collect`` process."""

    proc: subprocess.Popen[bytes]
    out: Path
    err: Path

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self) -> float:
        """SIGTERM; wait for the exit (at most 10 s); return how long it took."""
        began = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            message = f"collect did not exit within 10 s of SIGTERM:\n{self.stderr()}"
            raise AssertionError(message) from None
        return time.monotonic() - began

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")


Spawn = Callable[..., Collector]


@pytest.fixture
def spawn(tmp_path: Path, pycache: Path) -> Iterator[Spawn]:
    """Start ``canary collect`` processes; any still running at teardown are killed."""
    started: list[Collector] = []
    env = dict(os.environ)  # CANARY_STATE_DIR / CANARY_CONFIG_DIR from isolated_locations
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(pycache)

    def start(*args: str) -> Collector:
        n = len(started)
        out, err = tmp_path / f"collect-{n}.out", tmp_path / f"collect-{n}.err"
        with open(out, "wb") as o, open(err, "wb") as e:
            proc = subprocess.Popen(
                [sys.executable, "-m", "canary.cli.main", "--config", str(tmp_path / "canary.toml"),
                 "collect", *(args or ("--every", "0.2"))],
                cwd=tmp_path, env=env, stdout=o, stderr=e,
            )
        collector = Collector(proc, out, err)
        started.append(collector)
        return collector

    yield start
    for collector in started:
        if collector.proc.poll() is None:
            collector.proc.kill()
        collector.proc.wait()


def run_once(spawn: Spawn) -> Collector:
    """``canary collect --once`` to completion."""
    collector = spawn("--once")
    assert collector.proc.wait(60) == 0, collector.stderr()
    return collector


@pytest.fixture
def log(tmp_path: Path) -> Path:
    (tmp_path / "logs").mkdir()
    path = tmp_path / "logs" / "agent.log"
    write_config(tmp_path, [str(tmp_path / "logs" / "*.log")], tmp_path / "canary.db")
    return path


def assert_consistent_prefix(db: Path, log: Path, expected_sorted: list[int], when: str) -> int:
    """The store holds exactly the guard lines before its committed offset, each once."""
    data = log.read_bytes()
    pos = position_of(db, log)
    offset = pos.offset if pos is not None else 0
    assert offset == 0 or data[offset - 1 : offset] == b"\n", f"{when}: offset {offset} mid-line"
    before = data.count(GUARD_MATCH.encode(), 0, offset)
    seen = firing_seqs(db)
    doubled = {s: n for s, n in seen.items() if n > 1}
    want = set(expected_sorted[:before])
    assert not doubled and set(seen) == want, (
        f"{when}: offset {offset} covers {before} guard lines but the store counted "
        f"{sum(seen.values())}; missing: {ranges(want - set(seen))}; "
        f"beyond the offset: {ranges(set(seen) - want)}; doubled: {sorted(doubled)}"
    )
    return before


def assert_hourly_counts_match(db: Path) -> None:
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(db, timeout=30)) as conn:
        (hourly,) = conn.execute("SELECT COALESCE(SUM(count), 0) FROM hourly_counts").fetchone()
    assert hourly == firing_count(db), "hourly counts and firings disagree"


# -- SIGKILL --------------------------------------------------------------------------


@pytest.mark.slow
def test_sigkill_at_random_moments_while_reading_a_large_file(
    tmp_path: Path, log: Path, spawn: Spawn, record_property: pytest.RecordProperty
) -> None:
    db = tmp_path / "canary.db"
    last = write_big_log(log, 60_000_000, every=10)  # ~31,000 guard lines among noise
    expected = guard_seqs(1, last, 10)
    ordered = sorted(expected)
    seed = random.randrange(1 << 30)
    record_property("seed", seed)
    rng = random.Random(seed)
    mid_file = 0
    for round_ in range(3):
        before = firing_count(db)
        if before == len(ordered):
            break
        collector = spawn()
        progressed = wait_until(lambda: firing_count(db) > before, DEADLINE)  # noqa: B023
        assert progressed, f"round {round_}: no progress after restart\n{collector.stderr()}"
        time.sleep(rng.uniform(0.0, 0.4))
        collector.kill()
        counted = assert_consistent_prefix(db, log, ordered, f"after kill {round_} (seed {seed})")
        mid_file += counted < len(ordered)
        print(f"\nkill {round_}: {counted} of {len(ordered)} guard lines committed")
    record_property("kills_mid_file", mid_file)
    assert mid_file >= 2, f"only {mid_file} of the kills landed before the end of the file"
    collector = spawn()
    result = wait_exact(db, expected, DEADLINE)
    assert result.exact, f"seed {seed}: {result.describe()}"
    collector.terminate()
    assert "warning" not in collector.stderr()
    read_to_the_end(db, log)
    assert_hourly_counts_match(db)


@pytest.mark.slow
def test_sigkill_while_a_writer_is_still_appending(
    tmp_path: Path, log: Path, spawn: Spawn
) -> None:
    db = tmp_path / "canary.db"
    writer = Writer.start(log, count=10**7, rate=2000, every=EVERY, reopen="never")
    try:
        writer.wait_for_lines(200)
        first = spawn()
        assert wait_until(lambda: firing_count(db) > 0, DEADLINE), first.stderr()
        time.sleep(random.uniform(0.1, 0.4))
        first.kill()
        at_kill = firing_count(db)
        second = spawn()
        assert wait_until(lambda: firing_count(db) > at_kill, DEADLINE), second.stderr()
        time.sleep(0.5)
        assert writer.proc.poll() is None, "the writer stopped on its own"
        summary = writer.stop()
    finally:
        writer.kill()
    expected = writer.expected(summary)
    result = wait_exact(db, expected, DEADLINE)
    assert result.exact, result.describe()
    second.terminate()
    read_to_the_end(db, log)
    assert_hourly_counts_match(db)


# -- SIGTERM --------------------------------------------------------------------------


@pytest.mark.slow
def test_sigterm_mid_read_exits_promptly_after_reading_to_the_end(
    tmp_path: Path, log: Path, spawn: Spawn
) -> None:
    db = tmp_path / "canary.db"
    last = write_big_log(log, 40_000_000, every=10)
    expected = guard_seqs(1, last, 10)
    collector = spawn()
    assert wait_until(lambda: firing_count(db) > 0, DEADLINE), collector.stderr()
    assert firing_count(db) < len(expected), "the file was read before SIGTERM could land"
    took = collector.terminate()
    assert collector.proc.returncode == 0, collector.stderr()
    print(f"\nSIGTERM mid-read: exited after {took:.2f}s")
    assert took < 10
    # The last poll read the file to its end and committed it.
    result = tally(db, expected)
    assert result.exact, f"after SIGTERM: {result.describe()}"
    read_to_the_end(db, log)
    # A restart finds nothing new.
    run_once(spawn)
    result = tally(db, expected)
    assert result.exact, f"after the restart: {result.describe()}"
    read_to_the_end(db, log)
    assert_hourly_counts_match(db)


# -- rotation while stopped ----------------------------------------------------------------


@pytest.mark.slow
def test_logrotate_while_killed_then_restart(tmp_path: Path, log: Path, spawn: Spawn) -> None:
    logrotate = shutil.which("logrotate") or "/usr/sbin/logrotate"
    if not os.access(logrotate, os.X_OK):
        pytest.skip("logrotate is not installed")
    db = tmp_path / "canary.db"
    writer = Writer.start(log, count=10**7, rate=1500, every=EVERY, reopen="hup")
    try:
        writer.wait_for_lines(200)
        first = spawn()
        assert wait_until(lambda: firing_count(db) > 0, DEADLINE), first.stderr()
        first.kill()
        killed_at = position_of(db, log)
        assert killed_at is not None
        # Rotated while nothing follows it; the writer keeps appending to the renamed
        # file for a while, then reopens.
        conf = tmp_path / "logrotate.conf"
        conf.write_text(f"{log} {{\n  rotate 5\n  create\n  nodateext\n}}\n")
        conf.chmod(0o644)
        done = subprocess.run(
            [logrotate, "-f", "-s", str(tmp_path / "logrotate.state"), str(conf)],
            capture_output=True, text=True, timeout=30, check=False,
        )
        assert done.returncode == 0, done.stderr
        at_kill = firing_count(db)
        time.sleep(0.3)
        writer.hup()
        second = spawn()
        assert wait_until(lambda: firing_count(db) > at_kill, DEADLINE), second.stderr()
        time.sleep(0.3)
        assert writer.proc.poll() is None, "the writer stopped on its own"
        summary = writer.stop()
    finally:
        writer.kill()
    rotated = log.with_name(log.name + ".1")
    assert rotated.stat().st_size > killed_at.offset, "nothing was left to finish"
    expected = writer.expected(summary)
    result = wait_exact(db, expected, DEADLINE)
    assert result.exact, result.describe()
    second.terminate()
    read_to_the_end(db, log)
    assert_hourly_counts_match(db)


# -- truncation while stopped ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("rewrite", ["shorter", "longer"])
def test_truncated_while_stopped_counted_once_across_two_restarts(
    tmp_path: Path, log: Path, spawn: Spawn, rewrite: str
) -> None:
    db = tmp_path / "canary.db"
    last = write_lines(log, 1, 3000, EVERY)
    expected = guard_seqs(1, last, EVERY)
    run_once(spawn)
    assert tally(db, expected).exact
    old_size = log.stat().st_size
    ino = log.stat().st_ino
    # Truncated in place while nothing follows it, then new lines: fewer bytes than were
    # read (size < offset), or more (regrown past the offset: only the head hash tells).
    with open(log, "r+b") as f:
        f.truncate(0)
    again = write_lines(log, 100_001, 1000 if rewrite == "shorter" else 6000, EVERY)
    assert log.stat().st_ino == ino
    assert (log.stat().st_size < old_size) == (rewrite == "shorter")
    expected |= guard_seqs(100_001, again, EVERY)
    collector = spawn()
    result = wait_exact(db, expected, DEADLINE)
    assert result.exact, f"first restart: {result.describe()}"
    collector.terminate()
    read_to_the_end(db, log)
    run_once(spawn)
    result = tally(db, expected)
    assert result.exact, f"second restart: {result.describe()}"
    read_to_the_end(db, log)
    assert_hourly_counts_match(db)
