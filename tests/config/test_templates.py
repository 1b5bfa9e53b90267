"""The bundled canary templates: each loads cleanly, and its fixture, inject, leak and repair make sense.

Values are drawn the way a run draws them (``canary.runs.values.draw``), many times per canary, and
each canary is checked for what its verdict relies on: the leak is in every injected variant
and not in the repair; a fabricated value is not on the page; a control's value is grounded.
"""

from __future__ import annotations

import html
import json
import re
import tomllib
from pathlib import Path

import pytest

from canary.cli.init import KINDS, canary_sections
from canary.config.definitions import CanaryDef, GuardDef, load_definitions
from canary.config.placeholders import fill, placeholders_in
from canary.locations import bundled_defs_dir
from canary.runs.values import draw

DEFS = Path(__file__).resolve().parents[2] / "canaries_defs"
DRAWS = 40
BASE = "http://127.0.0.1:11436"
#: Reject canaries whose leak is on the page by design, and why.
LEAK_ON_PAGE = {
    ("exclusion", "excluded-item"): "the page names the exercise to skip; naming it at all is the leak",
    ("provenance", "snippet-link"): "the link is seen in a snippet on the page, never opened",
}
#: Controls whose grounded value is computed from the page rather than copied from it.
COMPUTED = {("arithmetic", "total-control"): "the total is the sum of the page's parts"}
NEW_KINDS = ("money", "provenance", "exclusion", "arithmetic", "quote_fused", "version_sibling",
             "denial_phrasings", "number_blindspots")


def guards() -> list[GuardDef]:
    found, problems = load_definitions(["*.toml"], DEFS)
    assert [p.render() for p in problems] == []
    return found


def canaries() -> list[tuple[GuardDef, CanaryDef]]:
    return [(g, c) for g in guards() for c in g.canaries]


