"""The dashboard's "last verdict" says what ``canary status`` says: a failing guard names its failing
canary, never the control that passed after it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from canary.cli.quick import status_table
from canary.status.overview import status_document
from tests.dashboard.test_dashboard import SIZE, cell, make_app, settle
from tests.dashboard.test_dashboard_data import NOW, Seeded, add_run

pytestmark = pytest.mark.anyio


def _status_words(seeded: Seeded, guard: str) -> str:
    """The "last verdict" cell of ``guard``'s row in the ``canary status`` table."""
    doc = status_document(seeded.store, seeded.config, now=NOW, readable=True)
    doc["guards"] = [g for g in doc["guards"] if g["guard"] == guard]
    header, row = status_table(doc).splitlines()[:2]
    start, end = header.index("last verdict"), header.index("reason")
    return row[start:end].strip()


async def test_a_failing_guard_shows_its_failing_canary_not_the_control_that_passed_after(
    seeded: Seeded,
) -> None:
    # citation's fake-url leaked, then its control passed: the latest run passed, the guard is asleep
    add_run(seeded.store, guard="citation", canary="fake-url", verdict="leaked",
            at=NOW - timedelta(minutes=12), fired=False)
    add_run(seeded.store, guard="citation", canary="real-url-control", verdict="passed",
            at=NOW - timedelta(minutes=5), expect="accept", fired=False)
    app = make_app(seeded)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert cell(app, "citation", "status").strip() == "ASLEEP"
        shown = cell(app, "citation", "verdict")
        assert "passed" not in shown
        assert shown.startswith("fake-url v0 leaked")  # the bundled fake-url has variants
    assert shown.startswith(_status_words(seeded, "citation"))


async def test_a_degraded_guard_names_its_failing_variant(seeded: Seeded) -> None:
    # denial's latest run caught (variant 0); its variant 1 leaked earlier: degraded
    app = make_app(seeded)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert cell(app, "denial", "status").strip() == "DEGRADED"
        shown = cell(app, "denial", "verdict")
        assert cell(app, "citation", "verdict") == "caught 20m ago"  # an alive guard: its latest run
    assert shown.startswith("empty-page v1 leaked")
    assert shown.startswith(_status_words(seeded, "denial"))
