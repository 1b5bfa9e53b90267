"""A store's file is moved or re-opened only once every connection to it is back and closed.

A connection still open on a file moved aside would open the new store's ``-wal`` and
``-shm`` by their names (see ``canary.store.users``); these tests hold real connections in
other threads while the store is set aside.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from canary.daemon import storewatch
from canary.daemon.storewatch import StoreWatch
from canary.errors import StoreError
from canary.store.engine import Store

NOW = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
CORRUPT = "the store at sqlite:///x could not be used: database disk image is malformed"


def hold(store: Store, seconds: float, released: list[float]) -> threading.Thread:
    """A thread that reads through a connection and keeps it for ``seconds``."""
    ready = threading.Event()

    def run() -> None:
        with store.engine.connect() as conn:
            conn.exec_driver_sql("SELECT count(*) FROM firings").scalar()
            ready.set()
            time.sleep(seconds)
            released.append(time.monotonic())

    thread = threading.Thread(target=run)
    thread.start()
    ready.wait(10)
    return thread


def test_a_corrupt_store_is_moved_aside_only_once_every_connection_is_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'canary.db'}")
    watch = StoreWatch(store)
    moved: list[float] = []
    real_replace = storewatch.os.replace

    def replace(src: Path, dst: Path) -> None:
        moved.append(time.monotonic())
        real_replace(src, dst)

    monkeypatch.setattr(storewatch.os, "replace", replace)
    released: list[float] = []
    holder = hold(store, 0.5, released)
    watch.failed(CORRUPT, NOW)
    holder.join()
    assert released and moved and moved[0] >= released[0]
    assert len(list(tmp_path.glob("canary.db.corrupt-*"))) == 1
    assert store.count_firings() == 0  # the new store works
    store.close()


def test_a_store_corrupt_again_is_moved_aside_again(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'canary.db'}")
    watch = StoreWatch(store)
    watch.failed(CORRUPT, NOW)
    watch.failed(CORRUPT, NOW)  # the same reason, in the same second
    assert len(list(tmp_path.glob("canary.db.corrupt-*"))) == 2
    assert store.count_firings() == 0
    store.close()


def test_a_stopped_store_hands_out_no_connection_until_it_is_re_opened(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'canary.db'}")
    assert store.stop(1.0)
    with pytest.raises(StoreError, match="being re-opened"):
        store.count_firings()
    store.reopen()
    assert store.count_firings() == 0
    store.close()


def test_stopping_waits_for_a_connection_in_use_and_says_when_it_did_not_come_back(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'canary.db'}")
    released: list[float] = []
    holder = hold(store, 0.6, released)
    assert not store.stop(0.1)  # still in use: nothing is closed
    assert store.users.in_use == 1
    assert store.stop(10.0)
    assert released
    holder.join()
    store.reopen()
    holder = hold(store, 0.6, released)
    with pytest.raises(StoreError, match="still in use"):
        store.reopen(0.1)
    holder.join()
    store.close()
