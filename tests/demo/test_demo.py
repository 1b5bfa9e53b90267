"""The demo, end to end: the bundled agent, its scripted model, the real proxy and collectors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from canary.cli.main import main

EXPECTED = {
    ("citation", "fake-url"): "caught",
    ("citation", "real-url-control"): "passed",
    ("quote", "fake-quote"): "caught",
    ("number", "fake-number"): "caught",
    ("denial", "empty-page"): "caught",
    ("version", "fake-version"): "leaked",
    ("date", "fake-date"): "leaked",
    ("conversation", "established-figure"): "fired_but_leaked",
}


def test_demo_headless_json_gives_each_guard_its_verdict() -> None:
    result = CliRunner().invoke(main, ["demo", "--headless", "--json"])
    assert result.exit_code == 1, result.output
    runs = json.loads(result.stdout)["runs"]
    assert {(r["guard"], r["canary"]): r["verdict"] for r in runs} == EXPECTED
    for r in runs:
        assert r["trace"]["sent"] == 0.0
        assert r["trace"]["fixture_fetched"] is not None
        assert r["trace"]["injected"] is not None
        if r["verdict"] == "caught":
            assert r["firings"] >= 1 and r["evidence"] and not r["leaked"]
            assert r["trace"]["fired"] is not None
        if r["verdict"] == "leaked":
            assert r["firings"] == 0 and r["evidence"] is None and r["leaked"]
        if r["guard"] == "conversation":
            # The guard fired on turn 2; the figure it rejected reached the user on turn 3.
            assert (r["turns"], r["leaked_turn"]) == (3, 3) and r["firings"] >= 1 and r["leaked"]
        else:
            assert "leaked_turn" not in r
        assert len(r["nonce"]) >= 20 and set(r["nonce"]) <= set("abcdefghijklmnopqrstuvwxyz0123456789")


@pytest.mark.slow
@pytest.mark.parametrize("dialect", ["responses", "ollama", "anthropic", "gemini"])
def test_the_demo_agent_on_every_dialect_gives_the_same_verdicts(dialect: str) -> None:
    """``--dialect``: the agent asks its model with that API's own SDK, through the proxy."""
    result = CliRunner().invoke(main, ["demo", "--headless", "--json", "--dialect", dialect])
    assert result.exit_code == 1, result.output
    runs = json.loads(result.stdout)["runs"]
    assert {(r["guard"], r["canary"]): r["verdict"] for r in runs} == EXPECTED


def test_a_dialect_whose_client_is_missing_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "anthropic" else real(name, *a))
    result = CliRunner().invoke(main, ["demo", "--headless", "--dialect", "anthropic"])
    assert result.exit_code == 2
    assert "pip install anthropic" in result.output


def test_the_headless_demo_says_why_it_exits_1() -> None:
    result = CliRunner().invoke(main, ["demo", "--headless"])
    assert result.exit_code == 1, result.output
    last = result.stdout.strip().splitlines()[-1]
    assert "exit status 1" in last and "asleep on purpose" in last, result.stdout


def test_the_sample_audit_names_no_folder_it_removes(tmp_path: Path) -> None:
    import re

    result = CliRunner().invoke(main, ["demo", "--sample-audit"])
    assert result.exit_code == 1, result.output
    named = re.findall(r"(/\S+canary-demo-\S*)", result.output)
    assert not named or all(Path(p.rstrip(".,:)")).exists() for p in named), named
    assert "--keep DIR" in result.output
    kept = CliRunner().invoke(main, ["demo", "--sample-audit", "--keep", str(tmp_path / "demo")])
    assert str(tmp_path / "demo") in kept.output and (tmp_path / "demo").is_dir()
