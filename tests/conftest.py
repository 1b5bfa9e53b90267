"""Shared fixtures: every test gets its own config, state and log directories."""

from __future__ import annotations

import gc
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import tests.profiles  # noqa: F401  (registers and loads the hypothesis profile)
from canary.store.sites import Site


@pytest.fixture(autouse=True)
def isolated_locations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point config and state at tmp_path so a developer's real files never leak in."""
    config = tmp_path / "_config"
    state = tmp_path / "_state"
    config.mkdir()
    state.mkdir()
    monkeypatch.setenv("CANARY_CONFIG_DIR", str(config))
    monkeypatch.setenv("CANARY_STATE_DIR", str(state))
    monkeypatch.delenv("CANARY_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    yield tmp_path


@pytest.fixture(autouse=True)
def collect_garbage() -> Iterator[None]:
    """Collect cycles after each test, so an unclosed socket or file warns in the test that leaked it.

    What survives is frozen (moved out of the collector's sight), so each collection walks only
    what the last test left behind, not every module the suite has imported.
    """
    yield
    gc.collect()
    gc.freeze()


@pytest.fixture
def pg_site() -> Iterator[Site]:
    """A project and machine no other test uses, on the PostgreSQL test server; its schema dropped after."""
    from tests.store.conftest import drop_site, pg_url

    pg_url()
    site = Site(f"p{uuid.uuid4().hex[:10]}", "m1")
    yield site
    drop_site(site)
