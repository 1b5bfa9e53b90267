"""Definitions reload while a real daemon runs: a file change or SIGHUP, checked first.

A new guard is counted over its window in what was read already, and from then on;
a broken change keeps the old definitions running and is reported in the daemon log.
"""

from __future__ import annotations

import signal
import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.daemon.test_store_watch import GUARD, World, wait_for

pytestmark = pytest.mark.slow

OTHER = "VersionGuard: rejected"


def count(db: Path, guard: str) -> int:
    try:
        with sqlite3.connect(db, timeout=30) as conn:
            return int(conn.execute("SELECT count(*) FROM firings WHERE guard = ?", (guard,)).fetchone()[0])
    except sqlite3.Error:
        return -1


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path, tmp_path / "state" / "canary.db")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    # Two lines stamped long ago (out of any window), then lines stamped now: the first sight
    # of the file reads back over the window, to the first line after the old ones.
    w.log.write_text("".join(f"2026-01-01T00:00:00Z {OTHER} old={i}\n" for i in range(2))
                     + "".join(f"{now} {GUARD} seq={i}\n" for i in range(5))
                     + "".join(f"{now} {OTHER} seq={i}\n" for i in range(3)))
    yield w
    w.close()


def test_a_new_guard_is_counted_from_what_was_read_and_then_live(world: World) -> None:
    world.daemon()
    wait_for(lambda: count(world.db, "citation") == 5, 30, "the first firings")
    assert count(world.db, "version") == 0
    (world.root / "defs" / "version.toml").write_text(f"[guard]\nname = 'version'\nmatch = '{OTHER}'\n")
    wait_for(lambda: count(world.db, "version") == 3, 30, "the new guard's firings in its window")
    with world.log.open("a") as f:
        f.write(f"{OTHER} seq=3\n{GUARD} seq=5\n")
    wait_for(lambda: count(world.db, "version") == 4 and count(world.db, "citation") == 6, 30,
             "both guards counted live")
    time.sleep(1)
    assert count(world.db, "citation") == 6  # nothing read twice


def test_a_broken_change_keeps_the_old_definitions(world: World) -> None:
    proc = world.daemon()
    wait_for(lambda: count(world.db, "citation") == 5, 30, "the first firings")
    (world.root / "defs" / "broken.toml").write_text("[guard]\nname = 'Bad Name'\nmatch = '('\n")
    wait_for(lambda: "were not reloaded" in world.errors(), 30, "the reload refused")
    with world.log.open("a") as f:
        f.write(f"{GUARD} seq=5\n")
    wait_for(lambda: count(world.db, "citation") == 6, 30, "the old guard still counted")
    (world.root / "defs" / "broken.toml").unlink()
    (world.root / "defs" / "citation.toml").write_text(
        f"[guard]\nname = 'citation'\nmatch = '{GUARD} seq=[0-2]$'\n"
    )
    proc.send_signal(signal.SIGHUP)
    wait_for(lambda: count(world.db, "citation") == 3, 30, "the changed guard counted again")
    assert proc.poll() is None
