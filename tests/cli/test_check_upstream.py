"""``canary check`` knocks on ``[model] upstream`` (a short connect) and names the setting when nothing answers."""

from __future__ import annotations

import socket
from pathlib import Path

from click.testing import CliRunner

from canary.cli.main import main
from canary.demo.live import free_port


def _config(tmp_path: Path, upstream: str) -> None:
    (tmp_path / "canary.toml").write_text(f"defs = []\n[model]\nupstream = '{upstream}'\n[logs]\npaths = []\n")


def test_check_says_when_the_model_server_refuses(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    _config(tmp_path, f"http://127.0.0.1:{port}/?key=secret")
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 0, result.output  # the files are valid; the server may come up later
    warning = next(line for line in result.stderr.splitlines() if "[model] upstream" in line)
    assert f"http://127.0.0.1:{port}/?key=***" in warning and "secret" not in warning
    assert "refused" in warning, warning


def test_check_is_quiet_when_the_model_server_answers(tmp_path: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        _config(tmp_path, f"http://127.0.0.1:{server.getsockname()[1]}")
        result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 0, result.output
    assert "[model] upstream" not in result.stderr, result.stderr
