"""TimestampParser: one table of line formats, then the edges around it."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.timestamps import TimestampParser
from tests.profiles import examples

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
MINUS5 = timezone(timedelta(hours=-5))


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, us: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, us, tzinfo=UTC)


def row(
    id: str,
    line: bytes,
    expected: datetime | None,
    *,
    fields: Mapping[str, object] | None = None,
    mode: str = "auto",
    fmt: str | None = None,
    tz: timezone = UTC,
    now: datetime = NOW,
) -> object:
    return pytest.param(line, fields, mode, fmt, tz, now, expected, id=id)


CASES = [
    # ISO 8601 / RFC 3339
    row("iso-z", b"2026-11-29T10:00:00Z guard fired", utc(2026, 11, 29, 10)),
    row("iso-millis-z", b"2026-11-29T10:00:00.612Z x", utc(2026, 11, 29, 10, 0, 0, 612000)),
    row("iso-lowercase-z", b"2026-11-29t10:00:00z x", utc(2026, 11, 29, 10)),
    row(
        "python-logging-comma",
        b"2026-11-29 10:00:00,123 - agent - WARNING - guard",
        utc(2026, 11, 29, 10, 0, 0, 123000),
    ),
    row("iso-plus-offset-to-utc", b"2026-11-29T10:00:00+01:00 x", utc(2026, 11, 29, 9)),
    row(
        "iso-micros-basic-minus-offset",
        b"2026-11-29T10:00:00.123456-0500 x",
        utc(2026, 11, 29, 15, 0, 0, 123456),
    ),
    row(
        "iso-nanos-truncated",
        b"2026-11-29T10:00:00.123456789Z x",
        utc(2026, 11, 29, 10, 0, 0, 123456),
    ),
    row("iso-hour-offset", b"2026-11-29T10:00:00+05 x", utc(2026, 11, 29, 5)),
    row("iso-no-seconds", b"2026-11-29T10:00Z x", utc(2026, 11, 29, 10)),
    row(
        "iso-spaced-offset-go",
        b"2026-11-29 10:00:00.5 -0500 EST x",
        utc(2026, 11, 29, 15, 0, 0, 500000),
    ),
    row("iso-utc-word", b"2026-11-29 10:00:00 UTC x", utc(2026, 11, 29, 10)),
    row("iso-naive-default-tz", b"2026-11-29T10:00:00 x", utc(2026, 11, 29, 15), tz=MINUS5),
    row(
        "iso-aware-ignores-default-tz", b"2026-11-29T10:00:00Z x", utc(2026, 11, 29, 10), tz=MINUS5
    ),
    row("iso-dash-after-logging-stamp", b"2026-11-29 10:00:00 - 12 items", utc(2026, 11, 29, 10)),
    # syslog
    row("syslog", b"Nov 29 10:00:00 host agent[12]: guard", utc(2026, 11, 29, 10)),
    row("syslog-padded-day", b"Nov  9 10:00:00 host agent: x", utc(2026, 11, 9, 10)),
    row("syslog-fraction", b"Nov 29 10:00:00.250 host x", utc(2026, 11, 29, 10, 0, 0, 250000)),
    row("syslog-naive-default-tz", b"Nov 29 10:00:00 host x", utc(2026, 11, 29, 15), tz=MINUS5),
    row(
        "syslog-dec31-seen-jan1",
        b"Dec 31 23:59:59 host x",
        utc(2026, 12, 31, 23, 59, 59),
        now=utc(2027, 1, 1, 0, 0, 5),
    ),
    row(
        "syslog-hours-ahead-stays-this-year",
        b"Nov 29 20:00:00 host x",
        utc(2026, 11, 29, 20),
    ),
    row(
        "syslog-two-days-ahead-is-last-year",
        b"Dec  1 12:00:00 host x",
        utc(2025, 12, 1, 12),
    ),
    row(
        "syslog-feb29-from-common-year",
        b"Feb 29 10:00:00 host x",
        utc(2028, 2, 29, 10),
        now=utc(2029, 3, 1),
    ),
    row("syslog-invalid-day", b"Nov 31 10:00:00 host x", None),
    row("syslog-unknown-month", b"Foo 29 10:00:00 host x", None),
    row("syslog-rfc3164-pri", b"<13>Nov 29 10:00:00 host x", utc(2026, 11, 29, 10)),
    row(
        "syslog-rfc5424",
        b"<34>1 2026-11-29T10:00:00.003Z host agent 12 ID47 - guard",
        utc(2026, 11, 29, 10, 0, 0, 3000),
    ),
    row("syslog-rfc5424-nil-stamp", b"<34>1 - host agent 12 ID47 - guard", None),
    # common log format
    row("common-log-bracket", b"[29/Nov/2026:10:00:00 +0000] x", utc(2026, 11, 29, 10)),
    row("common-log-offset", b"[29/Nov/2026:10:00:00 -0700] x", utc(2026, 11, 29, 17)),
    row(
        "common-log-full-line",
        b'127.0.0.1 - frank [29/Nov/2026:10:00:00 +0200] "GET / HTTP/1.1" 200 5',
        utc(2026, 11, 29, 8),
    ),
    row("common-log-bad-month", b"[29/Foo/2026:10:00:00 +0000] x", None),
    # prefixes and bytes
    row("bom", b"\xef\xbb\xbf2026-11-29T10:00:00Z x", utc(2026, 11, 29, 10)),
    row("bracket-prefix", b"[2026-11-29T10:00:00Z] [WARN] x", utc(2026, 11, 29, 10)),
    row(
        "bom-then-bracket",
        b"\xef\xbb\xbf[2026-11-29 10:00:00,5] x",
        utc(2026, 11, 29, 10, 0, 0, 500000),
    ),
    row("leading-spaces", b"   \t2026-11-29T10:00:00Z x", utc(2026, 11, 29, 10)),
    row("crlf", b"2026-11-29T10:00:00Z x\r\n", utc(2026, 11, 29, 10)),
    row("invalid-utf8-after-stamp", b"2026-11-29T10:00:00Z \xff\xfe\xc3(", utc(2026, 11, 29, 10)),
    row("invalid-utf8-only", b"\xff\xfe\xc3(", None),
    row("no-stamp", b"guard fired: refusing to fabricate", None),
    row("stamp-not-at-start", b"INFO 2026-11-29T10:00:00Z x", None),
    row("empty", b"", None),
    row("month-13", b"2026-13-29T10:00:00Z x", None),
    row("day-32", b"2026-11-32T10:00:00Z x", None),
    row("hour-25", b"2026-11-29T25:00:00Z x", None),
    row("year-zero", b"0000-01-01T00:00:00Z x", None),
    # JSON object lines
    row("json-line-ts-iso", b'{"ts": "2026-11-29T10:00:00Z", "msg": "x"}', utc(2026, 11, 29, 10)),
    row("json-line-time-epoch-seconds", b'{"time": 1795946400}', utc(2026, 11, 29, 10)),
    row(
        "json-line-time-epoch-millis",
        b'{"time": 1795946400612}',
        utc(2026, 11, 29, 10, 0, 0, 612000),
    ),
    row("json-line-float-seconds", b'{"ts": 1795946400.5}', utc(2026, 11, 29, 10, 0, 0, 500000)),
    row(
        "json-line-timestamp-field",
        b'{"timestamp": "2026-11-29T10:00:00+01:00"}',
        utc(2026, 11, 29, 9),
    ),
    row("json-line-bom-and-spaces", b'\xef\xbb\xbf  {"ts": 1795946400}', utc(2026, 11, 29, 10)),
    row("json-line-invalid-utf8", b'{"msg": "\xff", "ts": 1795946400}', utc(2026, 11, 29, 10)),
    row("json-line-no-field", b'{"msg": "guard fired"}', None),
    row("json-line-broken", b'{"ts": 1795946400', None),
    row(
        "json-line-naive-default-tz",
        b'{"ts": "2026-11-29T10:00:00"}',
        utc(2026, 11, 29, 15),
        tz=MINUS5,
    ),
    # fields handed over by a jsonl caller
    row("fields-epoch-seconds", b"{}", utc(2026, 11, 29, 10), fields={"ts": 1795946400}),
    row("fields-epoch-millis", b"{}", utc(2026, 11, 29, 10), fields={"time": 1795946400000}),
    row(
        "fields-epoch-micros",
        b"{}",
        utc(2026, 11, 29, 10, 0, 0, 1),
        fields={"ts": 1795946400000001},
    ),
    row(
        "fields-epoch-nanos",
        b"{}",
        utc(2026, 11, 29, 10, 0, 0, 1),
        fields={"ts": 1795946400000001000},
    ),
    row("fields-epoch-string", b"{}", utc(2026, 11, 29, 10), fields={"ts": "1795946400"}),
    row(
        "fields-iso-offset",
        b"{}",
        utc(2026, 11, 29, 4, 30),
        fields={"timestamp": "2026-11-29T10:00:00+05:30"},
    ),
    row(
        "fields-ts-before-time",
        b"{}",
        utc(2026, 11, 29, 10),
        fields={"time": "2020-01-01T00:00:00Z", "ts": "2026-11-29T10:00:00Z"},
    ),
    row(
        "fields-bad-ts-then-time",
        b"{}",
        utc(2026, 11, 29, 10),
        fields={"ts": "soon", "time": "2026-11-29T10:00:00Z"},
    ),
    row(
        "fields-invalid-ts-then-time",
        b"{}",
        utc(2026, 11, 29, 10),
        fields={"ts": "2026-13-29T10:00:00Z", "time": 1795946400},
    ),
    row(
        "fields-win-over-line",
        b"2020-01-01T00:00:00Z x",
        utc(2026, 11, 29, 10),
        fields={"ts": 1795946400},
    ),
    row(
        "fields-without-stamp-use-line", b"2026-11-29T10:00:00Z x", utc(2026, 11, 29, 10), fields={}
    ),
    row("fields-json-line-not-reparsed", b'{"ts": 1795946400}', None, fields={"msg": "x"}),
    row("fields-bool-ignored", b"{}", None, fields={"ts": True}),
    row("fields-nan", b"{}", None, fields={"ts": float("nan")}),
    row("fields-huge", b"{}", None, fields={"ts": 10**40}),
    row("fields-nested-ignored", b"{}", None, fields={"ts": {"sec": 1}}),
    # a custom regex with a group named ts
    row(
        "custom-regex-with-fmt",
        b"agent | 29.11.2026 10:00:00 | guard fired",
        utc(2026, 11, 29, 10),
        mode=r"\| (?P<ts>[\d.]+ [\d:]+) \|",
        fmt="%d.%m.%Y %H:%M:%S",
    ),
    row(
        "custom-regex-fmt-with-offset",
        b"t=2026/11/29-10:00:00+0100 x",
        utc(2026, 11, 29, 9),
        mode=r"t=(?P<ts>\S+)",
        fmt="%Y/%m/%d-%H:%M:%S%z",
    ),
    row(
        "custom-regex-fmt-naive-default-tz",
        b"t=2026/11/29-10:00:00 x",
        utc(2026, 11, 29, 15),
        mode=r"t=(?P<ts>\S+)",
        fmt="%Y/%m/%d-%H:%M:%S",
        tz=MINUS5,
    ),
    row(
        "custom-regex-fmt-without-year",
        b"I1231 23:59:59.000 x",
        utc(2026, 12, 31, 23, 59, 59),
        mode=r"^I(?P<ts>\d{4} [\d:]{8})",
        fmt="%m%d %H:%M:%S",
        now=utc(2027, 1, 1, 0, 0, 5),
    ),
    row(
        "custom-regex-iso-without-fmt",
        b"pid=12 at=2026-11-29T10:00:00.5+01:00 guard",
        utc(2026, 11, 29, 9, 0, 0, 500000),
        mode=r"at=(?P<ts>\S+)",
    ),
    row(
        "custom-regex-epoch-without-fmt",
        b"ts=1795946400 guard",
        utc(2026, 11, 29, 10),
        mode=r"ts=(?P<ts>\S+)",
    ),
    row("custom-regex-no-match", b"guard fired", None, mode=r"at=(?P<ts>\S+)"),
    row("custom-regex-empty-group", b"at= x", None, mode=r"at=(?P<ts>\S*)"),
    row(
        "custom-regex-fmt-mismatch",
        b"at=yesterday x",
        None,
        mode=r"at=(?P<ts>\S+)",
        fmt="%Y-%m-%d",
    ),
    row(
        "custom-regex-month-13",
        b"at=2026-13-01 x",
        None,
        mode=r"at=(?P<ts>\S+)",
        fmt="%Y-%m-%d",
    ),
]


@pytest.mark.parametrize(("line", "fields", "mode", "fmt", "tz", "now", "expected"), CASES)
def test_parse(
    line: bytes,
    fields: Mapping[str, object] | None,
    mode: str,
    fmt: str | None,
    tz: timezone,
    now: datetime,
    expected: datetime | None,
) -> None:
    parsed = TimestampParser(mode, fmt, default_tz=tz).parse(line, fields, now=now)
    assert parsed == expected
    if parsed is not None:
        assert parsed.tzinfo is UTC


@pytest.fixture
def eastern_local_zone() -> Iterator[None]:
    if not hasattr(time, "tzset"):
        pytest.skip("time.tzset is POSIX-only")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TZ", "EST+05")
        time.tzset()
        yield
    time.tzset()


@pytest.mark.usefixtures("eastern_local_zone")
def test_naive_stamps_use_the_local_zone_by_default() -> None:
    parser = TimestampParser()
    assert parser.parse(b"2026-11-29T10:00:00 x", now=NOW) == utc(2026, 11, 29, 15)
    assert parser.parse(b"Nov 29 10:00:00 host x", now=NOW) == utc(2026, 11, 29, 15)
    assert parser.parse(b"2026-11-29T10:00:00Z x", now=NOW) == utc(2026, 11, 29, 10)


def test_now_defaults_to_the_clock() -> None:
    before = datetime.now(UTC)
    stamp = before.strftime("%b %d %H:%M:%S").encode()
    parsed = TimestampParser(default_tz=UTC).parse(stamp + b" host x")
    assert parsed is not None
    assert before - timedelta(seconds=1) <= parsed <= before


def test_naive_now_is_read_as_utc() -> None:
    naive_now = datetime(2027, 1, 1, 0, 0, 5)
    parsed = TimestampParser(default_tz=UTC).parse(b"Dec 31 23:59:59 h x", now=naive_now)
    assert parsed == utc(2026, 12, 31, 23, 59, 59)


@pytest.mark.parametrize(
    ("mode", "fmt", "message"),
    [
        pytest.param("at=(\\S+", None, "does not compile", id="bad-regex"),
        pytest.param(r"at=(\S+)", None, "no group named ts", id="no-ts-group"),
        pytest.param("auto", "%Y", "needs a timestamp regex", id="fmt-without-regex"),
    ],
)
def test_constructor_rejects(mode: str, fmt: str | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TimestampParser(mode, fmt)




_PREFIXES = st.sampled_from(
    [
        b"",
        b"2026-11-29T10:00:00",
        b"Nov 29 10:00:00",
        b"[29/Nov/2026:10:00:00 ",
        b"<34>1 ",
        b'{"ts": ',
        b"\xef\xbb\xbf[",
    ]
)


@settings(max_examples=examples(300), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefix=_PREFIXES, rest=st.binary(max_size=64))
def test_parse_never_raises(prefix: bytes, rest: bytes) -> None:
    parsed = TimestampParser(default_tz=UTC).parse(prefix + rest, now=NOW)
    assert parsed is None or parsed.tzinfo is UTC


@pytest.mark.parametrize(
    "line",
    [
        b"2026-11-29T10:00:00.123Z WARN x",
        b"2026-11-29T10:00:00.123456Z x",
        b"2026-11-29T10:00:00.1234Z x",
        b"2026-11-29T10:00:00.000Z",
        b"2026-02-30T10:00:00.123Z impossible day",
        b"2026-11-29T23:59:59.999Z x",
    ],
)
def test_common_iso_stamps_read_the_same_as_by_the_general_pattern(line: bytes) -> None:
    from collectors import timestamps

    fast = TimestampParser(default_tz=UTC)
    general = TimestampParser(default_tz=UTC)
    general._from_iso_z = None  # type: ignore[method-assign, assignment]  # never used below
    expected = None
    try:
        match = timestamps._AUTO.match(line)
        assert match is not None
        expected = general._from_iso(match.group("iso"), match.group("off"))
    except ValueError:
        expected = None
    assert fast.parse(line) == expected
    assert fast.parse(line) == expected  # from the per-second cache


def test_parsing_stamps_with_an_offset_never_reads_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    from collectors import timestamps

    class NoClock(datetime):
        @classmethod
        def now(cls, tz: object = None) -> NoClock:  # type: ignore[override]
            raise AssertionError("the clock was read")

    monkeypatch.setattr(timestamps, "datetime", NoClock)
    parser = TimestampParser(default_tz=UTC)
    assert parser.parse(b"2026-11-29T10:00:00.123Z x") is not None
    assert parser.parse(b"2026-11-29 10:00:00+02:00 x") is not None
    assert parser.parse(b"", {"ts": 1764410400}) is not None
