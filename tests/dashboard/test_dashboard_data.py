"""The dashboard's data: a seeded store, and what the model and renderings make of it.

``seed`` is shared with the Pilot and snapshot tests: six guards that cover the
statuses a user meets (two alive, quiet, degraded, asleep by a leak, asleep by
silence), a running daemon, transitions and alert deliveries, at a fixed clock.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert

from canary.config.settings import Config, DaemonConfig, load_config
from canary.locations import bundled_defs_dir
from canary.records import replace
from canary.store.engine import Store
from canary.store.tables import Delivery, Firing, Heartbeat, HourlyActivity, HourlyCount, Run, Transition
from canary.vocabulary import Status, hour_floor
from dashboard.model import WINDOWS, load_alerts, load_detail, load_overview, window_named
from dashboard.queries import firing_cells, hourly_cells
from dashboard.render import ago, badge, sparkline, stage_glyphs, timeline

NOW = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
GUARDS = ("citation", "quote", "number", "denial", "version", "date")
LINES = {
    "citation": "WARN  guards CitationGuard: rejected url=https://x{n}.example.org/page not in fetched urls",
    "quote": 'WARN  guards QuoteGuard: rejected quote="The fee is {n} euros." not found verbatim',
    "number": "WARN  guards SpanGrounding: rejected entity={n} not in source quote",
    "denial": 'WARN  guards EvidenceDenial: rejected claim="The page was empty." while page had {n} chars',
    "version": "WARN  guards VersionGuard: rejected version=9.{n}.0 not in observations",
}


@dataclass
class Seeded:
    """A config and a store filled with a known story."""

    config: Config
    store: Store
    log: Path


def write_config(directory: Path, *, control: str = "127.0.0.1:11437") -> Config:
    """A canary.toml over the six bundled guards, its log and store in ``directory``."""
    defs = ", ".join(repr((bundled_defs_dir() / f"{g}.toml").as_posix()) for g in GUARDS)
    log = directory / "agent.log"
    log.touch()
    path = directory / "canary.toml"
    path.write_text(
        f"""defs = [{defs}]

[agent]
url = "http://127.0.0.1:9/ask"

[logs]
paths = [{log.as_posix()!r}]
activity = 'task finished'

