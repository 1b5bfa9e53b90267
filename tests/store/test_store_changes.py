"""``StoreChanges``: the dashboard's cue to read the store again, asked from a worker thread."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from canary.store.changes import StoreChanges


def _store(tmp_path: Path) -> Path:
    path = tmp_path / "canary.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t (x)")
    return path


def test_a_write_by_another_connection_is_a_change(tmp_path: Path) -> None:
    path = _store(tmp_path)
    changes = StoreChanges(path)
    assert changes.changed()  # the first look
    assert not changes.changed()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO t VALUES (1)")
    assert changes.changed()
    assert not changes.changed()
    changes.close()


def test_closed_while_a_worker_looks_it_never_crashes_the_process(tmp_path: Path) -> None:
    """The app closes it on unmount while a worker thread may be inside ``changed``."""
    path = _store(tmp_path)
    script = textwrap.dedent(f"""
        import threading
        from pathlib import Path
        from canary.store.changes import StoreChanges
        for _ in range(300):
            changes = StoreChanges(Path({str(path)!r}))
            stop = threading.Event()
            def look():
                while not stop.is_set():
                    changes.changed()
            worker = threading.Thread(target=look)
            worker.start()
            for _ in range(50):
                changes.close()
            stop.set()
            worker.join()
        print("survived")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0 and "survived" in done.stdout, done.stderr[-2000:]
