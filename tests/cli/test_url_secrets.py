"""Secrets in a URL, its password or a query parameter such as ``?token=``, are never shown nor stored."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from canary.cli.main import main
from canary.config.urls import redact_url
from canary.demo.live import free_port

SECRET = "s3cr3tVALUE"


@pytest.mark.parametrize(("url", "shown"), [
    ("http://u:p@h:1/x", "http://***@h:1/x"),
    (f"http://h/ask?token={SECRET}", "http://h/ask?token=***"),
    (f"http://h/ask?mode=test&key={SECRET}", "http://h/ask?mode=test&key=***"),
    (f"https://h/v1?api_key={SECRET}&x=1", "https://h/v1?api_key=***&x=1"),
    (f"https://h/blob?sv=2022&sig={SECRET}", "https://h/blob?sv=2022&sig=***"),
    (f"http://h/?access_token={SECRET}#frag", "http://h/?access_token=***#frag"),
    (f"http://h/?X-Api-Key={SECRET}", "http://h/?X-Api-Key=***"),
    (f"http://h/?password={SECRET};session={SECRET}", "http://h/?password=***;session=***"),
    (f"http://h/cb#access_token={SECRET}&state=1", "http://h/cb#access_token=***&state=1"),
    ("http://h/ask?mode=test&model=llama3", "http://h/ask?mode=test&model=llama3"),  # nothing secret
    (f"cannot reach http://h/?auth={SECRET}: refused", "cannot reach http://h/?auth=***: refused"),
])
def test_redact_url_hides_passwords_and_secret_parameters(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def _project(tmp_path: Path, agent_port: int) -> None:
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "a.toml").write_text(
        "[guard]\nname = 'a'\nmatch = 'A: rejected'\n[[canary]]\nname = 'c'\nevery = '6h'\n"
        "prompt = 'Read {fixture_url}'\ninject = 'x https://{nonce}.example.org'\nleak = '{nonce}'\n"
        "timeout = '5s'\n")
    (tmp_path / "x.log").write_text("")
    (tmp_path / "canary.toml").write_text(
        f"defs = ['defs/*.toml']\n"
        f"[agent]\nurl = 'http://127.0.0.1:{agent_port}/ask?token={SECRET}'\ntimeout = '5s'\n"
        f"[model]\nlisten = '127.0.0.1:{free_port()}'\nupstream = 'http://127.0.0.1:{free_port()}/?key={SECRET}'\n"
        f"[fixtures]\nlisten = '127.0.0.1:{free_port()}'\n[logs]\npaths = ['x.log']\n"
        f"[store]\nurl = 'sqlite:///{tmp_path / 'c.db'}'\n"
        f"[daemon]\ncontrol = '127.0.0.1:{free_port()}'\n")


def test_check_shows_no_secret(tmp_path: Path) -> None:
    _project(tmp_path, free_port())
    result = CliRunner().invoke(main, ["check"])
    assert "token=***" in result.stdout and "key=***" in result.stdout, result.output
    assert SECRET not in result.output


def test_run_prints_and_stores_no_secret(tmp_path: Path) -> None:
    _project(tmp_path, free_port())  # nothing listens: the run's error names the agent's URL
    for args in (["run"], ["run", "--json"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 3, result.output
        assert SECRET not in result.output
    error = json.loads(result.stdout)["runs"][0]["error"]
    assert "token=***" in error, error
    for db in tmp_path.glob("c.db*"):
        assert SECRET.encode() not in db.read_bytes(), db
    with sqlite3.connect(tmp_path / "c.db") as conn:
        texts = [str(v) for table, in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
                 for row in conn.execute(f'SELECT * FROM "{table}"') for v in row]
    assert not [t for t in texts if SECRET in t]
