"""``canary check`` warns when ``[model] ca_file`` can do nothing: the proxy reads it only to verify an
https upstream, so beside a plain-HTTP upstream (or none) it is ignored."""

from __future__ import annotations

from pathlib import Path

import trustme
from click.testing import CliRunner

from canary.cli.main import main
from tests.helpers_tls import ca_pem, plain_http_server, tls_server


def check(tmp_path: Path, model: str) -> str:
    """``canary check``'s stderr for a config whose ``[model]`` table is ``model`` (it must exit 0)."""
    (tmp_path / "canary.toml").write_text(f"defs = []\n[model]\n{model}[logs]\npaths = []\n"
                                          "[alerts]\ndesktop = false\n")
    result = CliRunner().invoke(main, ["check", "--config", str(tmp_path / "canary.toml")])
    assert result.exit_code == 0, result.output  # the files are valid: a warning, not a problem
    return result.stderr


def ca_file_warning(stderr: str) -> str:
    return next((line for line in stderr.splitlines() if "[model] ca_file" in line), "")


def test_a_ca_file_beside_a_plain_http_upstream_is_a_warning(tmp_path: Path) -> None:
    ca = ca_pem(trustme.CA(), tmp_path)
    with plain_http_server() as port:  # the upstream answers: no other warning about it
        stderr = check(tmp_path, f"upstream = 'http://u:secret@127.0.0.1:{port}'\nca_file = '{ca}'\n")
    warning = ca_file_warning(stderr)
    assert warning.startswith("warning: "), stderr
    assert f"[model] upstream = 'http://***@127.0.0.1:{port}'" in warning and "secret" not in stderr, warning
    assert repr(ca) in warning and "only" in warning and "https" in warning, warning
    assert "remove [model] ca_file" in warning and "https://" in warning, warning  # what to do


def test_a_ca_file_without_an_upstream_is_a_warning(tmp_path: Path) -> None:
    ca = ca_pem(trustme.CA(), tmp_path)
    warning = ca_file_warning(check(tmp_path, f"ca_file = '{ca}'\n"))
    assert "[model] upstream" in warning and "not set" in warning, warning
    assert "remove [model] ca_file" in warning, warning


def test_a_ca_file_beside_an_https_upstream_is_quiet(tmp_path: Path) -> None:
    ca = trustme.CA()
    with tls_server(ca.issue_cert("127.0.0.1")) as port:
        stderr = check(tmp_path, f"upstream = 'https://127.0.0.1:{port}'\nca_file = '{ca_pem(ca, tmp_path)}'\n")
    assert "[model] ca_file" not in stderr and "[model] upstream" not in stderr, stderr
