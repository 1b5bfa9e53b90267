"""``canary check`` knocks on ``[model] upstream`` (a short connect, and a TLS handshake for https) and
names the setting when nothing answers or the handshake fails."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trustme
from click.testing import CliRunner

from canary.cli.main import main
from canary.demo.live import free_port
from tests.helpers_tls import ca_pem, plain_http_server, tls_server


def _config(tmp_path: Path, upstream: str, ca_file: str | None = None) -> None:
    trust = f"ca_file = '{ca_file}'\n" if ca_file else ""
    (tmp_path / "canary.toml").write_text(
        f"defs = []\n[model]\nupstream = '{upstream}'\n{trust}[logs]\npaths = []\n"
    )


def _upstream_warning() -> str:
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 0, result.output
    return next((line for line in result.stderr.splitlines() if "[model] upstream" in line), "")


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


@pytest.mark.parametrize(("name", "with_ca", "why", "advice"), [
    # a CA the system does not know: the warning says where to add it
    ("127.0.0.1", False, "unable to get local issuer certificate", "[model] ca_file"),
    # signed by a CA it trusts, but for another host
    ("other.example", True, "mismatch, certificate is not valid for '127.0.0.1'",
     "check the host in [model] upstream"),
])
def test_check_says_when_the_model_servers_certificate_is_refused(
    tmp_path: Path, name: str, with_ca: bool, why: str, advice: str
) -> None:
    ca = trustme.CA()
    with tls_server(ca.issue_cert(name)) as port:
        _config(tmp_path, f"https://127.0.0.1:{port}", ca_pem(ca, tmp_path) if with_ca else None)
        warning = _upstream_warning()
    assert f"https://127.0.0.1:{port}" in warning and "TLS certificate" in warning, warning
    assert why in warning and advice in warning, warning


def test_check_says_when_https_meets_a_plain_http_port(tmp_path: Path) -> None:
    with plain_http_server() as port:
        _config(tmp_path, f"https://127.0.0.1:{port}")
        warning = _upstream_warning()
    assert f"https://127.0.0.1:{port}" in warning and "TLS handshake" in warning, warning
    assert "http://" in warning.partition("failed")[2], warning  # suggests plain HTTP for such a port


def test_check_is_quiet_when_the_certificate_is_trusted(tmp_path: Path) -> None:
    ca = trustme.CA()
    with tls_server(ca.issue_cert("127.0.0.1")) as port:
        _config(tmp_path, f"https://127.0.0.1:{port}", ca_pem(ca, tmp_path))
        assert _upstream_warning() == ""
