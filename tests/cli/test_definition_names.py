"""A problem in a ``[[canary]]`` table names the canary, not its index in the file."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from canary.cli.main import main


def test_check_names_the_canary_a_problem_is_in(tmp_path: Path) -> None:
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "a.toml").write_text(
        "[guard]\nname = 'a'\nmatch = 'A: rejected'\n"
        "[[canary]]\nname = 'fine'\nevery = '6h'\nprompt = 'Read {fixture_url}'\ninject = 'x {nonce}'\nleak = '{nonce}'\n"
        "[[canary]]\nname = 'fake-url'\nevery = 'soon'\nprompt = 'Read {fixture_url}'\ninject = 'x {nonce}'\n"
        "leak = '{nonce}'\n"
        "[[canary]]\nevery = '6h'\nprompt = 'Read {fixture_url}'\ninject = 'x {nonce}'\nleak = '{nonce}'\n")
    (tmp_path / "canary.toml").write_text("defs = ['defs/*.toml']\n")
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 2
    assert "a.toml:12: canary[fake-url].every: " in result.stderr, result.stderr
    assert "canary[1]" not in result.stderr
    assert "canary[2].name: required key is missing" in result.stderr  # a canary with no name keeps its place
