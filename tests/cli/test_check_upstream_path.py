"""``canary check`` warns of a ``[model] upstream`` that ends in ``/v1``: the proxy adds the agent's own path
(``/v1/messages``, ``/v1/chat/completions``) to it, so every call would go to ``/v1/v1/...`` and get a 404."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_check_ca_file import check
from tests.helpers_tls import plain_http_server


def path_warning(stderr: str) -> str:
    return next((line for line in stderr.splitlines() if "/v1/v1/" in line), "")


@pytest.mark.parametrize("suffix", ["/v1", "/v1/", "/api/v1"])
def test_an_upstream_ending_in_v1_is_a_warning_that_names_the_root_to_give(tmp_path: Path, suffix: str) -> None:
    with plain_http_server() as port:
        warning = path_warning(check(tmp_path, f"upstream = 'http://u:pw@127.0.0.1:{port}{suffix}'\n"))
    assert warning.startswith(f"warning: [model] upstream = 'http://***@127.0.0.1:{port}{suffix}' ends in /v1"), warning
    assert f"http://***@127.0.0.1:{port}{suffix.rstrip('/').removesuffix('/v1')}" in warning, warning
    assert "pw" not in warning


@pytest.mark.parametrize("path", ["", "/", "/openai", "/v1beta"])
def test_an_upstream_at_a_root_or_a_prefix_is_quiet(tmp_path: Path, path: str) -> None:
    with plain_http_server() as port:
        assert path_warning(check(tmp_path, f"upstream = 'http://127.0.0.1:{port}{path}'\n")) == ""
