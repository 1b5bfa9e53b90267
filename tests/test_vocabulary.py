"""The vocabulary: UTC times as every module writes them, and exit codes the error tree uses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from canary.errors import ConfigError, StoreError, UnavailableError, UsageError
from canary.vocabulary import EXIT_UNAVAILABLE, EXIT_USAGE, hour_floor, iso


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, us: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, us, tzinfo=UTC)


@pytest.mark.parametrize(
    ("moment", "expected"),
    [
        pytest.param(utc(2026, 11, 29, 10, 59, 59, 999999), utc(2026, 11, 29, 10), id="utc"),
        pytest.param(utc(2026, 11, 29, 10), utc(2026, 11, 29, 10), id="on-the-hour"),
        pytest.param(
            datetime(2026, 11, 29, 10, 45, tzinfo=timezone(timedelta(hours=5, minutes=30))),
            utc(2026, 11, 29, 5),
            id="half-hour-offset",
        ),
        pytest.param(
            datetime(2027, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=1))),
            utc(2026, 12, 31, 23),
            id="offset-crosses-year",
        ),
        pytest.param(datetime(2026, 11, 29, 10, 30), utc(2026, 11, 29, 10), id="naive-is-utc"),
    ],
)
def test_hour_floor(moment: datetime, expected: datetime) -> None:
    assert hour_floor(moment) == expected
    assert hour_floor(moment).tzinfo is UTC


def test_iso_writes_utc_with_a_z() -> None:
    paris = timezone(timedelta(hours=1))
    assert iso(datetime(2026, 11, 29, 11, 0, 0, 612000, tzinfo=paris)) == "2026-11-29T10:00:00.612000Z"
    assert iso(None) is None


def test_the_error_tree_exits_with_the_contracts_codes() -> None:
    assert ConfigError([]).exit_code == UsageError("x").exit_code == EXIT_USAGE == 2
    assert StoreError("x").exit_code == UnavailableError("x").exit_code == EXIT_UNAVAILABLE == 3
