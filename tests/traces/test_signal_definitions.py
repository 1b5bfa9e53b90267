"""``span`` and ``event`` in a guard's table: each problem named by file, key and what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from canary.config.definitions import load_definitions
from canary.config.settings import load_config


def problems(tmp_path: Path, guard: str) -> list[tuple[str, str]]:
    (tmp_path / "g.toml").write_text(f'[guard]\nname = "g"\n{guard}\n')
    _, found = load_definitions(["g.toml"], tmp_path)
    return [(p.key, p.message) for p in found if p.severity == "error"]


@pytest.mark.parametrize(("guard", "key", "says"), [
    ('span = "GUARDRAIL"', "guard.span", "expected a table"),
    ("span = {}", "guard.span", "an empty matcher matches everything"),
    ('span = { nam = "x" }', "guard.span.nam", "unknown key 'nam'"),
    ('span = { name = "(" }', "guard.span.name", "not a valid regex"),
    ('span = { name = "" }', "guard.span.name", "an empty regex"),
    ('span = { attributes = "x" }', "guard.span.attributes", "expected a table of attribute names"),
    ('event = { attributes = { "rail.stop" = true } }', "guard.event.attributes.rail.stop", "quote it"),
    ('span = { name = "(a+)+$" }', "guard.span.name", "backtrack"),
    ('description = "no way to fire"', "guard.match", "or span / event tables"),
])
def test_a_broken_matcher_is_named_by_its_key(tmp_path: Path, guard: str, key: str, says: str) -> None:
    found = problems(tmp_path, guard)
    assert any(k == key and says in m for k, m in found), found


def test_a_span_only_guard_loads_and_matches_what_it_says(tmp_path: Path) -> None:
    (tmp_path / "g.toml").write_text('[guard]\nname = "g"\nspan = { name = "^guard$", attributes = '
                                     '{ "output.value" = "BLOCKED" } }\n')
    (guard,), found = load_definitions(["g.toml"], tmp_path)
    assert found == [] and guard.match is None and guard.span is not None and guard.signals
    assert guard.span.matched("guard", {"output.value": "BLOCKED: x"}) == (("output.value", "BLOCKED: x"),)
    assert guard.span.matched("guard", {"output.value": "PASSED"}) is None
    assert guard.span.matched("guard", {}) is None  # a missing attribute never matches
    assert guard.span.matched("guard-2", {"output.value": "BLOCKED"}) is None


def test_span_guards_with_no_traces_table_are_warned_about(tmp_path: Path) -> None:
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "g.toml").write_text('[guard]\nname = "g"\nspan = { name = "guard" }\n')
    (tmp_path / "canary.toml").write_text('defs = ["defs/*.toml"]\n')
    config = load_config(path=tmp_path / "canary.toml")
    assert config.traces is None
    (warning,) = [w for w in config.warnings if w.key == "traces"]
    assert "nothing receives them" in warning.message
