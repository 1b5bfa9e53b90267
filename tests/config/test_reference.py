"""The key tables: they drive loading (unknown keys, defaults), canary init, and docs/configuration.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from canary.cli.init.model import InitSettings, LogScan
from canary.cli.init.render import render_config
from canary.config.definitions import load_definitions
from canary.config.reference import BEGIN, END, main, rewrite
from canary.config.schema import Section
from canary.config.sections import (
    AGENT,
    ALERTS,
    CANARY,
    CONFIG,
    DAEMON,
    DEFINITION,
    FIXTURES,
    GUARD,
    LOGS,
    MODEL,
    STORE,
    TRACES,
    TURN,
)
from canary.config.settings import load_config
from canary.errors import ConfigError, Problem

ROOT = Path(__file__).parents[2]
DOC = ROOT / "docs" / "configuration.md"
CONFIG_SECTIONS = (AGENT, MODEL, FIXTURES, TRACES, LOGS, STORE, ALERTS, DAEMON)

GUARD_TEXT = """\
[guard]
name = "g"
match = 'G: rejected'

[[canary]]
name = "c"
every = "6h"
prompt = "Read {fixture_url}"
inject = "see https://{nonce}.example.org"
leak = "{nonce}.example.org"
"""


def problems_of(path: Path) -> list[Problem]:
    with pytest.raises(ConfigError) as caught:
        load_config(path=path)
    return caught.value.problems


def test_the_committed_docs_are_the_tables_the_code_declares() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert BEGIN in text and END in text
    assert rewrite(text) == text, ("docs/configuration.md is stale: run "
                                   "`uv run python -m canary.config.reference`")


def test_the_one_line_command_rewrites_a_stale_table_and_keeps_the_prose(tmp_path: Path) -> None:
    current = DOC.read_text(encoding="utf-8")
    stale = current.replace("| `clock_skew` | duration | `\"5m\"`", "| `clock_skew` | duration | `\"9m\"`")
    stale = stale.replace("# Configuration\n", "# Configuration\n\nA paragraph of our own.\n")
    assert stale != current
    path = tmp_path / "configuration.md"
    path.write_text(stale, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "canary.config.reference", str(path)], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "rewrote the key tables" in done.stdout
    assert path.read_text(encoding="utf-8") == current.replace(
        "# Configuration\n", "# Configuration\n\nA paragraph of our own.\n")
    assert main([str(path)]) == 0  # a second run changes nothing
    assert "`\"9m\"`" not in path.read_text(encoding="utf-8")


def test_the_docs_name_every_key_including_the_ones_the_readme_left_out() -> None:
    text = DOC.read_text(encoding="utf-8")
    for section in (*CONFIG_SECTIONS, GUARD, CANARY, TURN):
        block = text.split(f"### {section.title}\n", 1)[1].split("\n### ", 1)[0]
        for key in section.keys:
            assert f"| `{key.name}` |" in block, (section.title, key.name)
    assert "| `timestamp_format` |" in text and "| `allow_remote` |" in text


@pytest.mark.parametrize("section", CONFIG_SECTIONS, ids=lambda s: s.header)
def test_every_declared_key_of_canary_toml_is_known_and_a_near_miss_is_named(
        tmp_path: Path, section: Section) -> None:
    lines = [f"[{section.header}]"] + [f"{key.name}s_ = 1" for key in section.keys]
    path = tmp_path / "canary.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    unknown = {p.key: p for p in problems_of(path) if p.message.startswith("unknown key")}
    for number, key in enumerate(section.keys, start=2):
        problem = unknown[f"{section.header}.{key.name}s_"]
        assert (problem.suggestion, problem.line) == (key.name, number)


def test_every_declared_key_of_a_definition_is_known_and_a_near_miss_is_named(tmp_path: Path) -> None:
    text = GUARD_TEXT.replace('[guard]\n', '[guard]\n' + "".join(
        f"{k.name}s_ = 1\n" for k in GUARD.keys)) + "".join(f"{k.name}s_ = 1\n" for k in CANARY.keys)
    (tmp_path / "g.toml").write_text(text, encoding="utf-8")
    _, problems = load_definitions(["g.toml"], tmp_path)
    unknown = {p.key: p.suggestion for p in problems if p.message.startswith("unknown key")}
    assert unknown == {**{f"guard.{k.name}s_": k.name for k in GUARD.keys},
                       **{f"canary[0].{k.name}s_": k.name for k in CANARY.keys}}
    assert CONFIG.names[2:] == tuple(s.header for s in CONFIG_SECTIONS)
    assert DEFINITION.names == ("guard", "canary") and CANARY.names[-1] == "turn"


def test_an_empty_config_takes_every_default_from_the_tables(tmp_path: Path) -> None:
    # [traces] is there, empty: without it nothing is received (config.traces is None)
    (tmp_path / "canary.toml").write_text('defs = []\n[traces]\n[agent]\nurl = "http://127.0.0.1:1/ask"\n')
    config = load_config(path=tmp_path / "canary.toml")
    loaded = {"agent": config.agent, "model": config.model, "fixtures": config.fixtures, "traces": config.traces,
              "logs": config.logs, "store": config.store, "alerts": config.alerts, "daemon": config.daemon}
    checked = 0
    for section in CONFIG_SECTIONS:
        for key in section.keys:
            if key.default is None or key.shown:
                continue  # unset, or computed per project (the daemon's port, the store's path)
            assert getattr(loaded[section.header], key.name) == key.value, (section.header, key.name)
            checked += 1
    assert checked > 10  # the loop ran over the keys with a plain default
    assert config.agent is not None and config.agent.body == {"prompt": "{prompt}"}
    assert config.defs == () and CONFIG.default("defs") == ("canaries_defs/*.toml",)


def test_a_bare_guard_and_canary_take_their_defaults_from_the_tables(tmp_path: Path) -> None:
    (tmp_path / "g.toml").write_text(GUARD_TEXT, encoding="utf-8")
    [guard], problems = load_definitions(["g.toml"], tmp_path)
    assert problems == []
    [canary] = guard.canaries
    assert (guard.description, guard.window, guard.grace) == tuple(
        GUARD.default(k) for k in ("description", "window", "grace"))
    assert (canary.expect, canary.fixture, canary.inject_at, canary.timeout, canary.cron) == tuple(
        CANARY.default(k) for k in ("expect", "fixture", "inject_at", "timeout", "cron"))


def test_canary_init_writes_declared_keys_with_their_help(tmp_path: Path) -> None:
    settings = InitSettings(agent_url="http://127.0.0.1:8700/ask", logs=("logs/*.log",),
                            model_upstream="http://127.0.0.1:11434")
    scan = LogScan((), [], [], 0, "text", [], None)
    text = render_config(tmp_path, settings, scan, activity=True)
    sections = {s.header: s for s in CONFIG_SECTIONS}
    current: Section = CONFIG
    written = []
    for line in text.splitlines():
        if line.startswith("["):
            current = sections[line.strip("[]")]
        elif " = " in line and not line.startswith("#"):
            name, _, rest = line.partition(" = ")
            assert rest.rpartition(" # ")[2] == current.key(name).help or current is CONFIG
            written.append(f"{current.header}.{name}")
    assert written == [".defs", "agent.url", "agent.body", "agent.answer", "agent.timeout",
                       "model.listen", "model.upstream", "fixtures.listen", "logs.paths", "logs.format"]
    (tmp_path / "canaries_defs").mkdir()
    (tmp_path / "canaries_defs" / "g.toml").write_text(GUARD_TEXT, encoding="utf-8")
    (tmp_path / "canary.toml").write_text(text, encoding="utf-8")
    config = load_config(path=tmp_path / "canary.toml")
    assert config.fixtures.listen == FIXTURES.default("listen")
    assert config.agent is not None and config.agent.timeout == AGENT.default("timeout")
