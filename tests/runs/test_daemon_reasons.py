"""Through a daemon, ``canary run`` explains a run as it does without one.

A daemon started by hand serves the agent's model address from a proxy process of its own
(``canary.runs.proxylink``), and its runs reach ``canary run`` as the control API's documents.
The agent asks with the real ``anthropic`` client (``tests/runs/claude_agent.py``); the daemon
and ``canary run`` are real subprocesses.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from canary.demo.live import free_port
from canary.proxy.serving import BackgroundServer
from tests.helpers_processes import stop_proxy_of
from tests.proxy.model_apis import ModelAPIs
from tests.runs.claude_agent import FailingModel, serve_project
from tests.runs.test_model_failures import FAILURES, definitions

pytestmark = pytest.mark.slow

THINKING_TOOL = """[guard]
name = "tool-think"
match = 'UrlAllowlist: refused'

[[canary]]
name = "no-repair"
every = "6h"
prompt = "thinking=on Read {fixture_url} and tell me what the page says."
fixture = "<p>{true_quote}</p>"
inject_tool = { name = "fetch_url", arguments = { url = "{fixture_url_alias}/admin" } }
leak = { fetched = "{fixture_url_alias}/admin" }
timeout = "20s"
"""


def canary_run(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``canary run`` as a user runs it."""
    return subprocess.run([sys.executable, "-m", "canary.cli.main", "--config", str(config), "run", *args],
                          capture_output=True, text=True, timeout=180, check=False)


@contextmanager
def daemon(config: Path) -> Iterator[None]:
    """A real daemon of the project, up; stopped after, with the proxy process it started."""
    err = config.parent / "daemon.err"
    with err.open("ab") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "canary.cli.main", "--config", str(config), "daemon"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=sink)
    try:
        deadline = time.monotonic() + 90
        while "daemon up" not in err.read_text(errors="replace"):
            assert proc.poll() is None, err.read_text(errors="replace")
            assert time.monotonic() < deadline, err.read_text(errors="replace")
            time.sleep(0.1)
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        stop_proxy_of(err.read_text(errors="replace"))


def reason(out: str, run: str) -> str:
    """The sentence ``canary run`` printed under the table for ``run`` (GUARD/CANARY)."""
    return next(line for line in out.splitlines() if line.startswith(f"{run}: "))


def test_a_tool_canary_whose_calls_asked_for_thinking_says_so_through_the_daemon(tmp_path: Path) -> None:
    """No `repair`: the run does not inject, and says why, whoever serves the proxy."""
    with BackgroundServer(ModelAPIs().app(), name="model apis") as model, serve_project(
        tmp_path, {"tool-think": THINKING_TOOL}, model.url, control=free_port()
    ) as config:
        alone = canary_run(config, "tool-think")
        with daemon(config):
            through = canary_run(config, "tool-think")
    assert "through the daemon" in through.stderr, through.stderr
    assert alone.returncode == through.returncode == 1, (alone.stdout, through.stdout)
    said = reason(alone.stdout, "tool-think/no-repair")
    assert "1 model call(s) carrying the run's nonce asked the model for extended thinking" in said, said
    assert "Give the canary a `repair` answer" in said
    assert reason(through.stdout, "tool-think/no-repair") == said


def test_the_model_server_failing_the_runs_call_is_named_through_the_daemon(tmp_path: Path) -> None:
    with FailingModel() as model, serve_project(tmp_path, {"cite": definitions()}, model.url,
                                                 control=free_port()) as config, daemon(config):
        through = canary_run(config, "cite", "--json")
    assert "through the daemon" in through.stderr, through.stderr
    runs = {r["canary"]: r for r in json.loads(through.stdout)["runs"]}
    for name, (_, did, raised) in FAILURES.items():
        error = runs[name]["error"]
        assert runs[name]["verdict"] == "error"
        assert error.startswith(f"the model server at {model.url} ([model] upstream) {did}; then the agent "
                                "answered HTTP 502: "), (name, error)
        assert raised in error, (name, error)
    assert runs["hanging"]["error"].startswith(  # the daemon's proxy tells the run it waits on the model
        f"the model server at {model.url} ([model] upstream) had not answered the run's model call after "
    ), runs["hanging"]["error"]
