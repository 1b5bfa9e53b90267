"""The live follower: real watchdog events wake it; stop() reads to the end first."""

from __future__ import annotations

import time
from pathlib import Path

from canary.store.engine import Store
from collectors.rules import Rule
from collectors.scan import Matcher
from collectors.tailer import Tailer
from collectors.watch import Follower


def wait_for(predicate, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_events_wake_the_follower_long_before_the_rescan(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "a.log"
    log.write_text("")
    tailer = Tailer([str(logs / "*.log")], Matcher([Rule.regex("g", "HIT")]), store)
    follower = Follower(tailer, rescan=60.0)
    follower.start()
    try:
        time.sleep(0.2)
        with log.open("a") as f:
            f.write("one HIT\n")
        assert wait_for(lambda: store.count_firings() == 1, timeout=5.0)
        (logs / "b.log").write_text("two HIT\n")  # a new file: a created event forces a rescan
        assert wait_for(lambda: store.count_firings() == 2, timeout=5.0)
        with log.open("a") as f:
            f.write("three HI")
    finally:
        follower.stop()
    with log.open("a") as f:
        f.write("T\n")
    assert store.count_firings() == 2  # the partial line was never counted
    tailer2 = Tailer([str(logs / "*.log")], Matcher([Rule.regex("g", "HIT")]), store)
    tailer2.poll()
    tailer2.close()
    assert store.count_firings() == 3
    store.close()
