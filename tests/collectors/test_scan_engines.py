"""Both scanning engines against a per-line ``re.search`` reference, over generated patterns."""

from __future__ import annotations

import re
from datetime import UTC

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from collectors import engine as native
from collectors.patterns import FOLDS_TO_ASCII, prefilter
from collectors.rules import Rule
from collectors.scan import LineScanner, Matcher
from collectors.shapes import catastrophic
from collectors.timestamps import TimestampParser
from tests.profiles import examples

ENGINES = ["python", *(["hyperscan"] if native.available() else [])]

ATOMS = [
    "Guard", "rejected", "Citation", "Quote", "ok", "é", "中", "k", "S", r"\d+", r"\w+", r"\s",
    r"\S+", ".", "[a-z]+", "[^ ]+", "[0-9a-f]{2}", r"\b", r"\B", "^", "$", r"\A", r"\Z", "=",
    " ", r"\.", "x*", "(?:ab)?", r"\W", "[^a-z]", r"\w+?", "(?=ok)", "(?!x)", "(?<=G)",
    "(?<!=)", "a++", "(?>ab|a)", r"(\w)\1",
]


@st.composite
def patterns(draw: st.DrawFn, depth: int = 0) -> str:
    """Small regexes: sequences of atoms, alternations, optional groups and case-folded groups."""
    kind = draw(st.integers(0, 5 if depth < 2 else 1))
    if kind <= 1:
        return "".join(draw(st.lists(st.sampled_from(ATOMS), min_size=1, max_size=4)))
    if kind == 2:
        alts = draw(st.lists(patterns(depth + 1), min_size=2, max_size=3))
        return "(?:" + "|".join(alts) + ")"
    if kind == 3:
        return "(?i:" + draw(patterns(depth + 1)) + ")"
    if kind == 4:
        return "(" + draw(patterns(depth + 1)) + ")?" + draw(patterns(depth + 1))
    return draw(patterns(depth + 1)) + draw(patterns(depth + 1))


PIECES = [
    b"CitationGuard: rejected url=x", b"QuoteGuard rejected", b"Guard", b"rejected", b"ok",
    b"OK", b"12", b"ab", b"x", b" ", b"=", b".", b"\r", b"\t", b"\x1c", b"\xff\xfe", b"\xc3\x28",
    "é".encode(), "É".encode(), "中".encode(), "\u212a".encode(), "\u017f".encode(), b"k", b"s",
    b"\xef\xbb\xbf", b"_", b"-",
]
lines_st = st.lists(st.lists(st.sampled_from(PIECES), max_size=7).map(b"".join), max_size=25)


def reference(data: bytes, compiled: list[re.Pattern[str]]) -> list[tuple[int, tuple[int, ...]]]:
    """(line offset, indexes of the patterns whose ``re.search`` finds the decoded line)."""
    out = []
    pos = 0
    while (end := data.find(b"\n", pos)) >= 0:
        raw = data[pos:end]
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if pos == 0 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        text = raw.decode("utf-8", "replace")
        found = tuple(i for i, p in enumerate(compiled) if p.search(text))
        if found:
            out.append((pos, found))
        pos = end + 1
    return out


def _scan(matcher: Matcher, data: bytes, cuts: list[int]) -> list[tuple[int, tuple[int, ...]]]:
    scanner = LineScanner(matcher)
    got = []
    pos = 0
    for cut in [*cuts, len(data)]:
        chunk = data[pos : pos + cut]
        pos += len(chunk)
        for hit in scanner.feed(chunk).hits:
            got.append((hit.offset, tuple(int(name) for name in hit.guards)))
        if pos >= len(data):
            break
    assert scanner.offset == len(data)
    return got


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=examples(250), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pats=st.lists(patterns(), min_size=1, max_size=4),
    lines=lines_st,
    cuts=st.lists(st.integers(min_value=1, max_value=40), max_size=20),
)
def test_engine_agrees_with_per_line_re_search(
    engine: str, pats: list[str], lines: list[bytes], cuts: list[int]
) -> None:
    compiled = []
    for pattern in pats:
        try:
            compiled.append(re.compile(pattern))
        except re.error:
            return
    rules = [Rule.regex(str(i), p) for i, p in enumerate(compiled)]
    matcher = Matcher(rules, timestamps=TimestampParser(default_tz=UTC), engine=engine)  # type: ignore[arg-type]
    data = b"\n".join(lines) + (b"\n" if lines else b"")
    assert _scan(matcher, data, cuts) == reference(data, compiled)


