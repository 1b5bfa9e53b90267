"""The store the dashboard opens, and where it reads its project's rows: it never makes a site.

A SQLite store is opened as the daemon opens it (the file is made when missing), so a dashboard
started before any daemon follows the daemon's writes once it starts. A shared store (PostgreSQL)
is opened as ``canary status`` opens it, as a reader (``Store.existing``): a project whose daemon
never wrote there has no site yet, the store is ``absent``, and its rows read as an empty store's
until the daemon has made the site (``reopened`` looks again).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from canary.config.settings import Config
from canary.store.engine import Store

__all__ = ["open_store", "project_rows", "reopened"]


def open_store(config: Config) -> Store:
    """The config's store: a SQLite file as the daemon opens it, a shared store as a reader."""
    return Store.joining(config)


def reopened(store: Store) -> Store:
    """``store``, or once a daemon has made the site it lacked, the store opened again on it (``store``
    is then closed)."""
    if not store.absent:
        return store
    again = Store.existing(store.url, site=store.site, local=store.local,
                           owner=Path(store.owner) if store.owner is not None else None)
    if again.absent:
        again.close()
        return store
    store.close()
    return again


@contextmanager
def project_rows(store: Store) -> Iterator[Store]:
    """The store to read the project's rows from, in the calling thread: ``store``, or while its site
    is absent an empty store of this thread's own (an in-memory database is one connection's)."""
    if not store.absent:
        yield store
        return
    empty = Store("sqlite://")
    try:
        yield empty
    finally:
        empty.close()
