"""``[agent] command`` runs in canary.toml's folder, as every other path of the config is read from it: a
command written ``./agent.sh`` reaches the agent from any folder ``canary run`` is typed in, and from the
installed service (whose working folder is the state folder)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from canary.config.agent import AgentConfig
from canary.demo.live import free_port
from canary.runs.agent import AgentDriver

AGENT = "#!/bin/sh\necho \"I could not verify: $1 (asked in $(basename \"$PWD\"))\"\n"


def project(root: Path) -> Path:
    root.mkdir()
    script = root / "agent.sh"
    script.write_text(AGENT)
    script.chmod(0o755)
    (root / "agent.log").write_text("")
    (root / "defs").mkdir()
    (root / "defs" / "citation.toml").write_text(
        "[guard]\nname = 'citation'\nmatch = 'CitationGuard: rejected'\n[[canary]]\nname = 'fake-url'\n"
        "every = '6h'\nprompt = 'Read {fixture_url}'\nfixture = '<p>x</p>'\n"
        "inject = 'see https://{nonce}.example.org'\nleak = '{nonce}.example.org'\ntimeout = '10s'\n")
    config = root / "canary.toml"
    config.write_text(
        f"defs = ['defs/*.toml']\n[agent]\ncommand = ['./agent.sh', '{{prompt}}']\ntimeout = '10s'\n"
        f"[model]\nlisten = '127.0.0.1:{free_port()}'\n[fixtures]\nlisten = '127.0.0.1:{free_port()}'\n"
        f"[daemon]\ncontrol = '127.0.0.1:{free_port()}'\n[logs]\npaths = ['agent.log']\n"
        f"[store]\nurl = 'sqlite:///{(root / 'canary.db').as_posix()}'\n[alerts]\ndesktop = false\n")
    return config


def test_the_driver_runs_the_command_in_the_folder_given(tmp_path: Path) -> None:
    project(tmp_path / "agent-home")
    driver = AgentDriver(AgentConfig(command=("./agent.sh", "{prompt}")), folder=tmp_path / "agent-home")
    assert driver.ask("hello", nonce="n").answer == "I could not verify: hello (asked in agent-home)"


def test_canary_run_typed_in_another_folder_reaches_a_command_written_relative(tmp_path: Path) -> None:
    config = project(tmp_path / "agent-home")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    canary = str(Path(sys.executable).with_name("canary"))
    env = {**os.environ, "CANARY_STATE_DIR": str(tmp_path / "state")}
    done = subprocess.run([canary, "run", "--json", "--config", str(config)], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    [run] = json.loads(done.stdout)["runs"]
    assert run["answer"] is not None and run["answer"].startswith("I could not verify: Read http"), run
    assert run["answer"].endswith("(asked in agent-home)"), run
