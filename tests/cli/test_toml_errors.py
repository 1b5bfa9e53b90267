"""A TOML syntax error is reported on the line where the broken construct starts, not where the parser gave up."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from canary.cli.main import main

GUARD = "[guard]\nname = 'a'\nmatch = 'A: rejected'\n\n[[canary]]\nname = 'fake'\nevery = '6h'\nprompt = 'x'\n"


@pytest.mark.parametrize(("broken", "found"), [
    ("inject = '''The minimum is 5 euros.\n", "Expected \"'''\""),  # an unclosed multi-line string
    ('inject = """The minimum is 5 euros.\n', "Unterminated string"),
    ("inject = ['The minimum is 5 euros.',\n", "Invalid value"),  # an unclosed array
])
def test_check_names_the_line_the_broken_construct_starts_on(tmp_path: Path, broken: str, found: str) -> None:
    filler = "".join(f"# note {n}\n" for n in range(28)) + "leak = 'x'\n"
    text = GUARD + broken + filler  # the construct opens on line 9; the file has 38 lines
    assert text.count("\n") == 38
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "a.toml").write_text(text)
    (tmp_path / "canary.toml").write_text("defs = ['defs/*.toml']\n")
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 2
    assert "a.toml:9: invalid TOML: " in result.stderr, result.stderr
    assert found in result.stderr
    assert "opens on this line and is never closed" in result.stderr


def test_an_error_on_its_own_line_keeps_its_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "canary.toml").write_text("defs = []\n[logs]\npaths = []\nformat = = 'text'\n[store]\n")
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 2
    assert "canary.toml:4: invalid TOML: Invalid value (column 10)" in result.stderr, result.stderr
