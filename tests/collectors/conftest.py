"""Fixtures the collector tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from canary.store.engine import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A real SQLite store in WAL mode, in the test's directory."""
    s = Store(f"sqlite:///{tmp_path / 'canary.db'}")
    yield s
    s.close()
