"""``NO_COLOR`` (set and not empty) and ``TERM=dumb`` turn every colour and cursor move off (no-color.org)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from canary.cli.main import main
from tests.cli.test_terminal_safety import run_in_pty, write_project

ESC = "\x1b["


def _project(tmp_path: Path) -> None:
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "a.toml").write_text("[guard]\nname = 'a'\nmatch = 'A: rejected'\n")
    (tmp_path / "x.log").write_text("nothing of note\n")
    (tmp_path / "canary.toml").write_text(
        f"defs = ['defs/*.toml']\n[logs]\npaths = ['x.log']\n[store]\nurl = 'sqlite:///{tmp_path / 'c.db'}'\n")


@pytest.mark.parametrize("command", [["status"], ["audit"]])
@pytest.mark.parametrize(("env", "coloured"), [
    ({}, True),
    ({"NO_COLOR": "1"}, False),
    ({"TERM": "dumb"}, False),
    ({"NO_COLOR": ""}, True),  # no-color.org: an empty NO_COLOR means nothing
])
def test_colours_follow_no_color_and_term(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str],
                                          env: dict[str, str], coloured: bool) -> None:
    _project(tmp_path)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(main, command, color=True)  # as on a terminal that shows colours
    assert result.exit_code in (0, 1), result.output
    assert (ESC in result.output) is coloured, result.output


#: Any escape sequence; an SGR one (colours, bold) alone.
ANY_ESCAPE, SGR = re.compile(rb"\x1b.{0,8}"), re.compile(rb"\x1b\[[0-9;]*m")


@pytest.mark.slow
@pytest.mark.parametrize(("env", "forbidden"), [
    ({"NO_COLOR": "1"}, SGR),  # no colour; the live lines may still be redrawn in place
    ({"TERM": "dumb"}, ANY_ESCAPE),  # neither colour nor cursor moves
])
def test_canary_run_on_a_terminal_writes_no_colour(tmp_path: Path, env: dict[str, str],
                                                   forbidden: re.Pattern[bytes]) -> None:
    write_project(tmp_path)
    canary = str(Path(sys.executable).with_name("canary"))
    environ = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    environ.update({"TERM": "xterm-256color", **env})
    code, out = run_in_pty([canary, "run", "citation"], tmp_path, env=environ)
    text = out.decode("utf-8", "replace")
    assert "CAUGHT" in text, text
    assert not forbidden.search(out), forbidden.findall(out)
    assert code == 0