@pytest.mark.skipif(not native.available(), reason="hyperscan is not installed")
def test_both_engines_count_the_same_on_a_mixed_log() -> None:
    rules = [
        Rule.regex("citation", r"CitationGuard: rejected url=https?://[a-z0-9.-]+"),
        Rule.regex("anchored", r"^(?:CitationGuard|QuoteGuard)\b"),
        Rule.regex("icase", r"(?i)traceback"),
        Rule.regex("end", r"rejected(\s+\w+)?$"),
        Rule.regex("look", r"Guard(?=: rejected)"),
        Rule.regex("backref", r"(\w)\1x"),
    ]
    activity = Rule.regex("activity", "task finished")
    lines = [
        b"CitationGuard: rejected url=https://a.example.org",
        b"CitationGuard: accepted urls=2",
        b"QuoteGuard rejected quote\r",
        b"INFO router CitationGuard loaded",
        b"ERROR TraceBack (most recent call last)",
        "é QuoteGuard: rejected ok".encode(),
        b"aax task finished",
        b"\xff\xfe garbage Guard: rejected",
    ]
    data = b"\n".join(lines * 200) + b"\n"
    counts = {}
    for engine in ("python", "hyperscan"):
        matcher = Matcher(rules, activity, timestamps=TimestampParser(default_tz=UTC),
                          engine=engine)  # type: ignore[arg-type]
        assert matcher.engine == engine
        hits = matcher.scan(data, 0)
        counts[engine] = [(h.offset, h.guards, h.activity) for h in hits]
    assert counts["python"] == counts["hyperscan"]
    assert len(counts["python"]) == 7 * 200


def test_folds_to_ascii_lists_every_non_ascii_letter_that_folds_into_ascii() -> None:
    letters = re.compile("(?i)[a-z]")
    found = "".join(chr(c) for c in range(0x80, 0x110000) if letters.fullmatch(chr(c)))
    assert found == FOLDS_TO_ASCII


@pytest.mark.parametrize(
    ("pattern", "widened"),
    [
        (r"CitationGuard: rejected", []),
        (r"Guard(?=: rejected)", ["a lookahead or lookbehind"]),
        (r"(\w)\1", ["a backreference"]),
        (r"(?>a+)b", ["an atomic group"]),
        (r"a++b", ["a possessive repeat"]),
    ],
)
def test_prefilter_says_what_it_widened(pattern: str, widened: list[str]) -> None:
    assert prefilter(re.compile(pattern)).widened == widened


@pytest.mark.parametrize(
    ("pattern", "bad"),
    [
        (r"(a+)+b", True), (r"(a|a)*", True), (r"(a+)+$", True), (r"(a|ab)+c", True),
        (r"(\w+\s?)*x", True), (r"(a*)*", True),
        (r"(foo|far)+", False), (r"(?:\d{2})+", False), (r"a+b+", False),
        (r"CitationGuard: rejected url=\S+", False), (r"(?:[a-z]+\.)+[a-z]{2,}", True),
    ],
)
def test_catastrophic_shapes(pattern: str, bad: bool) -> None:
    assert (catastrophic(pattern) is not None) == bad


@pytest.mark.parametrize("engine", ENGINES)
def test_catastrophic_regex_on_a_41_byte_line_finishes(engine: str) -> None:
    m = Matcher([Rule.regex("redos", r"(a+)+$"), Rule.regex("g", "HIT")],
                timestamps=TimestampParser(default_tz=UTC), engine=engine)  # type: ignore[arg-type]
    data = b"a" * 40 + b"!\n" + b"HIT after it\n" + b"a" * 10 + b"\n"
    assert [h.guards for h in m.scan(data, 0)] == [("g",), ("redos",)]


def test_a_line_over_budget_is_skipped_with_a_warning_and_counting_goes_on() -> None:
    m = Matcher([Rule.regex("redos", r"(a|aa)+$"), Rule.regex("g", "HIT")],
                timestamps=TimestampParser(default_tz=UTC), engine="python", budget=0.01)
    scanner = LineScanner(m, source="agent.log")
    data = b"a" * 60 + b"!\n" + b"HIT after it\n" + b"aaaa\n"
    hits = scanner.feed(data).hits
    assert [h.guards for h in hits] == [("g",), ("redos",)]
    (warning,) = scanner.warnings
    assert warning.offset == 0
    assert "redos" in warning.message
    assert "agent.log" in warning.message