[store]
url = {"sqlite:///" + (directory / "canary.db").as_posix()!r}
""",
        encoding="utf-8",
    )
    config = load_config(str(path))
    return replace(config, daemon=DaemonConfig(control=control))


def add_firings(store: Store, rows: list[tuple[str, datetime, int | None]], log: Path) -> None:
    """Firing rows and their hourly counts, as the collectors would commit them."""
    firings: list[dict[str, Any]] = []
    counts: Counter[tuple[str, datetime, str]] = Counter()
    for i, (guard, ts, run_id) in enumerate(rows):
        firings.append({
            "guard": guard, "ts": ts, "ts_from_line": True, "read_at": ts, "path": str(log),
            "file_key": "1:1", "offset": 1000 + i * 120, "line": LINES[guard].format(n=100 + i),
            "run_id": run_id,
        })
        counts[(guard, hour_floor(ts), "organic" if run_id is None else "canary")] += 1
    with store.engine.begin() as conn:
        conn.execute(insert(Firing), firings)
        for (guard, hour, source), n in counts.items():
            conn.execute(insert(HourlyCount).values(guard=guard, hour=hour, source=source, count=n))


def add_run(store: Store, *, guard: str, canary: str, verdict: str, at: datetime, variant: int = 0,
            expect: str = "reject", fired: bool = True, injected: str = "", leak: str | None = None,
            answer: str = "", evidence: str | None = None) -> int:
    """A finished canary run with a plausible trace."""
    trace = {
        "sent": 0.0, "fixture_fetched": 0.21,
        "injected": None if verdict == "not_injected" else 0.35,
        "fired": 0.61 if fired else None,
        "repair_requested": 0.9 if fired and expect == "reject" else None,
        "answered": 2.1,
    }
    with store.engine.begin() as conn:
        result = conn.execute(insert(Run).values(
            guard=guard, canary=canary, variant=variant, expect=expect, nonce=f"n{guard}{canary}{at.timestamp()}",
            started=at, finished=at + timedelta(seconds=3), duration_s=2.41, verdict=verdict,
            trace=json.dumps(trace), leaked=verdict in ("leaked", "fired_but_leaked"), firings=int(fired),
            evidence=evidence, injected_text=injected, leak_text=leak, answer=answer,
        ))
        key = result.inserted_primary_key
        assert key is not None
        return int(key[0])


def seed(directory: Path, *, control: str = "127.0.0.1:11437", daemon: str = "running") -> Seeded:
    """The shared story at ``NOW``; ``daemon`` is ``running``, ``stopped`` or ``never``."""
    config = write_config(directory, control=control)
    store = Store(config.store.url)
    log = directory / "agent.log"
    with store.engine.begin() as conn:
        conn.execute(insert(HourlyActivity), [
            {"hour": hour_floor(NOW) - timedelta(hours=h), "activity": 20, "lines": 2000, "bytes": 200_000}
            for h in range(0, 50)
        ])
    firings: list[tuple[str, datetime, int | None]] = []
    for i in range(40):  # citation: steady, busier lately
        firings.append(("citation", NOW - timedelta(minutes=7 + 35 * i), None))
    for i in range(12):  # quote: a burst six hours ago and a few recent ones
        firings.append(("quote", NOW - timedelta(hours=6, minutes=i * 3), None))
    for i in range(3):
        firings.append(("quote", NOW - timedelta(minutes=2 + 11 * i), None))
    for i in range(5):  # denial: a few, hours apart
        firings.append(("denial", NOW - timedelta(hours=1 + 4 * i, minutes=13), None))

    def run(guard: str, canary: str, verdict: str, minutes: int, **kw: Any) -> int:
        return add_run(store, guard=guard, canary=canary, verdict=verdict, at=NOW - timedelta(minutes=minutes), **kw)

    url = "https://k3v9q2.example.org/permit"
    cit = run("citation", "fake-url", "caught", 20, injected=f"The minimum is 740 euros. Source: {url}",
              leak="k3v9q2.example.org", answer="The minimum is 740 euros per month. Source: http://127.0.0.1:11436/f/k3v9q2",
              evidence="2026-11-29T09:40:00.612Z WARN guards CitationGuard: rejected url=" + url)
    run("citation", "real-url-control", "passed", 60, expect="accept", fired=False,
        injected="The minimum is 812 euros per month.", leak="812", answer="The minimum is 812 euros per month.")
    qrun = run("quote", "fake-quote", "caught", 30, injected='The page says: "The fee is 90 euros."', leak="fee is 90")
    nrun = run("number", "fake-number", "caught", 45, injected="The amount is 9410 euros.", leak="9410",
               answer="The amount is 410 euros.")
    run("denial", "empty-page", "leaked", 200, fired=False, injected="The page was empty.", leak="was empty",
        answer="The page at http://127.0.0.1:11436/f/a was empty, so I cannot say.")
    drun = run("denial", "empty-page", "caught", 50, variant=0, injected="The page was empty.", leak="was empty",
               answer="The minimum is 530 euros per month.")
    # denial's second variant leaked earlier in the window: variants disagree.
    with store.engine.begin() as conn:
        conn.execute(Run.__table__.update().where(Run.__table__.c.verdict == "leaked").values(variant=1))  # type: ignore[attr-defined]
    run("version", "fake-version", "leaked", 15, fired=False, injected="The latest version is 4.17.2.",
        leak="4.17.2", answer="The latest version is 4.17.2.")
    run("version", "fake-version", "leaked", 375, fired=False, injected="The latest version is 7.0.31.",
        leak="7.0.31", answer="The latest version is 7.0.31.")
    run("date", "fake-date", "not_injected", 25, fired=False, injected="It was published on 3 March 2024.",
        leak="3 March 2024", answer="The latest release is 2.4.1, published on 12 May 2025.")
    for guard, run_id, minutes in (("citation", cit, 20), ("quote", qrun, 30), ("number", nrun, 45),
                                   ("denial", drun, 50)):
        firings.append((guard, NOW - timedelta(minutes=minutes) + timedelta(seconds=1), run_id))
    add_firings(store, firings, log)

    with store.engine.begin() as conn:
        transitions = [
            ("version", 380, "alive", None, "canary fake-version caught at 03:40; 2 organic firing(s) in 24h"),
            ("version", 370, "asleep", "alive",
             "canary fake-version leaked at 03:45: the answer reached the user; the guard wrote no line"),
            ("denial", 195, "degraded", "alive", "canaries disagree: empty-page variant 1 leaked at 06:40"),
            ("date", 20, "asleep", "new",
             "no firing in the last 1d while the agent logged 1000 unit(s) of work, and no canary was caught"),
        ]
        for guard, minutes, status, previous, reason in transitions:
            result = conn.execute(insert(Transition).values(
                guard=guard, at=NOW - timedelta(minutes=minutes), status=status, previous=previous, reason=reason))
            tid = result.inserted_primary_key
            assert tid is not None
            if status in ("asleep", "degraded"):
                conn.execute(insert(Delivery), [
                    {"transition_id": int(tid[0]), "guard": guard, "kind": "change", "channel": "desktop",
                     "state": "sent", "attempts": 1, "next_try": NOW, "created": NOW,
                     "sent_at": NOW - timedelta(minutes=minutes), "last_error": None},
                    {"transition_id": int(tid[0]), "guard": guard, "kind": "change", "channel": "webhook",
                     "state": "failed", "attempts": 8, "next_try": NOW, "created": NOW,
                     "sent_at": None, "last_error": "HTTP 502 from hooks.example.org"},
                ])
        if daemon != "never":
            conn.execute(insert(Heartbeat).values(
                id=1, pid=4242, started=NOW - timedelta(hours=3), files=1,
                beat=NOW - timedelta(seconds=2) if daemon == "running" else NOW - timedelta(minutes=10),
                proxy="http://127.0.0.1:11435", fixtures="http://127.0.0.1:11436", control=f"http://{control}",
                stopped=None if daemon == "running" else NOW - timedelta(minutes=10),
            ))
    return Seeded(config, store, log)


@pytest.fixture
def seeded(tmp_path: Path) -> Seeded:
    data = seed(tmp_path)
    yield data  # type: ignore[misc]
    data.store.close()


def statuses(seeded: Seeded, **kw: Any) -> dict[str, Status]:
    overview = load_overview(seeded.store, seeded.config, now=NOW, window=window_named("24h"), **kw)
    return {r.guard: r.status.status for r in overview.rows}


def test_the_seed_covers_the_statuses_a_user_meets(seeded: Seeded) -> None:
    assert statuses(seeded) == {
        "version": Status.ASLEEP, "date": Status.ASLEEP, "denial": Status.DEGRADED,
        "number": Status.QUIET, "citation": Status.ALIVE, "quote": Status.ALIVE,
    }


def test_the_unhealthy_come_first_in_definition_order(seeded: Seeded) -> None:
    overview = load_overview(seeded.store, seeded.config, now=NOW, window=window_named("24h"))
    assert [r.guard for r in overview.rows] == ["version", "date", "denial", "number", "citation", "quote"]


@pytest.mark.parametrize("label", [w.label for w in WINDOWS])
def test_window_counts_equal_the_sparkline_sum_and_split_organic_from_canary(seeded: Seeded, label: str) -> None:
    overview = load_overview(seeded.store, seeded.config, now=NOW, window=window_named(label))
    for row in overview.rows:
        assert sum(row.buckets) == row.organic + row.canary
        assert len(row.buckets) == overview.window.cells
    citation = overview.row("citation")
    assert citation is not None
    # citation fires every 35 minutes from 10 min ago, plus one canary firing 20 min ago.
    expected = {"1h": (2, 1), "24h": (40, 1), "7d": (40, 1), "30d": (40, 1)}[label]
    assert (citation.organic, citation.canary) == expected


def test_the_one_hour_window_counts_the_firing_rows_of_the_last_hour_only(seeded: Seeded) -> None:
    overview = load_overview(seeded.store, seeded.config, now=NOW, window=window_named("1h"))
    quote = overview.row("quote")
    assert quote is not None
    assert (quote.organic, quote.canary) == (3, 1)  # the burst six hours ago is outside
    assert quote.buckets[-1] == 1  # 2 minutes ago lands in the last 2-minute bar


def test_firing_cells_group_by_guard_cell_and_source(seeded: Seeded) -> None:
    rows = firing_cells(seeded.store.engine, NOW - timedelta(minutes=10), NOW, timedelta(minutes=2))
    # citation 7 min ago is in cell 1 (8..6 min ago), quote 2 min ago in cell 4 (2..0 min ago).
    assert sorted(rows) == [("citation", 1, "organic", 1), ("quote", 4, "organic", 1)]


@pytest.mark.parametrize("label", [w.label for w in WINDOWS])
def test_cells_grouped_in_sql_equal_cells_grouped_in_python(seeded: Seeded, label: str) -> None:
    spec = window_named(label)
    start = NOW - spec.span + timedelta(minutes=17)  # not on an hour: the first hour is partial
    engine = seeded.store.engine
    if spec.per_minute:
        in_sql = firing_cells(engine, start, NOW, spec.cell)
        in_python = firing_cells(engine, start, NOW, spec.cell, in_sql=False)
    else:
        in_sql = hourly_cells(engine, start, spec.cell)
        in_python = hourly_cells(engine, start, spec.cell, in_sql=False)
    def clamp(rows: list[tuple[str, int, str, int]]) -> Counter[tuple[str, int, str]]:
        counted: Counter[tuple[str, int, str]] = Counter()
        for guard, index, source, n in rows:
            counted[(guard, max(index, 0), source)] += n
        return counted
    assert in_sql and clamp(in_sql) == clamp(in_python)


def test_with_the_daemon_down_statuses_are_as_of_its_last_heartbeat(tmp_path: Path) -> None:
    data = seed(tmp_path, daemon="stopped")
    overview = load_overview(data.store, data.config, now=NOW, window=window_named("24h"))
    assert overview.read_only
    assert overview.as_of == NOW - timedelta(minutes=10)
    assert overview.now == NOW
    data.store.close()


def test_with_no_daemon_ever_statuses_are_computed_now(tmp_path: Path) -> None:
    data = seed(tmp_path, daemon="never")
    overview = load_overview(data.store, data.config, now=NOW, window=window_named("24h"))
    assert overview.read_only and overview.as_of == NOW and overview.daemon.beat is None
    data.store.close()


def test_detail_and_alert_history_read_newest_first(seeded: Seeded) -> None:
    detail = load_detail(seeded.store, seeded.config, "version", now=NOW)
    assert [r.verdict for r in detail.runs] == ["leaked", "leaked"]
    assert detail.runs[0].trace["fired"] is None and detail.runs[0].leak_text == "4.17.2"
    assert [t.status for t in detail.transitions] == ["asleep", "alive"]
    history = load_alerts(seeded.store, now=NOW)
    assert [r.transition.guard for r in history.rows] == ["date", "denial", "version", "version"]
    assert {d.state for d in history.rows[0].deliveries} == {"sent", "failed"}


def test_renderings_read_without_colour() -> None:
    assert badge(Status.ASLEEP).plain.strip() == "ASLEEP"
    assert badge(Status.ALIVE, stale=True).plain.strip() == "ALIVE?"
    assert badge(Status.ASLEEP, stale=True).plain.strip() == "ASLEEP"
    assert sparkline([0, 1, 4, 8]).plain == "·▂▅█"
    assert ago(NOW - timedelta(minutes=90), NOW) == "1h" and ago(None, NOW) == "never"


def test_a_leaked_run_shows_where_it_died(seeded: Seeded) -> None:
    run = load_detail(seeded.store, seeded.config, "version", now=NOW).runs[0]
    assert stage_glyphs(run).plain == "●─●─●─✗─○─●"
    assert "✗ no firing: the guard wrote no line" in timeline(run).plain
    not_injected = load_detail(seeded.store, seeded.config, "date", now=NOW).runs[0]
    assert stage_glyphs(not_injected).plain == "●─●─✗─○─○─●"


def test_a_run_under_an_earlier_definition_is_shown_as_history(seeded: Seeded) -> None:
    """Runs stamped with the canary's current fingerprint are evidence; one stamped with another is
    marked as history in the detail screen's and the overview's run lists."""
    from canary.config.fingerprints import fingerprint
    from canary.runs.runlog import RunLog
    from tests.helpers_store import record

    guard = next(g for g in seeded.config.guards if g.name == "version")
    canary = guard.canaries[0]
    runs = RunLog(seeded.store)
    for n, stamp in enumerate(["0123456789abcdef", fingerprint(guard, canary)]):
        rid = runs.start(guard="version", canary=canary.name, variant=0, expect="reject", nonce=f"h{n}",
                         started=NOW - timedelta(minutes=5 - n), injected_text="x", leak_text=None,
                         definition=stamp)
        runs.finish(rid, record("caught"), finished=NOW - timedelta(minutes=4 - n))
    detail = load_detail(seeded.store, seeded.config, "version", now=NOW)
    assert [r.history for r in detail.runs][:2] == [False, True]  # newest first
    overview = load_overview(seeded.store, seeded.config, now=NOW, window=window_named("24h"))
    assert [r.history for r in overview.runs if r.guard == "version"][:2] == [False, True]
    assert [r.history for r in detail.runs[2:]] == [False, False]  # from before stamps: not marked
    from dashboard.render import verdict_text

    assert verdict_text(detail.runs[1]).plain == "caught (earlier definition)"
    assert verdict_text(detail.runs[0]).plain == "caught"
