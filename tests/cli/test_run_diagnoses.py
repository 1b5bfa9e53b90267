"""``canary run`` explains a failed run by what the proxy and the agent's log really saw.

A small real agent (an HTTP server) asks a real model server (another HTTP server) with the
``openai`` client. Depending on the canary's prompt it skips the proxy, strips the prompt, asks
through the proxy at a call ``inject_at`` never selects, or logs its guard's rejection in words the
guard's ``match`` does not fit. ``canary run`` runs in-process through Click's runner.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from canary.cli.main import main
from canary.demo.live import free_port
from canary.proxy.serving import BackgroundServer
from canary.runs.record import RunRecord
from canary.sentences import explain
from tests.cli.small_agent import agent_app, canary, model_app

GUARDS = {
    "citation": "[guard]\nname = \"citation\"\nmatch = 'CitationGuard: rejected'\n"
    + canary("direct", "direct") + canary("strip", "strip") + canary("late", "proxy", "4")
    + canary("reworded", "reworded"),
    "quote": "[guard]\nname = \"quote\"\nmatch = 'QuoteGuard: rejected quote='\n",
}


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    log = tmp_path / "agent.log"
    log.touch()
    (tmp_path / "defs").mkdir()
    for name, text in GUARDS.items():
        (tmp_path / "defs" / f"{name}.toml").write_text(text)
    proxy, fixtures = free_port(), free_port()
    with BackgroundServer(model_app()) as model:
        agent = BackgroundServer(agent_app(model.url, f"http://127.0.0.1:{proxy}", log))
        with agent:
            (tmp_path / "canary.toml").write_text(
                f'defs = ["defs/*.toml"]\n[agent]\nurl = "{agent.url}/ask"\ntimeout = "5s"\n'
                f'[model]\nlisten = "127.0.0.1:{proxy}"\nupstream = "{model.url}"\n'
                f'[fixtures]\nlisten = "127.0.0.1:{fixtures}"\n[logs]\npaths = ["{log}"]\n'
            )
            yield tmp_path, proxy


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["run", *args])
    return result.exit_code, result.stdout


def reason(out: str, canary_name: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(f"citation/{canary_name}: "))


def test_no_model_call_through_the_proxy_says_the_base_url_misses_it(project: tuple[Path, int]) -> None:
    """The agent asks its model directly: the reason shows each client's line, with the proxy's address."""
    _root, proxy = project
    code, out = run("citation/direct", "citation/strip", "citation/late")
    assert code == 1, out
    direct = reason(out, "direct")
    assert "no model call reached the proxy" in direct and "check inject_at" not in direct
    address = f"http://127.0.0.1:{proxy}"
    for line in (f'OpenAI(base_url="{address}/v1")', f"OPENAI_BASE_URL={address}/v1",
                 f"OLLAMA_HOST={address}", f'Client(host="{address}")',
                 f'ChatOpenAI(base_url="{address}/v1")', f'ChatOllama(base_url="{address}")'):
        assert line in direct, (line, direct)
    strip = reason(out, "strip")
    assert "1 model call(s) came through the proxy, none carrying the run's nonce" in strip, strip
    assert "base_url" not in strip
    late = reason(out, "late")
    assert "1 model call(s) carrying the run's nonce came through the proxy" in late, late
    assert "inject_at" in late and "base_url" not in late


def test_a_nonce_line_no_match_fits_is_shown_with_the_nearest_guard(project: tuple[Path, int]) -> None:
    """``CitationGuard rejected`` against ``match = 'CitationGuard: rejected'``: still unlogged, but said.

    The agent also logs the prompt, which carries the nonce: that line is near no guard, and not shown.
    """
    code, doc = run("citation/reworded", "--json")
    assert code == 1, doc
    record = json.loads(doc)["runs"][0]
    assert record["verdict"] == "unlogged" and record["firings"] == 0
    assert record["unmatched_line"].endswith(f"WARN CitationGuard rejected https://{record['nonce']}"
                                             ".example.org/permit not in fetched urls")
    assert record["nearest_guard"] == "citation"
    assert record["model_calls"] == 1
    # The sentence `canary run` prints, from the document as the daemon's control API sends it.
    said = explain(RunRecord.from_json(record), matches={"citation": "CitationGuard: rejected"})
    assert "WARN CitationGuard rejected https://" in said and "no guard's match fits" in said
    assert "nearest guard: citation (match 'CitationGuard: rejected')" in said, said
    assert "does not log" not in said


def test_one_cause_is_explained_once_for_every_canary_it_struck(project: tuple[Path, int]) -> None:
    """Two canaries whose model calls both missed the proxy: one paragraph, naming both."""
    root, _proxy = project
    (root / "defs" / "number.toml").write_text(
        "[guard]\nname = \"number\"\nmatch = 'SpanGrounding: rejected'\n" + canary("direct", "direct"))
    code, out = run("citation/direct", "number/direct")
    assert code == 1, out
    assert out.count("no model call reached the proxy") == 1, out
    assert "citation/direct, number/direct: no model call reached the proxy" in out, out
