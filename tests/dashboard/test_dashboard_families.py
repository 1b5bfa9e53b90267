"""The dashboard shows the kill rate per variant family: a mark in the list, every family in the detail."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console, RenderableType

from dashboard.screens import DetailScreen
from dashboard.widgets import DetailHead, GuardSummary
from tests.dashboard.test_dashboard import SIZE, cell, make_app, settle
from tests.dashboard.test_dashboard_data import NOW, Seeded, add_run, seed

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def seeded(tmp_path: Path) -> Iterator[Seeded]:
    data = seed(tmp_path)
    # quote is alive (its latest run caught), but one of its variants leaked earlier in the window
    add_run(data.store, guard="quote", canary="fake-quote", variant=1, verdict="leaked",
            at=NOW - timedelta(minutes=100), fired=False)
    add_run(data.store, guard="quote", canary="fake-quote", variant=1, verdict="caught",
            at=NOW - timedelta(minutes=25))
    yield data
    data.store.close()


def text_of(renderable: RenderableType) -> str:
    with open(os.devnull, "w") as sink:
        console = Console(width=200, record=True, file=sink)
        console.print(renderable)
        return console.export_text()


async def test_the_list_marks_a_guard_whose_family_has_a_hole_even_when_alive(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        overview = app.overview
        assert overview is not None
        quote = overview.row("quote")
        assert quote is not None and quote.status.status.value == "alive"
        assert cell(app, "quote", "kill") == "67%!"
        assert cell(app, "denial", "kill") == "50%!"
        assert cell(app, "number", "kill") == "100%"  # no hole, no mark
        summary = app.screen.query_one(GuardSummary)
        summary.guard = "quote"
        await pilot.pause()
        assert "holes: fake-quote 2/3 caught" in text_of(summary.render())


async def test_the_detail_shows_every_family_and_each_variants_latest_verdict(seeded: Seeded) -> None:
    app: Any = make_app(seeded)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.push_screen(DetailScreen("quote"))
        await settle(pilot)
        head = app.screen.query_one(DetailHead)
        text = text_of(head.render())
        assert "kill rate per variant family" in text
        assert "fake-quote  2/3 caught (67%)  v0 caught  v1 caught" in text
        assert head.size.height >= 4  # the family lines are on screen, not cut at the head's first lines
        app.pop_screen()
        app.push_screen(DetailScreen("denial"))
        await settle(pilot)
        text = text_of(app.screen.query_one(DetailHead).render())
        # the variant that leaked is named with its verdict
        assert "empty-page  1/2 caught (50%)  v0 caught  v1 leaked" in text
