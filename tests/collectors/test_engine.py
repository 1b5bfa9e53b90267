"""The native engine's bulk answers: lines per prefilter, and the line count, against Python."""

from __future__ import annotations

from datetime import UTC
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors import engine as native
from collectors.rules import Rule
from collectors.scan import Matcher
from collectors.timestamps import TimestampParser
from tests.profiles import examples

pytestmark = pytest.mark.skipif(not native.available(), reason="hyperscan is not installed")

PIECES = [b"\n", b"\n", b"ab", b"\r\n", "é".encode(), b"\x00", b"\xff", b"x" * 300, b"\n" * 7]
K = 128
BIG = 70 << 10
#: A set with a prefilter that fires on some of PIECES, one with none, one that is end-anchored.
SETS = [[(0, b"ab"), (1, b"\\xc3")], [], [(2, b"b\\r$")]]


@settings(max_examples=examples(60), deadline=None)
@given(
    pieces=st.lists(st.sampled_from(PIECES), min_size=1, max_size=60),
    bounds=st.tuples(st.integers(0, 1 << 20), st.integers(0, 1 << 20)),
    which=st.sampled_from(range(len(SETS))),
)
def test_the_scans_line_count_and_plain_text_agree_with_bytes_methods(
    pieces: list[bytes], bounds: tuple[int, int], which: int
) -> None:
    found = native.NativeSet(SETS[which])
    unit = b"".join(pieces)
    data = unit * (BIG // len(unit) + 2)
    lo, hi = sorted(b % (len(data) + 1) for b in bounds)
    assert found.scan(data, lo, hi).lines == data.count(b"\n", lo, hi)
    assert found.scan(data, 0, len(data)).lines == data.count(b"\n")
    piece = data[lo:hi]
    assert found.scan(data, lo, hi).plain == (piece.isascii() and b"\r" not in piece)


@pytest.mark.parametrize("lines", [0, 1, K - 1, K, K + 1, 3 * K, 3 * K + 5, 2000 * K])
@pytest.mark.parametrize("tail", [b"", b"no newline at the end"])
def test_the_scans_line_count_however_many_lines(lines: int, tail: bytes) -> None:
    found = native.NativeSet([(0, b"y")])
    data = b"y\n" * lines + tail
    ends, counted, plain = found.scan(data, 0, len(data))
    assert (counted, plain) == (lines, True)
    assert sorted(set(ends[0])) == [2 * i + 1 for i in range(lines)]


@pytest.mark.parametrize(("lo", "hi"), [(0, 0), (0, 9), (1, 9), (3, 30), (2, 39), (17, 40), (39, 40), (40, 40)])
def test_newlines_counts_as_bytes_count_does_over_any_range(lo: int, hi: int) -> None:
    data = b"ab\ncd\n\n\nefgh\nij\n" + b"x\n" * 10 + b"tail"
    assert len(data) == 40
    for buf in (data, bytearray(data)):
        assert native.newlines(buf, lo, hi) == data.count(b"\n", lo, hi)


def test_a_prefilter_is_reported_once_per_line_at_the_lines_end() -> None:
    found = native.NativeSet([(0, b"ab"), (3, b"x")])
    data = b"ab ab ab\nzz\nx x\nab"
    assert dict(found.line_ends(data, 0, len(data))) == {0: [8, 18], 3: [15]}
    assert dict(found.line_ends(data, 9, len(data))) == {0: [9], 3: [6]}


def test_both_engines_count_a_match_at_the_end_of_a_last_line_without_newline() -> None:
    rules = [Rule.regex("end", "rejected$"), Rule.regex("lit", "Guard")]
    data = b"x rejected\nGuard rejected"
    got = {}
    for engine in ("python", "hyperscan"):
        matcher = Matcher(rules, timestamps=TimestampParser(default_tz=UTC),
                          engine=engine)  # type: ignore[arg-type]
        got[engine] = [(h.offset, h.guards) for h in matcher.scan(data, 0)]
    assert got["hyperscan"] == got["python"] == [(0, ("end",)), (11, ("end", "lit"))]


def test_an_end_anchored_prefilter_compiles_and_is_reported_at_its_lines_end() -> None:
    import re

    from collectors.patterns import prefilter

    anchored = prefilter(re.compile("rejected$")).expression
    alternative = prefilter(re.compile("(?:x$|y)")).expression
    found = native.NativeSet([(0, anchored), (1, alternative)])  # no NativeError
    data = b"a rejected\nrejected b\ny y x\nx\n"
    ends = {index: sorted(set(lines)) for index, lines in found.line_ends(data, 0, len(data)).items()}
    assert ends == {0: [10], 1: [27, 29]}


def _fed_by_both_engines(data: bytes) -> dict[str, Any]:
    """Each engine's ``FeedResult`` for ``data``: guard ``Guard``, activity ``task finished``."""
    from collectors.scan import LineScanner

    fed = {}
    for engine in ("python", "hyperscan"):
        matcher = Matcher([Rule.regex("g", "Guard")], Rule.regex("activity", "task finished"),
                          timestamps=TimestampParser(default_tz=UTC),
                          engine=engine)  # type: ignore[arg-type]
        fed[engine] = LineScanner(matcher).feed(data, count_activity=True)
    return fed


def test_activity_lines_of_a_buffer_with_non_ascii_and_cr_lines_are_counted_like_python() -> None:

    lines = [
        b"task finished", "task finished é".encode(), b"task finished\r", "é".encode(),
        b"Guard task finished", b"task finished twice: task finished", b"\xff task finished",
        b"nothing", b"Guard", b"task finished \r middle",
    ]
    data = b"\n".join(lines * 50) + b"\n"
    got = {engine: (result.activity, [(h.offset, h.guards, h.activity) for h in result.hits])
           for engine, result in _fed_by_both_engines(data).items()}
    assert got["hyperscan"] == got["python"]
    assert got["python"][0] == 6 * 50  # the Guard line is a hit, not counted


@pytest.mark.parametrize("rest", [b"", "é\n".encode(), b"x\r\n"], ids=["plain", "utf8", "cr"])
def test_activity_after_a_bom_is_counted_like_python_whether_the_buffer_is_plain_or_not(
    rest: bytes,
) -> None:
    from collectors.scan import BOM

    data = BOM + b"task finished\n" + b"task finished\nGuard task finished\nnothing\n" * 3 + rest
    got = {engine: (result.activity, result.lines, [(h.offset, h.guards) for h in result.hits])
           for engine, result in _fed_by_both_engines(data).items()}
    assert got["hyperscan"] == got["python"]
    assert got["python"][:2] == (4, data.count(b"\n"))


#: Patterns that read every line like its bytes, with pieces of text around which they may fall.
BYTE_EXACT = ["task (finished|done) status=ok", "QuoteGuard: rejected url=", "a[b-d]+x", "ab{2,3}c"]
LINE_PIECES = ["task done status=ok", "task finished", "QuoteGuard: rejected url=", "abbc", "acx",
               "é", "\udcff", "\r", " ", "a", "x", "status=ok", "ab"]


@pytest.mark.parametrize(("pattern", "exact"), [
    ("task (finished|done) status=ok", True),
    ("QuoteGuard: rejected url=", True),
    ("[a-z]+=", True),
    ("a.b", False),  # any character: a non-ASCII one too
    ("a[^ ]", False),
    ("(?i)abc", False),  # K folds to the Kelvin sign
    ("a(?i:b)", False),
    (r"a\sb", False),
    ("^abc", False),
    ("abc$", False),  # before a trailing \r in the text, not in the bytes
    (r"a\bc", False),
    ("é", False),
    (r"a\rb", False),
    ("(?=a)b", False),
])
def test_byte_exact_says_which_patterns_read_a_line_like_its_bytes(pattern: str, exact: bool) -> None:
    import re

    from collectors.patterns import byte_exact

    assert byte_exact(re.compile(pattern)) is exact


@settings(max_examples=examples(80), deadline=None)
@given(
    pattern=st.sampled_from(BYTE_EXACT),
    lines=st.lists(st.lists(st.sampled_from(LINE_PIECES), max_size=6).map("".join), max_size=12),
)
def test_a_byte_exact_pattern_is_reported_on_exactly_the_lines_whose_text_matches(
    pattern: str, lines: list[str]
) -> None:
    import re

    from collectors.patterns import prefilter

    compiled = re.compile(pattern)
    found = native.NativeSet([(0, prefilter(compiled).expression)], plain_check=False)
    raws = [line.encode("utf-8", "surrogateescape") for line in lines]
    data = b"".join(raw + b"\n" for raw in raws)
    scan = found.scan(data, 0, len(data))
    reported = set(scan.ends.get(0, []))
    ends, pos = [], 0
    for raw in raws:
        pos += len(raw)
        ends.append(pos)
        pos += 1
    want = {end for end, raw in zip(ends, raws, strict=True)
            if compiled.search(raw.decode("utf-8", "replace").removesuffix("\r"))}
    assert reported == want
    assert scan.plain is False  # a set built without the check never says plain


def test_an_activity_that_reads_lines_like_bytes_needs_no_plain_text_check() -> None:
    timestamps = TimestampParser(default_tz=UTC)
    literal = Matcher([Rule.regex("g", "Guard")], Rule.regex("activity", "task (finished|done)"),
                      timestamps=timestamps, engine="hyperscan")
    wide = Matcher([Rule.regex("g", "Guard")], Rule.regex("activity", "task [^ ]+"),
                   timestamps=timestamps, engine="hyperscan")
    assert literal._native is not None and wide._native is not None
    assert (literal._native.plain_check, wide._native.plain_check) == (False, True)