def page_text(page: str) -> str:
    """What an agent reads of the page: tags dropped, whitespace collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def test_every_file_loads_with_no_problem_and_one_guard_each() -> None:
    files = sorted(DEFS.glob("*.toml"))
    assert len(guards()) == len(files)
    assert {f.stem for f in files} >= {"citation", "quote", "number", "denial", "version", "date", *NEW_KINDS}


@pytest.mark.parametrize("path", sorted(DEFS.glob("*.toml")), ids=lambda p: p.stem)
def test_header_documents_the_guard_and_an_example_line_its_match_finds(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    header = text[: text.index("[guard]")]
    with path.open("rb") as handle:
        table = tomllib.load(handle)["guard"]
    prose = " ".join(header.replace("#", "").split())
    if "match" in table:
        (example,) = re.findall(r"^# Example log line: (.+)$", header, re.M)
        assert re.search(table["match"], example), (table["match"], example)
        assert "set it to a regex for the line your guard writes" in prose
    else:  # a guard that reports through OpenTelemetry: its example span or event matches
        ((kind, name, attributes),) = re.findall(r"^# Example (span|event): (\S+(?: \S+)?) (\{.+\})$", header, re.M)
        (guard,) = [g for g in guards() if g.path.name == path.name]
        matcher = guard.span if kind == "span" else guard.event
        assert matcher is not None and matcher.matched(name, json.loads(attributes)) is not None
        assert "set them to what your guard's span carries" in prose
    canary_part = re.split(r"^\[\[canary\]\]$", text, maxsplit=1, flags=re.M)[1]
    for name in re.findall(r'^name = "([a-z0-9-]+)"$', canary_part, re.M):
        assert name in header, f"{path.name}: canary {name} is not described in the header"


@pytest.mark.parametrize(("guard", "canary"), canaries(), ids=lambda x: x.name)
def test_every_prompt_sends_the_agent_to_the_fixture(guard: GuardDef, canary: CanaryDef) -> None:
    # the first turn's; a later turn is tied by the conversation's history
    assert "fixture_url" in placeholders_in(canary.turns[0])
    assert canary.fixture.strip()
    assert canary.inject_at == "after-fetch"


# Observed leaks (the tool_* templates) are checked by test_tool_templates_aim_every_call_at_the_observed_effect.
@pytest.mark.parametrize(("guard", "canary"), [(g, c) for g, c in canaries() if c.observe is None],
                         ids=lambda x: x.name)
def test_the_leak_is_in_every_variant_and_fakes_stay_off_the_page(guard: GuardDef, canary: CanaryDef) -> None:
    mark = canary.leak if canary.expect == "reject" else canary.grounded
    assert mark is not None
    for _ in range(DRAWS):
        drawn = draw(canary.fixture, BASE)
        values, page = drawn.values, drawn.page
        leak = fill(mark, values)
        for variant in canary.inject:
            text = fill(variant, values)
            assert leak in text, (variant, leak)
            for name in placeholders_in(variant):
                if name.startswith("fake_"):
                    assert values[name] not in page
        if canary.expect == "reject":
            if canary.repair is not None:
                assert leak not in fill(canary.repair, values), "the repaired answer would leak"
            if (guard.name, canary.name) not in LEAK_ON_PAGE:
                assert leak not in page_text(page), "a grounded answer could carry the leak"
        elif (guard.name, canary.name) not in COMPUTED:
            assert leak in page_text(page), "a control's value must be on the page"


def test_the_conversation_template_injects_on_its_middle_turn_of_three() -> None:
    guard = next(g for g in guards() if g.name == "conversation")
    (canary,) = guard.canaries
    assert (len(canary.turns), canary.inject_turn) == (3, 1)
    assert "established" in canary.turns[2] and "budget" in canary.turns[1]


def test_fused_and_spliced_quotes_are_not_on_the_page_but_each_half_is() -> None:
    guard = next(g for g in guards() if g.name == "quote-fused")
    for canary in guard.canaries:
        for _ in range(DRAWS):
            drawn = draw(canary.fixture, BASE)
            text = page_text(drawn.page)
            for variant in canary.inject:
                (quote,) = re.findall(r'"([^"]+)"', fill(variant, drawn.values))
                if canary.expect == "accept":
                    assert quote in text
                    continue
                assert quote not in text
                if canary.name == "fused-quote":
                    halves = [drawn.values["true_quote"].rstrip("."), drawn.values["true_quote_2"][1:]]
                    assert quote == drawn.values["fake_fused_quote"]
                else:
                    halves = re.split(r" and | for ", quote.rstrip("."), maxsplit=1)
                assert all(half.lower() in text.lower() for half in halves), halves


def test_the_sibling_version_is_on_the_page_for_the_other_project() -> None:
    guard = next(g for g in guards() if g.name == "version-sibling")
    canary = next(c for c in guard.canaries if c.name == "sibling-version")
    drawn = draw(canary.fixture, BASE)
    text = page_text(drawn.page)
    sibling, own = drawn.values["sibling_version"], drawn.values["true_version"]
    assert sibling != own
    assert f"corvid, the Python package: the latest release is {sibling}" in text
    assert f"corvid-swift: the latest release is {own}" in text
    assert f"corvid-swift {sibling}" not in text


def test_arithmetic_totals_are_wrong_except_in_the_control() -> None:
    guard = next(g for g in guards() if g.name == "arithmetic")
    for canary in guard.canaries:
        for _ in range(DRAWS):
            drawn = draw(canary.fixture, BASE)
            parts = [int(n) for n in re.findall(r":\s*(\d+) euros", page_text(drawn.page))]
            answer = fill(canary.inject[0], drawn.values)
            stated_parts = [int(n) for n in re.findall(r"(\d+) euros(?! a month)", answer)]
            (total,) = (int(n) for n in re.findall(r"(\d+) euros a month in total", answer))
            assert stated_parts == parts
            assert (total == sum(parts)) == (canary.expect == "accept"), (canary.name, parts, total)


def test_the_denial_phrasings_avoid_the_words_of_the_empty_page_canary() -> None:
    guard = next(g for g in guards() if g.name == "denial-phrasings")
    for canary in guard.canaries:
        assert "empty" not in " ".join(canary.inject)


def test_new_templates_say_their_match_is_an_example() -> None:
    for name in NEW_KINDS:
        header = (DEFS / f"{name}.toml").read_text(encoding="utf-8").split("[guard]")[0]
        assert "`match` below is an example" in header, name


@pytest.mark.parametrize(("kind", "files"), [(kind, files) for kind, _, files in KINDS], ids=str)
def test_each_kind_bundles_uniquely_named_canaries(kind: str, files: tuple[str, ...]) -> None:
    names: list[str] = []
    for file in files:
        section = canary_sections(bundled_defs_dir() / file)
        names += re.findall(r'^name = "([a-z0-9-]+)"$', section, re.M)
    assert names and len(names) == len(set(names)), names


def test_the_decoy_number_is_on_the_page_in_another_role_only() -> None:
    guard = next(g for g in guards() if g.name == "number-blindspots")
    canary = next(c for c in guard.canaries if c.name == "decoy-number")
    for _ in range(DRAWS):
        drawn = draw(canary.fixture, BASE)
        text = page_text(drawn.page)
        decoy, true = drawn.values["decoy_number"], drawn.values["true_number"]
        assert decoy != true
        assert f"opened in {decoy}" in text
        assert f"{decoy} euros" not in text
        assert f"{decoy} euros" in fill(canary.inject[0], drawn.values)


def test_the_entity_free_claim_has_no_entity_and_is_not_on_the_page() -> None:
    guard = next(g for g in guards() if g.name == "number-blindspots")
    canary = next(c for c in guard.canaries if c.name == "entity-free-claim")
    for _ in range(DRAWS):
        drawn = draw(canary.fixture, BASE)
        claim = drawn.values["fake_claim"]
        assert not re.search(r"\d|https?://|[A-Z][a-z]+ [A-Z]", claim), claim
        assert claim not in page_text(drawn.page)


def test_the_denial_phrasings_cover_five_other_languages() -> None:
    guard = next(g for g in guards() if g.name == "denial-phrasings")
    languages = {c.name.rsplit("-", 1)[1] for c in guard.canaries if c.name.startswith("not-found-")}
    assert languages == {"tr", "de", "es", "fr", "pt"}


TOOL_KINDS = ("tool_fetch", "tool_write", "tool_shell", "tool_step")


@pytest.mark.parametrize("name", TOOL_KINDS)
def test_tool_templates_aim_every_call_at_the_observed_effect(name: str) -> None:
    from canary.config.fabrications import ToolTemplate, fill_arguments
    from canary.runs.observations import target_of

    [guard] = [g for g in guards() if g.path.stem == name]
    assert {c.expect for c in guard.canaries} == {"reject", "accept"}
    header = (DEFS / f"{name}.toml").read_text(encoding="utf-8").split("[guard]")[0]
    assert "`match` below is an example" in header
    for canary in guard.canaries:
        assert canary.observe is not None and canary.inject == ()
        assert canary.repair is not None  # the follow-up carrying the tool result needs an answer
        drawn = draw(canary.fixture, BASE)
        target = target_of(canary.observe, drawn.values)
        for variant in canary.variants:
            assert isinstance(variant, ToolTemplate)
            arguments = " ".join(str(v) for v in fill_arguments(dict(variant.arguments), drawn.values).values())
            if canary.observe.kind == "fetched":
                assert target in arguments
                assert target != drawn.values["fixture_url"]  # not the page the agent reads anyway
            else:
                assert target.rsplit("/", 1)[1] in arguments and drawn.values["nonce"] in target
