"""``canary init``: the demo agent's logs in, the demo's guards out, with the counts ``canary audit`` sees.

Logs come from the bundled sample (two days of a research agent) and from the real demo agent
run against its scripted model with fabrications. The command is driven with click's CliRunner;
no test writes outside its tmp_path.
"""

from __future__ import annotations

import json
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner, Result

from canary.cli.init import InitSettings, init_command, init_project, mask, scan_logs, shown
from canary.cli.main import main
from canary.config.settings import load_config
from canary.demo.agent import create_agent
from canary.demo.model import create_model_server
from canary.demo.sample import FIRINGS, write_demo
from canary.logs.audit import audit
from canary.proxy.serving import BackgroundServer
from tests.demo.test_demo_agent import GUARDS, guard_regex, page_server

DEMO_MATCH = {name: guard_regex(name).pattern for name in GUARDS}


def sample_log(tmp_path: Path) -> Path:
    write_demo(tmp_path / "sample")
    return tmp_path / "sample" / "logs" / "agent.log"


def run(args: list[str], input: str | None = None) -> Result:
    result = CliRunner().invoke(init_command, args, input=input)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def test_mask_keeps_the_stable_words_of_a_line() -> None:
    line = ('2026-11-29T10:00:00.612Z WARN  guards QuoteGuard: rejected quote="The fee is 12 euros." '
            "url=https://a.example.org/x?y=1 task=t1a2b3c4 after 3 tries, 0.25s")
    assert shown("".join(f"\ue000{k}\ue000" if k else v for k, v in mask(line))) == (
        "<TS> WARN  guards QuoteGuard: rejected quote=<Q> url=<URL> task=<ID> after <N> tries, <N>s")


def test_sample_logs_propose_the_demo_guards_with_their_counts(tmp_path: Path) -> None:
    scan = scan_logs([str(sample_log(tmp_path))], tmp_path)
    strong = {p.name: (p.count, p.match, p.kind) for p in scan.proposals if p.strong}
    expected = {g: n for g, n in FIRINGS.items() if n}
    assert strong == {g: (n, DEMO_MATCH[g], g) for g, n in expected.items()}
    assert [p.name for p in scan.proposals if not p.strong] == []
    assert scan.activity is not None and (scan.activity.match, scan.activity.count) == ("task finished", 410)
    assert len(scan.files) == 3  # the live log and its two rotated copies, .gz included


def test_yes_writes_files_that_check_clean_and_audit_the_same_counts(tmp_path: Path) -> None:
    log = sample_log(tmp_path)
    project = tmp_path / "project"
    result = run(["--yes", "--logs", str(log), "--dir", str(project),
                  "--agent-url", "http://127.0.0.1:8700/ask", "--model-upstream", "http://127.0.0.1:11434/v1"])
    assert result.exit_code == 0, result.output
    assert "$ canary check" in result.output and "$ canary audit" in result.output
    assert 'base_url="http://127.0.0.1:11435/v1"' in result.output  # what to do next

    written = sorted(p.stem for p in (project / "canaries_defs").glob("*.toml"))
    assert written == sorted(g for g, n in FIRINGS.items() if n)
    config = load_config(path=project / "canary.toml")
    assert config.model.upstream == "http://127.0.0.1:11434"  # /v1 belongs to the path the proxy relays
    assert config.agent is not None and config.agent.url == "http://127.0.0.1:8700/ask"
    assert config.logs.activity == "task finished"
    report = audit(config, now=datetime.now(UTC))
    assert {g.guard: g.firings for g in report.guards} == {g: n for g, n in FIRINGS.items() if n}
    quote = next(g for g in config.guards if g.name == "quote")
    assert {c.name for c in quote.canaries} == {"fake-quote", "fused-quote", "spliced-quote", "quote-control"}
    check = CliRunner().invoke(main, ["--config", str(project / "canary.toml"), "check"])
    assert check.exit_code == 0, check.output


