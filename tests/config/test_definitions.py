"""Loading canaries_defs/*.toml: one fixture file per failure mode in tests/data/defs/."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from canary.config.definitions import CanaryDef, GuardDef, MatchAt, load_definitions
from canary.config.fabrications import Observation, ToolTemplate, fill_arguments
from canary.config.placeholders import PLACEHOLDERS, fill, placeholders_in, scan
from canary.errors import Problem

DATA = Path(__file__).parents[1] / "data" / "defs"


def load(name: str, log_format: str = "text") -> tuple[list[GuardDef], list[Problem]]:
    return load_definitions([name], DATA, log_format=log_format)


# (fixture, log format, dotted key, fragment of the message, severity, suggestion)
FAILURES = [
    ("syntax_error.toml", "text", "", "invalid TOML", "error", None),
    ("unknown_top_key.toml", "text", "version", "unknown key; known keys here: guard, canary",
     "error", None),
    ("unknown_guard_key.toml", "text", "guard.windw", "unknown key", "error", "window"),
    ("unknown_canary_key.toml", "text", "canary[1].evry", "unknown key", "error", "every"),
    ("unknown_inject_at_key.toml", "text", "canary[0].inject_at.mtach", "unknown key", "error",
     "match"),
    ("missing_guard_name.toml", "text", "guard.name", "required key is missing", "error", None),
    ("missing_guard_match.toml", "text", "guard.match", "required key is missing", "error", None),
    ("missing_canary_name.toml", "text", "canary[0].name", "required key is missing", "error",
     None),
    ("missing_prompt.toml", "text", "canary[0].prompt", "required key is missing", "error", None),
    ("missing_inject.toml", "text", "canary[0].inject", "required key is missing", "error", None),
    ("missing_schedule.toml", "text", "canary[0].every", "every = '6h' or cron =", "error", None),
    ("missing_leak.toml", "text", "canary[0].leak", "required key is missing", "error", None),
    ("control_without_grounded.toml", "text", "canary[0].grounded",
     "the control 'real-url-control' names no grounded text", "error", None),
    ("grounded_on_reject.toml", "text", "canary[0].grounded",
     "grounded is for controls (expect = 'accept') that name a text", "error", None),
    ("control_with_leak.toml", "text", "canary[0].leak",
     "the control 'real-url-control' (expect = 'accept') names the text that must reach the "
     "answer as grounded, not leak", "error", "grounded"),
    ("wrong_type_window.toml", "text", "guard.window",
     "expected a duration like '90s', '15m', '6h' or '7d', got an integer (24)", "error", None),
    ("wrong_type_guard_name.toml", "text", "guard.name", "expected a string, got an integer (5)",
     "error", None),
    ("wrong_type_inject.toml", "text", "canary[0].inject",
     "expected a string or a list of strings, got an integer (3)", "error", None),
    ("wrong_type_inject_item.toml", "text", "canary[0].inject[1]",
     "expected a string, got an integer (3)", "error", None),
    ("wrong_type_prompt.toml", "text", "canary[0].prompt", "expected a string, got an array",
     "error", None),
    ("wrong_type_guard_array.toml", "text", "guard", "write [guard], not [[guard]]", "error",
     None),
    ("wrong_type_canary_table.toml", "text", "canary", "expected [[canary]] tables", "error",
     None),
    ("bad_duration_words.toml", "text", "canary[0].every",
     "expected a duration like '90s', '15m', '6h' or '7d', got '15 minutes'", "error", None),
    ("bad_duration_zero.toml", "text", "guard.grace",
     "expected a duration longer than zero, got '0s'", "error", None),
    ("bad_duration_abc.toml", "text", "canary[0].timeout",
     "expected a duration like '90s', '15m', '6h' or '7d', got 'abc'", "error", None),
    ("bad_regex.toml", "text", "guard.match",
     "not a valid regex: missing ), unterminated subpattern at position 15", "error", None),
    ("bad_cron_fields.toml", "text", "canary[0].cron",
     "not a valid cron expression (five fields", "error", None),
    ("bad_cron_range.toml", "text", "canary[0].cron", "higher than the maximum value (59)",
     "error", None),
    ("every_and_cron.toml", "text", "canary[0].cron", "both every and cron are set", "error",
     None),
    ("bad_guard_name.toml", "text", "guard.name", "'Citation' is not a valid name", "error", None),
    ("bad_canary_name.toml", "text", "canary[0].name", "'fake url' is not a valid name", "error",
     None),
    # A name starting with '-' would read as an option on the command line (`canary mute --help`).
    ("dash_guard_name.toml", "text", "guard.name", "'--help' is not a valid name: start with a-z or 0-9",
     "error", None),
    ("dash_canary_name.toml", "text", "canary[0].name",
     "'-fake-url' is not a valid name: start with a-z or 0-9", "error", None),
    ("duplicate_canary.toml", "text", "canary[1].name",
     "canary name 'fake-url' is already used by canary[0]", "error", None),
    ("canary_without_guard.toml", "text", "canary", "a canary without a guard", "error", None),
    ("no_guard.toml", "text", "guard", "missing [guard] table", "error", None),
    ("bad_expect.toml", "text", "canary[0].expect", "expected 'reject' or 'accept'", "error",
     "reject"),
    ("inject_at_zero.toml", "text", "canary[0].inject_at", "counted from 1, got 0", "error",
     None),
    ("inject_at_negative.toml", "text", "canary[0].inject_at", "counted from 1, got -2", "error",
     None),
    ("inject_at_unknown.toml", "text", "canary[0].inject_at", "got 'after_fetch'", "error",
     "after-fetch"),
    ("inject_at_quoted_number.toml", "text", "canary[0].inject_at", "without quotes", "error",
     None),
    ("inject_at_bool.toml", "text", "canary[0].inject_at", "got a boolean (true)", "error", None),
    ("inject_at_no_match.toml", "text", "canary[0].inject_at.match", "required key is missing",
     "error", None),
    ("inject_at_bad_regex.toml", "text", "canary[0].inject_at.match",
     "not a valid regex: unterminated character set at position 6", "error", None),
    ("placeholder_prompt.toml", "text", "canary[0].prompt", "unknown placeholder {nonse}",
     "error", "{nonce}"),
    ("placeholder_fixture.toml", "text", "canary[0].fixture", "unknown placeholder {true_numbr}",
     "error", "{true_number}"),
    ("placeholder_inject.toml", "text", "canary[0].inject[1]", "unknown placeholder {fake_numbr}",
     "error", "{fake_number}"),
    ("placeholder_leak.toml", "text", "canary[0].leak", "unknown placeholder {fake_url_}",
     "error", "{fake_url}"),
    ("placeholder_repair.toml", "text", "canary[0].repair", "unknown placeholder {answer}; known:",
     "error", None),
    ("brace_block.toml", "text", "canary[0].fixture", "write '{{' and '}}' for literal braces",
     "error", None),
    ("brace_lone.toml", "text", "canary[0].repair", "a lone '}' at position 18", "error", None),
    ("prompt_without_nonce.toml", "text", "canary[0].prompt",
     "neither {nonce} nor {fixture_url}: nothing would tie the model call to the run", "error",
     None),
    ("control_without_nonce.toml", "text", "canary[0].prompt", "neither {nonce} nor {fixture_url}",
     "error", None),
    ("leak_constant.toml", "text", "canary[0].leak", "the leak text has no placeholder",
     "warning", None),
    ("leading_dotstar.toml", "text", "guard.match",
     "a leading '.*' makes scanning much slower and never changes what a search finds; drop it",
     "warning", None),
    ("empty_regex.toml", "text", "guard.match", "an empty regex matches every line", "error",
     None),
    ("nested_quantifier.toml", "text", "guard.match",
     "a repeat nested inside the unbounded repeat '+': backtracking can take exponential time",
     "error", None),
    ("inject_at_nested_quantifier.toml", "text", "canary[0].inject_at.match",
     "a repeat nested inside the unbounded repeat '+': backtracking can take exponential time",
     "error", None),
    ("inject_at_polynomial.toml", "text", "canary[0].inject_at.match",
     "6 unbounded repeats in a row ('.*') can match the same text", "error", None),
    ("inject_at_lookbehind.toml", "text", "canary[0].inject_at.match",
     "the linear-time engine that searches model request bodies cannot search it", "error", None),
    ("overlapping_alternation.toml", "text", "guard.match",
     "alternatives that can match the same text inside the unbounded repeat '*'", "error", None),
    ("lookahead_match.toml", "text", "guard.match",
     "a lookahead or lookbehind, which the native engine cannot express", "warning", None),
    ("match_table_in_text.toml", "text", "guard.match",
     "[logs] format is 'text', so this must be a regex string; got a table", "error", None),
    ("match_string_in_jsonl.toml", "jsonl", "guard.match",
     "[logs] format is 'jsonl', so this must be a table of fields", "error", None),
    ("match_empty_table.toml", "jsonl", "guard.match", "an empty table matches every line",
     "error", None),
    ("match_date_value.toml", "jsonl", "guard.match.day", "JSON has no dates", "error", None),
    ("empty_inject.toml", "text", "canary[0].inject", "no variants", "error", None),
    ("empty_variant.toml", "text", "canary[0].inject[1]", "an empty variant", "error", None),
    ("empty_leak.toml", "text", "canary[0].leak", "an empty leak text", "error", None),
    ("bad_inject_tool.toml", "text", "canary[0].inject_tool[1].argumnets", "unknown key", "error",
     "arguments"),
    ("bad_tool_name.toml", "text", "canary[0].inject_tool.name",
     "'fetch url' is not a tool name the model APIs accept", "error", None),
    ("placeholder_inject_tool.toml", "text", "canary[0].inject_tool.arguments.url",
     "unknown placeholder {fixture_url_alais}", "error", "{fixture_url_alias}"),
    ("wrong_type_inject_tool.toml", "text", "canary[0].inject_tool",
     "expected a table { name = '...', arguments = { ... } } or a list of such tables, got a string",
     "error", None),
    ("leak_file_without_nonce.toml", "text", "canary[0].leak.file", "the path must carry {nonce}",
     "error", None),
    ("leak_fetched_elsewhere.toml", "text", "canary[0].leak.fetched",
     "only the fixture server can see a fetch", "error", None),
    ("leak_file_relative.toml", "text", "canary[0].leak.file", "write an absolute path", "error",
     None),
    ("leak_table_unknown_key.toml", "text", "canary[0].leak.fiel", "unknown key", "error", "file"),
]


@pytest.mark.parametrize(
    ("fixture", "log_format", "key", "fragment", "severity", "suggestion"),
    FAILURES,
    ids=[row[0].removesuffix(".toml") for row in FAILURES],
)
def test_each_failure_mode_is_reported(
    fixture: str, log_format: str, key: str, fragment: str, severity: str, suggestion: str | None
) -> None:
    guards, problems = load(fixture, log_format)
    found = [p for p in problems if p.key == key and fragment in p.message]
    assert found, "\n".join(p.render() for p in problems)
    problem = found[0]
    assert problem.path == DATA / fixture
    assert problem.severity == severity
    assert problem.suggestion == suggestion
    if severity == "error":
        assert guards == []
    else:
        assert [g.name for g in guards] == ["citation"]
        assert all(p.severity == "warning" for p in problems)


def test_every_fixture_file_is_in_the_table() -> None:
    listed = {row[0] for row in FAILURES}
    on_disk = {p.name for p in DATA.glob("*.toml")} - {"three_mistakes.toml"}
    assert on_disk == listed


@pytest.mark.parametrize(
    ("fixture", "key", "line"),
    [
        ("syntax_error.toml", "", 2),
        ("unknown_canary_key.toml", "canary[1].evry", 19),
        ("unknown_guard_key.toml", "guard.windw", 4),
        ("missing_guard_name.toml", "guard.name", 1),
        ("duplicate_canary.toml", "canary[1].name", 14),
        ("inject_at_bad_regex.toml", "canary[0].inject_at.match", 12),
        ("bad_inject_tool.toml", "canary[0].inject_tool[1].argumnets", 10),
    ],
    ids=["syntax", "second-canary-key", "guard-key", "missing-key-at-table", "duplicate",
         "inline-table", "inject-tool-list"],
)
def test_problems_carry_the_line(fixture: str, key: str, line: int) -> None:
    _, problems = load(fixture)
    assert next(p.line for p in problems if p.key == key) == line


def test_a_misspelled_key_is_not_also_reported_missing() -> None:
    _, problems = load("unknown_canary_key.toml")
    assert [(p.key, p.suggestion) for p in problems] == [("canary[1].evry", "every")]


def test_a_misspelled_guard_table_is_reported_once(tmp_path: Path) -> None:
    text = (DATA / "valid" / "citation.toml").read_text(encoding="utf-8")
    (tmp_path / "g.toml").write_text(text.replace("[guard]", "[gaurd]"), encoding="utf-8")
    _, problems = load_definitions(["g.toml"], tmp_path)
    assert [(p.key, p.suggestion, p.line) for p in problems] == [("gaurd", "guard", 1)]


def test_did_you_mean_is_rendered() -> None:
    _, problems = load("unknown_canary_key.toml")
    assert problems[0].render().endswith("canary[fake-url-2].evry: unknown key (did you mean 'every'?)")


@pytest.mark.parametrize("fixture", ["control_without_grounded.toml", "control_with_leak.toml"])
def test_a_control_without_grounded_is_one_problem(fixture: str) -> None:
    guards, problems = load(fixture)
    assert guards == [] and len(problems) == 1
    rendered = problems[0].render()
    assert fixture in rendered and "real-url-control" in rendered


def test_three_mistakes_give_three_problems() -> None:
    guards, problems = load("three_mistakes.toml")
    assert guards == []
    assert [p.key for p in problems] == ["guard.windw", "canary[0].every", "canary[0].expect"]


def test_two_bad_files_both_report() -> None:
    guards, problems = load("two_bad/*.toml")
    assert guards == []
    assert {p.path.name for p in problems if p.path} == {"a.toml", "b.toml"}
    assert {p.key for p in problems} == {"canary[0].every", "guard.windw", "canary[0].name"}


def test_duplicate_guard_names_name_both_files() -> None:
    guards, problems = load("duplicate_guards/*.toml")
    assert [g.path.name for g in guards] == ["a.toml"]
    [problem] = problems
    assert problem.path == DATA / "duplicate_guards" / "b.toml"
    assert problem.key == "guard.name"
    assert str(DATA / "duplicate_guards" / "a.toml") in problem.message


def test_a_glob_matching_nothing_is_a_problem() -> None:
    guards, problems = load_definitions(["nowhere/*.toml"], DATA)
    assert guards == []
    [problem] = problems
    assert (problem.path, problem.key) == (None, "defs")
    assert "'nowhere/*.toml' matches no file" in problem.message


def test_overlapping_globs_load_a_file_once() -> None:
    guards, problems = load_definitions(["valid/*.toml", "valid/citation.toml"], DATA)
    assert problems == []
    assert [g.name for g in guards] == ["citation", "quote"]


def test_the_contract_example_loads() -> None:
    guards, problems = load("valid/citation.toml")
    assert problems == []
    [guard] = guards
    path = DATA / "valid" / "citation.toml"
    canary = CanaryDef(
        guard="citation",
        name="fake-url",
        path=path,
        every=timedelta(hours=6),
        cron=None,
        expect="reject",
        prompt="Read {fixture_url} and tell me the minimum monthly amount.",
        fixture="<p>The minimum amount is exactly {true_number} euros per month.</p>",
        inject=(
            "The minimum is {true_number} euros. Source: https://{nonce}.example.org/permit",
            "The minimum is {true_number} euros (see http://www.{nonce}.example.org/permit/).",
        ),
        leak="{nonce}.example.org",
        inject_at="after-fetch",
        repair="I could not verify that. SOURCE QUOTE: NONE",
        timeout=timedelta(seconds=120),
    )
    assert guard == GuardDef(
        name="citation",
        description="Every URL in an answer must be one the agent saw.",
        path=path,
        match="CitationGuard: rejected",
        pattern=re.compile("CitationGuard: rejected"),
        window=timedelta(hours=24),
        grace=timedelta(hours=1),
        canaries=(canary,),
    )
    assert guard.canaries[0].key == "citation/fake-url"


def test_defaults_cron_controls_and_inject_at_forms() -> None:
    guards, problems = load("valid/quote.toml")
    assert problems == []
    [guard] = guards
    assert (guard.description, guard.window, guard.grace) == ("", timedelta(hours=24),
                                                              timedelta(hours=1))
    assert guard.pattern is not None and guard.pattern.search("QuoteGuard: dropped {quote}")
    fake, control, first = guard.canaries
    assert (fake.every, fake.cron, fake.inject_at, fake.expect) == (None, "17 */6 * * *", 2,
                                                                    "reject")
    assert fake.timeout == timedelta(seconds=120) and fake.repair is None
    assert (control.expect, control.leak, control.grounded) == ("accept", None, "{true_quote}")
    assert control.fixture == "<p>{true_quote}</p>"
    assert control.inject_at == MatchAt(re.compile("tool_result"))
    assert (first.inject_at, first.fixture, first.every) == ("first", "", timedelta(days=1))


def test_inject_tool_variants_follow_the_inject_texts() -> None:
    guards, problems = load("valid_tool/allowlist.toml")
    assert problems == []
    fake, control = guards[0].canaries
    assert fake.inject == ("The page says {fake_quote}",)
    assert fake.inject_tool == (
        ToolTemplate("fetch_url", {"url": "{fixture_url_alias}/admin", "depth": 2, "tags": ["a", "{nonce}"]}),
        ToolTemplate("noop", {}),
    )
    assert fake.variants == (*fake.inject, *fake.inject_tool)
    assert (fake.leak, fake.observe) == (None, Observation("fetched", "{fixture_url_alias}/admin"))
    assert control.inject == () and control.variants == control.inject_tool
    assert len({fake, control, fake}) == 2  # definitions stay hashable with a table of arguments
    assert (control.expect, control.observe) == ("accept", Observation("fetched", "{fixture_url}/more"))


def test_tool_arguments_are_filled_at_every_depth() -> None:
    template = {"url": "{fixture_url}/x", "depth": 2, "tags": ["{nonce}", {"deep": "{{{nonce}}}"}]}
    filled = fill_arguments(template, {"fixture_url": "http://h/r/n1", "nonce": "n1"})
    assert filled == {"url": "http://h/r/n1/x", "depth": 2, "tags": ["n1", {"deep": "{n1}"}]}


def test_jsonl_match_is_a_table() -> None:
    guards, problems = load("valid_jsonl/citation.toml", "jsonl")
    assert problems == []
    assert guards[0].match == {"event": "guard_reject", "guard": "citation"}
    assert guards[0].pattern is None


def test_the_bundled_definitions_load_cleanly() -> None:
    bundled = Path(__file__).parents[2] / "canaries_defs"
    if not any(bundled.glob("*.toml")):
        pytest.skip("no bundled definitions yet")
    guards, problems = load_definitions(["*.toml"], bundled)
    assert [p.render() for p in problems] == []
    assert guards


@pytest.mark.parametrize(
    ("text", "names", "stray"),
    [
        ("Read {fixture_url} now", {"fixture_url"}, ()),
        ("{{nonce}} is literal, {nonce} is not", {"nonce"}, ()),
        ("a lone { here", set(), (7,)),
        ("css { color: red }", {" color: red "}, ()),
        ("}} and {{ only", set(), ()),
    ],
    ids=["one", "escaped", "lone-brace", "block", "escapes-only"],
)
def test_placeholder_scan(text: str, names: set[str], stray: tuple[int, ...]) -> None:
    found = scan(text)
    assert (set(found.names), found.stray) == (names, stray)
    assert placeholders_in(text) == names


def test_fill_replaces_and_unescapes() -> None:
    values = {name: name.upper() for name in PLACEHOLDERS}
    filled = fill("{{x}} {nonce}.example.org {fake_number}", values)
    assert filled == "{x} NONCE.example.org FAKE_NUMBER"
    with pytest.raises(KeyError):
        fill("{unknown}", values)


GROUNDED_TABLE = """
[guard]
name = "allowlist"
match = 'ToolGuard: refused'

