"""``canary daemon --tick`` takes a positive period: a zero or negative one is bad usage (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from canary.cli.main import main


@pytest.mark.parametrize("tick", ["0", "-1", "-0.5"])
def test_a_tick_that_would_spin_is_refused_before_the_daemon_starts(tmp_path: Path, tick: str) -> None:
    config = tmp_path / "canary.toml"
    config.write_text("defs = []\n[logs]\npaths = []\n")
    result = CliRunner().invoke(main, ["--config", str(config), "daemon", "--tick", tick])
    assert result.exit_code == 2, result.output
    assert "--tick" in result.output and "x>0" in result.output
