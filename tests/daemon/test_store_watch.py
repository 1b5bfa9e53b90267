"""The daemon watches its store: deleted, full or corrupt is a daemon error, never a silent ALIVE.

A real ``canary daemon`` subprocess follows a real log into a real SQLite WAL file; the
store is deleted, its disk filled (a small tmpfs where one can be mounted) or a page
corrupted under it; ``canary status`` is run as a user would.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from canary.daemon.storewatch import StoreWatch
from canary.demo.live import free_port
from canary.store.engine import Store
from canary.store.health import StoreProblem, read_problem, write_problem

pytestmark = pytest.mark.slow

GUARD = "CitationGuard: rejected"


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def write_config(root: Path, db: Path, log: Path) -> Path:
    defs = root / "defs"
    defs.mkdir(exist_ok=True)
    (defs / "citation.toml").write_text(f"[guard]\nname = 'citation'\nmatch = '{GUARD}'\n")
    config = root / "canary.toml"
    config.write_text(
        f"""defs = ["defs/*.toml"]
[model]
listen = "127.0.0.1:{free_port()}"
[fixtures]
listen = "127.0.0.1:{free_port()}"
[daemon]
control = "127.0.0.1:{free_port()}"
[logs]
paths = ["{log}"]
[store]
url = "sqlite:///{db}"
[alerts]
desktop = false
"""
    )
    return config


class World:
    def __init__(self, root: Path, db: Path) -> None:
        self.root, self.db = root, db
        self.log = root / "agent.log"
        self.log.write_text("".join(f"{GUARD} seq={i}\n" for i in range(5)))
        self.config = write_config(root, db, self.log)
        self.procs: list[subprocess.Popen[bytes]] = []

    def daemon(self) -> subprocess.Popen[bytes]:
        with (self.root / "daemon.err").open("ab") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "canary.cli.main", "--config", str(self.config), "daemon",
                 "--tick", "0.3"],
                stdout=subprocess.DEVNULL, stderr=err, env=os.environ.copy(),
            )
        self.procs.append(proc)
        return proc

    def status(self) -> tuple[int, dict[str, Any], str]:
        out = subprocess.run(
            [sys.executable, "-m", "canary.cli.main", "--config", str(self.config), "status", "--json"],
            check=False, capture_output=True, text=True, timeout=60, env=os.environ.copy(),
        )
        return out.returncode, json.loads(out.stdout) if out.stdout.strip() else {}, out.stderr

    def firings(self) -> int:
        try:
            with sqlite3.connect(self.db, timeout=30) as conn:
                return int(conn.execute("SELECT count(*) FROM firings").fetchone()[0])
        except sqlite3.Error:
            return -1

    def errors(self) -> str:
        return (self.root / "daemon.err").read_text(errors="replace")

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path, tmp_path / "state" / "canary.db")
    yield w
    w.close()


def test_status_without_a_daemon_never_creates_a_store(world: World) -> None:
    code, doc, _err = world.status()
    assert not world.db.exists()
    assert doc["daemon"]["running"] is False
    assert code in (0, 1)


def test_store_deleted_while_running_is_a_daemon_error_then_re_created(world: World) -> None:
    world.daemon()
    wait_for(lambda: world.firings() == 5, 30, "the first firings")
    for suffix in ("", "-wal", "-shm"):
        Path(str(world.db) + suffix).unlink(missing_ok=True)
    code, doc, _err = wait_for(
        lambda: (s := world.status())[1].get("daemon", {}).get("error") and s, 20, "a daemon error"
    )
    assert code == 3
    assert "deleted" in doc["daemon"]["error"]
    # re-created, and every line re-read into it from the start (no position can be proved)
    wait_for(lambda: world.firings() == 5, 20, "the firings re-read into the new store")
    assert "Traceback" not in world.errors()


def test_store_page_corrupted_is_reported_once_and_set_aside(world: World) -> None:
    world.daemon()
    wait_for(lambda: world.firings() == 5, 30, "the first firings")
    with sqlite3.connect(world.db, timeout=30) as conn:  # every page into the main file
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = os.path.getsize(world.db)
    with open(world.db, "r+b") as f:  # every page but the first is garbage
        f.seek(4096)
        f.write(os.urandom(max(size - 4096, 8192)))
    with world.log.open("a") as f:
        f.write(f"{GUARD} seq=5\n")
    wait_for(lambda: list(world.db.parent.glob("canary.db.corrupt-*")), 30, "the store set aside")
    wait_for(lambda: world.firings() == 6, 30, "the firings re-read into a new store")
    time.sleep(1.5)
    said = world.errors()
    assert said.count("Traceback") == 0, said[max(said.find("Traceback") - 1500, 0):][:6000]


def _mount_tmpfs(where: Path) -> bool:
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
                          capture_output=True, check=False)
    return done.returncode == 0


def test_full_disk_is_a_daemon_error_with_exit_3(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk):
        pytest.skip("no tmpfs can be mounted here (the SQLite size-limit test covers it)")
    w = World(tmp_path, disk / "canary.db")
    try:
        w.daemon()
        wait_for(lambda: w.firings() == 5, 30, "the first firings")
        filler = disk / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        with w.log.open("a") as f:  # lines that cannot be stored
            f.write("".join(f"{GUARD} more={i} {'x' * 100}\n" for i in range(400)))
        code, doc, _ = wait_for(
            lambda: (s := w.status())[1].get("daemon", {}).get("error") and s, 30, "a daemon error"
        )
        assert code == 3 and "full" in doc["daemon"]["error"]
        filler.unlink()
        wait_for(lambda: w.firings() == 405, 30, "the firings once the disk has room")
        wait_for(lambda: w.status()[0] != 3, 20, "the error cleared")
    finally:
        w.close()
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_store_that_refuses_the_firings_but_takes_the_heartbeat_is_a_daemon_error(world: World) -> None:
    """A trigger makes SQLite refuse every firing row (as a full disk or a revoked grant refuses the
    collectors' commits) while the heartbeat's writes go on working. The alert channel hears of
    the error, and of its end."""
    told = world.root / "alerts.txt"
    record = "import sys; open(sys.argv[1], 'a').write(' '.join(sys.argv[2:]) + '\\n')"
    command = json.dumps([sys.executable, "-c", record, str(told), "{guard}", "{status}"])
    world.config.write_text(world.config.read_text().replace("desktop = false", f"desktop = false\ncommand = {command}"))
    world.daemon()
    wait_for(lambda: world.firings() == 5, 30, "the first firings")
    with sqlite3.connect(world.db, timeout=30) as conn:
        conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON firings BEGIN "
                     "SELECT RAISE(ABORT, 'the firings are refused'); END")
    with world.log.open("a") as handle:
        handle.write(f"{GUARD} seq=refused\n")
    code, doc, _err = wait_for(
        lambda: (s := world.status())[1].get("daemon", {}).get("error") and s, 30, "a daemon error"
    )
    assert code == 3 and "the firings are refused" in doc["daemon"]["error"]
    with sqlite3.connect(world.db, timeout=30) as conn:
        conn.execute("DROP TRIGGER refuse")
    wait_for(lambda: world.firings() == 6, 30, "the refused firing committed once the store takes it")
    code, doc, _err = wait_for(
        lambda: not (s := world.status())[1].get("daemon", {}).get("error") and s, 30, "the error gone"
    )
    assert code in (0, 1) and world.firings() == 6
    wait_for(lambda: told.exists() and "(daemon) ok" in told.read_text(), 20, "the recovery alert")
    assert told.read_text().splitlines()[:2] == ["(daemon) error", "(daemon) ok"]
    assert "Traceback" not in world.errors()


def test_full_store_by_a_size_limit_is_reported_and_recovers(tmp_path: Path) -> None:
    """The same without a mount: SQLite's ``max_page_count`` makes the store full."""
    from sqlalchemy import event, text

    store = Store(f"sqlite:///{tmp_path / 'canary.db'}")
    watch = StoreWatch(store)
    limit = {"pages": 1}

    @event.listens_for(store.engine, "connect")
    def _limit(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute(f"PRAGMA max_page_count={limit['pages']}")

    store.engine.dispose()
    now = datetime(2026, 12, 1, 10, 2, tzinfo=UTC)
    try:
        with store.engine.begin() as conn:
            conn.execute(text("INSERT INTO meta(key, value) VALUES ('fill', :v)"), {"v": "x" * 100000})
    except Exception as exc:
        from canary.daemon.storewatch import store_failure

        reason = store_failure(exc)
        assert reason is not None and "full" in reason
        watch.failed(reason, now)
    else:
        raise AssertionError("the size limit did not make the store full")
    problem = read_problem(tmp_path / "canary.db")
    assert problem is None  # no daemon holds the lock: nothing is claimed for it
    assert watch.problem is not None and "since 2026-12-01T10:02:00Z" in watch.problem.sentence()
    watch.worked(now + timedelta(seconds=1))
    assert watch.problem is None
    store.close()


def test_a_problem_is_read_only_while_a_daemon_holds_the_lock(tmp_path: Path) -> None:
    import fcntl

    db = tmp_path / "canary.db"
    write_problem(db, StoreProblem(datetime(2026, 12, 1, 10, 2, tzinfo=UTC), "database or disk is full"))
    assert read_problem(db) is None
    fd = os.open(str(db) + ".lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        problem = read_problem(db)
        assert problem is not None and problem.reason == "database or disk is full"
    finally:
        os.close(fd)


def test_a_collector_warning_is_shown_by_status_while_the_daemon_runs(world: World) -> None:
    world.daemon()
    wait_for(lambda: world.firings() == 5, 30, "the first firings")
    os.truncate(world.log, 0)  # truncated under the daemon: a possible loss it must tell of
    with world.log.open("a") as handle:
        handle.write(f"{GUARD} seq=after\n")
    code, doc, _err = wait_for(
        lambda: (s := world.status())[1].get("daemon", {}).get("warnings") and s, 30, "a collector warning"
    )
    (warning,) = doc["daemon"]["warnings"]
    assert warning["file"] == str(world.log) and "was truncated" in warning["message"]
    assert warning["count"] == 1 and code in (0, 1)
    text = subprocess.run(
        [sys.executable, "-m", "canary.cli.main", "--config", str(world.config), "status"],
        check=False, capture_output=True, text=True, timeout=60, env=os.environ.copy(),
    )
    assert f"collector warning: {world.log} was truncated" in text.stderr


class Writer(threading.Thread):
    """The agent: guard lines with sequence numbers into the log, a few every 10 ms."""

    def __init__(self, log: Path, start: int) -> None:
        super().__init__(daemon=True)
        self.log, self.next = log, start
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.01):
            with self.log.open("a") as handle:
                handle.write("".join(f"{GUARD} seq={n}\n" for n in range(self.next, self.next + 3)))
            self.next += 3


def stored_seqs(db: Path) -> set[int]:
    try:
        with sqlite3.connect(db, timeout=30) as conn:
            lines = [row[0] for row in conn.execute("SELECT line FROM firings")]
    except sqlite3.Error:
        return set()
    return {int(line.rsplit("seq=", 1)[1]) for line in lines if "seq=" in line}


def test_random_bytes_over_the_store_round_after_round_never_kill_the_daemon(world: World) -> None:
    """Each round: random bytes over the whole store while lines arrive; it is set aside, and the
    daemon lives on and counts every line written after the new store was created."""
    proc = world.daemon()
    wait_for(lambda: world.firings() == 5, 30, "the first firings")
    writer = Writer(world.log, 5)
    writer.start()
    try:
        for round_ in range(1, 7):
            time.sleep(0.5)
            with sqlite3.connect(world.db, timeout=30) as conn:  # every page into the main file
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            size = max(os.path.getsize(world.db), 65536)
            with open(world.db, "r+b") as f:
                f.seek(0 if round_ % 2 else 4096)
                f.write(os.urandom(size))
            wait_for(lambda n=round_: len(list(world.db.parent.glob("canary.db.corrupt-*"))) >= n
                     or proc.poll() is not None, 60, f"the store set aside (round {round_})")
            assert proc.poll() is None, f"the daemon died in round {round_}: exit {proc.returncode}"
            since = writer.next  # lines from here on were written after the new store was created
            wait_for(lambda s=since: s + 30 in stored_seqs(world.db) or proc.poll() is not None, 60,
                     f"lines counted in the new store (round {round_})")
            assert proc.poll() is None, f"the daemon died in round {round_}: exit {proc.returncode}"
    finally:
        writer.done.set()
        writer.join()
    last = writer.next
    wait_for(lambda: set(range(since, last)) <= stored_seqs(world.db) or proc.poll() is not None, 60,
             "every line written since the last store was created")
    assert proc.poll() is None, f"the daemon died: exit {proc.returncode}"