def test_live_demo_agent_logs_propose_its_guards_with_correct_counts(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "agent.log"
    with (
        BackgroundServer(create_model_server(fabricate_every=1), name="model") as model,
        BackgroundServer(page_server(), name="pages") as pages,
        BackgroundServer(create_agent(model.url + "/v1", log), name="agent") as agent,
    ):
        for i in range(8):
            page = ("permit", "release")[i % 2]
            reply = httpx.post(f"{agent.url}/ask", json={"prompt": f"Read {pages.url}/{page} and answer."},
                               timeout=60, trust_env=False)
            assert reply.status_code == 200
    lines = log.read_text(encoding="utf-8").splitlines()
    expected = {g: sum(1 for line in lines if guard_regex(g).search(line)) for g in GUARDS}
    expected = {g: n for g, n in expected.items() if n}
    assert set(expected) == {"citation", "quote", "number", "denial"}, expected

    scan = scan_logs([str(log)], tmp_path)
    strong = {p.name: (p.count, p.match) for p in scan.proposals if p.strong}
    assert strong == {g: (n, DEMO_MATCH[g]) for g, n in expected.items()}
    weak = [p for p in scan.proposals if not p.strong]
    assert [p.match for p in weak] == ["retry rejected"]  # the agent's own give-up line, not a guard
    assert scan.activity is not None and scan.activity.count == 8

    result = run(["--yes", "--logs", str(log), "--dir", str(tmp_path / "p"), "--agent-url",
                  f"{agent.url}/ask"])
    assert result.exit_code == 0, result.output
    names = {p.stem for p in (tmp_path / "p" / "canaries_defs").glob("*.toml")}
    assert names == set(expected)


def test_answering_no_leaves_existing_files_as_they_were(tmp_path: Path) -> None:
    log = sample_log(tmp_path)
    project = tmp_path / "project"
    (project / "canaries_defs").mkdir(parents=True)
    mine = "# my own config\ndefs = ['canaries_defs/*.toml']\n"
    (project / "canary.toml").write_text(mine)
    theirs = "# my citation guard\n[guard]\nname = 'citation'\nmatch = 'Citation check failed'\n"
    (project / "canaries_defs" / "citation.toml").write_text(theirs)

    # Enter takes every default: add the proposed guards and the activity, replace nothing.
    result = run(["--logs", str(log), "--dir", str(project), "--agent-url", "http://127.0.0.1:8700/ask",
                  "--model-upstream", ""], input="\n" * 20)
    assert "canary.toml exists and would change. Replace it? [y/N]" in result.output
    assert "citation.toml exists and would change. Replace it? [y/N]" in result.output
    assert (project / "canary.toml").read_text() == mine
    assert (project / "canaries_defs" / "citation.toml").read_text() == theirs
    assert (project / "canaries_defs" / "quote.toml").exists()

    again = run(["--yes", "--logs", str(log), "--dir", str(project)])
    assert "Replace it?" not in again.output
    assert (project / "canary.toml").read_text() == mine
    assert (project / "canaries_defs" / "citation.toml").read_text() == theirs
    assert "kept" in again.output and "(already in quote.toml)" in again.output


def test_answering_yes_replaces_a_file(tmp_path: Path) -> None:
    log = sample_log(tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    (project / "canary.toml").write_text("# old\n")
    answers = "\n" * 5 + "y\n"  # four guards and the activity by default, then yes to replacing
    result = run(["--logs", str(log), "--dir", str(project), "--agent-url", "http://127.0.0.1:8700/ask",
                  "--model-upstream", ""], input=answers)
    assert result.exit_code == 0, result.output
    assert "replaced" in result.output
    assert load_config(path=project / "canary.toml").agent is not None


def test_prompts_ask_for_what_the_flags_did_not_give(tmp_path: Path) -> None:
    log = sample_log(tmp_path)
    answers = f"my-agent ask --json\n{log}\n127.0.0.1:11434/\n" + "\n" * 3 + "n\n" + "\n" * 2
    result = run(["--dir", str(tmp_path / "p")], input=answers)
    assert result.exit_code == 0, result.output
    assert "How do canaries reach your agent?" in result.output
    assert "Your agent's log files" in result.output and "Your real model server" in result.output
    config = load_config(path=tmp_path / "p" / "canary.toml")
    assert config.agent is not None and config.agent.command == ("my-agent", "ask", "--json", "{prompt}")
    assert config.model.upstream == "http://127.0.0.1:11434"
    assert sorted(g.name for g in config.guards) == ["denial", "number", "quote"]  # "n" to citation, the fourth


def test_jsonl_logs_get_field_matches(tmp_path: Path) -> None:
    log = tmp_path / "agent.jsonl"
    rows = []
    for i in range(30):
        rows.append({"ts": f"2026-11-29T10:{i:02d}:00Z", "level": "info", "event": "tool_call", "tool": "fetch",
                     "url": f"https://docs.example.org/{i}"})
        if i % 3 == 0:
            rows.append({"ts": f"2026-11-29T10:{i:02d}:01Z", "level": "warning", "event": "guard_reject",
                         "guard": "citation", "url": f"https://x{i}.example.org/"})
        if i % 10 == 0:
            rows.append({"ts": f"2026-11-29T10:{i:02d}:02Z", "level": "warning", "event": "guard_reject",
                         "guard": "version", "value": f"1.{i}.0"})
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    scan = scan_logs([str(log)], tmp_path)
    assert scan.log_format == "jsonl"
    assert {p.name: (p.count, p.match) for p in scan.proposals} == {
        "citation": (10, {"event": "guard_reject", "guard": "citation"}),
        "version": (3, {"event": "guard_reject", "guard": "version"}),
    }
    result = init_project(tmp_path / "p", InitSettings(logs=(str(log),)))
    assert {p.name for p in result.chosen} == {"citation", "version"}
    config = load_config(path=result.config_path)
    assert config.logs.format == "jsonl"
    assert {g.guard: g.firings for g in audit(config).guards} == {"citation": 10, "version": 3}


def test_no_rejection_in_the_logs_still_gives_a_valid_config(tmp_path: Path) -> None:
    log = tmp_path / "quiet.log"
    log.write_text("2026-11-29T10:00:00Z INFO agent task finished id=1\n" * 3)
    result = run(["--yes", "--logs", str(log), "--dir", str(tmp_path / "p")])
    assert result.exit_code == 0, result.output
    assert "No line reads like a guard's rejection" in result.output
    config = load_config(path=tmp_path / "p" / "canary.toml")
    assert config.guards == () and config.agent is None


def test_an_existing_definition_that_matches_is_not_proposed_again(tmp_path: Path) -> None:
    log = sample_log(tmp_path)
    project = tmp_path / "project"
    (project / "canaries_defs").mkdir(parents=True)
    (project / "canaries_defs" / "cites.toml").write_text(
        "[guard]\nname = 'cites'\nmatch = 'CitationGuard: rejected url='\n")
    result = init_project(project, InitSettings(logs=(str(log),)))
    citation = next(p for p in result.scan.proposals if p.kind == "citation")
    assert citation.covered_by == project / "canaries_defs" / "cites.toml"
    assert citation not in result.chosen
    config = load_config(path=result.config_path)
    assert sorted(g.name for g in config.guards) == ["cites", "denial", "number", "quote"]


@pytest.mark.parametrize("flag", ["--agent-url", "--agent-command"])
def test_agent_flags_reach_the_config(tmp_path: Path, flag: str) -> None:
    value = "http://127.0.0.1:8700/ask" if flag == "--agent-url" else "python -m my_agent '{prompt}' --quiet"
    result = run(["--yes", flag, value, "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    with (tmp_path / "canary.toml").open("rb") as handle:
        agent = tomllib.load(handle)["agent"]
    if flag == "--agent-url":
        assert agent["url"] == value and agent["body"] == {"prompt": "{prompt}"}
    else:
        assert agent["command"] == ["python", "-m", "my_agent", "{prompt}", "--quiet"]


def test_the_command_has_help() -> None:
    result = CliRunner().invoke(init_command, ["--help"])
    assert result.exit_code == 0
    assert init_command.help and len(init_command.help) > 20
    for option in ("--agent-url", "--agent-command", "--logs", "--model-upstream", "--dir", "--yes"):
        assert option in result.output


def test_a_name_another_file_uses_is_not_reused(tmp_path: Path) -> None:
    log = sample_log(tmp_path)
    project = tmp_path / "project"
    (project / "canaries_defs").mkdir(parents=True)
    (project / "canaries_defs" / "mine.toml").write_text("[guard]\nname = 'quote'\nmatch = 'Quote check failed'\n")
    result = init_project(project, InitSettings(logs=(str(log),)))
    assert sorted(p.name for p in result.chosen) == ["citation", "denial", "number", "quote-2"]
    config = load_config(path=result.config_path)
    assert sorted(g.name for g in config.guards) == ["citation", "denial", "number", "quote", "quote-2"]


def test_the_listing_of_log_lines_shows_escapes_and_never_sends_them(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    attack = "\x1b]0;PWNED\x07\x1b]52;c;cHduZWQ=\x07\x1b[2J\x9b2J"
    log.write_text("".join(
        f"2026-11-29T10:00:0{i}Z WARN guards {attack} CitationGuard: rejected url=https://x{i}.example.org\n"
        for i in range(5)), encoding="utf-8")
    result = run(["--yes", "--logs", str(log), "--dir", str(tmp_path / "project")])
    assert "CitationGuard" in result.output
    for raw in ("\x1b]", "\x07", "\x9b"):
        assert raw not in result.output, result.output
    assert "PWNED" in result.output  # the line is listed, its escapes visible


def test_tool_governance_refusals_propose_the_tool_templates(tmp_path: Path) -> None:
    lines = [
        "2026-11-30T10:00:00Z WARNING governance UrlAllowlist: refused fetch_url url=http://x.example.org/a",
        "2026-11-30T10:00:01Z WARNING governance Sandbox: refused write_file path=/etc/x outside /srv/box",
        "2026-11-30T10:00:02Z WARNING governance ShellPolicy: refused run_shell command='curl x' program=curl",
        "2026-11-30T10:00:03Z WARNING governance StepPolicy: refused write_file during step=research",
        "2026-11-30T10:00:04Z INFO agent task finished id=t1",
    ]
    log = tmp_path / "agent.log"
    log.write_text("\n".join(lines * 3) + "\n", encoding="utf-8")
    scan = scan_logs([str(log)], tmp_path)
    found = {p.name: (p.match, [f.name for f in p.template_files]) for p in scan.proposals if p.strong}
    assert found == {
        "tool-fetch": ("UrlAllowlist: refused", ["tool_fetch.toml"]),
        "tool-write": ("Sandbox: refused", ["tool_write.toml"]),
        "tool-shell": ("ShellPolicy: refused", ["tool_shell.toml"]),
        "tool-step": ("StepPolicy: refused", ["tool_step.toml"]),
    }


@pytest.mark.parametrize(("upstream", "root", "advice", "not_advised"), [
    ("https://api.anthropic.com", "https://api.anthropic.com",
     ["ANTHROPIC_BASE_URL=http://127.0.0.1:11435", 'AnthropicProvider(base_url="http://127.0.0.1:11435")'],
     "OPENAI_BASE_URL"),
    ("https://generativelanguage.googleapis.com/v1beta", "https://generativelanguage.googleapis.com",
     ['HttpOptions(base_url="http://127.0.0.1:11435")', "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:11435"],
     "OPENAI_BASE_URL"),
    ("https://api.openai.com/v1", "https://api.openai.com", ['base_url="http://127.0.0.1:11435/v1"'],
     "ANTHROPIC_BASE_URL"),
    # a local server whose API its address does not tell: every SDK's line
    ("http://127.0.0.1:31401", "http://127.0.0.1:31401",
     ['base_url="http://127.0.0.1:11435/v1"', "ANTHROPIC_BASE_URL=http://127.0.0.1:11435",
      'HttpOptions(base_url="http://127.0.0.1:11435")'], "api.anthropic.com"),
])
def test_an_anthropic_or_gemini_upstream_gets_that_sdks_base_url_advice(
    tmp_path: Path, upstream: str, root: str, advice: list[str], not_advised: str
) -> None:
    log = sample_log(tmp_path)
    project = tmp_path / "project"
    result = run(["--yes", "--logs", str(log), "--dir", str(project),
                  "--agent-url", "http://127.0.0.1:8700/ask", "--model-upstream", upstream])
    assert result.exit_code == 0, result.output
    for line in advice:
        assert line in result.output, result.output
    assert not_advised not in result.output
    config = load_config(path=project / "canary.toml")
    assert config.model.upstream == root
    if "googleapis" in upstream or "anthropic" in upstream:  # the canary.toml names that SDK's line too
        assert advice[0] in (project / "canary.toml").read_text()


def test_a_line_longer_than_the_collectors_cap_is_cut_and_told(tmp_path: Path) -> None:
    """One 3 MiB line among normal ones: read only as far as the collectors read a line, said so,
    and the guard is proposed from the normal lines with the count ``canary audit`` gives."""
    from collectors.scan import MAX_LINE

    log = tmp_path / "logs" / "agent.log"
    log.parent.mkdir()
    filler = "tool output 12 https://a.example.com/q 'quoted' abc123def "
    with log.open("w", encoding="utf-8") as f:
        for i in range(40):
            f.write(f"2026-12-03T10:00:{i:02d}.000Z INFO  agent task finished id={i}\n")
            if i % 4 == 0:
                f.write(f"2026-12-03T10:00:{i:02d}.500Z WARN  guards CitationGuard: rejected "
                        f"url=https://x{i}.example.com/p not in fetched urls\n")
            if i == 20:
                f.write("2026-12-03T10:00:20.700Z INFO  tool result=" + filler * (3 * MAX_LINE // len(filler))
                        + "\n")
    scan = scan_logs([str(log)], tmp_path)
    assert scan.lines == 51 and scan.cut == 1
    assert [(p.name, p.match, p.count) for p in scan.proposals] == [("citation", "CitationGuard: rejected", 10)]
    longest = max(len(e) for t in scan.proposals[0].templates for e in t.examples)
    assert longest < 200
    result = run(["--logs", str(log), "--dir", str(tmp_path / "project"), "--yes"])
    assert result.exit_code == 0, result.output
    assert f"1 line longer than {MAX_LINE} bytes: only its first {MAX_LINE} bytes were read" in result.output


def test_a_hole_of_nuls_is_not_part_of_a_proposed_line(tmp_path: Path) -> None:
    """A log truncated under a writer without O_APPEND starts with a hole: the line after it
    is read without it, as the collectors read it."""
    log = tmp_path / "agent.log"
    log.write_bytes(b"\0" * 5000 + b"2026-12-03T10:00:00.500Z WARN  guards CitationGuard: rejected "
                    b"url=https://x.example.com/p not in fetched urls\n")
    scan = scan_logs([str(log)], tmp_path)
    (proposal,) = scan.proposals
    assert proposal.match == "CitationGuard: rejected" and proposal.count == 1
    assert proposal.example.startswith("2026-12-03T10:00:00.500Z WARN")
