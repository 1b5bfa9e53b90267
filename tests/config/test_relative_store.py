"""A SQLite store written with a relative path (``sqlite:///canary.db``) is read from canary.toml's folder, as
every other path of the config is: ``canary status`` typed in another folder, or the installed service
(whose working folder is the state folder), reads and writes the one store, never a new empty one."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from canary.cli.main import main
from canary.config.settings import load_config


def write(folder: Path, url: str) -> Path:
    folder.mkdir()
    (folder / "agent.log").write_text("2026-12-07T10:00:00Z QuoteGuard: rejected x\n")
    (folder / "defs").mkdir()
    (folder / "defs" / "quote.toml").write_text("[guard]\nname = 'quote'\nmatch = 'QuoteGuard: rejected'\n")
    config = folder / "canary.toml"
    config.write_text(f"defs = ['defs/*.toml']\n[logs]\npaths = ['agent.log']\n[store]\nurl = '{url}'\n"
                      "[alerts]\ndesktop = false\n")
    return config


@pytest.mark.parametrize(("written", "expected"), [
    ("sqlite:///canary.db", "sqlite:///{folder}/canary.db"),
    ("sqlite:///state/canary.db?timeout=5", "sqlite:///{folder}/state/canary.db?timeout=5"),
    ("sqlite:////abs/canary.db", "sqlite:////abs/canary.db"),
    ("sqlite:///~/canary.db", "sqlite:///~/canary.db"),
    ("sqlite://", "sqlite://"),
    ("sqlite:///:memory:", "sqlite:///:memory:"),
])
def test_a_relative_sqlite_path_is_the_configs_folders(tmp_path: Path, written: str, expected: str) -> None:
    config = write(tmp_path / "agent-home", written)
    assert load_config(path=config).store.url == expected.format(folder=(tmp_path / "agent-home").as_posix())


def test_collect_and_status_from_other_folders_share_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write(tmp_path / "agent-home", "sqlite:///canary.db")
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
    monkeypatch.chdir(tmp_path / "one")
    assert CliRunner().invoke(main, ["collect", "--once", "--config", str(config)]).exit_code == 0
    monkeypatch.chdir(tmp_path / "two")
    status = CliRunner().invoke(main, ["status", "--config", str(config)])
    assert (tmp_path / "agent-home" / "canary.db").is_file()
    assert not (tmp_path / "one" / "canary.db").exists() and not (tmp_path / "two" / "canary.db").exists()
    assert "quote" in status.stdout and " 1 " in status.stdout.splitlines()[-1], status.output
