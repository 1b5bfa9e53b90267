"""The store's back ends: every test that takes ``open_store`` runs on SQLite and on a real PostgreSQL.

PostgreSQL is the server named by ``CANARY_TEST_PG_URL`` (start one with
``eval "$(.ci/postgres start)"``). Without one those runs are skipped and say how to start it;
with ``CANARY_REQUIRE_PG=1`` (CI sets it) they fail instead. Each PostgreSQL run is a site of its
own (its own schema), dropped afterwards, so tests on one server never see each other's rows.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from canary.store.engine import Store
from canary.store.sites import REGISTRY, Site, quoted

PG_URL = os.environ.get("CANARY_TEST_PG_URL", "")
START = 'start one with `eval "$(.ci/postgres start)"`, which exports CANARY_TEST_PG_URL'


def pg_url() -> str:
    """The test server's URL, or a skip (a failure with CANARY_REQUIRE_PG=1) naming how to start one."""
    if PG_URL:
        return PG_URL
    if os.environ.get("CANARY_REQUIRE_PG") == "1":
        pytest.fail(f"CANARY_REQUIRE_PG=1, but no PostgreSQL server is named: {START}")
    pytest.skip(f"no PostgreSQL server for the store's PostgreSQL runs: {START}")


def drop_site(site: Site) -> None:
    """Remove a test site's schema and its registry row."""
    engine = create_engine(PG_URL)
    try:
        with engine.begin() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {quoted(site.schema)} CASCADE"))
            conn.execute(text(f"DELETE FROM {quoted(REGISTRY)}.sites WHERE schema_name = :s"), {"s": site.schema})
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    """The back end of this run."""
    if request.param == "postgresql":
        pg_url()
    return str(request.param)


@pytest.fixture
def test_site() -> Site:
    """A site no other test uses."""
    return Site(f"t{uuid.uuid4().hex[:12]}", "test")


@pytest.fixture
def store_url(backend: str, tmp_path: Path) -> str:
    """The URL of this run's store."""
    return f"sqlite:///{tmp_path / 'c.db'}" if backend == "sqlite" else PG_URL


@pytest.fixture
def open_store(backend: str, store_url: str, test_site: Site) -> Iterator[Callable[..., Store]]:
    """Opens this run's store (again, for a second call), as one test site; every one is closed after."""
    opened: list[Store] = []

    def open_(**kwargs: Any) -> Store:
        if backend == "postgresql":
            kwargs.setdefault("site", test_site)
        store = Store(store_url, **kwargs)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()
    if backend == "postgresql":
        drop_site(test_site)


@contextmanager
def fresh_store(backend: str, **kwargs: Any) -> Iterator[Store]:
    """A new, empty store of ``backend`` (a temporary SQLite file, or a new site on the server),
    for a property test's each example; removed after."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            store = Store(f"sqlite:///{Path(tmp) / 'c.db'}", **kwargs)
            try:
                yield store
            finally:
                store.close()
        return
    site = Site(f"t{uuid.uuid4().hex[:12]}", "test")
    store = Store(pg_url(), site=site, **kwargs)
    try:
        yield store
    finally:
        store.close()
        drop_site(site)


def as_time(value: Any) -> datetime:
    """A time read back raw: SQLite's text, or PostgreSQL's aware datetime, as aware UTC."""
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    return datetime.fromisoformat(str(value)).replace(tzinfo=UTC)
