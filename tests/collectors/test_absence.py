"""Absence is not forgetting: a file out of sight keeps its position until it is deleted."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from canary.store.engine import Store
from tests.collectors.fakes import Clock
from tests.collectors.test_tailer import append, hits, make_tailer


def test_directory_moved_away_and_back_is_not_read_again(tmp_path: Path, store: Store) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    append(logs / "a.log", hits(10))
    clock = Clock()
    t = make_tailer(store, str(logs / "*.log"), clock)
    t.poll()
    assert store.count_firings() == 10
    os.rename(logs, tmp_path / "away")
    for _ in range(6):  # well past rotate_wait: the glob matches nothing all this time
        clock.now += 5
        t.poll()
    assert t.files() == []
    assert len(store.positions()) == 1  # still on disk (elsewhere): its position is kept
    os.rename(tmp_path / "away", logs)
    append(logs / "a.log", hits(2, 100))
    clock.now += 1
    t.poll()
    assert store.count_firings() == 12
    t.close()


def test_a_file_deleted_while_out_of_sight_is_forgotten(tmp_path: Path, store: Store) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    append(logs / "a.log", hits(3))
    clock = Clock()
    t = make_tailer(store, str(logs / "*.log"), clock)
    t.poll()
    (logs / "a.log").unlink()
    for _ in range(4):
        clock.now += 5
        t.poll()
    assert store.positions() == []
    t.close()


def test_copytruncate_copy_outside_the_glob_is_finished(tmp_path: Path, store: Store) -> None:
    """Glob ``app.log`` only: lines the copy holds past what was read are read from the copy."""
    log = tmp_path / "app.log"
    append(log, hits(5))
    clock = Clock()
    t = make_tailer(store, str(log), clock)
    t.poll()
    append(log, hits(3, 100))  # written before the copy, never read from the original
    shutil.copyfile(log, tmp_path / "app.log.1")
    os.truncate(log, 0)
    append(log, hits(1, 200))
    t.poll()
    clock.now += 1
    t.poll()
    assert store.count_firings() == 5 + 3 + 1
    t.close()


def test_idle_files_give_their_descriptors_back(tmp_path: Path, store: Store) -> None:
    for i in range(20):
        append(tmp_path / f"f{i}.log", hits(1, i))
    clock = Clock()
    t = make_tailer(store, str(tmp_path / "*.log"), clock, max_open=5)
    t.poll()
    assert store.count_firings() == 20
    assert t._fds.open <= 5
    append(tmp_path / "f3.log", hits(1, 300))
    clock.now += 1
    t.poll()
    assert store.count_firings() == 21
    clock.now += 60
    t.poll()
    assert t._fds.open == 0
    t.close()


CHILD = textwrap.dedent(
    """
    import resource, sys, time
    from datetime import UTC
    from canary.store.engine import Store
    from collectors.rules import Rule
    from collectors.scan import Matcher
    from collectors.tailer import Tailer
    from collectors.timestamps import TimestampParser

    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    root = sys.argv[1]
    store = Store(f"sqlite:///{root}/canary.db")
    matcher = Matcher([Rule.regex("g", "HIT")], timestamps=TimestampParser(default_tz=UTC))
    errors = []
    now = [1000.0]
    t = Tailer([root + "/logs/*.log"], matcher, store, clock=lambda: now[0],
               on_error=lambda p, m: errors.append(m))
    for _ in range(60):
        t.poll()
        now[0] += 1.0
    print(store.count_firings(), len(t.files()), len(errors))
    """
)


@pytest.mark.slow
def test_three_hundred_files_under_a_limit_of_256(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for i in range(300):
        (logs / f"f{i:03}.log").write_bytes(b"line %d HIT\n" % i)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, timeout=120,
        check=True,
    )
    firings, followed, errors = map(int, out.stdout.split())
    assert (firings, followed, errors) == (300, 300, 0), out.stderr
