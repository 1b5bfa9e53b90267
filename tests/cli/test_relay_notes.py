"""Where the agent may point: `canary check` warns when nothing keeps the proxy up, `canary run` says it is for the run."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from canary.cli.main import main
from canary.daemon import service
from canary.demo.live import free_port

GUARD = """
[guard]
name = "cite"
match = 'CiteGuard: rejected'

[[canary]]
name = "fake-url"
every = "6h"
prompt = "Read {fixture_url} and tell me the amount."
fixture = "<p>The amount is exactly {true_number} euros.</p>"
inject = "The amount is {true_number} euros. Source: https://{nonce}.example.org/x"
leak = "{nonce}.example.org"
timeout = "2s"
"""


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME and XDG_CONFIG_HOME in tmp_path: no real service file is seen."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdg"))
    return home


def write(tmp_path: Path, model: str) -> None:
    (tmp_path / "defs").mkdir(exist_ok=True)
    (tmp_path / "defs" / "cite.toml").write_text(GUARD)
    (tmp_path / "canary.toml").write_text(
        f"""defs = ["defs/*.toml"]
[agent]
url = "http://127.0.0.1:{free_port()}/ask"
timeout = "2s"
{model}
[fixtures]
listen = "127.0.0.1:{free_port()}"
[daemon]
control = "127.0.0.1:{free_port()}"
[logs]
paths = []
"""
    )


def test_check_warns_when_the_proxy_has_no_keeper(tmp_path: Path) -> None:
    write(tmp_path, f'[model]\nlisten = "127.0.0.1:{free_port()}"')
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 0, result.output
    assert "no daemon runs and no service is installed" in result.stderr
    assert "canary service install" in result.stderr


def test_check_is_quiet_once_the_service_is_installed(tmp_path: Path) -> None:
    write(tmp_path, f'[model]\nlisten = "127.0.0.1:{free_port()}"')
    for path, contents in service.plan_files(None):  # this platform's files
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(contents)
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 0, result.output
    assert "no daemon runs" not in result.stderr


def test_check_is_quiet_without_model_listen(tmp_path: Path) -> None:
    write(tmp_path, "")
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 0, result.output
    assert "no daemon runs" not in result.stderr


def test_run_without_a_daemon_says_the_proxy_serves_only_for_the_run(tmp_path: Path) -> None:
    write(tmp_path, f'[model]\nlisten = "127.0.0.1:{free_port()}"')
    result = CliRunner().invoke(main, ["run"])
    assert "serves only during this run" in result.stderr
    assert "serves it for that run only" in result.stderr


ROOT = Path(__file__).resolve().parents[2]


def _flat(text: str) -> str:
    """Text as a sentence reads, whatever its wrapping, indents and Markdown code marks."""
    return " ".join(text.replace("`", "").split())


def test_one_rule_for_pointing_the_agent_at_the_proxy_said_the_same_everywhere(tmp_path: Path) -> None:
    from canary.sentences import POINT_AT_THE_PROXY

    rule = _flat(POINT_AT_THE_PROXY)
    write(tmp_path, f'[model]\nlisten = "127.0.0.1:{free_port()}"')
    said = {
        "check": CliRunner().invoke(main, ["check"]).stderr,
        "run": CliRunner().invoke(main, ["run"]).stderr,
        "init": CliRunner().invoke(main, ["init", "--yes", "--dir", str(tmp_path / "new"),
                                          "--agent-url", "http://127.0.0.1:9/ask"]).stdout,
    }
    for name in ("README.md", "docs/daemon.md", "docs/configuration.md"):
        said[name] = (ROOT / name).read_text(encoding="utf-8")
    missing = [where for where, text in said.items() if rule not in _flat(text)]
    assert not missing, (missing, rule)
    # init's next steps keep the proxy up before the agent is pointed at it
    steps = said["init"][said["init"].index("Next:"):]
    assert steps.index("canary service install") < steps.index("Point your agent's model base URL")
    # the README's onboarding too: the daemon line comes before the line that points the agent
    readme = said["README.md"]
    block = readme[readme.index("cd ~/src/my-agent"):]
    assert block.index("canary daemon") < block.index("model base URL")
