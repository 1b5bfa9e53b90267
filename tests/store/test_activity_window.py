"""A status counts only the activity, lines and firings that lie inside its guard's window."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from canary.config.settings import Config, load_config
from canary.status.evaluate import GuardFacts, GuardStatus
from canary.status.overview import evaluate_all
from canary.store.engine import Store
from canary.vocabulary import Status
from collectors.scan import Hit
from collectors.tailer import Batch, FileState

#: The tester's afternoon: the agent last worked at 15:21, the guard was added at 15:25.
NOW = datetime(2026, 11, 29, 15, 25, tzinfo=UTC)
DAY = timedelta(hours=24)
MINUTE = timedelta(minutes=1)


def config_for(tmp_path: Path, *, activity: bool = True) -> Config:
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "zero.toml").write_text(
        "[guard]\nname = 'zero'\nmatch = 'NeverGuard: rejected'\nwindow = '1m'\n")
    (tmp_path / "defs" / "day.toml").write_text(
        "[guard]\nname = 'day'\nmatch = 'DayGuard: rejected'\nwindow = '24h'\n")
    pattern = "activity = 'task finished'\n" if activity else ""
    (tmp_path / "canary.toml").write_text(
        f"defs = ['defs/*.toml']\n[logs]\npaths = []\n{pattern}"
        f"[store]\nurl = 'sqlite:///{tmp_path / 'unused.db'}'\nretention = '12h'\n")
    return load_config(str(tmp_path / "canary.toml"))


class Log:
    """One followed file, committed batch by batch, each read at its own instant."""

    def __init__(self, open_store: Callable[..., Store]) -> None:
        self.read_at = NOW - 2 * DAY
        self.store = open_store(clock=lambda: self.read_at)
        self.offset = 0

    def read(self, at: datetime, hits: list[Hit], lines: int | None = None) -> None:
        self.read_at = at
        self.offset += 10 * max(len(hits), 1)
        state = FileState("1:2", 1, 2, "/logs/agent.log", self.offset, 10, b"h" * 16, self.offset)
        self.store.commit(Batch(state, hits, len(hits) if lines is None else lines, self.offset))

    def work(self, *times: datetime) -> list[Hit]:
        return [Hit(self.offset + n, f"{t.isoformat()} task finished", (), True, t) for n, t in enumerate(times)]


def status(log: Log, config: Config, guard: str, now: datetime) -> tuple[GuardFacts, GuardStatus]:
    found = {f.guard: (f, s) for f, s in evaluate_all(log.store, config, now=now, readable=True)}
    return found[guard]


def test_a_one_minute_window_counts_no_work_done_before_it(open_store: Callable[..., Store],
                                                           tmp_path: Path) -> None:
    config = config_for(tmp_path)
    log = Log(open_store)
    log.read(NOW - 2 * DAY, [], lines=1)  # watched for days
    log.read(datetime(2026, 11, 29, 15, 21, 30, tzinfo=UTC),
             log.work(*(datetime(2026, 11, 29, 15, 0, tzinfo=UTC) + n * timedelta(seconds=1.8)
                        for n in range(706))))
    facts, found = status(log, config, "zero", NOW)
    assert facts.activity == 0
    assert found.status is not Status.ASLEEP, found.reason
    # work logged inside the minute is counted, and a silent guard over it is asleep
    log.read(NOW - timedelta(seconds=20), log.work(NOW - timedelta(seconds=30), NOW - timedelta(seconds=25)))
    facts, found = status(log, config, "zero", NOW)
    assert facts.activity == 2
    assert found.status is Status.ASLEEP
    assert "logged 2 unit(s) of work" in found.reason


def test_a_one_minute_window_counts_only_its_own_whole_minutes(open_store: Callable[..., Store],
                                                               tmp_path: Path) -> None:
    config = config_for(tmp_path)
    log = Log(open_store)
    log.read(NOW - 2 * DAY, [], lines=1)
    log.read(NOW, log.work(NOW - timedelta(seconds=90), NOW - timedelta(seconds=50)))
    # at 15:25:20 the window starts at 15:24:20: the minute 15:24 is partly outside it
    facts, found = status(log, config, "zero", NOW + timedelta(seconds=20))
    assert facts.activity == 0
    assert found.status is not Status.ASLEEP, found.reason
    # at 15:25:00 the window is the whole minute 15:24, and the work at 15:24:10 is in it
    facts, found = status(log, config, "zero", NOW)
    assert facts.activity == 1
    assert found.status is Status.ASLEEP


def test_a_day_window_leaves_out_its_first_hours_work_before_it(open_store: Callable[..., Store],
                                                               tmp_path: Path) -> None:
    config = config_for(tmp_path)
    log = Log(open_store)
    start = NOW - DAY  # 15:25 the day before
    log.read(start - 2 * timedelta(hours=1), [], lines=1)
    log.read(start + timedelta(minutes=20),
             log.work(start - timedelta(minutes=24), start - timedelta(minutes=4), start - timedelta(seconds=1),
                      start, start + timedelta(minutes=10)))
    log.read(NOW - timedelta(hours=3), log.work(NOW - timedelta(hours=3)))
    facts, _found = status(log, config, "day", NOW)
    assert facts.activity == 3  # from 15:25 on; the three lines earlier in that hour are outside
    # a status read half a minute later leaves the minute 15:25 out: part of it is outside
    facts, _found = status(log, config, "day", NOW + timedelta(seconds=30))
    assert facts.activity == 2


def test_a_day_window_whose_first_hour_holds_all_the_work_before_it_is_not_asleep(
        open_store: Callable[..., Store], tmp_path: Path) -> None:
    config = config_for(tmp_path)
    log = Log(open_store)
    start = NOW - DAY
    log.read(start - 2 * timedelta(hours=1), [], lines=1)
    log.read(start, log.work(*(start - timedelta(minutes=25) + n * MINUTE for n in range(20))))
    facts, found = status(log, config, "day", NOW)
    assert facts.activity == 0
    assert found.status is not Status.ASLEEP, found.reason


def test_lines_read_before_a_short_window_are_not_counted_in_it(open_store: Callable[..., Store],
                                                                tmp_path: Path) -> None:
    """With no activity pattern, the lines read tell an idle agent from an asleep guard."""
    config = config_for(tmp_path, activity=False)
    log = Log(open_store)
    log.read(NOW - 2 * DAY, [], lines=1)
    log.read(datetime(2026, 11, 29, 15, 21, tzinfo=UTC), [], lines=706)
    facts, found = status(log, config, "zero", NOW)
    assert facts.lines == 0
    assert found.status is not Status.ASLEEP, found.reason
    log.read(NOW - timedelta(seconds=30), [], lines=5)
    facts, found = status(log, config, "zero", NOW)
    assert facts.lines == 5
    assert found.status is Status.ASLEEP


def test_a_window_longer_than_the_retention_counts_no_firing_before_it(open_store: Callable[..., Store],
                                                                       tmp_path: Path) -> None:
    config = config_for(tmp_path)  # retention 12h, the guard's window 24h
    log = Log(open_store)
    start = NOW - DAY
    log.read(start - 2 * timedelta(hours=1), [], lines=1)
    fired = Hit(log.offset, "DayGuard: rejected", ("day",), False, start - timedelta(minutes=10))
    log.read(start, [fired, *log.work(start + timedelta(minutes=5))])
    facts, found = status(log, config, "day", NOW)
    assert (facts.organic, facts.activity) == (0, 1)
    assert found.status is Status.ASLEEP
    inside = Hit(log.offset, "DayGuard: rejected", ("day",), False, start + timedelta(minutes=10))
    log.read(start + timedelta(minutes=11), [inside])
    facts, found = status(log, config, "day", NOW)
    assert facts.organic == 1
    assert found.status is not Status.ASLEEP


def test_minutes_are_kept_as_far_back_as_the_longest_window_begins(open_store: Callable[..., Store],
                                                                   tmp_path: Path) -> None:
    from sqlalchemy import text

    from tests.store.conftest import as_time

    configured = Store.of(config_for(tmp_path))
    assert configured.minutes_kept == DAY + timedelta(hours=1)  # the longest window, and an hour
    configured.close()
    log = Log(open_store)
    log.store.minutes_kept = 2 * timedelta(hours=1)

    def minutes() -> list[tuple[datetime, int, int]]:
        with log.store.engine.connect() as conn:
            rows = conn.execute(text("SELECT minute, activity, lines FROM minute_activity ORDER BY minute"))
            return [(as_time(m), int(a), int(n)) for m, a, n in rows]

    log.read(NOW, log.work(NOW - timedelta(hours=3), NOW - timedelta(hours=1)))
    assert minutes() == [(NOW - timedelta(hours=1), 1, 0), (NOW, 0, 2)]  # the older line: its hour only
    log.read(NOW + timedelta(hours=2), [], lines=1)
    assert minutes() == [(NOW, 0, 2), (NOW + timedelta(hours=2), 0, 1)]
    log.read(NOW + timedelta(hours=2, minutes=30), [], lines=1)  # dropped once an hour
    assert minutes()[0] == (NOW, 0, 2)
    log.read(NOW + timedelta(hours=3), [], lines=1)
    assert [m for m, _a, _n in minutes()] == [NOW + timedelta(hours=2), NOW + timedelta(hours=2, minutes=30),
                                              NOW + timedelta(hours=3)]


def test_a_window_shorter_than_the_watch_is_not_whole_before_it_has_passed(
    open_store: Callable[..., Store], tmp_path: Path
) -> None:
    """Logs first read at 15:20:10: a 1m window ending 15:20:40 was not watched whole, one ending at
    15:21:10 was; the first hour read (15:00) is no measure of when watching began."""
    config = config_for(tmp_path)
    log = Log(open_store)
    first = datetime(2026, 11, 29, 15, 20, 10, tzinfo=UTC)
    log.read(first, log.work(first - timedelta(seconds=5)))
    log.read(first + timedelta(seconds=25), log.work(first + timedelta(seconds=20)))
    facts, found = status(log, config, "zero", first + timedelta(seconds=30))
    assert facts.activity == 2
    assert found.status is Status.NEW, found.reason
    assert facts.watched_since is not None and facts.watched_since > first - MINUTE
    log.read(first + timedelta(seconds=118), log.work(first + timedelta(seconds=115)))
    _facts, found = status(log, config, "zero", first + timedelta(seconds=125))
    assert found.status is Status.ASLEEP, found.reason


def test_watching_older_than_the_kept_minutes_still_counts_as_watched(
    open_store: Callable[..., Store], tmp_path: Path
) -> None:
    """Once the first hour's minutes are pruned, the logs have been watched longer than any window."""
    config = config_for(tmp_path)
    log = Log(open_store)
    log.read(NOW - 2 * DAY, [], lines=1)
    log.read(NOW - timedelta(seconds=20), log.work(NOW - timedelta(seconds=30)))
    facts, found = status(log, config, "day", NOW)
    assert facts.watched_since is not None and facts.watched_since <= NOW - DAY
    assert found.status is Status.ASLEEP, found.reason
