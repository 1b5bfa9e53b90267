"""Splitting bytes into lines and matching them: pure, table-driven."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from collectors.rules import Rule, required_literal
from collectors.scan import LineScanner, Matcher
from collectors.timestamps import TimestampParser


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        pytest.param("CitationGuard: rejected", b"CitationGuard: rejected", id="pure-literal"),
        pytest.param(r"QuoteGuard: rejected (\S+)", b"QuoteGuard: rejected ", id="literal-then-group"),
        pytest.param(r"\d+ Version(Guard)", b" Version", id="longest-run-wins"),
        pytest.param(r"(?i)traceback", b"traceback", id="ignorecase-lowered"),
        pytest.param(r"(foo|bar)", None, id="alternation-has-no-required-literal"),
        pytest.param(r"x{2,}abc", b"abc", id="repeat-min-one-counts"),
        pytest.param(r"(?:ab)?cd", b"cd", id="optional-group-skipped"),
        pytest.param(r"é grounding", "é grounding".encode(), id="non-ascii-literal-utf8"),
    ],
)
def test_required_literal(pattern: str, expected: bytes | None) -> None:
    lit = required_literal(pattern)
    assert (lit.text if lit else None) == expected


def _matcher(*rules: Rule, activity: Rule | None = None) -> Matcher:
    return Matcher(list(rules), activity, timestamps=TimestampParser(default_tz=UTC))


LOG = (
    b"2026-11-29T10:00:00Z INFO planner turn=1\n"
    b"2026-11-29T10:00:01Z WARN CitationGuard: rejected url=https://x.example.org\n"
    b"2026-11-29T10:00:02Z WARN QuoteGuard: rejected quote and CitationGuard: rejected too\n"
    b"2026-11-29T10:00:03Z INFO task finished id=1\n"
    b"no timestamp here CitationGuard: rejected\n"
)


def test_matcher_finds_every_guard_on_a_line_and_activity() -> None:
    m = _matcher(
        Rule.regex("citation", "CitationGuard: rejected"),
        Rule.regex("quote", r"QuoteGuard: rejected"),
        activity=Rule.regex("activity", "task finished"),
    )
    hits = m.scan(LOG, 100)
    assert [(h.guards, h.activity) for h in hits] == [
        (("citation",), False),
        (("citation", "quote"), False),
        ((), True),
        (("citation",), False),
    ]
    assert hits[0].offset == 100 + LOG.index(b"2026-11-29T10:00:01Z")
    assert hits[0].ts == datetime(2026, 11, 29, 10, 0, 1, tzinfo=UTC)
    assert hits[3].ts is None


@pytest.mark.parametrize(
    "pattern",
    [
        pytest.param(r"(Citation|Quote)Guard: rejected", id="alternation-chunk-search"),
        pytest.param(r"^\S+ WARN (Citation|Quote)", id="anchored-line-start"),
        pytest.param(r"(?i)(citation|quote)guard", id="ignorecase-alternation"),
        pytest.param(r"rejected(\s+\w+)?$", id="anchored-line-end"),
    ],
)
def test_slow_path_agrees_with_a_plain_per_line_search(pattern: str) -> None:
    compiled = re.compile(pattern)
    m = _matcher(Rule.regex("g", pattern))
    expected = [
        i for i, line in enumerate(LOG.split(b"\n")[:-1]) if compiled.search(line.decode())
    ]
    got = [LOG[: h.offset].count(b"\n") for h in m.scan(LOG, 0)]
    assert got == expected
    crlf = LOG.replace(b"\n", b"\r\n")
    got_crlf = [crlf[: h.offset].count(b"\n") for h in m.scan(crlf, 0)]
    assert got_crlf == expected


def test_match_that_would_cross_lines_is_not_a_hit() -> None:
    m = _matcher(Rule.regex("g", r"planner\s+turn=1\s+\S+ WARN"))
    assert m.scan(LOG, 0) == []


def test_jsonl_rules_match_every_field_and_survive_garbage() -> None:
    buf = (
        b'{"ts": "2026-11-29T10:00:00Z", "event": "guard_reject", "guard": "citation"}\n'
        b'{"event": "guard_reject", "guard": "quote"}\n'
        b"not json at all guard_reject\n"
        b'{"event": "guard_reject", "guard": "citation", "extra": {"deep": 1}}\n'
        b'{"event": "guard_reject", "guard": "citation"\n'
    )
    m = _matcher(Rule.json_fields("citation", {"event": "guard_reject", "guard": "citation"}))
    hits = m.scan(buf, 0)
    assert len(hits) == 2
    assert hits[0].ts == datetime(2026, 11, 29, 10, tzinfo=UTC)
    nested = _matcher(Rule.json_fields("deep", {"extra.deep": 1}))
    assert len(nested.scan(buf, 0)) == 1


@pytest.mark.parametrize("ctx", [
    "[" * 3000 + "]" * 3000,  # nested deeper than Python's JSON reader recurses
    '{"a": ' * 3000 + '"[{\\"}]" ' + "}" * 3000,  # and with brackets and escapes inside its strings
    "9" * 6000,  # an integer longer than Python turns into an int from text
])
def test_a_jsonl_guard_line_python_cannot_read_whole_still_fires_on_its_fields(ctx: str) -> None:
    """Its fields are there: a line nested too deep, or with a number too long, is still its firing,
    never an error that stops the scan (the daemon would retry it, and every line after it, for ever)."""
    line = '{"event": "guard_reject", "guard": "citation", "ctx": ' + ctx + ', "n": 3}'
    buf = f'{{"event": "guard_reject", "guard": "citation"}}\n{line}\n'.encode()
    m = _matcher(Rule.json_fields("citation", {"event": "guard_reject", "guard": "citation", "n": 3}))
    assert [h.offset for h in m.scan(buf, 0)] == [buf.index(b"\n") + 1]
    whole = _matcher(Rule.json_fields("citation", {"event": "guard_reject", "guard": "citation"}))
    assert len(whole.scan(buf, 0)) == 2


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    buf = b"\xff\xfe CitationGuard: rejected \xc3\x28 bad\n"
    (hit,) = _matcher(Rule.regex("citation", "CitationGuard: rejected")).scan(buf, 0)
    assert "\ufffd" in hit.text


def test_bom_at_file_start_only_is_ignored() -> None:
    m = _matcher(Rule.regex("g", r"^2026-11-29T10:00:00Z WARN"))
    buf = b"\xef\xbb\xbf2026-11-29T10:00:00Z WARN x\n"
    assert len(m.scan(buf, 0)) == 1
    assert m.scan(buf, 10) == []  # the same bytes mid-file are not a BOM


GUARD = Rule.regex("g", "HIT")


def _feed_all(scanner: LineScanner, *chunks: bytes) -> tuple[int, int]:
    hits = lines = 0
    for chunk in chunks:
        result = scanner.feed(chunk)
        hits += len(result.hits)
        lines += result.lines
    return hits, lines


def test_partial_last_line_waits_for_its_newline() -> None:
    scanner = LineScanner(_matcher(GUARD))
    assert _feed_all(scanner, b"one HIT\ntwo H") == (1, 1)
    assert scanner.offset == len(b"one HIT\n")
    assert scanner.read_pos == len(b"one HIT\ntwo H")
    assert _feed_all(scanner, b"IT\n") == (1, 1)
    assert scanner.offset == len(b"one HIT\ntwo HIT\n")


def test_empty_lines_advance_the_offset_and_count() -> None:
    scanner = LineScanner(_matcher(GUARD))
    assert _feed_all(scanner, b"\n\n\n") == (0, 3)
    assert scanner.offset == 3


def test_multibyte_character_split_across_reads() -> None:
    scanner = LineScanner(_matcher(Rule.regex("g", "中HIT")))
    line = "x 中HIT\n".encode()
    cut = line.index("中".encode()) + 1
    assert _feed_all(scanner, line[:cut], line[cut:]) == (1, 1)


def test_oversize_line_is_cut_and_the_next_line_survives() -> None:
    scanner = LineScanner(_matcher(GUARD), max_line=1024)
    big = b"HIT " + b"x" * 10_000
    chunks = [b"before HIT\n" + big[:500], big[500:3000], big[3000:], b"\nafter HIT\n"]
    hits, lines = _feed_all(scanner, *chunks)
    assert (hits, lines) == (3, 3)
    assert scanner.oversize == 1
    assert scanner.offset == len(b"before HIT\n") + len(big) + 1 + len(b"after HIT\n")


@pytest.mark.parametrize("engine", ["python", "hyperscan"])
def test_lines_cut_inside_one_read_are_counted_once_each(engine: str) -> None:
    from collectors import engine as native

    if engine == "hyperscan" and not native.available():
        pytest.skip("hyperscan is not installed")
    matcher = Matcher([GUARD], timestamps=TimestampParser(default_tz=UTC),
                      engine=engine)  # type: ignore[arg-type]
    scanner = LineScanner(matcher, max_line=1024)
    data = b"a HIT\n" + (b"x" * 5000 + b"\n") * 3 + b"\n" * 300 + b"HIT b\n" + b"y" * 3000 + b"\n"
    result = scanner.feed(data)
    assert (len(result.hits), result.lines, scanner.oversize) == (2, data.count(b"\n"), 4)


def test_oversize_line_hit_keeps_its_start_offset() -> None:
    scanner = LineScanner(_matcher(GUARD), max_line=16)
    r1 = scanner.feed(b"ok\n" + b"HIT" + b"y" * 40)
    r2 = scanner.feed(b"z" * 40 + b"\nHIT\n")
    offsets = [h.offset for h in r1.hits + r2.hits]
    assert offsets == [3, 3 + 3 + 40 + 40 + 1]


# -- differential: the scanner against a naive per-line reference -------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.profiles import examples  # noqa: E402

RULES = [
    Rule.regex("citation", "CitationGuard: rejected url"),
    Rule.regex("quote", "QuoteGuard: rejected quote"),
    Rule.regex("version", r"VersionGuard: rejected \d"),
    Rule.regex("icase", r"(?i)traceback"),
    Rule.regex("slow", r"(ERR|WRN)\d"),
]
ACTIVITY = Rule.regex("activity", "task finished")
PIECES = [
    b"CitationGuard: rejected url=x", b"QuoteGuard: rejected quote", b"VersionGuard: rejected 1.2",
    b"VersionGuard: rejected v", b"TraceBack", b"ERR7", b"WRN", b"task finished", b": rejected ",
    b"noise", b" ", b"\r", b"\xff\xfe", "中".encode(), b"\xef\xbb\xbf", b"Guard: rejected",
]


def reference(data: bytes, max_line: int) -> list[tuple[int, tuple[str, ...], bool]]:
    out = []
    pos = 0
    while True:
        end = data.find(b"\n", pos)
        if end < 0:
            return out
        raw = data[pos:end][:max_line]
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if pos == 0 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        text = raw.decode("utf-8", "replace")
        names = tuple(r.name for r in RULES if r.matches(text, None))
        act = ACTIVITY.matches(text, None)
        if names or act:
            out.append((pos, names, act))
        pos = end + 1


@settings(max_examples=examples(300), deadline=None)
@given(
    lines=st.lists(st.lists(st.sampled_from(PIECES), max_size=6).map(b"".join), max_size=40),
    cuts=st.lists(st.integers(min_value=1, max_value=64), max_size=30),
)
def test_scanner_agrees_with_a_per_line_reference_whatever_the_chunking(lines: list[bytes], cuts: list[int]) -> None:
    data = b"\n".join(lines) + (b"\n" if lines else b"")
    scanner = LineScanner(Matcher(RULES, ACTIVITY, timestamps=TimestampParser(default_tz=UTC)), max_line=1 << 20)
    got = []
    lines_counted = 0
    pos = 0
    for cut in [*cuts, len(data)]:
        chunk = data[pos : pos + cut]
        pos += len(chunk)
        result = scanner.feed(chunk)
        got.extend((h.offset, h.guards, h.activity) for h in result.hits)
        lines_counted += result.lines
        if pos >= len(data):
            break
    assert got == reference(data, 1 << 20)
    assert scanner.offset == len(data)
    assert lines_counted == data.count(b"\n")  # counted in the matching pass


# -- reported defects ----------------------------------------------------------


def _count(matcher: Matcher, data: bytes, read: int, *, max_line: int = 1 << 20) -> int:
    scanner = LineScanner(matcher, max_line=max_line)
    hits = 0
    for pos in range(0, len(data), read):
        hits += len(scanner.feed(data[pos : pos + read]).hits)
    return hits


def test_anchored_alternation_counts_every_line_like_grep() -> None:
    log = (
        b"CitationGuard: rejected url=https://a.example.org\n"
        b"QuoteGuard: rejected quote\n"
        b"INFO planner CitationGuard is loaded\n"
        b"CitationGuard rejected again\n"
    )
    m = _matcher(Rule.regex("g", r"^(?:CitationGuard|QuoteGuard)\b"))
    assert len(m.scan(log, 0)) == 3
    assert _count(m, log, 7) == 3


@pytest.mark.parametrize("read", [4 << 20, 1 << 20, 256 << 10], ids=["4MiB", "1MiB", "256KiB"])
def test_marker_in_a_long_line_is_found_whatever_the_read_size(read: int) -> None:
    line = b"x" * (1200 << 10) + b" CitationGuard: rejected " + b"y" * (300 << 10) + b"\n"
    data = b"before\n" + line + b"after CitationGuard: rejected\n"
    m = _matcher(Rule.regex("citation", "CitationGuard: rejected"))
    assert _count(m, data, read, max_line=2 << 20) == 2


@pytest.mark.parametrize("read", [4 << 20, 1 << 20, 256 << 10], ids=["4MiB", "1MiB", "256KiB"])
def test_marker_past_max_line_is_cut_the_same_whatever_the_read_size(read: int) -> None:
    line = b"x" * (1200 << 10) + b" CitationGuard: rejected " + b"y" * (300 << 10) + b"\n"
    data = b"before\n" + line + b"after CitationGuard: rejected\n"
    m = _matcher(Rule.regex("citation", "CitationGuard: rejected"))
    scanner = LineScanner(m, max_line=1 << 20, source="agent.log")
    hits = []
    for pos in range(0, len(data), read):
        hits.extend(scanner.feed(data[pos : pos + read]).hits)
    assert len(hits) == 1
    assert scanner.offset == len(data)
    (warning,) = scanner.warnings
    assert warning.offset == len(b"before\n")
    assert "agent.log" in warning.message
    assert str(len(b"before\n")) in warning.message


def test_catastrophic_regex_on_a_short_line_does_not_stop_the_scan() -> None:
    m = _matcher(Rule.regex("redos", r"(a+)+$"), Rule.regex("g", "HIT"))
    data = b"a" * 40 + b"!\n" + b"HIT after it\n" + b"a" * 10 + b"\n"
    assert [h.guards for h in m.scan(data, 0)] == [("g",), ("redos",)]


@pytest.mark.parametrize(
    ("chunks", "texts", "lines"),
    [
        # the hole a writer without O_APPEND leaves before its next line: never a line itself
        ([b"\0" * 40 + b"b HIT 2\n"], ["b HIT 2"], 1),
        ([b"a HIT 1\n" + b"\0" * 7, b"\0" * 9 + b"b HIT 2\n"], ["a HIT 1", "b HIT 2"], 2),
        # a partial line the truncation cut is dropped, not glued to the line after the hole
        ([b"a HIT 1\npart HI", b"\0\0\0b HIT 2\n"], ["a HIT 1", "b HIT 2"], 2),
        ([b"\0" * 5], [], 0),
    ],
    ids=["hole-first", "hole-across-reads", "partial-before-hole", "only-a-hole"],
)
def test_a_run_of_nuls_is_never_read_as_a_line(chunks: list[bytes], texts: list[str], lines: int) -> None:
    scanner = LineScanner(_matcher(GUARD))
    found: list[str] = []
    counted = 0
    for chunk in chunks:
        result = scanner.feed(chunk)
        found += [h.text for h in result.hits]
        counted += result.lines
    assert (found, counted) == (texts, lines)
    assert scanner.offset == scanner.read_pos == sum(len(c) for c in chunks)
