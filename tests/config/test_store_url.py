"""``[store] url`` names a store the product can open, or ``canary check`` says it is wrong before anything
runs: SQLite, or PostgreSQL through psycopg (the driver ``guard-canary[postgres]`` installs). A URL as a
database host hands it out (``postgresql://`` or ``postgres://``) is read as psycopg's."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from canary.cli.main import main
from canary.config.settings import load_config
from canary.errors import ConfigError


def write(folder: Path, url: str) -> Path:
    (folder / "defs").mkdir()
    (folder / "defs" / "quote.toml").write_text("[guard]\nname = 'quote'\nmatch = 'QuoteGuard: rejected'\n")
    config = folder / "canary.toml"
    config.write_text(f"defs = ['defs/*.toml']\n[logs]\npaths = []\n[store]\nurl = '{url}'\n")
    return config


@pytest.mark.parametrize(("written", "read"), [
    ("postgresql://canary:pw@db.internal:5432/canary", "postgresql+psycopg://canary:pw@db.internal:5432/canary"),
    ("postgres://canary@db.internal/canary?sslmode=require",
     "postgresql+psycopg://canary@db.internal/canary?sslmode=require"),
    ("postgresql+psycopg://canary@db.internal/canary", "postgresql+psycopg://canary@db.internal/canary"),
    ("sqlite:////abs/canary.db", "sqlite:////abs/canary.db"),
])
def test_a_postgresql_url_as_hosts_hand_it_out_is_read_as_psycopgs(tmp_path: Path, written: str, read: str) -> None:
    assert load_config(path=write(tmp_path, written)).store.url == read


@pytest.mark.parametrize(("written", "said"), [
    ("mysql://a@127.0.0.1/x", "mysql is not a store guard-canary can use: give sqlite:////path/to/canary.db "
                              "or postgresql+psycopg://user@host/database"),
    ("oracle://h/x", "oracle is not a store guard-canary can use"),
    ("postgresql+asyncpg://a@h/x", "guard-canary speaks to PostgreSQL through psycopg: write "
                                   "postgresql+psycopg://***@h/x"),
    ("postgresql+psycopg2://a:secret@h/x", "write postgresql+psycopg://***@h/x"),
])
def test_a_store_url_it_cannot_open_is_an_error_naming_the_key(tmp_path: Path, written: str, said: str) -> None:
    config = write(tmp_path, written)
    with pytest.raises(ConfigError) as caught:
        load_config(path=config)
    assert "store.url" in str(caught.value) and said in str(caught.value), str(caught.value)
    assert "secret" not in str(caught.value)
    result = CliRunner().invoke(main, ["--config", str(config), "check"])
    assert result.exit_code == 2 and said in result.output, result.output
