"""A store shared by several projects and machines: each site's rows its own, written at once."""

from __future__ import annotations

import multiprocessing
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import insert, text

from canary.config.settings import Config, StoreConfig
from canary.errors import StoreError
from canary.status.overview import status_document
from canary.store.engine import Store
from canary.store.sites import Site, list_sites
from canary.store.tables import Run
from collectors.positions import Batch, FileState
from collectors.scan import Hit
from tests.store.conftest import drop_site, pg_url

NOW = datetime(2026, 11, 29, 10, 30, tzinfo=UTC)


def state(key: str, offset: int) -> FileState:
    return FileState(key, 1, int(key.split(":")[1]), f"/logs/{key}.log", offset, 10, b"h" * 16, offset)


def commit_lines(store: Store, key: str, count: int, guard: str = "g") -> None:
    """``count`` batches of one firing each, as a tailer commits a file line by line."""
    for i in range(count):
        hit = Hit(i * 10, f"{guard} rejected #{i}", (guard,), False, NOW)
        store.commit(Batch(state(key, (i + 1) * 10), [hit], 1, 10, since=i * 10))


def test_two_sites_of_one_server_never_see_each_others_rows() -> None:
    url = pg_url()
    alpha, beta = Site(f"alpha{uuid.uuid4().hex[:6]}", "laptop"), Site(f"beta{uuid.uuid4().hex[:6]}", "ci")
    first, second = Store(url, site=alpha, clock=lambda: NOW), Store(url, site=beta, clock=lambda: NOW)
    try:
        commit_lines(first, "1:1", 3)
        commit_lines(second, "1:1", 5)  # the same file key on another machine: another file
        assert first.position("1:1") == state("1:1", 30) and second.position("1:1") == state("1:1", 50)
        assert (first.count_firings(), second.count_firings()) == (3, 5)
        listed = {(s.project, s.machine) for s in list_sites(first.engine)}
        assert {(alpha.project, "laptop"), (beta.project, "ci")} <= listed
        with first.engine.connect() as conn:
            assert conn.execute(text("SELECT current_schema()")).scalar() == alpha.schema
    finally:
        first.close()
        second.close()
        drop_site(alpha)
        drop_site(beta)


def test_a_sqlite_store_holds_one_project(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    Store(url, site=Site("alpha", "laptop")).close()
    Store(url, site=Site("alpha", "other-host")).close()  # the same project, the file moved: fine
    with pytest.raises(StoreError, match=r"belongs to project 'alpha', not 'beta'.*PostgreSQL"):
        Store(url, site=Site("beta", "laptop"))


def _writer(url: str, project: str, key: str, count: int) -> None:
    store = Store(url, site=Site(project, "bench"), clock=lambda: NOW)
    try:
        commit_lines(store, key, count)
    finally:
        store.close()


def test_daemons_of_several_projects_write_at_once_and_each_keeps_its_own(
    backend: str, store_url: str, test_site: Site
) -> None:
    """Four processes commit line by line at once: on PostgreSQL each as its own project's site,
    on SQLite (one project a store) each its own file. Every count and position is exact."""
    writers = 4
    count = 60
    projects = [f"{test_site.project}w{i}" if backend == "postgresql" else test_site.project
                for i in range(writers)]
    # no store yet: the first commits race to create it (each site's schema, the registry)
    spawn = multiprocessing.get_context("spawn")
    procs = [spawn.Process(target=_writer, args=(store_url, projects[i], f"1:{i + 1}", count + i))
             for i in range(writers)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    try:
        for i in range(writers):
            store = Store(store_url, site=Site(projects[i], "bench"))
            try:
                assert store.position(f"1:{i + 1}") == state(f"1:{i + 1}", (count + i) * 10)
                with store.engine.connect() as conn:
                    mine = conn.execute(text("SELECT count(*) FROM firings WHERE file_key = :k"),
                                        {"k": f"1:{i + 1}"}).scalar()
                    total = conn.execute(text("SELECT SUM(count) FROM hourly_counts")).scalar()
                assert mine == count + i
                expected = (count + i) if backend == "postgresql" else sum(count + j for j in range(writers))
                assert total == expected
            finally:
                store.close()
    finally:
        if backend == "postgresql":
            for project in projects:
                drop_site(Site(project, "bench"))


def test_the_status_document_is_the_same_on_both_back_ends(
    open_store: Callable[..., Store], tmp_path: Path
) -> None:
    """The status queries (raw SQL, through ``canary.store.reads``) read the same facts on either back end."""
    from canary.config.definitions import load_definitions

    defs = tmp_path / "defs"
    defs.mkdir()
    (defs / "g.toml").write_text(
        '[guard]\nname = "g"\nmatch = "g rejected"\n\n[[canary]]\nname = "c"\nevery = "6h"\n'
        'prompt = "Read {fixture_url}."\ninject = "{nonce}.example.org"\nleak = "{nonce}.example.org"\n')
    guards, problems = load_definitions(["defs/*.toml"], tmp_path)
    assert not problems
    config = Config(store=StoreConfig("unused"), guards=tuple(guards))
    store = open_store(clock=lambda: NOW)
    commit_lines(store, "1:1", 4)
    with store.engine.begin() as conn:
        conn.execute(insert(Run.__table__).values(  # type: ignore[attr-defined]
            guard="g", canary="c", variant=0, expect="reject", nonce="n" * 36, started=NOW - timedelta(minutes=5),
            finished=NOW - timedelta(minutes=4), duration_s=1.0, verdict="caught", trace="{}", firings=1,
            foreign_calls=0, injected_text="x", leak_text="x"))
    doc = status_document(store, config, now=NOW + timedelta(minutes=1), readable=True)
    (guard,) = doc["guards"]
    assert (guard["status"], guard["organic_firings"], guard["last_verdict"]) == ("alive", 4, "caught"), guard["reason"]
    assert guard["kill_rate"] == 1.0 and guard["last_run"] == "2026-11-29T10:25:00Z"
