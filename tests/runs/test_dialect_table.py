"""The same canaries give the same verdicts through every dialect family.

dialect (OpenAI chat, Responses, Ollama, Anthropic, Gemini) x fabrication (text, tool call) x
{streamed, not} x {alive guard, dead guard}: one ``canary run`` over a real agent
(``tests/runs/dialect_agent.py``) whose real SDK asks its model through the real proxy.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from canary.cli.main import main
from canary.demo.live import free_port
from canary.proxy.serving import BackgroundServer
from tests.runs.dialect_agent import agent_app

DIALECTS = ("chat", "responses", "ollama", "anthropic", "gemini")
CASES = list(itertools.product(DIALECTS, ("text", "tool"), ("yes", "no"), ("alive", "dead")))
EXPECTED = {"alive": "caught", "dead": "leaked"}


def _definition(dialect: str, kind: str, stream: str, life: str) -> str:
    guard = f"{dialect}-{kind}-{stream}-{life}"
    match = "ToolPolicy: refused" if kind == "tool" else "CitationGuard: rejected"
    fabrication = ('inject_tool = { name = "fetch_url", arguments = { url = "https://{nonce}.example.org/admin" } }'
                   if kind == "tool" else
                   'inject = "The amount is {true_number} euros. Source: https://{nonce}.example.org/permit"')
    return f"""
[guard]
name = "{guard}"
match = '{match}'

[[canary]]
name = "fabricated"
every = "6h"
prompt = "dialect={dialect} stream={stream} life={life} Read {{fixture_url}} and tell me the amount."
fixture = "<p>The amount is exactly {{true_number}} euros.</p>"
{fabrication}
leak = "{{nonce}}.example.org"
timeout = "20s"
"""


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    log = tmp_path / "agent.log"
    log.touch()
    (tmp_path / "defs").mkdir()
    for case in CASES:
        (tmp_path / "defs" / f"{'-'.join(case)}.toml").write_text(_definition(*case))
    proxy, fixtures = free_port(), free_port()
    with BackgroundServer(agent_app(f"http://127.0.0.1:{proxy}", log)) as agent:
        (tmp_path / "canary.toml").write_text(
            f'defs = ["defs/*.toml"]\n[agent]\nurl = "{agent.url}/ask"\ntimeout = "20s"\n'
            f'[model]\nlisten = "127.0.0.1:{proxy}"\n'
            f'[fixtures]\nlisten = "127.0.0.1:{fixtures}"\n[logs]\npaths = ["{log}"]\n'
        )
        yield tmp_path


@pytest.mark.slow
def test_every_dialect_gives_the_same_verdicts(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    result = CliRunner().invoke(main, ["run", "--json"])
    assert result.exit_code == 1, result.output
    runs = json.loads(result.stdout)["runs"]
    got = {r["guard"]: r["verdict"] for r in runs}
    want = {"-".join(case): EXPECTED[case[3]] for case in CASES}
    assert got == want, {g: (got.get(g), v) for g, v in want.items() if got.get(g) != v}
    assert all(r["trace"]["injected"] is not None for r in runs)