def test_a_polynomial_pattern_on_a_long_non_ascii_line_costs_the_budget_not_the_scan() -> None:
    """Three unbounded repeats in a row backtrack in time of the line's length cubed: on this
    22 KB line ``re`` alone takes seconds. Such a guard is searched under the line budget.
    (The Python engine confirms every line holding the guard's literal; Hyperscan's exact
    prefilter never hands ``re`` this line, which holds no match.)"""
    m = Matcher([Rule.regex("poly", r"rejected .*url=.*http.*\.example"), Rule.regex("g", "HIT")],
                timestamps=TimestampParser(default_tz=UTC), engine="python")
    scanner = LineScanner(m, source="agent.log")
    long_line = ("rejected " + "url=http \u00e9 " * 2000).encode()
    data = long_line + b"\nHIT after it\nrejected url=http://a.example\n"
    assert [h.guards for h in scanner.feed(data).hits] == [("g",), ("poly",)]
    (warning,) = scanner.warnings
    assert warning.offset == 0
    assert "poly" in warning.message


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pats=st.lists(patterns(), min_size=2, max_size=4),
    lines=lines_st,
    cuts=st.lists(st.integers(min_value=1, max_value=40), max_size=20),
)
# re counts U+001C..U+001F as whitespace; the regex module does not.
@example(pats=["(?:\\s|(?=ok))", "Guard"], lines=[b"\x1c"], cuts=[])
@example(pats=["Guard", "(?:\\s|(?=ok))"], lines=[b"\x1c"], cuts=[])
# No rule the native engine can prefilter, and an activity rule read like its bytes: no database.
@example(pats=["x*", "x*"], lines=[b"x", b"", b"ax"], cuts=[2])
def test_counting_activity_lines_agrees_with_per_line_re_search(
    engine: str, pats: list[str], lines: list[bytes], cuts: list[int]
) -> None:
    try:
        compiled = [re.compile(p) for p in pats]
    except re.error:
        return
    guards = [Rule.regex(str(i), p) for i, p in enumerate(compiled[1:])]
    matcher = Matcher(guards, Rule.regex("activity", compiled[0]),
                      timestamps=TimestampParser(default_tz=UTC), engine=engine)  # type: ignore[arg-type]
    data = b"\n".join(lines) + (b"\n" if lines else b"")
    expected = reference(data, compiled)
    scanner = LineScanner(matcher)
    got = []
    counted = lines_counted = 0
    pos = 0
    for cut in [*cuts, len(data)]:
        chunk = data[pos : pos + cut]
        pos += len(chunk)
        result = scanner.feed(chunk, count_activity=True)
        counted += result.activity
        lines_counted += result.lines
        got += [(h.offset, h.guards, h.activity) for h in result.hits]
        if pos >= len(data):
            break
    want = [(offset, tuple(str(i - 1) for i in found if i), 0 in found)
            for offset, found in expected if found != (0,)]
    assert got == want
    assert counted == sum(1 for _, found in expected if found == (0,))
    assert lines_counted == data.count(b"\n")


def test_without_the_hyperscan_package_the_python_path_counts_the_same() -> None:
    import subprocess
    import sys

    script = (
        "import sys; sys.modules['hyperscan'] = None\n"
        "from collectors import engine\n"
        "from collectors.rules import Rule\n"
        "from collectors.scan import Matcher\n"
        "assert not engine.available()\n"
        "m = Matcher([Rule.regex('g', r'^(?:CitationGuard|QuoteGuard)\\b')])\n"
        "data = b'CitationGuard: x\\nQuoteGuard y\\nno CitationGuard\\n'\n"
        "print(m.engine, len(m.scan(data, 0)))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["python", "2"]


@pytest.mark.skipif(not native.available(), reason="hyperscan is not installed")
def test_compiled_database_is_reused_and_a_broken_cache_file_is_only_slower(
    tmp_path: pytest.TempPathFactory,
) -> None:
    from pathlib import Path

    cache = Path(str(tmp_path)) / "cache"
    rules = [Rule.regex("g", r"CitationGuard: rejected \S+")]
    data = b"CitationGuard: rejected x\nCitationGuard: rejected \n"
    Matcher(rules, cache_dir=cache / "missing-parent" / "cache").scan(data, 0)
    assert not (cache / "missing-parent").exists()
    first = Matcher(rules, cache_dir=cache).scan(data, 0)
    (stored,) = cache.iterdir()
    assert oct(stored.stat().st_mode & 0o777) == "0o600"
    assert Matcher(rules, cache_dir=cache).scan(data, 0) == first
    stored.write_bytes(b"not a database")
    assert Matcher(rules, cache_dir=cache).scan(data, 0) == first
    assert [h.offset for h in first] == [0]
