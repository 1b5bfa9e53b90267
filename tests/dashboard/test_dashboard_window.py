"""The dashboard's day and week windows end where ``canary status`` and ``canary audit --window`` end them."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from canary.status.overview import status_document
from dashboard.model import load_overview, window_named
from tests.dashboard.test_dashboard_data import NOW, add_firings, seed


@pytest.mark.parametrize("label", ["24h", "7d"])
def test_a_window_that_starts_inside_an_hour_counts_from_its_instant(tmp_path: Path, label: str) -> None:
    data = seed(tmp_path)
    try:
        now = NOW + timedelta(minutes=30)
        start = now - window_named(label).span
        add_firings(data.store, [("version", start - timedelta(minutes=10), None),  # its hour, before it
                                 ("version", start + timedelta(minutes=10), None)], data.log)
        overview = load_overview(data.store, data.config, now=now, window=window_named(label))
        version = overview.row("version")
        assert version is not None
        assert (version.organic, version.canary, sum(version.buckets)) == (1, 0, 1)
        if label == "24h":  # the version guard's own window is 24h: the status counts the same
            doc = status_document(data.store, data.config, now=now, readable=True)
            row = next(g for g in doc["guards"] if g["guard"] == "version")
            assert (row["organic_firings"], row["canary_firings"]) == (1, 0)
    finally:
        data.store.close()
