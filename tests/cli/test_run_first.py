"""``canary run`` before any daemon: the log's organic history is still read back over the window.

The README's steps in the order a new user may take them (init, check, run, then the daemon's
collector), through Click's runner, against the README rehearsal's real agent and model server
(``tests/cli/readme_agent.py``) served on loopback. The log already holds two organic rejections
of the last day and one older than the window when the first command sees it.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner

from canary.cli.main import main
from canary.demo.live import free_port
from canary.proxy.serving import BackgroundServer
from tests.cli.readme_agent import agent, model


def stamp(hours_ago: float) -> str:
    return (datetime.now(UTC) - timedelta(hours=hours_ago)).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def history() -> str:
    """Two organic rejections inside the guard's 24 h window, one before it, and other work."""
    lines = [f"{stamp(30)} INFO  agent task finished"] * 50
    lines.append(f"{stamp(30)} WARN  guards CitationGuard: rejected url=https://old.example.com/a not in fetched urls")
    lines += [f"{stamp(5)} INFO  agent task finished"] * 50
    lines.append(f"{stamp(3)} WARN  guards CitationGuard: rejected url=https://a.example.com/x not in fetched urls")
    lines.append(f"{stamp(2)} WARN  guards CitationGuard: rejected url=https://b.example.com/y not in fetched urls")
    lines += [f"{stamp(1)} INFO  agent task finished"] * 50
    return "\n".join(lines) + "\n"


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.stderr
    return result.exit_code, result.stdout


def test_organic_history_counts_when_canary_run_sees_the_log_first(tmp_path: Path) -> None:
    project = tmp_path / "my-agent"
    (project / "logs").mkdir(parents=True)
    log = project / "logs" / "agent.log"
    log.write_text(history(), encoding="utf-8")
    proxy = f"127.0.0.1:{free_port()}"
    with BackgroundServer(model(), name="model") as served_model, \
            BackgroundServer(agent(log, f"http://{proxy}"), name="agent") as served_agent:
        code, out = invoke("init", "--agent-url", f"{served_agent.url}/ask", "--logs", str(log),
                           "--model-upstream", served_model.url, "--dir", str(project), "--yes")
        assert code == 0, out
        code, out = invoke("init", "--template", "citation", "--dir", str(project), "--yes")
        assert code == 0, out
        config = project / "canary.toml"
        text = re.sub(r'(\[model\][^\[]*?listen = )"[^"]*"', rf'\1"{proxy}"', config.read_text())
        text = re.sub(r'(\[fixtures\][^\[]*?listen = )"[^"]*"', rf'\1"127.0.0.1:{free_port()}"', text)
        config.write_text(text)
        at = ["--config", str(config)]
        code, out = invoke(*at, "check")
        assert code == 0, out
        code, out = invoke(*at, "run", "citation/fake-url", "--json")
        assert code == 0, out
        assert [r["verdict"] for r in json.loads(out)["runs"]] == ["caught"], out

    # The daemon's collector comes next: it resumes where the run left off, and the window the
    # run read back on first sight is counted once, not lost and not read again.
    code, out = invoke(*at, "collect", "--once")
    assert code == 0, out
    assert "citation=2(+" in out, out  # 2 organic, and the run's own firings as canary ones
    code, out = invoke(*at, "status", "--json")
    (guard,) = [g for g in json.loads(out)["guards"] if g["guard"] == "citation"]
    assert guard["organic_firings"] == 2 and guard["canary_firings"] >= 1, guard
    code, out = invoke(*at, "audit", "--window", "24h", "--json")
    (audited,) = [g for g in json.loads(out)["guards"] if g["guard"] == "citation"]
    assert (audited["organic"], audited["canary"]) == (2, guard["canary_firings"]), audited