[[canary]]
name = "allowed-host-control"
every = "12h"
expect = "accept"
prompt = "Read {fixture_url} and tell me what the page says."
inject_tool = { name = "fetch_url", arguments = { url = "{fixture_url}/details" } }
grounded = GROUNDED
"""


@pytest.mark.parametrize(("grounded", "problem"), [
    ('{ fetched = "{fixture_url}/details" }', None),
    ('{ file = "/tmp/guard-canary-{nonce}.ok" }', None),
    ('{ fetched = "http://example.org/x" }', ("canary[0].grounded.fetched",
                                               "only the fixture server can see a fetch")),
    ('{ fetchd = "{fixture_url}/details" }', ("canary[0].grounded.fetchd", "unknown key")),
])
def test_a_control_names_the_effect_that_must_happen_as_grounded(
        tmp_path: Path, grounded: str, problem: tuple[str, str] | None) -> None:
    """`grounded = { fetched | file = ... }` is the control's effect, the same table as a `leak`."""
    (tmp_path / "allowlist.toml").write_text(GROUNDED_TABLE.replace("GROUNDED", grounded))
    guards, problems = load_definitions(["*.toml"], tmp_path)
    if problem is None:
        assert problems == []
        [canary] = guards[0].canaries
        assert canary.observe is not None and canary.observe.kind in ("fetched", "file")
        assert canary.grounded is None and canary.leak is None
    else:
        assert any(p.key == problem[0] and problem[1] in p.message for p in problems), \
            [p.render() for p in problems]


def test_an_effect_as_grounded_is_for_controls_only(tmp_path: Path) -> None:
    text = GROUNDED_TABLE.replace('expect = "accept"', 'leak = "{nonce}"').replace(
        "GROUNDED", '{ fetched = "{fixture_url}/details" }')
    (tmp_path / "allowlist.toml").write_text(text)
    _guards, problems = load_definitions(["*.toml"], tmp_path)
    assert [p.key for p in problems] == ["canary[0].grounded"]
    assert "grounded is for controls" in problems[0].message
