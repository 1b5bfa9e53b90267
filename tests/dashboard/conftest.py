"""What the dashboard's Pilot tests share: the event loop they run on and a seeded store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dashboard.test_dashboard_data import Seeded, seed


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def seeded(tmp_path: Path) -> Iterator[Seeded]:
    data = seed(tmp_path)
    yield data
    data.store.close()
