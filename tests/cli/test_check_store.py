"""``canary check`` connects to a PostgreSQL ``[store] url`` and names the setting when it cannot."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy.engine import make_url

from canary.cli.main import main
from canary.demo.live import free_port
from tests.store.conftest import pg_url


def _config(tmp_path: Path, url: str) -> None:
    (tmp_path / "canary.toml").write_text(f"defs = []\n[logs]\npaths = []\n[store]\nurl = '{url}'\n")


def _store_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str) -> str | None:
    monkeypatch.chdir(tmp_path)
    _config(tmp_path, url)
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 0, result.output  # the files are valid; the server may come up later
    return next((line for line in result.stderr.splitlines() if "[store] url" in line), None)


def test_check_says_when_no_postgresql_server_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()  # nothing listens there
    warning = _store_warning(tmp_path, monkeypatch, f"postgresql+psycopg://canary:s3cret@127.0.0.1:{port}/canary")
    assert warning is not None
    assert f"127.0.0.1:{port}" in warning and "s3cret" not in warning
    assert "refused" in warning, warning


def test_check_says_when_the_server_refuses_the_password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = make_url(pg_url()).set(password="not-the-password")
    warning = _store_warning(tmp_path, monkeypatch, url.render_as_string(hide_password=False))
    assert warning is not None and "not-the-password" not in warning
    assert "password authentication failed" in warning, warning


def test_check_is_quiet_when_the_store_takes_a_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _store_warning(tmp_path, monkeypatch, pg_url()) is None
    assert _store_warning(tmp_path, monkeypatch, f"sqlite:///{tmp_path / 'canary.db'}") is None
    assert not (tmp_path / "canary.db").exists()  # check never creates a store
